"""The architecture as data, torch-free: the model families (YOLO11, YOLO26), the scales (n/s/m/l/x) with
Ultralytics' rules that turn them into widths and repeats, and the detection levels' strides. The models build from
this table; the CLI, the gate and the geometry read it before torch loads.

The published model YAML lists every layer for a 1.0-width, 1.0-depth model; a scale shrinks it:
``channels = ceil(min(c, max_channels) * width / 8) * 8`` and ``repeats = max(round(n * depth), 1)``.
Scales m/l/x also switch every C3k2 to its C3k inner block. YOLO26 (``yolo26.yaml``) uses the same five scales;
what differs from YOLO11 is a ``Family``: a handful of layer options and the head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

STRIDES = (8, 16, 32)  # P3, P4, P5: the detection levels of every model, native or timm backbone
MAX_STRIDE = STRIDES[-1]  # network input sides must be multiples of it
HEAD_LAYER = 23  # Ultralytics' layer number of the Detect head (0-10 the backbone, 11-22 the neck)


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


@dataclass(frozen=True)
class Family:
    """What sets one published architecture apart from the other, layer for layer (same scales for both)."""

    name: str
    sppf_residual: bool  # SPPF: unactivated hidden 1x1 conv, output + input (YOLO26's `SPPF [1024, 5, 3, True]`)
    neck_c3k: bool  # neck C3k2 layers 13/16/19 use C3k inner blocks at every scale (YOLO26's `C3k2 [c, True]`)
    neck_p5_attention: bool  # layer 22's C3k2 inner blocks are Bottleneck + PSABlock (YOLO26's `attn=True`)
    reg_max: int  # bins per box side; 1 = a direct distance, no DFL
    end2end: bool  # a second, one-to-one head (NMS-free) beside the one-to-many head
    head: str  # the head's class name (yolo11.models.head), as config.json names it


FAMILIES: dict[str, Family] = {
    "yolo11": Family("yolo11", sppf_residual=False, neck_c3k=False, neck_p5_attention=False, reg_max=16,
                     end2end=False, head="Detect"),
    "yolo26": Family("yolo26", sppf_residual=True, neck_c3k=True, neck_p5_attention=True, reg_max=1, end2end=True,
                     head="End2EndDetect"),
}
MODEL_NAMES = tuple(family + key for family in FAMILIES for key in SCALES)


def split_name(name: str) -> tuple[Family, Scale]:
    """``"yolo26n"`` -> (the YOLO26 family, scale n); unknown names raise."""
    family, key = name[:-1], name[-1:]
    if family not in FAMILIES or key not in SCALES:
        raise ValueError(f"unknown model {name!r}; expected one of {', '.join(MODEL_NAMES)}")
    return FAMILIES[family], SCALES[key]


def get_scale(name: str) -> Scale:
    """``"yolo11n"`` or ``"n"`` -> its Scale; unknown names raise."""
    key = name.removeprefix("yolo11")
    if key not in SCALES:
        raise ValueError(f"unknown YOLO11 scale {name!r}; expected one of {['yolo11' + k for k in SCALES]}")
    return SCALES[key]
