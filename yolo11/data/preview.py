"""``save_batch_preview``: a grid of a batch's images with their boxes and class names (``train_batch0.jpg``)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import cv2
import numpy as np


def _colour(cls: int) -> tuple[int, int, int]:
    """A stable, well-separated BGR colour per class (golden-ratio hue steps)."""
    hue = int((cls * 0.618033988749895 % 1.0) * 179)
    bgr = cv2.cvtColor(np.array([[[hue, 220, 230]]], np.uint8), cv2.COLOR_HSV2BGR)[0, 0]
    return int(bgr[0]), int(bgr[1]), int(bgr[2])


def save_batch_preview(batch: dict, class_names: list[str], path: str | os.PathLike, max_images: int = 16,
                       max_side: int = 1920) -> Path:
    """Draw up to ``max_images`` images of a loader batch (RGB ``uint8 (B, 3, H, W)``, boxes xyxy input px,
    labels ``-1`` padded) in a square grid and write it to ``path`` (JPEG or PNG by suffix)."""
    images = batch["images"][:max_images].cpu().numpy()
    count, _, height, width = images.shape
    columns = math.ceil(math.sqrt(count))
    rows = math.ceil(count / columns)
    grid = np.full((rows * height, columns * width, 3), 255, np.uint8)
    for i in range(count):
        y0, x0 = (i // columns) * height, (i % columns) * width
        tile = np.ascontiguousarray(images[i].transpose(1, 2, 0)[:, :, ::-1])  # RGB CHW -> BGR HWC for cv2
        keep = batch["labels"][i] >= 0
        for box, cls in zip(batch["boxes"][i][keep].tolist(), batch["labels"][i][keep].tolist(), strict=True):
            x1, y1, x2, y2 = (int(round(v)) for v in box)
            colour = _colour(cls)
            cv2.rectangle(tile, (x1, y1), (x2, y2), colour, 2)
            name = class_names[cls] if cls < len(class_names) else str(cls)
            cv2.putText(tile, name, (x1 + 2, max(y1 - 4, 10)), cv2.FONT_HERSHEY_SIMPLEX, 0.4, colour, 1, cv2.LINE_AA)
        grid[y0:y0 + height, x0:x0 + width] = tile
        cv2.rectangle(grid, (x0, y0), (x0 + width - 1, y0 + height - 1), (255, 255, 255), 2)
    scale = min(1.0, max_side / max(grid.shape[:2]))
    if scale < 1:
        grid = cv2.resize(grid, (int(grid.shape[1] * scale), int(grid.shape[0] * scale)), interpolation=cv2.INTER_AREA)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(os.fspath(path), grid):
        raise OSError(f"could not write the batch preview {path}")
    return path
