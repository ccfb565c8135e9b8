"""COCO ``categories`` and ``annotations`` -> classes and boxes, as users' files have them.

Categories become contiguous classes in sorted id order (COCO's 1..90 with gaps -> 0..79). A box is read from
``bbox``; where that is missing or empty it is the extent of the ``segmentation`` (polygons, or RLE decoded by
pycocotools). An annotation that cannot be used is skipped with a message naming the file and its id; only a file
that cannot be used at all raises.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
from pycocotools import mask as mask_utils

from yolo11.data.schema import LOGGER, BadSampleSummary, DataSourceError
from yolo11.data.sources.checks import MAX_IMAGE_ID, check_box
from yolo11.data.sources.named_boxes import check_class_list
from yolo11.gate import MAX_CLASSES


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def class_map(json_path: Path, categories: list, annotations: list) -> tuple[dict[int, int], list[str]]:
    """``({category id: class}, class names)``, classes in sorted id order. A Roboflow export's category named
    after the dataset (``dataset_category``) is dropped with one log line."""
    if len(categories) > MAX_CLASSES:
        raise DataSourceError(f"{json_path}: {len(categories)} categories, more than the {MAX_CLASSES} classes a "
                              "model may have (yolo11.gate.MAX_CLASSES)")
    for index, category in enumerate(categories):
        if not isinstance(category, dict) or type(category.get("id")) is not int or "name" not in category:
            raise DataSourceError(f"{json_path}: categories[{index}] needs an integer 'id' and a 'name', got "
                                  f"{str(category)[:80]}")
    repeated = [i for i, n in Counter(c["id"] for c in categories).items() if n > 1]
    if repeated:
        raise DataSourceError(f"{json_path}: category id {repeated[0]} is listed more than once")
    names = {}
    for category in categories:
        if names.setdefault(str(category["name"]), category["id"]) != category["id"]:
            raise DataSourceError(f"{json_path}: categories {names[str(category['name'])]} and {category['id']} are "
                                  f"both named {str(category['name'])!r}; class names must be unique")
    categories = sorted(categories, key=lambda c: c["id"])
    phantom = dataset_category(categories, annotations)
    if phantom is not None:
        LOGGER.warning("%s: category %d %r dropped: it has no annotations and is the supercategory of every other "
                       "category (a Roboflow export names it after the dataset; it is not a class)", json_path,
                       phantom["id"], phantom["name"])
        categories = [c for c in categories if c is not phantom]
    # the bounds every source's names meet: their characters in all, no control character
    names = check_class_list([str(c["name"]) for c in categories], str(json_path))
    return {c["id"]: k for k, c in enumerate(categories)}, names


def dataset_category(categories: list[dict], annotations: list) -> dict | None:
    """The category that has no annotations and is the ``supercategory`` of all the others, else ``None``.

    Roboflow's COCO export adds one (id 0, named after the dataset, ``supercategory: "none"``); read as a class it
    is a phantom class that never appears, and every model trained on it has one output too many.
    """
    if len(categories) < 2:
        return None
    parents = Counter(c.get("supercategory") for c in categories)
    used = {ann.get("category_id") for ann in annotations if isinstance(ann, dict)}
    for category in categories:
        others_under_it = parents[category["name"]] - (category.get("supercategory") == category["name"])
        if others_under_it == len(categories) - 1 and category["id"] not in used:
            return category
    return None


def usable_images(json_path: Path, images: list, skipped: list[str]) -> list[dict]:
    """The ``images`` entries with an integer ``id`` (the first of each id) and a ``file_name``; a message in
    ``skipped`` for each other one."""
    usable, seen = [], set()
    for index, info in enumerate(images):
        image_id = info.get("id") if isinstance(info, dict) else None
        named = isinstance(info, dict) and isinstance(info.get("file_name"), str) and info["file_name"]
        if type(image_id) is not int or abs(image_id) > MAX_IMAGE_ID or not named:  # the cache's ids are int64
            skipped.append(f"{json_path}: images[{index}] needs an integer 'id' (within int64) and a 'file_name', got "
                           f"{str(info)[:80]}; skipped")
        elif image_id in seen:
            skipped.append(f"{json_path}: image id {image_id} is listed again ({info['file_name']}); skipped")
        else:
            seen.add(image_id)
            usable.append(info)
    return usable


def annotations_by_image(json_path: Path, annotations: list, image_ids: set[int],
                         skipped: list[str]) -> dict[int, list[dict]]:
    """Image id -> its annotations; one whose ``image_id`` is not among ``image_ids`` gets a message in
    ``skipped``."""
    by_image = defaultdict(list)
    for index, ann in enumerate(annotations):
        if not isinstance(ann, dict):
            skipped.append(f"{json_path}: annotations[{index}] is not a JSON object; skipped")
            continue
        image_id = ann.get("image_id")
        if type(image_id) is not int or image_id not in image_ids:
            skipped.append(f"{json_path}: annotation {shown(ann.get('id'))}: image {shown(image_id)} is not in "
                           "'images' (or was skipped); annotation skipped")
            continue
        by_image[image_id].append(ann)
    return by_image


def shown(value: object, limit: int = 40) -> str:
    """A json value as a message quotes it: its repr, cut to ``limit`` characters (a crafted id of a megabyte
    would flood the log, once per annotation)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def image_objects(json_path: Path, image_id: int, annotations: list[dict], class_of: dict[int, int],
                  size: tuple[int, int], xyxy: bool, summary: BadSampleSummary,
                  scale: tuple[float, float] | None = None) -> tuple[list[np.ndarray], list[int]]:
    """``(boxes xyxy in pixels, classes)`` of one image of ``size`` (width, height, read from the file). Crowd
    annotations (``iscrowd: 1``) are skipped as Ultralytics' converter does, not counted; the others that cannot
    be used are counted in ``summary`` with their reason, boxes clipped to the image there too. ``scale``: the
    json's pixels to the file's ``(sx, sy)``, for an image resized since it was labelled."""
    boxes, classes = [], []
    for ann in annotations:
        if ann.get("iscrowd", 0) == 1:
            continue
        where = f"{json_path}: annotation {shown(ann.get('id'))} of image {image_id}"
        category = ann.get("category_id")
        if not _is_number(category) or category not in class_of:
            summary.skipped_lines.append(f"{where}: category {shown(category)} is not in 'categories', skipped")
            continue
        corners, reason = annotation_box(ann, xyxy)
        box, clipped = None, False
        if corners is not None:
            if scale is not None:  # the json's pixels are those of the image before it was resized
                corners = corners * [scale[0], scale[1], scale[0], scale[1]]
            box, clipped, reason = check_box(corners, *size)
        if box is None:
            summary.skipped_lines.append(f"{where}: {reason}, skipped")
            continue
        summary.clipped_boxes += clipped
        boxes.append(box)
        classes.append(class_of[category])
    return boxes, classes


def annotation_box(ann: dict, xyxy: bool) -> tuple[np.ndarray | None, str]:
    """``(corners x1 y1 x2 y2 in pixels, "")`` or ``(None, why not)``: from ``bbox`` (``[x, y, width, height]``,
    or corners when ``xyxy``), or where ``bbox`` is missing or empty, the extent of the ``segmentation``."""
    bbox = ann.get("bbox")
    if bbox is None or bbox == []:
        if not ann.get("segmentation"):
            return None, "no bbox and no segmentation"
        return segmentation_box(ann["segmentation"])
    if not isinstance(bbox, list) or len(bbox) != 4 or not all(map(_is_number, bbox)):
        return None, f"bbox {str(bbox)[:60]} is not 4 numbers"
    values = np.array(bbox, np.float64)
    if not np.isfinite(values).all():
        return None, f"bbox {bbox} is not finite"
    return (values if xyxy else np.concatenate([values[:2], values[:2] + values[2:]])), ""


def segmentation_box(segmentation: object) -> tuple[np.ndarray | None, str]:
    """The extent ``x1 y1 x2 y2`` of polygons (``[[x, y, x, y, ...], ...]``, or one flat polygon) or of an RLE
    mask (``{"size": [h, w], "counts": ...}``), or ``(None, why not)``."""
    if isinstance(segmentation, dict):
        return rle_box(segmentation)
    if not isinstance(segmentation, list):
        return None, f"segmentation {str(segmentation)[:60]} is neither polygons nor RLE"
    polygons = segmentation if all(isinstance(p, list) for p in segmentation) else [segmentation]
    if not all(p and len(p) % 2 == 0 and all(map(_is_number, p)) for p in polygons):
        return None, f"segmentation {str(segmentation)[:60]} is not polygons of x, y numbers"
    points = np.array([v for p in polygons for v in p], np.float64).reshape(-1, 2)
    if not np.isfinite(points).all():
        return None, "segmentation polygon is not finite"
    return np.concatenate([points.min(0), points.max(0)]), ""


def rle_box(rle: dict) -> tuple[np.ndarray | None, str]:
    """The extent of an RLE mask, uncompressed (``counts`` a list of run lengths) or compressed (a string), read
    by pycocotools (``toBbox``: whole pixels, as COCO's own boxes of RLE annotations)."""
    size, counts = rle.get("size"), rle.get("counts")
    if not (isinstance(size, list) and len(size) == 2 and all(type(v) is int and v > 0 for v in size)):
        return None, f"RLE size {str(size)[:40]} is not [height, width]"
    height, width = size
    if height * width >= 2**32:  # pycocotools counts pixels and runs in 32 bits: it raises OverflowError past them
        return None, f"RLE size {height} x {width} exceeds the 2^32 pixels an RLE mask may hold"
    if isinstance(counts, list):
        if not all(type(c) is int and c >= 0 for c in counts) or sum(counts) != height * width:
            return None, f"RLE counts are not run lengths adding up to {height} x {width} pixels"
        encoded = mask_utils.frPyObjects(rle, height, width)
    elif isinstance(counts, str):
        encoded = {"size": size, "counts": counts}
    else:
        return None, f"RLE counts {str(counts)[:40]} are neither a list nor a string"
    x, y, w, h = (float(v) for v in mask_utils.toBbox(encoded))
    return np.array([x, y, x + w, y + h]), ""
