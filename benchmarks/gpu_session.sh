#!/usr/bin/env bash
# On the GPU machine: install the carried wheels, then run the benchmark commands given as arguments, each logged
# under $OUT. Usage on the GPU machine:  bash benchmarks/gpu_session.sh "<cmd 1>" "<cmd 2>" ...
# The carried wheels (.whl/): datasets, dill, multiprocess, pycocotools, and pytest-xdist with execnet (pyproject's
# pytest options name -n); the Ultralytics 8.4.190, ultralytics-thop and polars wheels for comparisons.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export YOLO_OFFLINE=1 HF_HUB_OFFLINE=1 WANDB_MODE=offline
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD
mkdir -p "${OUT:-/tmp/out}"
# Compiled bytecode in a writable place, made once before any timing: an installed package has its .pyc files,
# and without them every process would compile torch's Python sources again (~8 s of each run's start).
export PYTHONPYCACHEPREFIX=/tmp/pycache
# Every module, not only those imported up front: torch._dynamo, matplotlib and others load lazily, mid-run, and
# compiled ~10 s of sources there in a timed run. A pip install has compiled them already.
python3 -m compileall -q -j 0 $(python3 -c "import site; print(*site.getsitepackages())") /tmp/site > /dev/null 2>&1
python3 -c "import yolo11.engine.trainer, yolo11.tools.val, accelerate.commands.launch, datasets, pycocotools.coco" \
  && python3 -c "import ultralytics.models.yolo, ultralytics.engine.trainer" 2>/dev/null; true
# cuDNN's and cuBLAS's libraries (~2 GB) read from disk before any timing: otherwise the first trainer of a call
# pays it alone (~10 s of its start), the next ones finding them in the page cache as on a machine used before
python3 -c "
import torch
x = torch.randn(8, 3, 64, 64, device='cuda')
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    w = torch.randn(16, 3, 3, 3, device='cuda', dtype=dtype, requires_grad=True)
    torch.nn.functional.conv2d(x.to(dtype), w).sum().backward()
    (w.flatten(1) @ w.flatten(1).T).sum().item()
"
python3 -c "import matplotlib.font_manager"  # its font cache, built once per machine (a user's is built already)
python3 -c "import torch, timm, accelerate; print('torch', torch.__version__, 'timm', timm.__version__, 'accelerate', accelerate.__version__, torch.cuda.get_device_name())" | tee "$OUT/versions.txt"
i=0
for cmd in "$@"; do
  i=$((i + 1))
  echo "=== [$i] $cmd" | tee -a "$OUT/summary.txt"
  start=$(date +%s)
  bash -c "$cmd" > "$OUT/run$i.log" 2>&1
  rc=$?
  echo "rc=$rc in $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
  tail -n 25 "$OUT/run$i.log" | tee -a "$OUT/summary.txt"
done
