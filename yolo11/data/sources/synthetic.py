"""A built-in, deterministic shapes dataset that a small YOLO11 learns in a few CPU minutes.

Each class is a shape with its own hue (both cues, so the task is easy), drawn large (a quarter to a half of the
image side) on a textured background. ``synthetic:num_images=256,imgsz=128`` style options choose the size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import cv2
import numpy as np

from yolo11.data.schema import DataSourceError
from yolo11.data.sources.checks import objects_row

SHAPES = ("circle", "square", "triangle", "cross", "ring", "diamond")
# BGR colours far apart in hue; each object jitters around its class colour
COLOURS = ((40, 40, 230), (230, 60, 40), (40, 200, 40), (20, 200, 230), (200, 40, 200), (230, 200, 40))
VAL_SEED_OFFSET = 1_000_003  # the val split is generated from another seed: no image is shared with train


@dataclass(frozen=True)
class SyntheticOptions:
    num_images: int = 256  # train images; val has num_val images
    num_val: int = 64
    imgsz: int = 128  # square image side in pixels
    min_objects: int = 1
    max_objects: int = 4
    min_size: float = 0.25  # object size as a fraction of the image side
    max_size: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_images < 1 or self.num_val < 1 or self.imgsz < 32:
            raise DataSourceError(f"synthetic: need num_images, num_val >= 1 and imgsz >= 32, got {self}")
        if not 1 <= self.min_objects <= self.max_objects:
            raise DataSourceError(f"synthetic: need 1 <= min_objects <= max_objects, got {self}")
        if not 0.05 <= self.min_size <= self.max_size <= 1.0:
            raise DataSourceError(f"synthetic: need 0.05 <= min_size <= max_size <= 1, got {self}")

    @classmethod
    def parse(cls, text: str, **overrides) -> SyntheticOptions:
        """``"num_images=256,imgsz=128"`` (the part after ``synthetic:``) plus keyword overrides; unknown keys raise."""
        known = {f.name: f.type for f in fields(cls)}
        values: dict = {}
        for item in filter(None, (t.strip() for t in text.split(","))):
            key, sep, value = item.partition("=")
            if not sep or key not in known:
                raise DataSourceError(f"synthetic: unknown option {key!r}; options are {sorted(known)}")
            try:
                values[key] = float(value) if known[key] == "float" else int(value)
            except ValueError:
                raise DataSourceError(f"synthetic: {key}={value!r} is not a {known[key]}") from None
        for key in overrides:
            if key not in known:
                raise DataSourceError(f"synthetic: unknown option {key!r}; options are {sorted(known)}")
        return cls(**{**values, **overrides})

    def to_dict(self) -> dict:
        return asdict(self)


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    """Low-frequency colour noise plus a few thin lines: texture the detector must learn to ignore."""
    coarse = rng.integers(60, 190, size=(8, 8, 3), dtype=np.uint8)
    image = cv2.resize(coarse, (size, size), interpolation=cv2.INTER_CUBIC)
    image = cv2.add(image, rng.integers(0, 25, size=(size, size, 3), dtype=np.uint8))
    for _ in range(rng.integers(2, 6)):
        p1, p2 = rng.integers(0, size, 2), rng.integers(0, size, 2)
        colour = tuple(int(c) for c in rng.integers(40, 220, 3))
        cv2.line(image, tuple(int(v) for v in p1), tuple(int(v) for v in p2), colour, 1, cv2.LINE_AA)
    return image


def _draw_shape(mask: np.ndarray, shape: str, cx: float, cy: float, half: float) -> None:
    """Draw a filled shape of half-size ``half`` px centred at (cx, cy) into a uint8 mask."""
    centre = (int(round(cx)), int(round(cy)))
    if shape == "circle":
        cv2.circle(mask, centre, int(half), 255, -1)
    elif shape == "ring":
        cv2.circle(mask, centre, int(half), 255, max(int(half * 0.35), 2))
    elif shape == "square":
        cv2.rectangle(mask, (int(cx - half), int(cy - half)), (int(cx + half), int(cy + half)), 255, -1)
    else:
        if shape == "triangle":
            points = [(cx, cy - half), (cx - half, cy + half), (cx + half, cy + half)]
        elif shape == "diamond":
            points = [(cx, cy - half), (cx + half, cy), (cx, cy + half), (cx - half, cy)]
        else:  # cross: two bars
            t = half * 0.35
            points = [(cx - t, cy - half), (cx + t, cy - half), (cx + t, cy - t), (cx + half, cy - t),
                      (cx + half, cy + t), (cx + t, cy + t), (cx + t, cy + half), (cx - t, cy + half),
                      (cx - t, cy + t), (cx - half, cy + t), (cx - half, cy - t), (cx - t, cy - t)]
        cv2.fillPoly(mask, [np.round(np.array(points)).astype(np.int32)], 255)


def _overlap(a: np.ndarray, b: np.ndarray) -> float:
    """Intersection area of two xyxy boxes (pixels^2), padded by 2 px so shapes do not touch."""
    w = min(a[2], b[2]) - max(a[0], b[0]) + 2
    h = min(a[3], b[3]) - max(a[1], b[1]) + 2
    return max(w, 0.0) * max(h, 0.0)


def synthetic_image(rng: np.random.Generator, options: SyntheticOptions) -> tuple[np.ndarray, list, list[int]]:
    """One BGR image, its ``xyxy`` pixel boxes (the exact extent of each drawn shape) and classes."""
    size = options.imgsz
    image = _background(rng, size)
    boxes, classes = [], []
    for _ in range(rng.integers(options.min_objects, options.max_objects + 1)):
        cls = int(rng.integers(len(SHAPES)))
        half = rng.uniform(options.min_size, options.max_size) * size / 2
        for _attempt in range(10):  # objects do not overlap, so every box shows its whole shape
            cx, cy = rng.uniform(half, size - half, 2)
            candidate = np.array([cx - half, cy - half, cx + half, cy + half])
            if all(_overlap(candidate, box) == 0 for box in boxes):
                break
        else:
            continue
        mask = np.zeros((size, size), np.uint8)
        _draw_shape(mask, SHAPES[cls], cx, cy, half)
        colour = np.clip(np.array(COLOURS[cls]) + rng.integers(-25, 26, 3), 0, 255).astype(np.uint8)
        image[mask > 0] = colour
        ys, xs = np.nonzero(mask)
        boxes.append(np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], np.float64))
        classes.append(cls)
    return image, boxes, classes


def synthetic_rows(options: SyntheticOptions, split: str) -> list[dict]:
    """PNG-encoded rows of a split (``train`` or ``val``; val uses a different seed)."""
    if split not in ("train", "val"):
        raise DataSourceError(f"synthetic: split must be 'train' or 'val', got {split!r}")
    count = options.num_images if split == "train" else options.num_val
    seed = options.seed + (VAL_SEED_OFFSET if split == "val" else 0)
    rows, next_object_id = [], 1
    for index in range(count):
        image, boxes, classes = synthetic_image(np.random.default_rng([seed, index]), options)
        png = cv2.imencode(".png", image)[1].tobytes()
        rows.append({"image_id": index, "image": {"bytes": png, "path": f"synthetic_{split}_{index:06d}.png"},
                     "width": options.imgsz, "height": options.imgsz,
                     "objects": objects_row(boxes, classes, next_object_id)})
        next_object_id += len(boxes)
    return rows
