"""Per-step cost of the training step, eager against the ways of removing its launch overhead (needs CUDA).

The real step (``yolo11.engine.loop.train_one_epoch``: device HSV, forward, loss, backward, accumulation to the
nominal batch 64, clipping, fused AdamW, EMA, the non-finite guard) over synthetic uint8 batches already on the GPU
(``--boxes`` rows per image), so the loader is out of the figures. Variants:

- ``eager``: the eager step;
- ``graphs``: ``--cuda-graphs`` (``torch.cuda.graph`` capture of the eager micro-step, ``GraphedMicroStep``);
- ``cudagraphs-backend``: ``torch.compile(backend="cudagraphs")`` of model and loss (AOTAutograd graphs replayed
  as CUDA graphs, no inductor code generation);
- ``reduce-overhead``: the trainer's ``--compile true`` (inductor, CUDA graphs), cold or warm as the compile cache
  in ``--cache-dir`` is (run it twice: the second is warm).

For each (variant, model, batch, imgsz): ``build_s`` is the first ``--build-batches`` batches' time minus as many
steady batches (capture or compilation and warm-up), ``ms`` the mean per batch over ``--steps`` batches after
them (one epoch, its optimizer steps included). Prints a table; ``--json`` writes the rows.

    python benchmarks/step_overhead.py --models yolo11n yolo11s --batches 8 16 32 64 128 --imgsz 320 640 \\
        --variants eager graphs
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def make_batches(count: int, batch: int, imgsz: int, boxes: int, device) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(count):
        images = torch.randint(0, 256, (batch, imgsz, imgsz, 3), dtype=torch.uint8, generator=g).permute(0, 3, 1, 2)
        xy = torch.rand(batch, boxes, 2, generator=g) * imgsz * 0.8
        wh = (torch.rand(batch, boxes, 2, generator=g) * 0.2 + 0.02) * imgsz
        out.append({"images": images.to(device), "boxes": torch.cat([xy, xy + wh], -1).to(device),
                    "labels": torch.randint(0, 80, (batch, boxes), generator=g).to(device),
                    "hsv_gains": (torch.rand(batch, 3, generator=g, dtype=torch.float64) - 0.5).to(device)})
    return out


def build_step(variant: str, model_name: str, batch: int, nominal: int = 64, device: str | torch.device = "cuda",
               layout: str = "auto"):
    """The trainer's ``TrainStep`` for ``variant`` on ``device`` (bf16 on CUDA, fp32 elsewhere; channels_last where
    the trainer's plan uses it), one optimizer step per ``nominal / batch`` batches."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    import yolo11
    from yolo11.data import BatchHSV
    from yolo11.data.collate import CHANNELS_LAST_DEVICES
    from yolo11.engine.build import build_train_step
    from yolo11.engine.compile import CompiledLoss, compile_model
    from yolo11.engine.ema import ModelEMA
    from yolo11.engine.optim import OptimizerChoice, WarmupSchedule, build_optimizer, lr_lambda
    from yolo11.loss import DetectionLoss

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    device = torch.device(device)
    cuda = device.type == "cuda"
    channels_last = device.type in CHANNELS_LAST_DEVICES if layout == "auto" else layout == "channels_last"
    accelerator = Accelerator(cpu=not cuda, mixed_precision="bf16" if cuda else "no")
    torch.manual_seed(0)
    model = yolo11.create_model(model_name, num_classes=80).to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    ema = ModelEMA(model)
    optimizer = build_optimizer(model, OptimizerChoice("AdamW", 0.000119, 0.9), 5e-4)
    schedule = WarmupSchedule(optimizer, lr_lambda("linear", 100, 0.01), -1, 0.1, 0.8, 0.937)
    criterion, batch_hsv = DetectionLoss(80), BatchHSV().to(device)
    if variant == "cudagraphs-backend":
        model = torch.compile(model, backend="cudagraphs")
        criterion = torch.compile(criterion, backend="cudagraphs")
    elif variant == "reduce-overhead":
        model = compile_model(model, "reduce-overhead", fast_layers=True)
        criterion = CompiledLoss(criterion)
        batch_hsv = torch.compile(batch_hsv)
    model, optimizer = accelerator.prepare(model, optimizer)
    return build_train_step(accelerator, model, optimizer, schedule, criterion=criterion, ema=ema,
                            accumulation=max(round(nominal / batch), 1), channels_last=channels_last,
                            batch_hsv=batch_hsv, cuda_graphs=variant == "graphs")


def timed_epoch(step, batches, state) -> float:
    from yolo11.engine.loop import train_one_epoch

    torch.cuda.synchronize()
    start = time.perf_counter()
    train_one_epoch(step, batches, state, epoch=0)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def measure(variant: str, model_name: str, batch: int, imgsz: int, args) -> dict:
    from yolo11.engine.checkpoint import TrainState

    batches = make_batches(args.build_batches + args.steps, batch, imgsz, args.boxes, "cuda")
    started = time.perf_counter()
    step = build_step(variant, model_name, batch, layout=args.layout)
    setup = time.perf_counter() - started
    state = TrainState()
    first = timed_epoch(step, batches[:args.build_batches], state)
    ms = timed_epoch(step, batches[args.build_batches:], state) / args.steps * 1000
    row = {"variant": variant, "layout": args.layout, "model": model_name, "batch": batch, "imgsz": imgsz,
           "ms": round(ms, 2),
           "img_s": round(batch / ms * 1000), "build_s": round(first - args.build_batches * ms / 1000 + setup, 2),
           "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}
    del step, batches
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch._dynamo.reset()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=["eager", "graphs"],
                        choices=["eager", "graphs", "cudagraphs-backend", "reduce-overhead"])
    parser.add_argument("--models", nargs="+", default=["yolo11n"])
    parser.add_argument("--batches", type=int, nargs="+", default=[16])
    parser.add_argument("--imgsz", type=int, nargs="+", default=[640])
    parser.add_argument("--boxes", type=int, default=40, help="box rows per image (mosaic batches of COCO: 30-60)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--layout", choices=("auto", "channels_last", "nchw"), default="auto",
                        help="the model's memory format (auto: the trainer's choice for the device)")
    parser.add_argument("--build-batches", type=int, default=6)
    parser.add_argument("--cache-dir", default=None, help="inductor's cache (TORCHINDUCTOR_CACHE_DIR)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.cache_dir:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = args.cache_dir
    rows = []
    print(f"{'variant':20s} {'model':8s} {'batch':>5s} {'imgsz':>5s} {'ms/batch':>9s} {'img/s':>7s} {'build s':>8s} "
          f"{'peak GiB':>8s}", flush=True)
    for model_name in args.models:
        for imgsz in args.imgsz:
            for batch in args.batches:
                for variant in args.variants:
                    try:
                        row = measure(variant, model_name, batch, imgsz, args)
                    except Exception as err:  # a failed variant is a result too; the others still run
                        row = {"variant": variant, "layout": args.layout, "model": model_name, "batch": batch,
                               "imgsz": imgsz,
                               "error": f"{type(err).__name__}: {str(err)[:200]}"}
                        print(f"{variant:20s} {model_name:8s} {batch:5d} {imgsz:5d} failed: {row['error']}", flush=True)
                        rows.append(row)
                        continue
                    rows.append(row)
                    print(f"{variant:20s} {model_name:8s} {batch:5d} {imgsz:5d} {row['ms']:9.2f} {row['img_s']:7d} "
                          f"{row['build_s']:8.2f} {row['peak_gib']:8.2f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
