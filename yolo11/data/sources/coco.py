"""COCO ``instances`` json + image folder -> rows of the Hub schema (contiguous classes in sorted id order)."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import numpy as np

from yolo11.data.schema import BadSampleSummary, DataSourceError
from yolo11.data.sources.checks import check_box, image_size, objects_row
from yolo11.data.sources.parallel import ordered_map


def read_coco(json_path: Path) -> dict:
    try:
        data = json.loads(json_path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise DataSourceError(f"{json_path}: cannot read the COCO json ({err})") from None
    if not isinstance(data, dict) or "images" not in data or "categories" not in data:
        raise DataSourceError(f"{json_path}: not a COCO instances file (needs 'images' and 'categories')")
    if not data["categories"]:
        raise DataSourceError(f"{json_path}: no categories (class names)")
    return data


def checked_size(path: Path) -> tuple[int, int] | str:
    """``(width, height)`` of one image, or why it is skipped; run in a worker."""
    try:
        return image_size(path)
    except (ValueError, OSError) as err:
        return f"{path}: {err}, image skipped"


def coco_rows(json_path: Path, images_dir: Path | None,
              workers: int | None = None) -> tuple[list[dict], list[str], BadSampleSummary]:
    """Rows of a COCO file; ``iscrowd`` boxes are skipped (as Ultralytics' converter does), not counted as bad.

    The image checks run in ``workers`` processes (all cores when ``None``); the rows do not depend on it.
    """
    data = read_coco(json_path)
    images_dir = images_dir or json_path.parent
    if not images_dir.is_dir():
        raise DataSourceError(f"{json_path}: image folder {images_dir} does not exist (pass images=...)")
    categories = sorted(data["categories"], key=lambda c: c["id"])
    class_of = {c["id"]: k for k, c in enumerate(categories)}
    annotations = defaultdict(list)
    for ann in data.get("annotations", []):
        annotations[ann["image_id"]].append(ann)
    paths = [images_dir / info["file_name"] for info in data["images"]]
    sizes = ordered_map(checked_size, paths, workers=workers, desc=f"converting {json_path.stem}")
    summary, rows, next_object_id = BadSampleSummary(), [], 1
    for info, path, size in zip(data["images"], paths, sizes, strict=True):
        if isinstance(size, str):
            summary.skipped_images.append(size)
            continue
        width, height = size
        boxes, classes = [], []
        for ann in annotations[info["id"]]:
            if ann.get("iscrowd", 0):
                continue
            where = f"{json_path}: annotation {ann.get('id')} of image {info['id']}"
            if ann.get("category_id") not in class_of:
                summary.skipped_lines.append(f"{where}: category {ann.get('category_id')} is not in 'categories'")
                continue
            x, y, w, h = (float(v) for v in ann["bbox"])
            box, clipped, reason = check_box(np.array([x, y, x + w, y + h]), width, height)
            if box is None:
                summary.skipped_lines.append(f"{where}: {reason}, skipped")
                continue
            summary.clipped_boxes += clipped
            boxes.append(box)
            classes.append(class_of[ann["category_id"]])
        summary.backgrounds += not boxes
        rows.append({"image_id": int(info["id"]), "image": {"bytes": None, "path": os.fspath(path)},
                     "width": width, "height": height, "objects": objects_row(boxes, classes, next_object_id)})
        next_object_id += len(boxes)
    return rows, [str(c["name"]) for c in categories], summary


def coco_fingerprint_files(json_path: Path, images_dir: Path | None) -> list[Path]:
    images_dir = images_dir or json_path.parent
    if not images_dir.is_dir():
        raise DataSourceError(f"{json_path}: image folder {images_dir} does not exist (pass images=...)")
    return [json_path, *sorted(p for p in images_dir.iterdir() if p.is_file())]
