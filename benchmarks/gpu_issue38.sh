#!/usr/bin/env bash
# Every GPU measure of issue 38 (whole small runs against Ultralytics) in one script, most wanted first, each logged
# under $OUT as it finishes (a call cut short keeps what ran). Carry .whl (with the Ultralytics 8.4.190, its thop
# and polars wheels: polars 1.33.1, one 40 MB wheel, keeps the carry under 64 MiB where 2.x's runtime wheel does not)
# and .data (coco128 and coco128.yaml). On the GPU machine, from the repository root:
#   bash benchmarks/gpu_issue38.sh [quick | core | fp16]
# fp16: the graphed step's GPU tests in fp16, the generated run and the coco128 tutorial in fp16 and bf16, and
# Ultralytics' tutorial (~9 minutes; each run logged as it ends);
# core: the GPU tests, the coco128 tutorial runs (under the launcher, as `yolo11 train`, Ultralytics'), where its
# saving goes (benchmarks/saving_profile.py) and a trained model's validation pass (~8 minutes with the install);
# quick: also the first-use figures; without either, also the generated 2,000/500 runs for
# yolo11n and yolo26n, yolo26n's training speed against Ultralytics' at batch 16 (whole trainer) and 128 (the step),
# seeds 1 and 2, and where a tutorial epoch's time goes (~35 minutes: more than one call's 10; run the rest as
# separate calls). The yolo26n lines: its
# batch-128 step's kernels (0.86x Ultralytics' on 2026-12-06) and, at batch 16, CUDA graphs against --compile auto's
# compiled run (is the ~130 s cold compile repaid?).
set -u
cd "$(dirname "$0")/.."
runs=(
  "python3 benchmarks/first_use.py"
  "python3 -m pytest -q -m gpu -n 0 -p no:cacheprovider tests/test_postprocess.py tests/test_cuda_graphs.py tests/test_models.py tests/test_evaluate.py tests/test_evaluation.py tests/test_train_loop.py tests/test_yolo26_train.py tests/test_scoring_beside.py tests/test_compile.py tests/test_weights.py 2>&1 | tail -15"
  "python3 benchmarks/user_runs.py --dataset .data/coco128.yaml --variants ours ultralytics ours-cli --epochs 100 --batch 16 --imgsz 640 --seeds 0 && grep -hE 'time:|finished in|mixed precision' runs/user_runs/coco128_ours*_seed0.log && python3 benchmarks/saving_profile.py data=.data/coco128.yaml epochs=100 batch=16 imgsz=640 project=runs/sp name=a 2>&1 | grep -E -A12 '^time:|saving.s functions' | grep -vE '^ +[a-z]+ +[0-9]+ +[0-9]+ +0\.0'"
  # a trained model's pass (the tutorial run's weights): scoring, NMS candidates, batched against per-image NMS
  "python3 benchmarks/val_profile.py --data .data/coco128.yaml --passes 20 --weights runs/user_runs/ours_seed0/weights/last.safetensors 2>&1 | grep -E 'a pass|scored later|foreach|cudaGraphLaunch|aten::index |searchsorted|candidates|post-processing|Self'"
)
if [ "${1:-}" = fp16 ]; then  # the graphed fp16 step: its GPU tests, then fp16 against bf16 and Ultralytics, one
  # run per command so that a call cut short keeps those that finished (the generated run first: its accuracy
  # near 1 shows a precision's loss, which the tutorial's from-scratch ~0 cannot)
  tutorial="python3 benchmarks/user_runs.py --dataset .data/coco128.yaml --epochs 100 --batch 16 --imgsz 640 --seeds 0"
  generated="python3 benchmarks/user_runs.py --dataset generated --epochs 30 --batch 32 --imgsz 320 --seeds 0"
  runs=(
    "python3 -m pytest -q -m gpu -n 0 -p no:cacheprovider tests/test_cuda_graphs.py -k 'graphed_step_equals or without_a_launcher' 2>&1 | tail -15"
    "$generated --variants ours-fp16 && grep -hE 'time:' runs/user_runs/generated_ours-fp16_seed0.log"
    "$generated --variants ours-bf16 && grep -hE 'time:' runs/user_runs/generated_ours-bf16_seed0.log"
    "$tutorial --variants ours-fp16 && grep -hE 'time:|mixed precision|CUDA graphs' runs/user_runs/coco128_ours-fp16_seed0.log"
    "$tutorial --variants ultralytics"
    "$tutorial --variants ours-bf16 && grep -hE 'time:' runs/user_runs/coco128_ours-bf16_seed0.log"
  )
elif [ "${1:-}" = core ]; then  # the least that says whether the work holds: the GPU tests, the coco128 runs, a pass
  runs=("${runs[1]}" "${runs[2]}" "${runs[3]}")
elif [ "${1:-}" != quick ]; then
  runs+=(
    "python3 benchmarks/user_runs.py --dataset generated --variants ours ultralytics --epochs 30 --batch 32 --imgsz 320 --seeds 0 && grep -hE 'time:' runs/user_runs/generated_ours_seed0.log"
    "python3 benchmarks/user_runs.py --dataset generated --model yolo26n --out runs/user_runs26 --variants ours ultralytics --epochs 30 --batch 32 --imgsz 320 --seeds 0 && grep -hE 'time:' runs/user_runs26/generated_ours_seed0.log"
    "python3 benchmarks/train_throughput.py --mode step --model yolo26n --batch 128 --profile 2>&1 | tail -60"
    "python3 benchmarks/train_throughput.py --mode e2e --model yolo26n --batch 16 --coco128 .data/coco128 --steps 300 --variants='--compile false; ' 2>&1 | tail -8"
    "python3 benchmarks/user_runs.py --dataset .data/coco128.yaml --variants ours ultralytics --epochs 100 --batch 16 --imgsz 640 --seeds 1 2"
    "python3 benchmarks/user_runs.py --dataset generated --variants ours ultralytics --epochs 30 --batch 32 --imgsz 320 --seeds 1 2"
    "python3 benchmarks/epoch_timeline.py --start 150 --steps 8 -- --data .data/coco128.yaml --epochs 100 --batch-size 16 --imgsz 640 2>&1 | tail -30"
  )
fi
exec bash benchmarks/gpu_session.sh "${runs[@]}"
