#!/usr/bin/env bash
# Two processes sharing one GPU (YOLO11_SHARE_GPU=1, issue 39): the GPU tests of tests/test_ddp_one_gpu.py in one
# call, through gpu_session.sh (which installs the carried wheels first: carry .whl). On the GPU machine, from the
# repository root:
#   bash benchmarks/gpu_ddp_one_gpu.sh
# Logs under $OUT: run1.log (pytest -v -rA: every test's outcome; -s: the parity and evaluation figures the tests
# print, lines starting "parity (cuda)" and "evaluation (cuda)"), summary.txt (exit code, time, last lines),
# versions.txt. About 10 launches of the trainer or the val tool, 2-5 minutes after the install.
set -u
cd "$(dirname "$0")/.."
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"  # the tests share the first GPU when several are visible
exec bash benchmarks/gpu_session.sh \
  "nvidia-smi -L; python3 -m pytest -m gpu -n 0 tests/test_ddp_one_gpu.py -v -s -rA --durations=0 -p no:cacheprovider"
