"""COCO evaluation (pycocotools), Ultralytics-style precision/recall, plots, the results.csv writer and the
predict-and-score runner shared by training's validation and ``yolo11-val``."""

from yolo11.evaluation.coco import STAT_NAMES, CocoEvaluator, coco_ground_truth, gather_predictions
from yolo11.evaluation.runner import EvaluationResult, ValidationStopped, predict_and_score

__all__ = ["STAT_NAMES", "CocoEvaluator", "EvaluationResult", "ValidationStopped", "coco_ground_truth",
           "gather_predictions", "predict_and_score"]
