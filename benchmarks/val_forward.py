"""GPU time of training's validation step (the eval forward and the validation loss) by precision and layout.

    python benchmarks/val_forward.py [--batch 32] [--imgsz 640] [--model yolo11n]

Each variant's step is captured as one CUDA graph (as ``GraphedValStep`` does) and replayed; printed: the median
milliseconds of a replay over 30 (CUDA events, the GPU's time), per image. Variants: float32 weights under bf16
autocast (what training's validation runs), the same channels_last, float16 and bfloat16 weights without autocast
(Ultralytics' validator runs ``model.half()``), each NCHW and channels_last, and the forward alone. Last, Ultralytics'
own yolo11n (``DetectionModel("yolo11n.yaml").half()``, eager, NCHW, as its validator runs it) when importable.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def replay_ms(step, repeats: int = 30) -> float:
    """Median GPU milliseconds of ``step()`` captured as one CUDA graph (warmed up on a side stream first)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return _median_ms(graph.replay, repeats)


def _median_ms(call, repeats: int) -> float:
    """Median GPU milliseconds of ``call()`` over ``repeats`` (``train_throughput.time_steps``' CUDA events)."""
    from train_throughput import time_steps  # benchmarks/ is on the path when this runs as a script

    return sorted(time_steps(call, 0, repeats))[repeats // 2] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="yolo11n")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--imgsz", type=int, default=640)
    args = parser.parse_args()

    import torch

    from yolo11.engine.build import build_criterion
    from yolo11.evaluation.runner import float_maps
    from yolo11.models import create_model

    torch.backends.cudnn.benchmark = False  # as a run validates
    device = torch.device("cuda")
    base = create_model(args.model, num_classes=80).to(device).eval()
    criterion = build_criterion(base, device)
    generator = torch.Generator(device=device).manual_seed(0)
    images = torch.randint(0, 256, (args.batch, 3, args.imgsz, args.imgsz), dtype=torch.uint8, device=device,
                           generator=generator)
    centres = torch.rand(args.batch, 16, 2, device=device, generator=generator) * args.imgsz * 0.8 + args.imgsz * 0.1
    sizes = torch.rand(args.batch, 16, 2, device=device, generator=generator) * args.imgsz * 0.2 + 8
    boxes = torch.cat((centres - sizes / 2, centres + sizes / 2), dim=2)
    labels = torch.randint(0, 80, (args.batch, 16), device=device, generator=generator)

    def variant(dtype: torch.dtype | None, channels_last: bool, loss: bool = True):
        model = copy.deepcopy(base)
        if dtype is not None:
            model = model.to(dtype)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
        layout = torch.channels_last if channels_last else torch.contiguous_format
        inputs = images.contiguous(memory_format=layout)
        autocast = (torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False) if dtype is None
                    else contextlib.nullcontext())

        @torch.no_grad()
        def step():
            with autocast:
                x = inputs if dtype is None else inputs.to(dtype).div_(255.0)
                feats = float_maps(model(x))
            if loss:
                criterion(feats, boxes, labels)

        return replay_ms(step)

    rows = [
        ("float32 weights, bf16 autocast, NCHW (training's validation)", variant(None, False)),
        ("float32 weights, bf16 autocast, channels_last", variant(None, True)),
        ("float16 weights, NCHW", variant(torch.float16, False)),
        ("float16 weights, channels_last", variant(torch.float16, True)),
        ("bfloat16 weights, NCHW", variant(torch.bfloat16, False)),
        ("bfloat16 weights, channels_last", variant(torch.bfloat16, True)),
        ("forward alone: float32 weights, bf16 autocast, NCHW", variant(None, False, loss=False)),
        ("forward alone: float16 weights, NCHW", variant(torch.float16, False, loss=False)),
    ]
    try:
        from ultralytics.nn.tasks import DetectionModel

        theirs = DetectionModel(f"{args.model}.yaml", verbose=False).to(device).half().eval()
        half = images.half().div_(255.0)

        @torch.no_grad()
        def forward():
            theirs(half)

        for _ in range(3):
            forward()
        rows.append(("Ultralytics' model.half(), eager forward alone, NCHW", _median_ms(forward, 30)))
    except ImportError as err:
        print(f"(Ultralytics not importable: {err})")
    print(f"{args.model}, batch {args.batch}, {args.imgsz} px, {torch.cuda.get_device_name()}:")
    for name, ms in rows:
        print(f"  {name:62s} {ms:7.2f} ms  ({ms / args.batch:.3f} ms an image)")


if __name__ == "__main__":
    main()
