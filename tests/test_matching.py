"""Ultralytics-style matching on all images at once equals the per-image loop it replaces."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from torchvision.ops import box_iou

from yolo11.evaluation import matching
from yolo11.evaluation.matching import Boxes, confusion_matrix, match_predictions


def _claims(iou: np.ndarray, visit: np.ndarray, threshold: float, strict: bool) -> np.ndarray:
    """Per-image reference of Ultralytics 8.4.190's greedy matching on a (G, N) IoU matrix: the predictions in
    ``visit`` order each take their best box not taken yet (argmax: the lowest index on ties) when its IoU reaches
    (passes) the threshold. Returns the box each prediction took, -1 where none."""
    taken, took = np.zeros(iou.shape[0], dtype=bool), np.full(iou.shape[1], -1)
    for j in visit:
        available = np.where(taken, 0.0, iou[:, j])
        k = int(available.argmax())
        if available[k] > threshold if strict else available[k] >= threshold:
            taken[k], took[j] = True, k
    return took


def reference(pred: Boxes, gt: Boxes, num_images: int, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-image loop: true-positive flags (N, T) (predictions visited in index order, boxes of their class) and
    the confusion matrix (predictions above 0.25 visited by decreasing score, any class, IoU above 0.45)."""
    correct = np.zeros((len(pred), matching.IOU_THRESHOLDS.shape[0]), dtype=bool)
    matrix = np.zeros((num_classes + 1, num_classes + 1), dtype=np.int64)
    for i in range(num_images):
        p_rows, g_rows = np.flatnonzero(pred.image == i), np.flatnonzero(gt.image == i)
        p, g = pred[p_rows], gt[g_rows]
        iou = box_iou(torch.from_numpy(g.xyxy), torch.from_numpy(p.xyxy)).numpy()
        if iou.size:
            same_class = g.classes[:, None] == p.classes[None, :]
            for t, threshold in enumerate(matching.IOU_THRESHOLDS):
                correct[p_rows, t] = _claims(np.nan_to_num(iou * same_class), np.arange(len(p)), threshold,
                                             False) >= 0
        above = p.scores > 0.25
        p, iou = p[above], iou[:, above]
        took = _claims(np.nan_to_num(iou), np.argsort(-p.scores, kind="stable"), 0.45, True) if iou.size \
            else np.full(len(p), -1)
        matched = took >= 0
        np.add.at(matrix, (p.classes[matched], g.classes[took[matched]]), 1)
        np.add.at(matrix, (num_classes, g.classes[np.setdiff1d(np.arange(len(g)), took[matched])]), 1)
        np.add.at(matrix, (p.classes[~matched], num_classes), 1)
    return correct, matrix


def random_boxes(rng: np.random.Generator, num_images: int, num_classes: int) -> tuple[Boxes, Boxes]:
    """Ground truth (some images empty) and predictions (some images without any): jittered copies, exact
    duplicates (IoU ties), copies with a wrong class, random boxes; scores at one decimal (ties)."""
    gt_rows, pred_rows = [], []
    for i in range(num_images):
        count = 0 if i % 6 == 0 else int(rng.integers(1, 12))
        xy = rng.uniform(0, 400, (count, 2)).round()
        gt = np.concatenate((xy, xy + rng.uniform(4, 120, (count, 2)).round()), 1)
        gt_classes = rng.integers(0, num_classes, count)
        shift = np.array([10.0, 0.0, 10.0, 0.0])
        if count > 2:  # a duplicate of box 0, and box 1 moved right: equal IoUs from either's predictions
            gt = np.concatenate((gt, gt[:1], gt[1:2] + shift))
            gt_classes = np.concatenate((gt_classes, gt_classes[:2]))
        gt_rows += [(i, *box, cls) for box, cls in zip(gt, gt_classes, strict=True)]
        if i % 5 == 4:
            continue
        num = int(rng.integers(0, 60))
        pick = rng.integers(0, max(len(gt), 1), num)
        near = (rng.random(num) < 0.7) & (len(gt) > 0)
        xy = rng.uniform(0, 400, (num, 2))
        boxes = np.concatenate((xy, xy + rng.uniform(4, 120, (num, 2))), 1)
        classes = rng.integers(0, num_classes, num)
        if len(gt):
            jitter = rng.normal(0, 3, (num, 4)) * (rng.random((num, 1)) < 0.7)  # 30 % exact copies
            boxes[near] = gt[pick[near]] + jitter[near]
            keep = near & (rng.random(num) < 0.8)
            classes[keep] = gt_classes[pick[keep]]
        if count > 2:  # halfway between box 1 and its moved copy: the same IoU with both
            between = rng.integers(1, 4)
            boxes = np.concatenate((boxes, np.repeat(gt[1:2] + shift / 2, between, 0)))
            classes = np.concatenate((classes, np.repeat(gt_classes[1:2], between)))
            num += between
        scores = rng.integers(0, 11, num) / 10
        pred_rows += [(i, *box, s, cls) for box, s, cls in zip(boxes, scores, classes, strict=True)]
    gt_array = np.array(gt_rows, dtype=np.float64).reshape(-1, 6)
    pred_array = np.array(pred_rows, dtype=np.float64).reshape(-1, 7)
    gt = Boxes(gt_array[:, 0].astype(int), gt_array[:, 1:5], gt_array[:, 5].astype(int))
    pred = Boxes(pred_array[:, 0].astype(int), pred_array[:, 1:5], pred_array[:, 6].astype(int), pred_array[:, 5])
    return pred, gt


@pytest.mark.parametrize(("seed", "num_classes"), [(0, 3), (1, 80), (2, 1)])
def test_all_images_at_once_equal_the_per_image_loop(seed, num_classes):
    num_images = 40
    pred, gt = random_boxes(np.random.default_rng(seed), num_images, num_classes)
    expected_correct, expected_matrix = reference(pred, gt, num_images, num_classes)
    correct = match_predictions(pred, gt)
    assert 0 < expected_correct[:, 0].sum() < len(pred) and expected_correct[:, -1].sum() > 0
    np.testing.assert_array_equal(correct, expected_correct)
    np.testing.assert_array_equal(confusion_matrix(pred, gt, num_classes), expected_matrix)


def test_match_predictions_one_to_one_and_same_class():
    # two predictions on one gt box: only the first is a true positive; a wrong class never is
    gt = Boxes(np.array([0]), np.array([[0.0, 0.0, 10.0, 10.0]]), np.array([0]))
    pred = Boxes(np.zeros(3, dtype=int), np.array([[0.0, 0.0, 10.0, 9.0], [0.0, 0.0, 10.0, 8.0],
                                                   [0.0, 0.0, 10.0, 9.5]]), np.array([0, 0, 1]))
    correct = match_predictions(pred, gt, thresholds=np.array([0.5, 0.85]))
    assert correct.tolist() == [[True, True], [False, False], [False, False]]


def test_no_boxes_at_all():
    empty = Boxes(np.zeros(0, dtype=int), np.zeros((0, 4)), np.zeros(0, dtype=int), np.zeros(0))
    assert match_predictions(empty, empty).shape == (0, 10)
    assert confusion_matrix(empty, empty, 2).sum() == 0


def test_pair_iou_is_box_iou_to_the_bit():
    pred, gt = random_boxes(np.random.default_rng(3), 5, 4)
    gt_idx, pred_idx = np.meshgrid(np.arange(len(gt)), np.arange(len(pred)), indexing="ij")
    expected = box_iou(torch.from_numpy(gt.xyxy), torch.from_numpy(pred.xyxy)).numpy()
    np.testing.assert_array_equal(matching._pair_iou(gt, pred, gt_idx.ravel(), pred_idx.ravel()), expected.ravel())


def reference_curves(correct, scores, pred_classes, gt_classes):
    """``class_curves`` written as Ultralytics' ``ap_per_class`` loops: a mask of each class's predictions."""
    order = np.argsort(-scores, kind="stable")
    correct, scores, pred_classes = correct[order, 0], scores[order], pred_classes[order]
    classes, counts = np.unique(gt_classes, return_counts=True)
    shape = (len(classes), matching.CONFIDENCE_GRID.shape[0])
    precision, recall, pr_precision = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    for k, (cls, num_gt) in enumerate(zip(classes, counts, strict=True)):
        mine = pred_classes == cls
        if not mine.any():
            continue
        tp, fp = np.cumsum(correct[mine]), np.cumsum(~correct[mine])
        rec, pre = tp / (num_gt + matching.EPS), tp / (tp + fp)
        recall[k] = np.interp(-matching.CONFIDENCE_GRID, -scores[mine], rec, left=0)
        precision[k] = np.interp(-matching.CONFIDENCE_GRID, -scores[mine], pre, left=1)
        mrec, mpre = matching._average_precision(rec, pre)
        pr_precision[k] = np.interp(matching.CONFIDENCE_GRID, mrec, mpre)
    return classes, precision, recall, pr_precision


@pytest.mark.parametrize(("seed", "num_classes"), [(0, 3), (1, 80), (2, 1)])
def test_class_curves_equal_the_per_class_loop_to_the_bit(seed, num_classes):
    """Each class's run of the (class, score) sort is what a mask of its predictions picks, ties in the same
    order: the curves are the loop's bit for bit; without ``pr_curve`` the PR plot's curve alone is left out."""
    pred, gt = random_boxes(np.random.default_rng(seed), 40, num_classes)
    correct = match_predictions(pred, gt)
    expected = reference_curves(correct, pred.scores, pred.classes, gt.classes)
    curves = matching.class_curves(correct, pred.scores, pred.classes, gt.classes)
    for got, want in zip((curves.classes, curves.precision, curves.recall, curves.pr_precision), expected,
                         strict=True):
        np.testing.assert_array_equal(got, want)
    assert curves.recall.any()
    lean = matching.class_curves(correct, pred.scores, pred.classes, gt.classes, pr_curve=False)
    assert lean.pr_precision is None
    np.testing.assert_array_equal(lean.precision, curves.precision)
    np.testing.assert_array_equal(lean.recall, curves.recall)


@pytest.mark.skipif(importlib.util.find_spec("ultralytics") is None,
                    reason="ultralytics 8.4.190 is not importable (PYTHONPATH=/work/ultra)")
@pytest.mark.parametrize(("seed", "num_classes"), [(3, 3), (4, 1)])
def test_matching_and_confusion_equal_live_ultralytics(seed, num_classes):
    """Ultralytics 8.4.190 itself, image by image: ``BaseValidator.match_predictions`` on the image's predictions
    by decreasing score (its NMS's order) and ``ConfusionMatrix.process_batch``. Crowded images, where a second
    prediction's best box is already taken, are where its greedy matching and the older one differ."""
    from types import SimpleNamespace

    from ultralytics.engine.validator import BaseValidator
    from ultralytics.utils.metrics import ConfusionMatrix

    pred, gt = random_boxes(np.random.default_rng(seed), 40, num_classes)
    order = np.lexsort((-pred.scores, pred.image))  # each image's predictions by decreasing score
    pred = pred[order]
    validator = SimpleNamespace(iouv=torch.linspace(0.5, 0.95, 10))
    confusion = ConfusionMatrix(names={k: str(k) for k in range(num_classes)})
    expected = []
    for i in range(40):
        p, g = pred[pred.image == i], gt[gt.image == i]
        iou = box_iou(torch.from_numpy(g.xyxy).float(), torch.from_numpy(p.xyxy).float())
        expected.append(BaseValidator.match_predictions(validator, torch.from_numpy(p.classes),
                                                        torch.from_numpy(g.classes), iou).numpy())
        confusion.process_batch({"cls": torch.from_numpy(p.classes).float(), "conf": torch.from_numpy(p.scores),
                                 "bboxes": torch.from_numpy(p.xyxy)},
                                {"cls": torch.from_numpy(g.classes).float(), "bboxes": torch.from_numpy(g.xyxy)})
    correct = match_predictions(pred, gt)
    assert correct[:, 0].sum() > 0
    np.testing.assert_array_equal(correct, np.concatenate(expected))
    np.testing.assert_array_equal(confusion_matrix(pred, gt, num_classes), confusion.matrix.astype(np.int64))
