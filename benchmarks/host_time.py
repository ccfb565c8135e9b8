"""Host time of one eager training step, by phase and by layer, for our step and Ultralytics'.

At batch 8-32 the eager step on a GPU is bound by the Python thread that launches its kernels, so what limits it
is the host time of each phase, not the device's. No device sync is taken inside a step: on CUDA a phase's figure
is the time the host took to launch it (the device runs behind), and "device tail" is the wait at the step's end.
On the CPU kernels run where they are launched, so the figures include the arithmetic: use a small ``--imgsz``
(64) to read the overhead. On CUDA the host syncs per step are counted too (``torch.cuda.set_sync_debug_mode``).

Ours is the trainer's own loop (``yolo11.engine.loop.train_one_epoch``, eager: ``--cuda-graphs false``), timed by
wrapping the objects it calls; Ultralytics' is its trainer's step as 8.4.190 runs it (``preprocess_batch``,
``model.loss``, ``scaler.scale(loss).backward()``, ``optimizer_step``), built from ``yolo11n.yaml``. One optimizer
step per batch on both (nominal batch = batch), AdamW, clip 10, EMA, the same synthetic batches (``--boxes``
per image). Figures are medians over ``--steps`` steps after ``--warmup``.

    python benchmarks/host_time.py --device cpu --batch 2 --imgsz 64 --threads 1
    python benchmarks/host_time.py --device cuda --batch 16 --imgsz 640
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


class Clock:
    """Per-step host seconds of named phases; ``mark`` ends a step."""

    def __init__(self, device: torch.device):
        self.device = device
        self.current: dict[str, float] = defaultdict(float)
        self.steps: list[dict[str, float]] = []
        self._open: dict[str, float] = {}

    def wrap(self, obj, attr: str, name: str) -> None:
        inner = getattr(obj, attr)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.current[name] += time.perf_counter() - start
        setattr(obj, attr, timed)

    def hook(self, module: torch.nn.Module, name: str) -> None:
        module.register_forward_pre_hook(lambda *_: self._open.__setitem__(name, time.perf_counter()))
        module.register_forward_hook(lambda *_: self.current.__setitem__(
            name, self.current[name] + time.perf_counter() - self._open.pop(name)))

    def mark(self, step_seconds: float) -> None:
        start = time.perf_counter()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self.current["device tail"] += time.perf_counter() - start
        self.current["step"] = step_seconds + self.current["device tail"]
        self.steps.append(dict(self.current))
        self.current = defaultdict(float)

    def medians(self, warmup: int) -> dict[str, float]:
        kept = self.steps[warmup:]
        return {k: statistics.median(s.get(k, 0.0) for s in kept) * 1000 for k in kept[0]}


def ours(args, batches: list[dict], device: torch.device) -> tuple[dict, int]:
    from step_overhead import build_step

    from yolo11.engine.checkpoint import TrainState
    from yolo11.engine.loop import train_one_epoch

    step = build_step("eager", args.model, args.batch, nominal=args.batch, device=device)  # a step per batch
    accelerator, optimizer, ema = step.accelerator, step.optimizer, step.ema
    cuda = device.type == "cuda"
    clock = Clock(device)
    plain = accelerator.unwrap_model(step.model)
    for name, layer in [*plain.backbone.layers.named_children(), *plain.neck.named_children()]:
        clock.hook(layer, f"layer {name} {type(layer).__name__}")
    clock.hook(plain.head, f"layer head {type(plain.head).__name__}")
    clock.hook(plain, "forward")
    clock.hook(step.criterion, "loss")
    clock.hook(step.batch_hsv, "HSV + input")
    clock.wrap(step.micro_step, "backward", "backward")
    clock.wrap(accelerator, "clip_grad_norm_", "clip")
    clock.wrap(optimizer, "step", "optimizer")
    clock.wrap(optimizer, "zero_grad", "optimizer")
    clock.wrap(ema, "update", "EMA")

    def feed():  # a step runs from one batch request to the next: the loop's own per-step work included
        start = time.perf_counter()
        for batch in batches:
            yield batch
            clock.mark(time.perf_counter() - start)
            start = time.perf_counter()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        train_one_epoch(step, feed(), TrainState(), epoch=0)
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
    syncs = sum("synchroniz" in str(w.message) for w in caught)
    return clock.medians(args.warmup), syncs * args.steps // len(batches)


def ultralytics(args, batches: list[dict], device: torch.device) -> tuple[dict, int]:
    from ultralytics.cfg import get_cfg
    from ultralytics.nn.tasks import DetectionModel
    from ultralytics.utils.torch_utils import ModelEMA

    cuda = device.type == "cuda"
    torch.manual_seed(0)
    model = DetectionModel(f"{args.model}.yaml", nc=80, verbose=False).to(device).train()
    model.args = get_cfg()
    ema = ModelEMA(model)
    groups = ([], [], [])  # Ultralytics' build_optimizer: BN weights, weights (decayed), biases
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            groups[2 if name == "bias" else 1 if not isinstance(module, torch.nn.BatchNorm2d) else 0].append(param)
    optimizer = torch.optim.AdamW(groups[2], lr=0.000119, betas=(0.9, 0.999), weight_decay=0.0)
    optimizer.add_param_group({"params": groups[0], "weight_decay": 5e-4})
    optimizer.add_param_group({"params": groups[1], "weight_decay": 0.0})
    scaler = torch.amp.GradScaler(device.type, enabled=cuda)
    clock = Clock(device)
    for index, layer in enumerate(model.model):
        clock.hook(layer, f"layer {index} {type(layer).__name__}")
    model.loss({**batches[0], "img": batches[0]["img"].float() / 255})  # builds model.criterion
    criterion = model.criterion

    class TimedCriterion:  # the criterion is a plain callable: time its calls
        def __call__(self, *a, **k):
            start = time.perf_counter()
            try:
                return criterion(*a, **k)
            finally:
                clock.current["loss"] += time.perf_counter() - start
    model.criterion = TimedCriterion()
    model.zero_grad(set_to_none=True)

    def step(batch):
        start = time.perf_counter()
        images = batch["img"].to(device, non_blocking=True).float() / 255  # preprocess_batch
        clock.current["HSV + input"] += time.perf_counter() - start
        start = time.perf_counter()
        with torch.autocast(device.type, enabled=cuda):
            loss, _ = model.loss({**batch, "img": images})
        clock.current["forward"] += time.perf_counter() - start - clock.current["loss"]
        start = time.perf_counter()
        scaler.scale(loss.sum()).backward()
        clock.current["backward"] += time.perf_counter() - start
        start = time.perf_counter()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
        clock.current["clip"] += time.perf_counter() - start
        start = time.perf_counter()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        clock.current["optimizer"] += time.perf_counter() - start
        start = time.perf_counter()
        ema.update(model)
        clock.current["EMA"] += time.perf_counter() - start

    syncs = 0
    for batch in batches:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if cuda:
                torch.cuda.set_sync_debug_mode("warn")
            start = time.perf_counter()
            step(batch)
            seconds = time.perf_counter() - start
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
        if len(clock.steps) >= args.warmup:
            syncs += sum("synchroniz" in str(w.message) for w in caught)
        clock.mark(seconds)
    return clock.medians(args.warmup), syncs


def make_batches(args, device: torch.device) -> tuple[list[dict], list[dict]]:
    """The same images and boxes in each trainer's batch format."""
    from step_overhead import make_batches as ours_format

    count = args.warmup + args.steps
    mine = ours_format(count, args.batch, args.imgsz, args.boxes, device)
    theirs = []
    for b in mine:
        xyxy = b["boxes"].reshape(-1, 4) / args.imgsz
        xywh = torch.cat([(xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2]], 1)
        # Ultralytics' collate stacks contiguous (3, H, W) arrays: an NCHW batch (ours arrives channels_last)
        theirs.append({"img": b["images"].contiguous(), "bboxes": xywh, "cls": b["labels"].reshape(-1, 1).float(),
                       "batch_idx": torch.arange(args.batch, device=device).repeat_interleave(args.boxes).float()})
    if device.type == "cpu":  # the CPU step applies HSV in the loader, not in the step
        for b in mine:
            b.pop("hsv_gains")
    return mine, theirs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", default="yolo11n")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--boxes", type=int, default=8, help="boxes per image")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    parser.add_argument("--skip-ultralytics", action="store_true")
    parser.add_argument("--ultralytics-first", action="store_true", help="run Ultralytics' step first (order check)")
    parser.add_argument("--layers", type=int, default=8, help="how many of the slowest layers to list")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    mine, theirs = make_batches(args, device)
    runs = {"ours": lambda: ours(args, mine, device)}
    if not args.skip_ultralytics:
        runs["ultralytics"] = lambda: ultralytics(args, theirs, device)
    order = sorted(runs, key=lambda name: (name == "ours") == args.ultralytics_first)
    results = {name: runs[name]() for name in order}
    print(f"host ms per step, median of {args.steps} ({args.model}, batch {args.batch}, {args.imgsz} px, "
          f"{device.type}, torch {torch.__version__})")
    phases = ["HSV + input", "forward", "loss", "backward", "clip", "optimizer", "EMA", "device tail", "step"]
    print(f"{'phase':14s}" + "".join(f"{name:>14s}" for name in results))
    for phase in phases:
        print(f"{phase:14s}" + "".join(f"{r[0].get(phase, 0.0):14.2f}" for r in results.values()))
    for name, (figures, _) in results.items():
        known = sum(figures.get(p, 0.0) for p in phases[:-2])
        print(f"{name}: loop and other host work {figures['step'] - figures['device tail'] - known:.2f} ms; "
              + (f"host syncs per step {results[name][1] / args.steps:.1f}" if device.type == "cuda" else ""))
        layers = sorted(((v, k) for k, v in figures.items() if k.startswith("layer ")), reverse=True)
        print("  slowest layers (forward, host ms): " + ", ".join(f"{k[6:]} {v:.2f}" for v, k in
                                                                  layers[:args.layers]))
    if args.json:
        args.json.write_text(json.dumps({k: {"ms": v[0], "syncs": v[1]} for k, v in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
