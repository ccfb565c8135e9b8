"""A LabelMe json (``shapes`` of ``label``, ``points`` and ``shape_type``, beside its image) -> one image's named
boxes. A rectangle's two corners, a polygon's extent and a circle's bounding square are boxes; points, lines and
line strips mark no area and are skipped by name. The embedded ``imageData`` is not decoded: the image file beside
the json is the one read.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from yolo11.data.sources.named_boxes import ImageAnnotation, NamedBox
from yolo11.gate import FileRefusedError, read_json

# LabelMe embeds the image as base64 in imageData: a 40 MB photo makes a 54 MB json
MAX_LABELME_JSON_BYTES = 128 << 20
# arrays, objects and commas: ~650,000 points, ~200 MB once parsed (a polygon of 1,000 points is 3,000)
MAX_LABELME_VALUES = 2_000_000
BOX_SHAPES = ("rectangle", "polygon", "circle")


def is_labelme(head: bytes) -> bool:
    """Whether the start of a json file looks like LabelMe's (its ``shapes`` key comes before ``imageData``)."""
    return b'"shapes"' in head


def read_labelme_json(path: Path) -> ImageAnnotation:
    """The json's boxes; ``ValueError`` saying why for a file that is not LabelMe's."""
    try:
        data = read_json(path, max_bytes=MAX_LABELME_JSON_BYTES, max_values=MAX_LABELME_VALUES)
    except FileRefusedError as err:
        raise ValueError(err.problem) from None  # the caller names the file
    if not isinstance(data, dict) or not isinstance(data.get("shapes"), list):
        raise ValueError("not a LabelMe file (no 'shapes' list)")
    try:
        size = int(data["imageWidth"]), int(data["imageHeight"])
    except (KeyError, TypeError, ValueError, OverflowError):  # json reads 1e400 as infinity, which int refuses
        size = None
    objects = tuple(_shape_box(shape) for shape in data["shapes"])
    return ImageAnnotation(os.fspath(path), size if size and min(size) > 0 else None, objects)


def _shape_box(shape: object) -> NamedBox:
    if not isinstance(shape, dict):
        return NamedBox("", None, "not a shape object")
    name, kind = str(shape.get("label") or "").strip(), shape.get("shape_type") or "polygon"
    points = shape.get("points")
    if kind not in BOX_SHAPES:
        return NamedBox(name, None, f"a {kind} marks no area")
    try:
        xs, ys = zip(*(_pair(point) for point in points), strict=True)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer of 309 digits or more
        return NamedBox(name, None, "points are not [x, y] pairs")
    if not all(math.isfinite(v) for v in (*xs, *ys)):
        return NamedBox(name, None, "non-finite coordinates")
    if kind == "circle":  # the centre, then a point on the circle
        if len(xs) != 2:
            return NamedBox(name, None, f"a circle needs 2 points, got {len(xs)}")
        radius = math.hypot(xs[1] - xs[0], ys[1] - ys[0])
        return NamedBox(name, (xs[0] - radius, ys[0] - radius, xs[0] + radius, ys[0] + radius))
    if len(xs) < 2:
        return NamedBox(name, None, f"a {kind} of {len(xs)} point")
    return NamedBox(name, (min(xs), min(ys), max(xs), max(ys)))  # a rectangle's corners come in either order


def _pair(point: object) -> tuple[float, float]:
    """``[x, y]`` as numbers; ``ValueError`` for anything else (``"12"`` unpacks into the point (1, 2), ``true`` is
    a 1 to ``float``)."""
    if not isinstance(point, list) or len(point) != 2 or \
            not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in point):
        raise ValueError("not an [x, y] pair of numbers")
    return float(point[0]), float(point[1])
