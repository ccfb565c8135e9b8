"""Checks shared by the file-based sources: box sanity, with a message naming the file (images: ``image_io``)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from yolo11.data.image_io import IMAGE_SUFFIXES, image_size, oriented_size, read_image_bytes

__all__ = ["IMAGE_SUFFIXES", "MAX_BOXES_PER_IMAGE", "check_box", "check_boxes", "image_size", "objects_row",
           "oriented_size"]

# Objects one image may carry. The densest public sets stay far below (SKU-110K ~700, VisDrone ~900, DOTA's large
# tiles a few thousand); the loss's assignment grows with boxes x anchors x batch, and a million-line label file
# had a 64 px run of batch 2 ask for 2 GB in it mid-epoch: such an image is refused at conversion, named.
MAX_BOXES_PER_IMAGE = 10_000

# A box may stick out of the image by this fraction of the image size (label rounding) and is clipped; further out
# it is treated as a wrong label and dropped.
OUT_OF_IMAGE_TOLERANCE = 0.02
MIN_BOX_SIZE_PX = 1e-3  # narrower boxes (after clipping) carry no signal and break IoU-based losses


MAX_IMAGE_ID = 2**63 - 1  # the cache's image_id column is int64


def as_id(text: str) -> int | None:
    """``text`` as an id where it is a plain decimal number that fits the cache's int64 ('000123' -> 123); None
    for anything else: Unicode digits ('²', which ``str.isdigit`` accepts), 20-digit timestamps, signs."""
    text = text.strip()
    if text.isascii() and text.isdigit() and int(text) <= MAX_IMAGE_ID:
        return int(text)
    return None


def listed_file_exists(path: Path, link_counts: bool = False) -> bool:
    """Whether a listed image is there: a file (``link_counts``: any entry or link, a dangling one then named by
    the decoder); False for a name the system refuses (longer than it allows), which pathlib raises for, so that
    it is reported missing as any other."""
    try:
        return path.exists() or path.is_symlink() if link_counts else path.is_file()
    except OSError:
        return False


def posix_name(folder: Path, name: str) -> str:
    """A listed name written on Windows (``images\\x.jpg``, ``.\\a.jpg``) with ``/`` separators, unless an entry
    of that very name exists in ``folder``: txt image lists and COCO ``file_name``s."""
    if os.sep == "/" and "\\" in name and not listed_file_exists(folder / name, link_counts=True):
        return name.replace("\\", "/")
    return name


def image_cell(path: os.PathLike) -> dict:
    """The schema's ``image`` of a file: its path, read when the cache is written. A name that is not UTF-8 (a zip
    made on Windows: Latin-1 bytes, a str with surrogates here) cannot be an Arrow string: its bytes are read now
    and the name kept with the undecodable bytes shown as U+FFFD, for messages."""
    text = os.fspath(path)
    try:
        text.encode()
    except UnicodeEncodeError:
        shown = text.encode(errors="surrogateescape").decode(errors="replace")
        return {"bytes": read_image_bytes(path), "path": shown}
    return {"bytes": None, "path": text}


def check_box(box: np.ndarray, width: int, height: int) -> tuple[np.ndarray | None, bool, str]:
    """Validate one ``xyxy`` box in pixels against the image size.

    Returns ``(box or None, clipped, reason)``: a box slightly outside the image is clipped to it; one further out
    than ``OUT_OF_IMAGE_TOLERANCE`` of the image size, or with zero area after clipping, is rejected with a reason.
    """
    x1, y1, x2, y2 = (float(v) for v in box)
    if not np.isfinite(box).all():
        return None, False, "non-finite coordinates"
    tol_x, tol_y = _slack(width), _slack(height)
    if x1 < -tol_x or y1 < -tol_y or x2 > width + tol_x or y2 > height + tol_y:
        return None, False, f"box {x1:.1f},{y1:.1f},{x2:.1f},{y2:.1f} lies outside the {width}x{height} image"
    clipped_box = np.array([min(max(x1, 0.0), width), min(max(y1, 0.0), height),
                            min(max(x2, 0.0), width), min(max(y2, 0.0), height)], dtype=np.float64)
    if x2 < x1 or y2 < y1:  # COCO's [x, y, w, h] with a negative w or h, or xyxy corners swapped
        return None, False, f"box {x1:.1f},{y1:.1f},{x2:.1f},{y2:.1f} has a negative width or height"
    if clipped_box[2] - clipped_box[0] < MIN_BOX_SIZE_PX or clipped_box[3] - clipped_box[1] < MIN_BOX_SIZE_PX:
        return None, False, "zero-area box"
    # only clipping by more than half a pixel is reported: label rounding moves edges by less
    return clipped_box, bool(np.abs(clipped_box - [x1, y1, x2, y2]).max() > 0.5), ""


def _slack(size):
    """Pixels a box may stick out of an image of ``size``: ``OUT_OF_IMAGE_TOLERANCE`` of it, and a millionth of a
    pixel more, so that a box exactly at the tolerance is not refused by float rounding."""
    return OUT_OF_IMAGE_TOLERANCE * size + 1e-6


def check_boxes(boxes: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, str]]:
    """``check_box`` for many ``xyxy`` pixel boxes ``(N, 4)`` at once, each in its image of ``sizes`` ``(N, 2)``
    (width, height): ``(boxes clipped to their image (N, 4), usable (N,), clipped (N,), {index: reason})``, the
    reasons those of ``check_box`` for the boxes it rejects. Vectorised: a Hub dataset checks every box at each
    load, which ``check_box`` box by box would make seconds long at COCO's size."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    width, height = (np.asarray(sizes, np.float64).reshape(-1, 2)[:, k] for k in (0, 1))
    finite = np.isfinite(boxes).all(1)
    x1, y1, x2, y2 = boxes.T
    tol_x, tol_y = _slack(width), _slack(height)
    with np.errstate(invalid="ignore"):  # NaN boxes compare False here; ``finite`` rejects them first
        outside = finite & ((x1 < -tol_x) | (y1 < -tol_y) | (x2 > width + tol_x) | (y2 > height + tol_y))
        clipped_boxes = np.stack([np.clip(x1, 0.0, width), np.clip(y1, 0.0, height), np.clip(x2, 0.0, width),
                                  np.clip(y2, 0.0, height)], 1)
        empty = finite & ~outside & ((clipped_boxes[:, 2] - clipped_boxes[:, 0] < MIN_BOX_SIZE_PX)
                                     | (clipped_boxes[:, 3] - clipped_boxes[:, 1] < MIN_BOX_SIZE_PX))
        usable = finite & ~outside & ~empty
        clipped = usable & (np.abs(clipped_boxes - boxes).max(1) > 0.5)
    reasons = {int(k): "non-finite coordinates" for k in np.flatnonzero(~finite)}
    reasons |= {int(k): f"box {x1[k]:.1f},{y1[k]:.1f},{x2[k]:.1f},{y2[k]:.1f} lies outside the "
                        f"{int(width[k])}x{int(height[k])} image" for k in np.flatnonzero(outside)}
    reversed_ = empty & ((x2 < x1) | (y2 < y1))
    reasons |= {int(k): f"box {x1[k]:.1f},{y1[k]:.1f},{x2[k]:.1f},{y2[k]:.1f} has a negative width or height"
                if reversed_[k] else "zero-area box" for k in np.flatnonzero(empty)}
    return clipped_boxes, usable, clipped, reasons


def objects_row(boxes_xyxy: list[np.ndarray], categories: list[int], first_id: int) -> dict:
    """The ``objects`` column of one image: COCO ``xywh`` pixels, areas, ids counting from ``first_id``."""
    bbox = [[float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])] for b in boxes_xyxy]
    return {"id": list(range(first_id, first_id + len(bbox))), "area": [w * h for _, _, w, h in bbox],
            "bbox": bbox, "category": list(categories)}
