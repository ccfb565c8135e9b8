"""YOLO11 / YOLO26 model parts; importing this registers the ``yolo11*_backbone`` / ``yolo26*_backbone`` models in
timm."""

from yolo11.models import backbone as _backbone  # noqa: F401  (registers the timm models)
from yolo11.models.detector import (
    MODEL_NAMES,
    SCALES,
    End2EndMaps,
    YOLO11Detector,
    YOLO26Detector,
    create_model,
)

__all__ = ["MODEL_NAMES", "SCALES", "End2EndMaps", "YOLO11Detector", "YOLO26Detector", "create_model"]
