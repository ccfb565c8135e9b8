"""Time DetectionLoss (assigner included) forward + backward per batch on random maps and realistic targets.

Usage:
    python benchmarks/loss_speed.py                      # batch 64 and 128 at 640 px, CPU and (if present) CUDA
    python benchmarks/loss_speed.py --batch-sizes 8 16 --devices cpu
    python benchmarks/loss_speed.py --devices cuda --max-boxes 300   # worst-case padding, reports peak memory

Targets: per image a Poisson(``--boxes-per-image``) number of boxes, log-uniform sides of 8-320 px, padded to the
largest count of the batch (or to ``--max-boxes``) as the loader does. Times are the median of ``--repeats`` runs
after ``--warmup`` runs, with CUDA synchronisation around each.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from yolo11.loss import DetectionLoss

NUM_CLASSES = 80
STRIDES = (8, 16, 32)


def random_batch(
    batch: int, imgsz: int, boxes_per_image: float, max_boxes: int | None, device: torch.device, seed: int = 0
) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Random head maps ``(B, 64 + 80, H/s, W/s)`` and padded targets (xyxy pixels, labels with -1 padding)."""
    gen = torch.Generator().manual_seed(seed)
    feats = [torch.randn(batch, 64 + NUM_CLASSES, imgsz // s, imgsz // s, generator=gen) for s in STRIDES]
    counts = torch.poisson(torch.full((batch,), boxes_per_image), generator=gen).long()
    num_rows = max_boxes if max_boxes is not None else max(int(counts.max()), 1)
    counts = counts.clamp(max=num_rows)
    sides = torch.exp(torch.empty(batch, num_rows, 2).uniform_(2.08, 5.77, generator=gen))  # 8 .. 320 px
    corner = torch.rand(batch, num_rows, 2, generator=gen) * (imgsz - sides)
    boxes = torch.cat((corner, corner + sides), -1)
    labels = torch.randint(0, NUM_CLASSES, (batch, num_rows), generator=gen)
    labels[torch.arange(num_rows)[None, :] >= counts[:, None]] = -1
    return [f.to(device).requires_grad_() for f in feats], boxes.to(device), labels.to(device)


def time_step(loss_fn, feats, boxes, labels, warmup: int, repeats: int) -> float:
    """Median seconds of one forward + backward."""
    device = feats[0].device

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    times = []
    for i in range(warmup + repeats):
        for f in feats:
            f.grad = None
        sync()
        start = time.perf_counter()
        loss, _ = loss_fn(feats, boxes, labels)
        loss.backward()
        sync()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--boxes-per-image", type=float, default=8.0)
    parser.add_argument("--max-boxes", type=int, default=None, help="pad every image to this many rows")
    parser.add_argument("--devices", nargs="+", default=["cpu", "cuda"], choices=["cpu", "cuda"])
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compile", action="store_true", help="also time torch.compile(DetectionLoss)")
    args = parser.parse_args()

    devices = [d for d in args.devices if d == "cpu" or torch.cuda.is_available()]
    loss_fn = DetectionLoss(NUM_CLASSES)
    variants = [("eager", loss_fn)]
    if args.compile:
        variants.append(("compiled", torch.compile(loss_fn)))
    print(f"torch {torch.__version__}, imgsz {args.imgsz}, ~{args.boxes_per_image} boxes/img, threads "
          f"{torch.get_num_threads()}")
    for device_name in devices:
        device = torch.device(device_name)
        label = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        for batch in args.batch_sizes:
            feats, boxes, labels = random_batch(
                batch, args.imgsz, args.boxes_per_image, args.max_boxes, device, seed=batch
            )
            for name, fn in variants:
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                seconds = time_step(fn, feats, boxes, labels, args.warmup, args.repeats)
                memory = ""
                if device.type == "cuda":
                    memory = f", peak {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB"
                print(f"{label:>24} {name:>8} batch {batch:4d} M {boxes.shape[1]:3d}: "
                      f"{seconds * 1e3:8.1f} ms/batch fwd+bwd ({batch / seconds:8.0f} img/s){memory}")


if __name__ == "__main__":
    main()
