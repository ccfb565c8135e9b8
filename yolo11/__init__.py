"""YOLO11 object detection trained with Hugging Face Accelerate.

``import yolo11`` is light (the training CLI parses its flags before torch loads); the models load on first use
of ``yolo11.create_model`` / ``SCALES`` / ``YOLO11Detector``, or with ``import yolo11.models``, which also
registers the ``yolo11*_backbone`` models in timm.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["SCALES", "YOLO11Detector", "create_model"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("yolo11.models"), name)
    raise AttributeError(f"module 'yolo11' has no attribute {name!r}")
