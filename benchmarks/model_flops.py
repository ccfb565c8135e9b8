"""Parameters and GFLOPs of every YOLO11 scale next to Ultralytics' published figures (no compute: meta device).

    python benchmarks/model_flops.py --imgsz 640 [--num-classes 80] [--backbone resnet50]

GFLOPs are given twice: ``torch.utils.flop_counter`` (2 per MAC of convs and matmuls) and Ultralytics' thop
convention (see ``yolo11.models.flops``), which is what Ultralytics prints in its model summaries.
"""

from __future__ import annotations

import argparse

import torch

import yolo11
from yolo11.models.flops import count_gflops

PUBLISHED = {"yolo11n": (2_624_080, 6.6), "yolo11s": (9_458_752, 21.7), "yolo11m": (20_114_688, 68.5),
             "yolo11l": (25_372_160, 87.6), "yolo11x": (56_966_176, 196.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--num-classes", type=int, default=80)
    parser.add_argument("--backbone", default=None, help="a timm model name instead of the native backbone")
    args = parser.parse_args()
    print(f"{'model':8} {'params':>12} {'published':>12} {'GFLOPs':>8} {'thop conv.':>10} {'published':>9}")
    for name, (params_published, gflops_published) in PUBLISHED.items():
        with torch.device("meta"):
            model = yolo11.create_model(name, num_classes=args.num_classes, backbone=args.backbone).eval()
        params = sum(p.numel() for p in model.parameters())
        plain = count_gflops(model, args.imgsz, args.imgsz)
        thop_like = count_gflops(model, args.imgsz, args.imgsz, ultralytics=True)
        # Ultralytics' figures are for the native model, 80 classes, 640 px.
        published = args.imgsz == 640 and args.num_classes == 80 and args.backbone is None
        ref_params = f"{params_published:,}" if published else "-"
        ref_gflops = f"{gflops_published:.1f}" if published else "-"
        print(f"{name:8} {params:>12,} {ref_params:>12} {plain:>8.2f} {thop_like:>10.2f} {ref_gflops:>9}")

if __name__ == "__main__":
    main()
