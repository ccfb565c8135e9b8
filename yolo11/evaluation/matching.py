"""Ultralytics-style detection statistics from per-image matches: precision/recall at the best-F1 confidence,
PR curves and the confusion matrix.

COCOeval gives the mAP figures; Ultralytics reports its ``metrics/precision(B)`` and ``metrics/recall(B)`` from its
own matching, reproduced here:

1. per image and IoU threshold (0.50:0.95), a prediction is a true positive when it overlaps a ground-truth box of
   the same class with IoU >= threshold; pairs are taken greedily by decreasing IoU, each prediction and each
   ground-truth box at most once (``match_predictions``);
2. per class present in the ground truth, predictions sorted by decreasing score give cumulative precision and
   recall, interpolated on a grid of 1000 confidences in [0, 1] (``class_curves``);
3. the confidence where the mean F1 over classes (smoothed by a 10 % box filter) peaks picks the reported mean
   precision and recall (``best_f1_precision_recall``).

All boxes are xyxy in the same pixels (original image pixels in the evaluator).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torchvision.ops import box_iou

IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)
CONFIDENCE_GRID = np.linspace(0.0, 1.0, 1000)
EPS = 1e-16


def _greedy_pairs(iou: np.ndarray, allowed: np.ndarray, resort: bool) -> tuple[np.ndarray, np.ndarray]:
    """One-to-one matching among ``allowed`` (G, N) pairs sorted by decreasing IoU; returns (gt_idx, pred_idx).

    Each prediction keeps its best-IoU pair; then each gt box keeps one pair: the best IoU when ``resort``
    (Ultralytics' confusion matrix), else the lowest prediction index (Ultralytics' ``match_predictions``, whose
    ``np.unique`` leaves the pairs ordered by prediction index; kept so the figures agree).
    """
    gt_idx, pred_idx = np.nonzero(allowed)
    if gt_idx.size == 0:
        return gt_idx, pred_idx
    order = np.argsort(-iou[gt_idx, pred_idx], kind="stable")
    gt_idx, pred_idx = gt_idx[order], pred_idx[order]
    # np.unique returns the first occurrence, i.e. the highest IoU, of each prediction and then of each gt box.
    _, first = np.unique(pred_idx, return_index=True)
    if resort:
        first.sort()
    gt_idx, pred_idx = gt_idx[first], pred_idx[first]
    _, first = np.unique(gt_idx, return_index=True)
    return gt_idx[first], pred_idx[first]


def match_predictions(pred_classes: np.ndarray, gt_classes: np.ndarray, iou: np.ndarray,
                      thresholds: np.ndarray = IOU_THRESHOLDS) -> np.ndarray:
    """True-positive flags ``(N, T)`` of N predictions against G ground-truth boxes; ``iou`` is (G, N)."""
    correct = np.zeros((pred_classes.shape[0], thresholds.shape[0]), dtype=bool)
    if iou.size == 0:
        return correct
    same_class = gt_classes[:, None] == pred_classes[None, :]
    iou = iou * same_class
    for t, threshold in enumerate(thresholds):
        _, pred_idx = _greedy_pairs(iou, (iou >= threshold) & same_class, resort=False)
        correct[pred_idx, t] = True
    return correct


def smooth(y: np.ndarray, fraction: float = 0.05) -> np.ndarray:
    """Box filter over ``fraction`` of the points, edges padded with the end values (Ultralytics' smooth).

    The width is Ultralytics' ``round(len * fraction * 2) // 2 + 1`` (51 for its 1000-point curves) rounded down to
    an odd number, so the output always has ``len(y)`` points (Ultralytics' formula gives an even width, and one
    point too many, for e.g. 20 epochs).
    """
    width = (round(len(y) * fraction * 2) // 2) // 2 * 2 + 1
    pad = np.ones(width // 2)
    padded = np.concatenate((pad * y[0], y, pad * y[-1]))
    return np.convolve(padded, np.ones(width) / width, mode="valid")


def _average_precision(recall: np.ndarray, precision: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Precision envelope as a function of recall, with the sentinels (0, 1) and (1, 0)."""
    mrec = np.concatenate(([0.0], recall, [1.0]))
    mpre = np.concatenate(([1.0], precision, [0.0]))
    mpre = np.flip(np.maximum.accumulate(np.flip(mpre)))
    return mrec, mpre


@dataclass
class ClassCurves:
    """Per-class curves on ``CONFIDENCE_GRID`` (K classes present in the ground truth, IoU 0.5)."""

    classes: np.ndarray  # (K,) class indices
    precision: np.ndarray  # (K, 1000) precision vs confidence
    recall: np.ndarray  # (K, 1000) recall vs confidence
    pr_precision: np.ndarray  # (K, 1000) precision vs recall (recall grid = CONFIDENCE_GRID)

    @property
    def f1(self) -> np.ndarray:
        return 2 * self.precision * self.recall / (self.precision + self.recall + EPS)


def class_curves(correct: np.ndarray, scores: np.ndarray, pred_classes: np.ndarray,
                 gt_classes: np.ndarray) -> ClassCurves:
    """Curves from all images' predictions: ``correct`` (N, T), ``scores`` (N,), classes (N,) and (G,) ints."""
    order = np.argsort(-scores, kind="stable")
    correct, scores, pred_classes = correct[order, 0], scores[order], pred_classes[order]
    classes, counts = np.unique(gt_classes, return_counts=True)
    shape = (classes.shape[0], CONFIDENCE_GRID.shape[0])
    precision, recall, pr_precision = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    for k, (cls, num_gt) in enumerate(zip(classes, counts, strict=True)):
        mine = pred_classes == cls
        if not mine.any():
            continue
        tp = np.cumsum(correct[mine])
        fp = np.cumsum(~correct[mine])
        rec = tp / (num_gt + EPS)
        pre = tp / (tp + fp)
        # np.interp needs increasing x: scores decrease, so interpolate against -score.
        recall[k] = np.interp(-CONFIDENCE_GRID, -scores[mine], rec, left=0)
        precision[k] = np.interp(-CONFIDENCE_GRID, -scores[mine], pre, left=1)
        mrec, mpre = _average_precision(rec, pre)
        pr_precision[k] = np.interp(CONFIDENCE_GRID, mrec, mpre)
    return ClassCurves(classes, precision, recall, pr_precision)


def best_f1_precision_recall(curves: ClassCurves) -> tuple[float, float, float]:
    """(mean precision, mean recall, confidence) at the peak of the smoothed mean F1 over classes."""
    if curves.classes.size == 0:
        return 0.0, 0.0, 0.0
    i = int(smooth(curves.f1.mean(0), 0.1).argmax())
    return float(curves.precision[:, i].mean()), float(curves.recall[:, i].mean()), float(CONFIDENCE_GRID[i])


def confusion_counts(matrix: np.ndarray, pred: np.ndarray, gt_boxes: np.ndarray, gt_classes: np.ndarray,
                     conf: float = 0.25, iou_threshold: float = 0.45) -> None:
    """Add one image to ``matrix`` ``(nc + 1, nc + 1)``, rows = predicted class, columns = true class, index ``nc``
    = background (Ultralytics' layout). Matching is class-agnostic so confusions between classes show.

    ``pred``: (N, 6) xyxy, score, class; ``gt_boxes``: (G, 4) xyxy.
    """
    background = matrix.shape[0] - 1
    pred = pred[pred[:, 4] > conf]
    pred_classes = pred[:, 5].astype(int)
    if gt_boxes.shape[0] == 0:
        np.add.at(matrix, (pred_classes, background), 1)
        return
    if pred.shape[0] == 0:
        np.add.at(matrix, (background, gt_classes), 1)
        return
    iou = box_iou(torch.from_numpy(gt_boxes).double(), torch.from_numpy(pred[:, :4]).double()).numpy()
    gt_idx, pred_idx = _greedy_pairs(iou, iou > iou_threshold, resort=True)
    np.add.at(matrix, (pred_classes[pred_idx], gt_classes[gt_idx]), 1)
    missed = np.setdiff1d(np.arange(gt_boxes.shape[0]), gt_idx)
    np.add.at(matrix, (background, gt_classes[missed]), 1)
    extra = np.setdiff1d(np.arange(pred.shape[0]), pred_idx)
    np.add.at(matrix, (pred_classes[extra], background), 1)
