"""The YOLO11 scales (n/s/m/l/x) as data, and Ultralytics' rules that turn them into widths and repeats.

The published model YAML lists every layer for a 1.0-width, 1.0-depth model; a scale shrinks it:
``channels = ceil(min(c, max_channels) * width / 8) * 8`` and ``repeats = max(round(n * depth), 1)``.
Scales m/l/x also switch every C3k2 to its C3k inner block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Scale:
    depth: float
    width: float
    max_channels: int
    c3k: bool  # every C3k2 uses C3k inner blocks (Ultralytics forces this for m/l/x)

    def channels(self, yaml_channels: int) -> int:
        """Width of a layer given its channel count in the YAML (1.0 width)."""
        return math.ceil(min(yaml_channels, self.max_channels) * self.width / 8) * 8

    def repeats(self, yaml_repeats: int) -> int:
        """Number of inner blocks of a layer given its repeat count in the YAML."""
        return max(round(yaml_repeats * self.depth), 1)


SCALES: dict[str, Scale] = {
    "n": Scale(depth=0.50, width=0.25, max_channels=1024, c3k=False),
    "s": Scale(depth=0.50, width=0.50, max_channels=1024, c3k=False),
    "m": Scale(depth=0.50, width=1.00, max_channels=512, c3k=True),
    "l": Scale(depth=1.00, width=1.00, max_channels=512, c3k=True),
    "x": Scale(depth=1.00, width=1.50, max_channels=512, c3k=True),
}


def get_scale(name: str) -> Scale:
    """``"yolo11n"`` or ``"n"`` -> its Scale; unknown names raise."""
    key = name.removeprefix("yolo11")
    if key not in SCALES:
        raise ValueError(f"unknown YOLO11 scale {name!r}; expected one of {['yolo11' + k for k in SCALES]}")
    return SCALES[key]
