"""Ground truth and predictions for the evaluation tests: Hub-schema datasets without pixels (hand-written images
and coco128's reference annotations) and the predictions that score them perfectly."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import torch

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT.parent / "shared" / "data" / "reference"
CLASS_NAMES = ["cat", "dog", "bird"]


def hub_dataset(images: list[tuple[int, int, int, list[list[float]], list[int]]],
                class_names: list[str] = CLASS_NAMES) -> datasets.Dataset:
    """A Hub-schema dataset without pixels: (image_id, width, height, xywh boxes, classes) per image."""
    rows = [{"image_id": image_id, "width": w, "height": h,
             "objects": {"id": list(range(len(boxes))), "area": [b[2] * b[3] for b in boxes], "bbox": boxes,
                         "category": classes}}
            for image_id, w, h, boxes, classes in images]
    features = datasets.Features({
        "image_id": datasets.Value("int64"), "width": datasets.Value("int32"), "height": datasets.Value("int32"),
        "objects": {"id": datasets.List(datasets.Value("int64")), "area": datasets.List(datasets.Value("float32")),
                    "bbox": datasets.List(datasets.List(datasets.Value("float32"), length=4)),
                    "category": datasets.List(datasets.ClassLabel(names=class_names))},
    })
    return datasets.Dataset.from_list(rows, features=features)


IMAGES = [
    (7, 320, 240, [[10, 20, 50, 40], [100, 100, 120, 80]], [0, 1]),
    (3, 200, 300, [[5, 5, 30, 30]], [2]),
    (11, 640, 480, [], []),  # a background image
    (4, 256, 256, [[60, 60, 100, 150], [0, 0, 20, 20]], [0, 0]),
]


def perfect_predictions(images, score: float = 0.9) -> list[tuple[int, torch.Tensor]]:
    """Each image's ground truth as xyxy detections ``(N, 6)`` (box, ``score``, class)."""
    out = []
    for image_id, _, _, boxes, classes in images:
        xywh = torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4)
        xyxy = torch.cat((xywh[:, :2], xywh[:, :2] + xywh[:, 2:]), dim=1)
        rows = torch.cat((xyxy, torch.full((len(boxes), 1), score), torch.tensor(classes).reshape(-1, 1)), dim=1)
        out.append((image_id, rows))
    return out


def reference_dataset() -> tuple[datasets.Dataset, list[str]]:
    """coco128's ground truth (shared/data/reference) as a Hub-schema dataset without pixels, and its class names."""
    gt = json.loads((REFERENCE / "coco128_instances.json").read_text())
    by_image: dict[int, list[dict]] = {}
    for ann in gt["annotations"]:
        by_image.setdefault(ann["image_id"], []).append(ann)
    images = [(im["id"], im["width"], im["height"], [a["bbox"] for a in by_image.get(im["id"], [])],
               [a["category_id"] - 1 for a in by_image.get(im["id"], [])]) for im in gt["images"]]
    names = [c["name"] for c in gt["categories"]]
    rows = [{"image_id": i, "width": w, "height": h,
             "objects": {"id": list(range(len(b))), "area": [x[2] * x[3] for x in b], "bbox": b, "category": c}}
            for i, w, h, b, c in images]
    return datasets.Dataset.from_list(rows), names
