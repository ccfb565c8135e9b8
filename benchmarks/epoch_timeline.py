"""Where a small run's epochs go: the trainer in this process with ``--profile``'s window moved past the warm-up,
so that it holds whole epochs (steps, the epoch boundary, validation, saves), each phase marked in the trace.

    python benchmarks/epoch_timeline.py --start 120 --steps 6 -- --data coco128.yaml --epochs 100 --batch-size 16

The arguments after ``--`` are the trainer's. Writes ``<run>/profile/trace.json`` (open it in ui.perfetto.dev)
and ``summary.txt`` as ``--profile`` does, then prints the window's host time per marked phase (the trainer's
clock phases, each epoch's loop, and each wait for a training or validation batch) and, per epoch, when its first
optimizer step came.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=int, default=120, help="the optimizer step that opens the window")
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps in the window")
    parser.add_argument("trainer", nargs=argparse.REMAINDER, help="-- then the trainer's flags")
    args = parser.parse_args()
    flags = [a for a in args.trainer if a != "--"] + ["--profile", "true"]

    import torch

    from yolo11.engine import device_feed, evaluate, loop, run_clock, trainer
    from yolo11.engine.profiling import StepProfiler

    record = torch.profiler.record_function
    trainer.StepProfiler = functools.partial(StepProfiler, start=args.start, steps=args.steps)

    clock_call = run_clock.RunClock.__call__

    def marked_phase(self, phase):
        with record(f"phase {phase}"), clock_call(self, phase):
            yield

    import contextlib
    run_clock.RunClock.__call__ = contextlib.contextmanager(marked_phase)
    epoch = trainer.train_one_epoch

    def marked_epoch(*a, **k):
        with record("phase epoch loop"):
            return epoch(*a, **k)
    trainer.train_one_epoch = marked_epoch

    class MarkedWait(device_feed.TimedIterable):
        def __iter__(self):
            iterator = iter(self.iterable)
            while True:
                with record("wait batch"):
                    try:
                        item = next(iterator)
                    except StopIteration:
                        return
                yield item
    loop.TimedIterable = evaluate.TimedIterable = MarkedWait

    from yolo11.train import main as train_main

    code = train_main(flags)
    traces = sorted(Path("runs").glob("**/profile/trace.json"), key=lambda p: p.stat().st_mtime)
    if not traces:
        print("no trace written (did the run reach the window?)")
        sys.exit(code or 1)
    summarise(traces[-1])
    sys.exit(code)


def summarise(trace: Path) -> None:
    events = json.loads(trace.read_text())["traceEvents"]
    marks = [e for e in events if e.get("cat") == "user_annotation" and e.get("ph") == "X"]
    totals, counts = defaultdict(float), defaultdict(int)
    for event in marks:
        totals[event["name"]] += event["dur"] / 1e3
        counts[event["name"]] += 1
    print(f"{trace}: host time per marked phase in the window (ms)")
    for name in sorted(totals, key=totals.get, reverse=True):
        print(f"  {name:28s} {totals[name]:9.1f} ms in {counts[name]} ({totals[name] / counts[name]:.2f} ms each)")
    # the window as a sequence: each top-level phase with its start relative to the window
    top = sorted((e for e in marks if e["name"].startswith("phase")), key=lambda e: e["ts"])
    if top:
        origin = top[0]["ts"]
        print("timeline (ms from the first marked phase):")
        for event in top:
            print(f"  {(event['ts'] - origin) / 1e3:9.1f} +{event['dur'] / 1e3:8.1f}  {event['name']}")
    waits = sorted((e for e in marks if e["name"] == "wait batch"), key=lambda e: e["ts"])
    if waits:
        longest = sorted(waits, key=lambda e: e["dur"], reverse=True)[:8]
        print("longest batch waits (ms): " + ", ".join(f"{e['dur'] / 1e3:.1f}" for e in longest))


if __name__ == "__main__":
    main()
