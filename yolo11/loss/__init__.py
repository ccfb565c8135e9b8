"""Training loss: task-aligned assignment plus BCE, CIoU and DFL terms (Ultralytics 8.4 semantics)."""

from yolo11.loss.assigner import Assignment, TaskAlignedAssigner
from yolo11.loss.detection_loss import DetectionLoss, distribution_focal_loss

__all__ = ["Assignment", "DetectionLoss", "TaskAlignedAssigner", "distribution_focal_loss"]
