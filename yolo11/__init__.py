"""YOLO11 object detection trained with Hugging Face Accelerate.

``import yolo11`` is light (the training CLI parses its flags before torch loads); the models load on first use
of ``yolo11.create_model`` / ``SCALES`` / ``YOLO11Detector``, or with ``import yolo11.models``, which also
registers the ``yolo11*_backbone`` models in timm. ``yolo11.YOLO`` is Ultralytics' Python API on ours
(``yolo11/api.py``, docs/python_api.md).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

# PIL's decompression-bomb limit, ours for every image (data/image_io.py). OpenCV reads its own cap (2^30 pixels,
# 3 GB decoded) once, as it loads: set here, before any of our modules imports it, it bounds every decode in this
# process and its workers, those of files whose header PIL cannot read among them. A user's own setting stands.
MAX_IMAGE_PIXELS = 178_956_970
os.environ.setdefault("OPENCV_IO_MAX_IMAGE_PIXELS", str(MAX_IMAGE_PIXELS))

__all__ = ["SCALES", "YOLO", "Detections", "Detector", "YOLO11Detector", "create_model"]

# The models (and timm), the prediction API (weights, post-processing, OpenCV) and Ultralytics' ``YOLO`` (which
# loads torch when one is made) load on first use.
_MODULE_OF = {"SCALES": "yolo11.models", "YOLO11Detector": "yolo11.models", "create_model": "yolo11.models",
              "Detector": "yolo11.predictor", "Detections": "yolo11.predictor", "YOLO": "yolo11.api"}


def __dir__() -> list[str]:  # the public API, lazy exports included, for dir(yolo11) and completion
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        return getattr(importlib.import_module(_MODULE_OF[name]), name)
    raise AttributeError(f"module 'yolo11' has no attribute {name!r}")
