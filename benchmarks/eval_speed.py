"""Time CocoEvaluator.compute with pycocotools and with our torch evaluator (CPU, and CUDA when present) on
synthetic predictions; print the times, the speed-up and how far the mAPs differ.

    python benchmarks/eval_speed.py                                   # 5000 images x 300 detections x 80 classes
    python benchmarks/eval_speed.py --images 1000 --backends fast pycocotools
    python benchmarks/eval_speed.py --backends fast --threads 1      # ours alone, one CPU thread

Ground truth: about 7 boxes per image (Poisson), sides from 8 to 300 pixels, so all three COCO area ranges occur.
Detections: 60 % jittered copies of ground-truth boxes (20 % of them with a wrong class), the rest random boxes
of random classes; scores uniform, rounded to 3 decimals so ties occur. Everything follows ``--seed``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import datasets
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's yolo11, not an installed one

from yolo11.evaluation import CocoEvaluator  # noqa: E402


def synthetic(num_images: int, detections: int, num_classes: int, seed: int):
    """A Hub-schema dataset (no pixels) and ``(image_id, (D, 6))`` predictions in pixels."""
    rng = np.random.default_rng(seed)
    rows, predictions = [], []
    for image_id in range(1, num_images + 1):
        count = int(rng.poisson(7))
        side = np.exp(rng.uniform(np.log(8), np.log(300), (count, 2)))
        xy = rng.uniform(0, 640 - side)
        classes = rng.integers(0, num_classes, count)
        rows.append({"image_id": image_id, "width": 640, "height": 640,
                     "objects": {"id": list(range(count)), "area": (side[:, 0] * side[:, 1]).tolist(),
                                 "bbox": np.concatenate((xy, side), 1).tolist(), "category": classes.tolist()}})
        near = rng.random(detections) < 0.6 if count else np.zeros(detections, dtype=bool)
        pick = rng.integers(0, max(count, 1), detections)
        det_side = np.exp(rng.uniform(np.log(8), np.log(300), (detections, 2)))
        det_xy = rng.uniform(0, 640 - det_side)
        det_cls = rng.integers(0, num_classes, detections)
        if count:
            det_side[near] = side[pick[near]] * rng.normal(1, 0.1, (near.sum(), 2))
            det_xy[near] = xy[pick[near]] + rng.normal(0, 0.1, (near.sum(), 2)) * side[pick[near]]
            keep_class = near & (rng.random(detections) < 0.8)
            det_cls[keep_class] = classes[pick[keep_class]]
        scores = np.round(rng.random(detections), 3)
        det = np.concatenate((det_xy, det_xy + det_side, scores[:, None], det_cls[:, None]), 1)
        predictions.append((image_id, torch.tensor(det, dtype=torch.float32)))
    features = datasets.Features({
        "image_id": datasets.Value("int64"), "width": datasets.Value("int32"), "height": datasets.Value("int32"),
        "objects": {"id": datasets.List(datasets.Value("int64")), "area": datasets.List(datasets.Value("float32")),
                    "bbox": datasets.List(datasets.List(datasets.Value("float32"), length=4)),
                    "category": datasets.List(datasets.Value("int64"))},
    })
    return datasets.Dataset.from_list(rows, features=features), predictions


def timed_compute(dataset, class_names, predictions, backend: str, device: str) -> tuple[dict, float, float]:
    """Metrics, seconds of ``compute`` (evaluator built beforehand, as in training) and of the Ultralytics P/R
    and confusion matrix part alone."""
    evaluator = CocoEvaluator(dataset, class_names, backend=backend, device=device)
    if device == "cuda":
        evaluator.compute(predictions[:10])  # CUDA context and kernels
        torch.cuda.synchronize()
    start = time.perf_counter()
    metrics = evaluator.compute(predictions)
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    evaluator._matching_metrics(plot_data=True)  # P/R, PR curve and confusion matrix, as compute() gave
    return metrics, seconds, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--detections", type=int, default=300, help="per image")
    parser.add_argument("--classes", type=int, default=80)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backends", nargs="+", default=["fast", "pycocotools"],
                        choices=("fast", "pycocotools", "faster_coco_eval"))
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    dataset, predictions = synthetic(args.images, args.detections, args.classes, args.seed)
    class_names = [f"class{k}" for k in range(args.classes)]
    print(f"{args.images} images x {args.detections} detections x {args.classes} classes, "
          f"{sum(len(o['id']) for o in dataset['objects'])} ground-truth boxes (made in "
          f"{time.perf_counter() - start:.1f} s); torch threads {torch.get_num_threads()}")
    runs = [(backend, "cpu") for backend in args.backends]
    if "fast" in args.backends and torch.cuda.is_available():
        runs.append(("fast", "cuda"))
    results = {}
    for backend, device in runs:
        metrics, seconds, ultralytics = timed_compute(dataset, class_names, predictions, backend, device)
        results[backend, device] = metrics, seconds
        print(f"{backend:>17} {device:>4}: compute {seconds:8.2f} s ({1000 * seconds / args.images:6.2f} ms/image; "
              f"Ultralytics P/R + confusion part {ultralytics:.2f} s)  mAP50-95 {metrics['map50_95']:.6f}  "
              f"mAP50 {metrics['map50']:.6f}")
    if ("pycocotools", "cpu") in results:
        reference, reference_seconds = results["pycocotools", "cpu"]
        for (backend, device), (metrics, seconds) in results.items():
            if backend == "pycocotools":
                continue
            diff_all, diff_50 = (abs(metrics[k] - reference[k]) for k in ("map50_95", "map50"))
            print(f"{backend} {device} vs pycocotools: speed-up {reference_seconds / seconds:.1f}x, "
                  f"|diff| mAP50-95 {diff_all:.2e}, mAP50 {diff_50:.2e}")


if __name__ == "__main__":
    main()
