"""Augmentation hyper-parameters and their named presets: plain dataclasses, without cv2 or torch, so that the
training flags (``engine/config.py``) take their defaults from here without loading the image code."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace


def _param(default: float, help: str) -> float:  # noqa: A002 - argparse's word
    # The training flags are these fields (engine/config.py's DataConfig inherits them): "help" is the flag's help,
    # and an augmentation changes what a run computes, so its value is fixed on --resume (config.FIXED).
    return field(default=default, metadata={"help": help, "choices": None, "resume": "fixed"})


@dataclass(frozen=True)
class AugmentParams:
    """Augmentation hyper-parameters, Ultralytics' names and defaults (``default.yaml``)."""

    mosaic: float = _param(1.0, "mosaic probability")
    mixup: float = _param(0.0, "mixup probability")
    degrees: float = _param(0.0, "random rotation (+/- degrees)")
    translate: float = _param(0.1, "random translation (+/- fraction)")
    scale: float = _param(0.5, "random scale gain (+/- fraction)")
    shear: float = _param(0.0, "random shear (+/- degrees)")
    perspective: float = _param(0.0, "random perspective (+/- fraction)")
    flipud: float = _param(0.0, "vertical flip probability")
    fliplr: float = _param(0.5, "horizontal flip probability")
    hsv_h: float = _param(0.015, "HSV hue gain (fraction)")
    hsv_s: float = _param(0.7, "HSV saturation gain (fraction)")
    hsv_v: float = _param(0.4, "HSV value gain (fraction)")


PRESETS = {
    "yolo": AugmentParams(),
    "none": AugmentParams(mosaic=0.0, translate=0.0, scale=0.0, fliplr=0.0, hsv_h=0.0, hsv_s=0.0, hsv_v=0.0),
}


def augment_preset(name: str, **overrides) -> AugmentParams:
    """A named preset (``yolo``, ``none``) with optional field overrides; unknown names raise ``ValueError``."""
    if name not in PRESETS:
        raise ValueError(f"unknown augmentation preset {name!r}; choose from {sorted(PRESETS)}")
    return replace(PRESETS[name], **overrides)


def augment_params_of(config: AugmentParams) -> AugmentParams:
    """The plain ``AugmentParams`` of an object that has its fields (the training flags' ``DataConfig``)."""
    return AugmentParams(**{f.name: getattr(config, f.name) for f in fields(AugmentParams)})
