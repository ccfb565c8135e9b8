"""COCO ``instances`` json + image folder -> rows of the Hub schema (contiguous classes in sorted id order)."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import numpy as np

from yolo11.data.schema import BadSampleSummary, DataSourceError
from yolo11.data.sources.checks import IMAGE_SUFFIXES, check_box, image_size, objects_row
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


def layout_candidates(json_path: Path) -> list[Path]:
    """Folders a json's file names may be relative to, in order: beside the json, then the standard COCO layouts
    ``<root>/annotations/instances_val2017.json`` with ``<root>/images/val2017`` or ``<root>/val2017``."""
    folders = [json_path.parent]
    prefix, _, tag = json_path.stem.rpartition("_")  # instances_val2017 -> val2017
    if prefix and tag:
        root = json_path.parent.parent
        folders += [root / "images" / tag, root / tag]
    return folders


def holds_images(folder: Path) -> bool:
    """Whether ``folder`` has an image file, directly or one folder down (file names such as ``val2017/1.jpg``)."""
    if not folder.is_dir():
        return False
    for entry in folder.iterdir():
        if entry.suffix.lower() in IMAGE_SUFFIXES and entry.is_file():
            return True
        if entry.is_dir() and any(p.suffix.lower() in IMAGE_SUFFIXES for p in entry.iterdir()):
            return True
    return False


def image_folder(json_path: Path, images: Path | None) -> tuple[Path, str]:
    """``(folder, note)``: the folder the json's ``file_name``s are relative to, ``images`` when given, else the
    first of ``layout_candidates`` that holds images; ``note`` says which folder was guessed, for the log."""
    if images is not None:
        if not images.is_dir():
            raise DataSourceError(f"{json_path}: image folder {images} does not exist (--images)")
        return images, ""
    candidates = layout_candidates(json_path)
    for folder in candidates:
        if holds_images(folder):
            note = "" if folder == json_path.parent else (
                f"{json_path.name}: images from {folder} (none beside the json: the standard COCO layout; "
                "--images names the folder)")
            return folder, note
    raise DataSourceError(f"{json_path}: no image folder found (looked in {', '.join(map(str, candidates))}); pass "
                          "--images DIR, with {split} for one folder per split (--images images/{split}2017)")


def missing_images(json_path: Path, images_dir: Path, file_names: list[str]) -> dict[int, str]:
    """Index -> message for each listed image that is not a file. Raises ``DataSourceError`` when none is there
    (a wrong folder, not a few lost files)."""
    paths = [images_dir / name for name in file_names]
    missing = [i for i, path in enumerate(paths) if not path.is_file()]
    if not missing:
        return {}
    first = ", ".join(file_names[i] for i in missing[:3])
    if len(missing) == len(paths):
        raise DataSourceError(f"{json_path}: none of its {len(paths)} images is in {images_dir} (first missing: "
                              f"{first}); pass --images DIR naming the folder its file_names are relative to")
    messages = {i: f"{paths[i]}: no such file, image skipped" for i in missing}
    messages[missing[0]] += (f" ({len(missing)} of the {len(paths)} images listed in {json_path.name} are missing "
                             f"from {images_dir}, first: {first}; --images names the image folder)")
    return messages


def coco_rows(json_path: Path, images_dir: Path, bbox_format: str = "xywh",
              workers: int | None = None) -> tuple[list[dict], list[str], BadSampleSummary]:
    """Rows of a COCO file whose ``file_name``s are relative to ``images_dir``; ``iscrowd`` boxes are skipped (as
    Ultralytics' converter does), not counted as bad. ``bbox_format`` ``xyxy`` reads files that break the COCO
    ``[x, y, width, height]`` rule.

    The image checks run in ``workers`` processes (all cores when ``None``); the rows do not depend on it.
    """
    data = read_coco(json_path)
    categories = sorted(data["categories"], key=lambda c: c["id"])
    class_of = {c["id"]: k for k, c in enumerate(categories)}
    annotations = defaultdict(list)
    for ann in data.get("annotations", []):
        annotations[ann["image_id"]].append(ann)
    paths = [images_dir / info["file_name"] for info in data["images"]]
    missing = missing_images(json_path, images_dir, [info["file_name"] for info in data["images"]])
    present = [path for i, path in enumerate(paths) if i not in missing]
    sizes = iter(ordered_map(checked_size, present, workers=workers, desc=f"converting {json_path.stem}"))
    summary, rows, next_object_id = BadSampleSummary(), [], 1
    for index, (info, path) in enumerate(zip(data["images"], paths, strict=True)):
        size = missing[index] if index in missing else next(sizes)
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
            values = np.array(ann["bbox"], dtype=np.float64)
            corners = values if bbox_format == "xyxy" else np.concatenate([values[:2], values[:2] + values[2:]])
            box, clipped, reason = check_box(corners, width, height)
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


def coco_fingerprint_files(json_path: Path, images_dir: Path) -> list[Path]:
    return [json_path, *sorted(p for p in images_dir.iterdir() if p.is_file())]
