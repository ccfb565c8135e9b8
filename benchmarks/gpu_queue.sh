#!/usr/bin/env bash
# Start, in the background on the GPU machine, a copy of this checkout running gpu_session.sh over the commands
# given, so that a queue longer than one remote command's time limit keeps running between commands; `wait`
# prints its progress and copies its logs to $OUT. Usage:
#   bash benchmarks/gpu_queue.sh start "<cmd 1>" "<cmd 2>" ...   |   bash benchmarks/gpu_queue.sh wait SECONDS
set -u
QUEUE=/tmp/gpu_queue
case "$1" in
  start)
    shift
    rm -rf "$QUEUE" && mkdir -p "$QUEUE/out" && cp -r . "$QUEUE/repo"  # later calls may refresh this checkout
    cd "$QUEUE/repo" && OUT="$QUEUE/out" setsid nohup bash benchmarks/gpu_session.sh "$@" > "$QUEUE/queue.log" 2>&1 &
    sleep 5; cat "$QUEUE/queue.log" ;;
  wait)
    deadline=$(( $(date +%s) + $2 ))
    while [ "$(date +%s)" -lt "$deadline" ] && pgrep -f gpu_session.sh > /dev/null; do sleep 5; done
    cat "$QUEUE/out/summary.txt" 2>/dev/null | grep -E "^===|^rc=" ; pgrep -f gpu_session.sh > /dev/null && echo RUNNING || echo DONE
    cp -r "$QUEUE/out/." "${OUT:-/tmp/out}/" 2>/dev/null; true ;;
esac
