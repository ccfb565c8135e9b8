"""Checks shared by the file-based sources: image headers and box sanity, each with a message naming the file."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
# A box may stick out of the image by this fraction of the image size (label rounding) and is clipped; further out
# it is treated as a wrong label and dropped.
OUT_OF_IMAGE_TOLERANCE = 0.02
MIN_BOX_SIZE_PX = 1e-3  # narrower boxes (after clipping) carry no signal and break IoU-based losses
EXIF_ORIENTATION = 274
TRANSPOSED_ORIENTATIONS = (5, 6, 7, 8)  # rotated by 90 or 270 degrees (5 and 7 also mirrored)
LIBJPEG_CORRUPTION = ("Corrupt JPEG data", "Premature end of JPEG file")  # libjpeg's data-error warnings


def oriented_size(image: Image.Image) -> tuple[int, int]:
    """``(width, height)`` once the EXIF orientation is applied, as OpenCV decodes the pixels (``cv2.imread`` and
    ``cv2.imdecode`` both rotate) and as YOLO labels are drawn; PIL's ``size`` is the stored, unrotated size."""
    width, height = image.size
    try:
        orientation = image.getexif().get(EXIF_ORIENTATION)
    except Exception:  # a malformed EXIF block: OpenCV ignores it too
        orientation = None
    return (height, width) if orientation in TRANSPOSED_ORIENTATIONS else (width, height)


def image_size(path: Path) -> tuple[int, int]:
    """``(width, height)`` of an image file with its EXIF orientation applied, verified to be complete.

    Raises ``ValueError`` with the reason for an unreadable, corrupt or truncated file: PIL ``verify`` checks the
    header and the container, then OpenCV (the loader's decoder) decodes it once at 1/8 scale (``decode_problem``).
    """
    try:
        with Image.open(path) as image:
            width, height = oriented_size(image)
            image_format = image.format
            image.verify()
    except Exception as err:  # PIL raises many types (OSError, SyntaxError, struct.error...)
        raise ValueError(f"unreadable or corrupt image ({type(err).__name__}: {err})") from None
    if width < 2 or height < 2:
        raise ValueError(f"image too small ({width}x{height})")
    if image_format == "JPEG":
        with open(path, "rb") as file:  # PIL's verify does not see a JPEG cut short: look for the end marker
            file.seek(-2, 2)
            if file.read() != b"\xff\xd9":
                raise ValueError("truncated JPEG (no end-of-image marker)")
    problem = decode_problem(Path(path).read_bytes())
    if problem:
        raise ValueError(problem)
    return width, height


def decode_problem(data: bytes) -> str:
    """Why OpenCV cannot decode ``data`` cleanly, or ``""``.

    A JPEG damaged in the middle decodes to garbage pixels while libjpeg prints "Corrupt JPEG data: ..." to the
    process's stderr without a file name, so stderr (file descriptor 2) is captured around the decode to tie the
    warning to the file. Decoding at 1/8 scale still reads every coefficient: about 0.6 ms for a COCO image.
    """
    sys.stderr.flush()
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_REDUCED_GRAYSCALE_8)
        except cv2.error:
            decoded = None
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        warnings = sink.read().decode(errors="replace").splitlines()
    corrupt = [line.strip() for line in warnings if line.startswith(LIBJPEG_CORRUPTION)]
    if corrupt:
        return f"corrupt image data (libjpeg: {corrupt[0]})"
    return "" if decoded is not None else "OpenCV cannot decode it"


def check_box(box: np.ndarray, width: int, height: int) -> tuple[np.ndarray | None, bool, str]:
    """Validate one ``xyxy`` box in pixels against the image size.

    Returns ``(box or None, clipped, reason)``: a box slightly outside the image is clipped to it; one further out
    than ``OUT_OF_IMAGE_TOLERANCE`` of the image size, or with zero area after clipping, is rejected with a reason.
    """
    x1, y1, x2, y2 = (float(v) for v in box)
    if not np.isfinite(box).all():
        return None, False, "non-finite coordinates"
    tol_x, tol_y = OUT_OF_IMAGE_TOLERANCE * width, OUT_OF_IMAGE_TOLERANCE * height
    if x1 < -tol_x or y1 < -tol_y or x2 > width + tol_x or y2 > height + tol_y:
        return None, False, f"box {x1:.1f},{y1:.1f},{x2:.1f},{y2:.1f} lies outside the {width}x{height} image"
    clipped_box = np.array([min(max(x1, 0.0), width), min(max(y1, 0.0), height),
                            min(max(x2, 0.0), width), min(max(y2, 0.0), height)], dtype=np.float64)
    if clipped_box[2] - clipped_box[0] < MIN_BOX_SIZE_PX or clipped_box[3] - clipped_box[1] < MIN_BOX_SIZE_PX:
        return None, False, "zero-area box"
    # only clipping by more than half a pixel is reported: label rounding moves edges by less
    return clipped_box, bool(np.abs(clipped_box - [x1, y1, x2, y2]).max() > 0.5), ""


def objects_row(boxes_xyxy: list[np.ndarray], categories: list[int], first_id: int) -> dict:
    """The ``objects`` column of one image: COCO ``xywh`` pixels, areas, ids counting from ``first_id``."""
    bbox = [[float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])] for b in boxes_xyxy]
    return {"id": list(range(first_id, first_id + len(bbox))), "area": [w * h for _, _, w, h in bbox],
            "bbox": bbox, "category": list(categories)}
