"""YOLO11 model parts; importing this registers the ``yolo11*_backbone`` models in timm."""

from yolo11.models import backbone as _backbone  # noqa: F401  (registers the timm models)
from yolo11.models.detector import SCALES, YOLO11Detector, create_model

__all__ = ["SCALES", "YOLO11Detector", "create_model"]
