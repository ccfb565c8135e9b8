"""Small YOLO-layout datasets written to disk for the data tests: random images, label files as given, and a JPEG
damaged in its middle (every header intact)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np


def write_image(path: Path, seed: int = 0, size: tuple[int, int] = (60, 80)) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    image = np.random.default_rng(seed).integers(0, 255, (*size, 3), dtype=np.uint8)
    data = cv2.imencode(path.suffix, image)[1].tobytes()
    path.write_bytes(data)
    return data


def make_dataset(root: Path, label_lines: dict[str, str], yaml_extra: str = "names: [a, b, c]\n") -> Path:
    """A YOLO-layout dataset: ``label_lines`` maps image stems to label file text (``None`` = no label file)."""
    for k, (stem, text) in enumerate(label_lines.items()):
        write_image(root / "images" / "train" / f"{stem}.jpg", seed=k)
        if text is not None:
            (root / "labels" / "train").mkdir(parents=True, exist_ok=True)
            (root / "labels" / "train" / f"{stem}.txt").write_text(text)
    yaml_path = root / "data.yaml"
    yaml_path.write_text(f"path: {root}\ntrain: images/train\nval: images/train\n{yaml_extra}")
    return yaml_path


def corrupt_middle(data: bytes) -> bytes:
    """A JPEG with 64 bytes of its entropy-coded data overwritten: every header intact, the end marker too."""
    middle = len(data) // 2
    noise = np.random.default_rng(1).integers(0, 255, 64, dtype=np.uint8).tobytes()
    return data[:middle] + noise + data[middle + 64:]
