"""Augmentation hyper-parameters and their named presets: plain dataclasses, without cv2 or torch, so that the
training flags (``engine/config.py``) take their defaults from here without loading the image code."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class AugmentParams:
    """Augmentation hyper-parameters, Ultralytics' names and defaults (``default.yaml``)."""

    mosaic: float = 1.0
    mixup: float = 0.0
    degrees: float = 0.0
    translate: float = 0.1
    scale: float = 0.5
    shear: float = 0.0
    perspective: float = 0.0
    flipud: float = 0.0
    fliplr: float = 0.5
    hsv_h: float = 0.015
    hsv_s: float = 0.7
    hsv_v: float = 0.4


PRESETS = {
    "yolo": AugmentParams(),
    "none": AugmentParams(mosaic=0.0, translate=0.0, scale=0.0, fliplr=0.0, hsv_h=0.0, hsv_s=0.0, hsv_v=0.0),
}


def augment_preset(name: str, **overrides) -> AugmentParams:
    """A named preset (``yolo``, ``none``) with optional field overrides; unknown names raise ``ValueError``."""
    if name not in PRESETS:
        raise ValueError(f"unknown augmentation preset {name!r}; choose from {sorted(PRESETS)}")
    return replace(PRESETS[name], **overrides)
