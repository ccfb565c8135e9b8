"""COCO evaluation (pycocotools), Ultralytics-style precision/recall, plots and the results.csv writer."""

from yolo11.evaluation.coco import STAT_NAMES, CocoEvaluator, coco_ground_truth, gather_predictions

__all__ = ["STAT_NAMES", "CocoEvaluator", "coco_ground_truth", "gather_predictions"]
