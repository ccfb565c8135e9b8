"""COCO evaluation (pycocotools), Ultralytics-style precision/recall, plots, the results.csv writer and the
predict-and-score runner shared by training's validation and ``yolo11-val``.

The names below load on first use: ``yolo11.evaluation.plots`` alone (what ``PlotPool`` workers import) needs
neither torch nor Accelerate.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULE_OF = {"STAT_NAMES": "coco", "CocoEvaluator": "coco", "coco_ground_truth": "coco",
              "gather_predictions": "coco", "EvaluationResult": "runner", "ValidationStopped": "runner",
              "predict_and_score": "runner"}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        return getattr(importlib.import_module(f"yolo11.evaluation.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module 'yolo11.evaluation' has no attribute {name!r}")
