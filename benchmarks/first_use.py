"""What the first use of each input shape costs on a GPU (cuDNN plans, cuBLAS, the allocator), in a fresh process.

A run's first epoch takes seconds where later ones take a fraction of one (benchmarks/RESULTS.md): every new
convolution shape makes cuDNN choose and build a plan. This times, for yolo11n as training runs it (bf16 autocast,
channels_last), the first and second forward+backward at the training shape and the first and second eval forward
at each of a few rect validation shapes; run it under several settings to see which part is the cost:

    python benchmarks/first_use.py                       # as the trainer runs
    python benchmarks/first_use.py --nchw                # contiguous NCHW instead of channels_last
    python benchmarks/first_use.py --fp32                # no autocast
    python benchmarks/first_use.py --cudnn-benchmark     # cudnn.benchmark = True (timed search per shape)
    TORCH_CUDNN_V8_API_DISABLED=1 python benchmarks/first_use.py   # cuDNN's v7 API, where torch still has it
    python benchmarks/first_use.py --dynamo before|thread  # torch._dynamo's import (which Optimizer.step does at
                                                           # its first call) before the first step, or on a
                                                           # thread beside it: does the step hide it?
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VAL_SHAPES = ((640, 640), (480, 640), (640, 512), (384, 640))  # rect batches of a COCO-like validation set


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="yolo11n")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--nchw", action="store_true")
    parser.add_argument("--fp32", action="store_true")
    parser.add_argument("--cudnn-benchmark", action="store_true")
    parser.add_argument("--dynamo", choices=["before", "thread"], default=None,
                        help="import torch._dynamo before the first training step, or on a thread during it")
    args = parser.parse_args()
    started = time.perf_counter()
    import torch

    from yolo11.models import create_model

    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    device = torch.device("cuda")
    sync = torch.cuda.synchronize
    model = create_model(args.model, num_classes=80).to(device)
    memory_format = torch.contiguous_format if args.nchw else torch.channels_last
    model = model.to(memory_format=memory_format)
    sync()
    print(f"import and model on the GPU: {time.perf_counter() - started:.2f} s")
    autocast = contextlib.nullcontext if args.fp32 else lambda: torch.autocast("cuda", dtype=torch.bfloat16)

    def timed(fn) -> float:
        sync()
        start = time.perf_counter()
        fn()
        sync()
        return time.perf_counter() - start

    def train_step() -> None:
        images = torch.rand(args.batch, 3, args.imgsz, args.imgsz, device=device).to(memory_format=memory_format)
        with autocast():
            feats = model(images)
        sum(f.float().mean() for f in feats).backward()

    model.train()
    importing = None
    if args.dynamo == "before":
        print(f"import torch._dynamo: {timed(lambda: __import__('torch._dynamo')):.3f} s")
    elif args.dynamo == "thread":
        import threading
        importing = threading.Thread(target=__import__, args=("torch._dynamo",))
        importing.start()
    first = timed(train_step)
    if importing is not None:
        waited = timed(importing.join)
        print(f"first step with torch._dynamo imported beside it: {first:.3f} s, then {waited:.3f} s more for the "
              "import")
    second = timed(train_step)
    print(f"train forward+backward, batch {args.batch} at {args.imgsz}: first {first:.3f} s, second {second:.3f} s")
    model.eval()
    total = 0.0
    for height, width in VAL_SHAPES:
        images = torch.rand(2 * args.batch, 3, height, width, device=device).to(memory_format=memory_format)

        def forward(images: torch.Tensor = images) -> None:
            with torch.no_grad(), autocast():
                model(images)

        first, second = timed(forward), timed(forward)
        total += first
        print(f"eval forward, batch {2 * args.batch} at {height}x{width}: first {first:.3f} s, second {second:.3f} s")
    print(f"first eval forwards together: {total:.2f} s; whole process so far {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
