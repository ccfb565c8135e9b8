"""Image files as users have them, read one way everywhere: conversion checks, the loader, prediction, plots.

Bytes are read by Python (a regular file, size-capped) and decoded by ``cv2.imdecode``: it applies the EXIF
orientation for JPEG, PNG, WebP and TIFF alike (checked against PIL's ``exif_transpose`` for all 8 orientations),
and it reads every file ``cv2.imread`` reads plus those ``imread`` refuses (OpenCV 5.1's ``imread`` fails on a
TIFF whose orientation is 5-8). 16-bit, palette, grey and alpha images decode to 8-bit BGR (alpha dropped, as
Ultralytics does). Boxes are drawn on the displayed image, so every size here is the size after orientation.
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

# PIL's own decompression-bomb limit (Image.MAX_IMAGE_PIXELS), set in the package's init for OpenCV as well: a
# 13k x 13k aerial tile passes, a PNG of a few KB claiming 100k x 100k pixels (30 GB decoded) does not.
from yolo11 import MAX_IMAGE_PIXELS
from yolo11.gate import FileRefusedError, read_regular

# Ultralytics' image formats that OpenCV decodes (.mpo: a stereo camera's JPEG), and those it cannot: these are
# listed too, so that each is skipped by name with what to do instead of being left out without a word
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".mpo", ".jp2", ".avif", ".heic",
                  ".heif", ".dng")
UNDECODABLE_SUFFIXES = (".heic", ".heif", ".dng")
MAX_IMAGE_BYTES = 1 << 30  # a 1 GB image file is a scan or a crafted file, not a training image
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EXIF_ORIENTATION = 274
TRANSPOSED_ORIENTATIONS = (5, 6, 7, 8)  # rotated by 90 or 270 degrees (5 and 7 also mirrored)
# libjpeg and libpng report damaged data as warnings on stderr and still return pixels (garbage or grey)
DECODER_CORRUPTION = ("Corrupt JPEG data", "Premature end of JPEG file", "libpng error")


def read_regular_file(path: str | os.PathLike, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; ``ValueError`` saying why otherwise (the message
    without the path: callers name the file). Read by the gate's ``read_regular``: a FIFO named ``x.jpg`` would
    block a plain read forever, and ``/dev/zero`` would never end."""
    try:
        return read_regular(path, max_bytes)
    except FileRefusedError as err:
        raise ValueError(err.problem) from None


def read_image_bytes(path: str | os.PathLike) -> bytes:
    return read_regular_file(path, MAX_IMAGE_BYTES)


@dataclass(frozen=True)
class Header:
    """What PIL reads from an image's header without decoding it."""

    format: str
    width: int  # as stored, before the EXIF orientation
    height: int
    transposed: bool  # the EXIF orientation turns it by 90 or 270 degrees


def read_header(data: bytes) -> Header | None:
    """The header, or ``None`` when PIL cannot parse it (OpenCV may still decode the file: PIL refuses a PNG with
    a bad text-chunk checksum that libpng reads with a warning)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the pixel cap below decides
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
                # only JPEG's EXIF is parsed with the header; other formats' getexif decodes the whole image
                orientation = _orientation(image) if image.format in ("JPEG", "MPO") else None
                return Header(image.format or "", width, height, orientation in TRANSPOSED_ORIENTATIONS)
    except Image.DecompressionBombError:
        raise ValueError(f"more than {MAX_IMAGE_PIXELS} pixels (a decompression bomb?)") from None
    except Exception:  # PIL raises many types (OSError, SyntaxError, struct.error...)
        return None


def _orientation(image: Image.Image) -> int | None:
    try:
        return image.getexif().get(EXIF_ORIENTATION)
    except Exception:  # a malformed EXIF block: OpenCV ignores it too
        return None


def decode_bgr(data: bytes, reduced: bool = False) -> np.ndarray | None:
    """``(H, W, 3)`` uint8 BGR with the EXIF orientation applied, or ``None``; ``reduced``: grey at 1/8 scale
    (a JPEG then decodes ~10x faster, every coefficient still read)."""
    flags = cv2.IMREAD_REDUCED_GRAYSCALE_8 if reduced else cv2.IMREAD_COLOR
    try:
        return cv2.imdecode(np.frombuffer(data, np.uint8), flags)
    except cv2.error:  # OpenCV asserts on some malformed buffers instead of returning None
        return None


def checked_decode(data: bytes, reduced: bool) -> tuple[np.ndarray | None, str]:
    """``(decoded or None, problem or "")``, the problem including what libjpeg/libpng print about damaged data.

    A JPEG damaged in the middle decodes to garbage pixels while libjpeg prints "Corrupt JPEG data: ..." to the
    process's stderr without a file name, so stderr (file descriptor 2) is captured around the decode to tie the
    warning to the file (conversion runs one file at a time per process: ``sources/parallel.py``)."""
    sys.stderr.flush()
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            decoded = decode_bgr(data, reduced)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        messages = sink.read().decode(errors="replace").splitlines()
    corrupt = [line.strip() for line in messages if line.startswith(DECODER_CORRUPTION)]
    if corrupt:
        return None, f"corrupt image data ({corrupt[0]})"
    return decoded, "" if decoded is not None else "OpenCV cannot decode it"


def image_size(path: str | os.PathLike) -> tuple[int, int]:
    """``(width, height)`` of an image file as displayed (EXIF orientation applied), checked to decode cleanly.

    Raises ``ValueError`` with the reason for a file the loader could not use. The decoder is the judge, not
    PIL's ``verify``: PIL refuses some files OpenCV reads (and ``verify`` cannot follow a ``getexif``). A JPEG is
    sized from its header and decoded once at 1/8 scale; other formats decode in full either way, so their size
    is the decoded one."""
    if Path(path).suffix.lower() in UNDECODABLE_SUFFIXES:
        raise ValueError(f"OpenCV cannot decode {Path(path).suffix} images; convert them to JPEG or PNG")
    data = read_image_bytes(path)
    header = read_header(data)
    size = (header.width, header.height) if header is not None else _png_size(data)
    if size is not None and size[0] * size[1] > MAX_IMAGE_PIXELS:
        raise ValueError(f"{size[0]}x{size[1]}: more than {MAX_IMAGE_PIXELS} pixels (a decompression bomb?)")
    jpeg = header is not None and header.format in ("JPEG", "MPO")
    decoded, problem = checked_decode(data, reduced=jpeg)
    if problem:
        raise ValueError(_explain(problem, data, header))
    if jpeg:
        width, height = (header.height, header.width) if header.transposed else (header.width, header.height)
    else:
        height, width = decoded.shape[:2]
    if width < 2 or height < 2:
        raise ValueError(f"image too small ({width}x{height})")
    return width, height


def _png_size(data: bytes) -> tuple[int, int] | None:
    """A PNG's stored size from its first chunk (IHDR, which the format puts first), for a PNG whose header PIL
    refuses: it stops at a bad checksum of any chunk before the pixels, which libpng decodes past with a warning."""
    if data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR" and len(data) >= 24:
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    return None


def _explain(problem: str, data: bytes, header: Header | None) -> str:
    """The decoder's complaint in the user's terms: what the file seems to be and what is wrong with it."""
    if problem.startswith("corrupt"):  # the decoder's own words about damaged data
        return problem
    if not data:
        return "empty file"
    if header is None:
        return "unreadable or corrupt image (not an image format OpenCV or PIL knows)"
    if header.format in ("JPEG", "MPO") and not data.rstrip(b"\0").endswith(b"\xff\xd9"):
        return "truncated JPEG (no end-of-image marker)"
    return f"a {header.format} image OpenCV cannot decode (truncated, corrupt, or a variant it lacks)"


def oriented_size(image: Image.Image) -> tuple[int, int]:
    """``(width, height)`` of an open PIL image once the EXIF orientation is applied (PIL's ``size`` is the stored
    size). For images already in memory (Hub datasets); files go through ``image_size``."""
    width, height = image.size
    return (height, width) if _orientation(image) in TRANSPOSED_ORIENTATIONS else (width, height)


def load_bgr(path: str | os.PathLike) -> np.ndarray:
    """``(H, W, 3)`` uint8 BGR of an image file, orientation applied; ``ValueError`` naming the file otherwise."""
    try:
        decoded = decode_bgr(read_image_bytes(path))
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    if decoded is None:
        raise ValueError(f"cannot decode image {path}")
    return decoded


def is_image_file(path: str | os.PathLike) -> bool:
    """Whether the name has an image suffix, in any case (``IMG_0001.JPG``)."""
    return Path(path).suffix.lower() in IMAGE_SUFFIXES


def is_image_name(name: str) -> bool:
    """An image's file name as Ultralytics' glob lists them: an image suffix, not hidden (macOS's ``._x.jpg``)."""
    return not name.startswith(".") and os.path.splitext(name)[1].lower() in IMAGE_SUFFIXES
