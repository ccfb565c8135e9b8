"""YOLO11 object detection trained with Hugging Face Accelerate."""

from yolo11.models import SCALES, YOLO11Detector, create_model

__all__ = ["SCALES", "Detections", "Detector", "YOLO11Detector", "create_model"]

# The prediction API pulls in the weights, post-processing and OpenCV: loaded on first use, not by `import yolo11`.
_LAZY = {"Detector": "yolo11.predictor", "Detections": "yolo11.predictor"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'yolo11' has no attribute {name!r}")
