#!/usr/bin/env bash
# Every GPU measure of issue 38 (whole small runs against Ultralytics) in one call, most wanted first, each logged
# under $OUT as it finishes (a call cut short keeps what ran). Carry .whl (with the Ultralytics 8.4.190, its thop
# and polars wheels) and .data (coco128 and coco128.yaml). On the device machine, from the repository root:
#   bash benchmarks/gpu_issue38.sh [quick]
# quick: the first-use figures, the GPU tests of this work and one coco128 tutorial pair (~6 minutes with the
# install); without it also the generated 2,000/500 runs for yolo11n and yolo26n and seeds 1 and 2 (~25 minutes).
set -u
cd "$(dirname "$0")/.."
runs=(
  "python3 benchmarks/first_use.py"
  "python3 -m pytest -q -m gpu -n 0 -p no:cacheprovider tests/test_cuda_graphs.py tests/test_models.py tests/test_evaluation.py tests/test_yolo26_train.py 2>&1 | tail -15"
  "python3 benchmarks/user_runs.py --dataset .data/coco128.yaml --variants ours ultralytics --epochs 100 --batch 16 --imgsz 640 --seeds 0 && grep -hE 'time:|finished in' runs/user_runs/coco128_ours_seed0.log"
)
if [ "${1:-}" != quick ]; then
  runs+=(
    "python3 benchmarks/user_runs.py --dataset generated --variants ours ultralytics --epochs 30 --batch 32 --imgsz 320 --seeds 0"
    "python3 benchmarks/user_runs.py --dataset generated --model yolo26n --variants ours ultralytics --epochs 30 --batch 32 --imgsz 320 --seeds 0"
    "python3 benchmarks/user_runs.py --dataset .data/coco128.yaml --variants ours ultralytics --epochs 100 --batch 16 --imgsz 640 --seeds 1 2"
  )
fi
exec bash benchmarks/gpu_session.sh "${runs[@]}"
