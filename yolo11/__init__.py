"""YOLO11 object detection trained with Hugging Face Accelerate."""

from yolo11.models import SCALES, YOLO11Detector, create_model

__all__ = ["SCALES", "YOLO11Detector", "create_model"]
