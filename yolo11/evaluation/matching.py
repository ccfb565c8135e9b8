"""Ultralytics-style detection statistics from per-image matches: precision/recall at the best-F1 confidence,
PR curves and the confusion matrix.

COCOeval gives the mAP figures; Ultralytics reports its ``metrics/precision(B)`` and ``metrics/recall(B)`` from its
own matching, reproduced here:

1. per image and IoU threshold (0.50:0.95), a prediction is a true positive when it overlaps a ground-truth box of
   the same class with IoU >= threshold; the image's predictions, by decreasing score, each take the best-IoU box
   not yet taken (``match_predictions``, Ultralytics 8.4.190's greedy matching);
2. per class present in the ground truth, predictions sorted by decreasing score give cumulative precision and
   recall, interpolated on a grid of 1000 confidences in [0, 1] (``class_curves``);
3. the confidence where the mean F1 over classes (smoothed by a 10 % box filter) peaks picks the reported mean
   precision and recall (``best_f1_precision_recall``).

Matching runs on all images at once: boxes of every image are concatenated, each with the index of its image, and
only pairs within one image (and one class, for step 1) are formed. All boxes are xyxy in the same pixels (original
image pixels in the evaluator).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)
CONFIDENCE_GRID = np.linspace(0.0, 1.0, 1000)
EPS = 1e-16


@dataclass
class Boxes:
    """Boxes of many images: ``image`` (N,) image index, ``xyxy`` (N, 4) float64 pixels, ``classes`` (N,) int and,
    for predictions, ``scores`` (N,)."""

    image: np.ndarray
    xyxy: np.ndarray
    classes: np.ndarray
    scores: np.ndarray | None = None

    def __getitem__(self, index) -> Boxes:
        return Boxes(self.image[index], self.xyxy[index], self.classes[index],
                     None if self.scores is None else self.scores[index])

    def __len__(self) -> int:
        return self.image.shape[0]


def _pairs(gt_key: np.ndarray, pred_key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All (gt, pred) index pairs with equal keys, ordered by gt index and then prediction index."""
    pred_order = np.argsort(pred_key, kind="stable")
    sorted_keys = pred_key[pred_order]
    start = np.searchsorted(sorted_keys, gt_key, "left")
    counts = np.searchsorted(sorted_keys, gt_key, "right") - start
    offset = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.repeat(np.arange(gt_key.shape[0]), counts), pred_order[np.repeat(start, counts) + offset]


def _pair_iou(gt: Boxes, pred: Boxes, gt_idx: np.ndarray, pred_idx: np.ndarray) -> np.ndarray:
    """IoU of each pair in float64, operation for operation as ``torchvision.ops.box_iou`` (so decisions equal
    those of per-image IoU matrices), without its (P, 1, 1) broadcasting, which costs 10x here."""
    a, b = gt.xyxy[gt_idx], pred.xyxy[pred_idx]
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    wh = np.clip(np.minimum(a[:, 2:], b[:, 2:]) - np.maximum(a[:, :2], b[:, :2]), 0, None)
    inter = wh[:, 0] * wh[:, 1]
    with np.errstate(invalid="ignore", divide="ignore"):  # degenerate boxes give NaN, never matched
        return inter / (area_a + area_b - inter)


def _greedy_claims(gt_idx: np.ndarray, pred_idx: np.ndarray, iou: np.ndarray, group: np.ndarray,
                   visit: np.ndarray, thresholds: np.ndarray, strict: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Ultralytics 8.4's greedy matching over candidate pairs (gt, pred, IoU): within each group of boxes (an image,
    or an image and class), the predictions in ``visit`` order each take, at each threshold, the best-IoU box not
    yet taken at that threshold (the lowest box index on ties) when its IoU reaches the threshold (passes it,
    ``strict``).

    ``group`` and ``visit`` (N,) give each prediction's group and its place in the order (ascending; ties by
    index); a pair's box must be in its prediction's group. Runs one round
    per rank of a prediction within its group, all groups at once (the predictions of one rank are in different
    groups, whose boxes are apart). Returns ``(claimed (P, T) bool, box (P, T))`` for the predictions
    ``P = np.unique(pred_idx)``, in that order, with the box each one took (meaningless where not claimed).
    """
    order = np.lexsort((gt_idx, pred_idx))  # each prediction's pairs one run, by box index
    gt_idx, pred_idx, iou = gt_idx[order], pred_idx[order], iou[order]
    preds, starts, lengths = np.unique(pred_idx, return_index=True, return_counts=True)
    by_group = np.lexsort((preds, visit[preds], group[preds]))  # a group's predictions in visiting order
    sorted_groups = group[preds][by_group]
    first_of_group = np.searchsorted(sorted_groups, sorted_groups, "left")
    rank = np.empty(preds.shape[0], dtype=np.int64)
    rank[by_group] = np.arange(preds.shape[0]) - first_of_group
    claimed = np.zeros((preds.shape[0], thresholds.shape[0]), dtype=bool)
    box = np.zeros((preds.shape[0], thresholds.shape[0]), dtype=np.int64)
    taken = np.zeros((int(gt_idx.max(initial=-1)) + 1, thresholds.shape[0]), dtype=bool)
    columns = np.arange(thresholds.shape[0])
    by_rank = np.argsort(rank, kind="stable")  # each round's predictions one slice, not a scan of all of them
    bounds = np.searchsorted(rank[by_rank], np.arange(int(rank.max(initial=-1)) + 2))
    for r in range(bounds.shape[0] - 1):
        now = by_rank[bounds[r]:bounds[r + 1]]  # one prediction per group
        runs = lengths[now]
        at = np.repeat(starts[now] - (np.cumsum(runs) - runs), runs) + np.arange(runs.sum())  # their pairs
        seg = np.cumsum(runs) - runs
        boxes = gt_idx[at]
        available = np.where(taken[boxes], 0.0, iou[at, None])  # (pairs, T)
        best = np.maximum.reduceat(available, seg, axis=0)  # (predictions, T)
        where = np.where(available == np.repeat(best, runs, axis=0), np.arange(at.shape[0])[:, None], at.shape[0])
        choice = boxes[np.minimum.reduceat(where, seg, axis=0)]  # the lowest box index among the best
        won = best > thresholds if strict else best >= thresholds
        claimed[now], box[now] = won, choice
        rows, cols = np.nonzero(won)
        taken[choice[rows, cols], columns[cols]] = True
    return claimed, box


def match_predictions(pred: Boxes, gt: Boxes, thresholds: np.ndarray = IOU_THRESHOLDS) -> np.ndarray:
    """True-positive flags ``(N, T)`` of the predictions, as Ultralytics 8.4.190's ``match_predictions``: in each
    image, the predictions by decreasing score each take the best-IoU box of their class not yet taken at that
    threshold, a true positive when the IoU reaches the threshold (``_greedy_claims``)."""
    correct = np.zeros((len(pred), thresholds.shape[0]), dtype=bool)
    num_classes = int(max(gt.classes.max(initial=0), pred.classes.max(initial=0))) + 1
    gt_key, pred_key = gt.image * num_classes + gt.classes, pred.image * num_classes + pred.classes
    gt_idx, pred_idx = _pairs(gt_key, pred_key)
    if gt_idx.size == 0:
        return correct
    iou = _pair_iou(gt, pred, gt_idx, pred_idx)
    candidate = iou >= thresholds.min()  # Ultralytics visits only these predictions; no other pair is ever taken
    gt_idx, pred_idx, iou = gt_idx[candidate], pred_idx[candidate], iou[candidate]
    if gt_idx.size == 0:
        return correct
    # in index order, as Ultralytics visits them (its NMS leaves each image's predictions by decreasing score)
    claimed, _ = _greedy_claims(gt_idx, pred_idx, iou, pred_key, np.arange(len(pred)), thresholds)
    correct[np.unique(pred_idx)] = claimed
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
    pr_precision: np.ndarray | None  # (K, 1000) precision vs recall (recall grid = CONFIDENCE_GRID); None unasked

    @property
    def f1(self) -> np.ndarray:
        return 2 * self.precision * self.recall / (self.precision + self.recall + EPS)


def class_curves(correct: np.ndarray, scores: np.ndarray, pred_classes: np.ndarray,
                 gt_classes: np.ndarray, pr_curve: bool = True) -> ClassCurves:
    """Curves from all images' predictions: ``correct`` (N, T), ``scores`` (N,), classes (N,) and (G,) ints;
    ``pr_curve``: also precision against recall (the PR plot's; an epoch that plots nothing skips it)."""
    by_score = np.argsort(-scores, kind="stable")
    # then by class, stably: each class's predictions one contiguous run, by decreasing score as above
    order = by_score[np.argsort(pred_classes[by_score], kind="stable")]
    correct, scores, pred_classes = correct[order, 0], scores[order], pred_classes[order]
    classes, counts = np.unique(gt_classes, return_counts=True)
    starts = np.searchsorted(pred_classes, classes, side="left")
    ends = np.searchsorted(pred_classes, classes, side="right")
    shape = (classes.shape[0], CONFIDENCE_GRID.shape[0])
    precision, recall = np.zeros(shape), np.zeros(shape)
    pr_precision = np.zeros(shape) if pr_curve else None
    for k, (num_gt, start, end) in enumerate(zip(counts, starts, ends, strict=True)):
        if start == end:
            continue
        mine, mine_scores = correct[start:end], scores[start:end]
        tp = np.cumsum(mine)
        fp = np.cumsum(~mine)
        rec = tp / (num_gt + EPS)
        pre = tp / (tp + fp)
        # np.interp needs increasing x: scores decrease, so interpolate against -score.
        recall[k] = np.interp(-CONFIDENCE_GRID, -mine_scores, rec, left=0)
        precision[k] = np.interp(-CONFIDENCE_GRID, -mine_scores, pre, left=1)
        if pr_curve:
            mrec, mpre = _average_precision(rec, pre)
            pr_precision[k] = np.interp(CONFIDENCE_GRID, mrec, mpre)
    return ClassCurves(classes, precision, recall, pr_precision)


def best_f1_precision_recall(curves: ClassCurves) -> tuple[float, float, float]:
    """(mean precision, mean recall, confidence) at the peak of the smoothed mean F1 over classes."""
    if curves.classes.size == 0:
        return 0.0, 0.0, 0.0
    i = _best_f1_index(curves)
    return float(curves.precision[:, i].mean()), float(curves.recall[:, i].mean()), float(CONFIDENCE_GRID[i])


def per_class_precision_recall(curves: ClassCurves, num_classes: int) -> tuple[list, list]:
    """Each class's precision and recall at the confidence of ``best_f1_precision_recall`` (Ultralytics'
    per-class rows); ``None`` for a class without ground truth."""
    precision, recall = [None] * num_classes, [None] * num_classes
    if curves.classes.size:
        i = _best_f1_index(curves)
        for row, k in enumerate(curves.classes.tolist()):
            precision[k], recall[k] = float(curves.precision[row, i]), float(curves.recall[row, i])
    return precision, recall


def _best_f1_index(curves: ClassCurves) -> int:
    return int(smooth(curves.f1.mean(0), 0.1).argmax())


def confusion_matrix(pred: Boxes, gt: Boxes, num_classes: int, conf: float = 0.25,
                     iou_threshold: float = 0.45) -> np.ndarray:
    """Counts ``(nc + 1, nc + 1)``, rows = predicted class, columns = true class, index ``nc`` = background
    (Ultralytics' layout), of predictions scoring above ``conf``. Matching is Ultralytics 8.4.190's
    (``ConfusionMatrix.process_batch``): class-agnostic, so confusions between classes show; in each image the
    predictions by decreasing score each take the best-IoU box not yet taken, when the IoU passes the threshold."""
    matrix = np.zeros((num_classes + 1, num_classes + 1), dtype=np.int64)
    background = num_classes
    pred = pred[pred.scores > conf]
    gt_idx, pred_idx = _pairs(gt.image, pred.image)
    iou = _pair_iou(gt, pred, gt_idx, pred_idx)
    allowed = iou > iou_threshold
    gt_idx, pred_idx, iou = gt_idx[allowed], pred_idx[allowed], iou[allowed]
    missed, extra = np.ones(len(gt), dtype=bool), np.ones(len(pred), dtype=bool)
    if gt_idx.size:
        visit = np.empty(len(pred), dtype=np.int64)
        visit[np.argsort(-pred.scores, kind="stable")] = np.arange(len(pred))  # by decreasing score, as Ultralytics
        claimed, box = _greedy_claims(gt_idx, pred_idx, iou, pred.image, visit, np.array([iou_threshold]),
                                      strict=True)
        preds = np.unique(pred_idx)[claimed[:, 0]]
        boxes = box[claimed[:, 0], 0]
        np.add.at(matrix, (pred.classes[preds], gt.classes[boxes]), 1)
        missed[boxes], extra[preds] = False, False
    np.add.at(matrix, (background, gt.classes[missed]), 1)
    np.add.at(matrix, (pred.classes[extra], background), 1)
    return matrix
