"""Whether a dataset's boxes are ``[x, y, width, height]`` or ``[x1, y1, x2, y2]`` pixels, stated or read from the data.

The Hub's detection convention (cppe-5, detection-datasets/*) is COCO ``xywh``, but datasets built by hand often
store ``xyxy`` under the same ``bbox`` name. Each reading rules itself out on some boxes: ``xyxy`` cannot have a
corner left of or above its origin, and a box read with the wrong format usually leaves the image. When neither
reading is ruled out the data cannot tell, and the user has to say. Boxes normalised to 0..1 (as YOLO labels are)
are refused whatever the format: read as pixels they would all be a pixel wide.
"""

from __future__ import annotations

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from yolo11.data.schema import DataSourceError
from yolo11.data.sources.checks import OUT_OF_IMAGE_TOLERANCE

BBOX_FORMATS = ("auto", "xywh", "xyxy")
FLAG = "--bbox-format"
CLEAR_MARGIN = 10  # the chosen reading must fit at least this many times more boxes than the other one misfits
NORMALISED_MIN_IMAGE = 8  # images at least this many pixels a side whose boxes all lie in 0..1 hold normalised boxes


def is_list_type(arrow_type: pa.DataType) -> bool:
    return pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type)


def object_field(dataset: datasets.Dataset, objects_name: str, field: str) -> tuple[pa.Array, np.ndarray]:
    """``field`` of every object as one flat Arrow array, and the number of objects of each row ``(rows,)``.

    Read through Arrow without touching the image column: ``objects`` is either a struct of lists (datasets'
    ``Sequence({...})``) or a list of structs (``List({...})``); ``objects_name`` ``""``: ``field`` is a top-level
    column, a list per row, or one value per row (counted as one).
    """
    column = dataset.select_columns([objects_name or field]).with_format("arrow")[:].column(
        objects_name or field).combine_chunks()
    if not objects_name:
        if not is_list_type(column.type):
            return column, np.ones(len(column), np.int64)
        return column.flatten(), pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
    if pa.types.is_struct(column.type):
        per_row = pc.struct_field(column, field)
        values = per_row.flatten()
    else:
        per_row = column
        values = pc.struct_field(column.flatten(), field)
    return values, pc.fill_null(pc.list_value_length(per_row), 0).to_numpy(zero_copy_only=False)


def box_array(dataset: datasets.Dataset, objects_name: str, bbox_name: str, where: str) -> tuple[np.ndarray,
                                                                                                 np.ndarray]:
    """Every box of the dataset as ``(N, 4)`` float64 (as stored) and the row each belongs to ``(N,)``."""
    boxes, counts = object_field(dataset, objects_name, bbox_name)
    field = f"{objects_name}.{bbox_name}" if objects_name else bbox_name
    if pa.types.is_null(boxes.type) and not len(boxes):  # every object list empty: a split of backgrounds
        return np.zeros((0, 4), np.float64), np.zeros(0, np.int64)
    if not is_list_type(boxes.type):
        raise DataSourceError(f"{where}: {field} must hold a list of boxes per image ([[x, y, w, h], ...]), found "
                              f"{boxes.type} per box")
    rows = np.repeat(np.arange(len(counts)), counts)
    null = pc.is_null(boxes).to_numpy(zero_copy_only=False)
    if null.any():  # flatten would drop it and shift every later box to another object
        raise DataSourceError(f"{where}: row {rows[np.flatnonzero(null)[0]]}: {field} holds a null box (None) among "
                              "its boxes; remove it, or give its 4 numbers")
    lengths = pc.list_value_length(boxes).to_numpy(zero_copy_only=False)
    if len(lengths) and (lengths != 4).any():
        raise DataSourceError(f"{where}: {field} must hold 4 numbers per box, found a box of "
                              f"{int(lengths[lengths != 4][0])}")
    values = boxes.flatten().to_numpy(zero_copy_only=False).astype(np.float64).reshape(-1, 4)
    return values, rows


def misfits(boxes: np.ndarray, sizes: np.ndarray) -> dict[str, int]:
    """How many ``boxes (N, 4)`` each reading makes impossible in images of ``sizes (N, 2)`` (width, height).

    A box may stick out by ``OUT_OF_IMAGE_TOLERANCE`` of the image (label rounding), as conversion allows.
    """
    limit = sizes * (1.0 + OUT_OF_IMAGE_TOLERANCE)
    a, b = boxes[:, :2], boxes[:, 2:]
    as_xyxy = (b < a).any(1) | (b > limit).any(1)
    as_xywh = (b < 0).any(1) | (a + b > limit).any(1)
    return {"xyxy": int(as_xyxy.sum()), "xywh": int(as_xywh.sum())}


def check_pixels(boxes: np.ndarray, sizes: np.ndarray, where: str, field: str) -> None:
    """Raise ``DataSourceError`` when ``boxes`` ``(N, 4)`` look normalised to the image size: every coordinate in
    0..1 (give or take ``OUT_OF_IMAGE_TOLERANCE``), in images of ``sizes`` ``(N, 2)`` of at least
    ``NORMALISED_MIN_IMAGE`` pixels a side. Read as pixels they would make every box a pixel wide, whatever the
    format, and the model would train on nothing."""
    if not len(boxes) or not np.isfinite(boxes).all() or np.abs(boxes).max() == 0:
        return
    if boxes.min() >= -OUT_OF_IMAGE_TOLERANCE and boxes.max() <= 1 + OUT_OF_IMAGE_TOLERANCE \
            and sizes.min() >= NORMALISED_MIN_IMAGE:
        width, height = sizes.min(0)
        raise DataSourceError(
            f"{where}: {field} looks normalised to 0..1 (every coordinate of the {len(boxes)} boxes lies in 0..1, "
            f"in images of {width}x{height} pixels or more); boxes must be in pixels: {FLAG} says only how pixel "
            "boxes are ordered (xywh or xyxy). Multiply x and width by the image width, y and height by its height "
            "(datasets.Dataset.map), then save_to_disk and pass that folder")


def resolve_bbox_format(requested: str, boxes: np.ndarray, sizes: np.ndarray, where: str,
                        field: str) -> tuple[str, str]:
    """``(format, note)``: ``requested`` when stated; for ``auto`` the reading the boxes allow, and a note giving
    the evidence for the log (``""`` when there is nothing to say); ``field`` names the boxes in messages
    (``objects.bbox``).

    Raises ``DataSourceError`` naming ``--bbox-format`` when both readings fit every box, or when each misfits
    about as many boxes as the other (neither is clearly right).
    """
    if requested not in BBOX_FORMATS:
        raise DataSourceError(f"{FLAG} must be one of {BBOX_FORMATS}, got {requested!r}")
    check_pixels(boxes, sizes, where, field)
    if requested != "auto" or len(boxes) == 0:
        return ("xywh" if requested == "auto" else requested), ""
    bad = misfits(boxes, sizes)
    if bad["xyxy"] == bad["xywh"] == 0:
        raise DataSourceError(
            f"{where}: cannot tell whether {field} is [x, y, width, height] or [x1, y1, x2, y2]: all {len(boxes)} "
            f"boxes fit their images either way; pass {FLAG} xywh (the Hub and COCO convention) or {FLAG} xyxy")
    chosen, other = sorted(bad, key=bad.get)
    if bad[chosen] * CLEAR_MARGIN > bad[other]:
        raise DataSourceError(
            f"{where}: {field} fits neither box format: read as xywh {bad['xywh']} of {len(boxes)} boxes leave "
            f"their image or have a negative size, read as xyxy {bad['xyxy']} do; check the data or pass {FLAG}")
    either = f"; {bad[chosen]} misfit either way" if bad[chosen] else ""
    return chosen, (f"{where}: {field} read as {chosen} (as {other}, {bad[other]} of {len(boxes)} boxes would leave "
                    f"their image or be inverted{either}); {FLAG} sets it")
