"""Training loss: task-aligned assignment plus BCE, CIoU and DFL terms (Ultralytics 8.4 semantics); YOLO26's
end-to-end loss (two branches, L1 instead of DFL) in ``end2end_loss``."""

from yolo11.loss.assigner import Assignment, TaskAlignedAssigner
from yolo11.loss.detection_loss import DetectionLoss, distribution_focal_loss
from yolo11.loss.end2end_loss import End2EndLoss, one2many_weight

__all__ = ["Assignment", "DetectionLoss", "End2EndLoss", "TaskAlignedAssigner", "distribution_focal_loss",
           "one2many_weight"]
