"""YOLO26's end-to-end loss against Ultralytics 8.4.190's ``E2ELoss``: values and gradients on tiny, border,
overlapping and empty targets over several seeds, live (skipped when Ultralytics is not importable) and against
its recorded values (tests/helpers/make_ultralytics_yolo26_reference.py); the topk2 assignment and the
one-to-many/one-to-one weight schedule (live)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import make_ultralytics_yolo26_reference as reference

from yolo11.geometry import make_anchors, xywh_to_xyxy
from yolo11.loss import End2EndLoss, TaskAlignedAssigner, one2many_weight
from yolo11.models import End2EndMaps

needs_ultralytics = pytest.mark.skipif(importlib.util.find_spec("ultralytics") is None,
                                       reason="ultralytics 8.4.190 is not importable (PYTHONPATH=/work/ultra)")
RECORDED = Path(__file__).parent / "data" / "ultralytics_yolo26_cases.npz"
NUM_CLASSES = reference.LOSS_CLASSES


def targets(case: str) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """Ultralytics' batch (normalised xywh) and ours (padded xyxy pixels, labels ``-1`` on padding) for ``case``;
    our boxes are its batch converted as Ultralytics' ``preprocess`` does (scale, then xywh -> xyxy)."""
    batch = reference.case_batch(case)
    scale = torch.tensor([reference.WIDTH, reference.HEIGHT, reference.WIDTH, reference.HEIGHT], dtype=torch.float32)
    pixels = xywh_to_xyxy(batch["bboxes"] * scale)
    most = max(len(image) for image in reference.CASES[case])
    boxes, labels = torch.zeros(2, most, 4), torch.full((2, most), -1, dtype=torch.long)
    for image in range(2):
        mine = batch["batch_idx"] == image
        boxes[image, : int(mine.sum())] = pixels[mine]
        labels[image, : int(mine.sum())] = batch["cls"][mine, 0].long()
    return batch, boxes, labels


def ultralytics_criterion(epochs: int):
    from ultralytics.nn.tasks import DetectionModel
    from ultralytics.utils.loss import E2ELoss

    model = DetectionModel("yolo26n.yaml", nc=NUM_CLASSES, verbose=False)
    model.args = SimpleNamespace(box=7.5, cls=0.5, dfl=1.5, epochs=epochs)  # Ultralytics' default gains
    return E2ELoss(model)


@pytest.fixture(scope="module")
def criterion():
    if importlib.util.find_spec("ultralytics") is None:
        pytest.skip("ultralytics 8.4.190 is not importable (PYTHONPATH=/work/ultra)")
    return ultralytics_criterion(epochs=10)


@needs_ultralytics
@pytest.mark.parametrize("case", list(reference.CASES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_end2end_loss_and_gradients_equal_ultralytics(criterion, case, seed):
    batch, boxes, labels = targets(case)
    many, one = reference.random_maps(seed), reference.random_maps(seed + 100)
    criterion.one2one.hyp.epochs = 10
    for epoch in (0, 4):  # the weights before any update and after four epochs (of 10)
        criterion.updates = 0
        criterion.o2m, criterion.o2o = criterion.o2m_copy, criterion.total - criterion.o2m_copy
        for _ in range(epoch):
            criterion.update()
        preds = {"one2many": reference.branch_preds(many), "one2one": reference.branch_preds(one)}
        expected, expected_items = criterion(preds, batch)
        expected_grads = torch.autograd.grad(expected.sum(), many + one)
        assert one2many_weight(epoch, 10) == criterion.o2m
        ours = End2EndLoss(NUM_CLASSES)
        ours.set_epoch(epoch, 10)
        loss, parts = ours(End2EndMaps(many, one), boxes, labels)
        grads = torch.autograd.grad(loss, many + one)
        torch.testing.assert_close(loss, expected.sum(), rtol=2e-6, atol=1e-6)
        torch.testing.assert_close(parts, torch.stack(list(expected_items.values())), rtol=2e-6, atol=1e-6)
        for ours, theirs in zip(grads, expected_grads, strict=True):
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


@needs_ultralytics
@pytest.mark.parametrize("case", ["ordinary", "overlapping", "tiny"])
def test_topk2_assignment_equals_ultralytics(case):
    """The one-to-one assigner (topk 7, topk2 1) gives each GT at most one anchor, the same one as Ultralytics."""
    from ultralytics.utils.tal import TaskAlignedAssigner as UltralyticsAssigner

    _, boxes, labels = targets(case)
    generator = torch.Generator().manual_seed(7)
    points, _ = make_anchors([(reference.HEIGHT // 8, reference.WIDTH // 8)], [8])
    points = points * 8  # the stride-8 level alone, in pixels
    anchors = len(points)
    pred_scores = torch.rand(2, anchors, NUM_CLASSES, generator=generator)
    centre = points[None] + torch.randn(2, anchors, 2, generator=generator) * 4
    size = torch.rand(2, anchors, 2, generator=generator) * 50 + 4
    pred_boxes = torch.cat((centre - size / 2, centre + size / 2), -1)
    ours = TaskAlignedAssigner(NUM_CLASSES, topk=7, topk2=1)(pred_scores, pred_boxes, points, labels, boxes,
                                                              labels >= 0)
    theirs = UltralyticsAssigner(topk=7, num_classes=NUM_CLASSES, alpha=0.5, beta=6.0, stride=[8, 16, 32], topk2=1)
    _, t_boxes, t_scores, t_fg, t_idx = theirs(pred_scores, pred_boxes, points, labels.clamp(min=0)[..., None].float(),
                                               boxes, (labels >= 0)[..., None].float())
    assert torch.equal(ours.foreground, t_fg)
    assert torch.equal(ours.gt_index * ours.foreground, t_idx * t_fg)
    torch.testing.assert_close(ours.scores, t_scores, rtol=1e-6, atol=1e-7)
    per_gt = torch.zeros(2, boxes.shape[1], dtype=torch.long).scatter_add_(1, ours.gt_index, ours.foreground.long())
    assert per_gt.max() <= 1


@needs_ultralytics
@pytest.mark.parametrize("epochs", [1, 2, 10, 300])
def test_one2many_weight_follows_ultralytics_schedule(criterion, epochs):
    criterion.one2one.hyp.epochs = epochs  # decay() reads the model's args when it runs
    criterion.updates, criterion.o2m = 0, criterion.o2m_copy
    criterion.o2o = criterion.total - criterion.o2m
    ours = End2EndLoss(NUM_CLASSES)
    for epoch in range(min(epochs, 12)):
        assert one2many_weight(epoch, epochs) == criterion.o2m
        assert max(1.0 - one2many_weight(epoch, epochs), 0) == criterion.o2o
        ours.set_epoch(epoch, epochs)
        assert ours.branch_weights.tolist() == torch.tensor([criterion.o2m, criterion.o2o]).tolist()
        criterion.update()


@pytest.mark.parametrize("case", list(reference.CASES))
def test_end2end_loss_equals_recorded_ultralytics(case):
    """Without Ultralytics: its recorded ``E2ELoss`` (tests/helpers/make_ultralytics_yolo26_reference.py) on the same
    maps."""
    recorded = np.load(RECORDED)
    _, boxes, labels = targets(case)
    for seed in reference.SEEDS:
        for epoch in reference.EPOCHS:
            prefix = f"loss/{case}/{seed}/{epoch}"
            many, one = reference.random_maps(seed), reference.random_maps(seed + 100)
            ours = End2EndLoss(NUM_CLASSES)
            ours.set_epoch(epoch, 10)
            loss, parts = ours(End2EndMaps(many, one), boxes, labels)
            torch.testing.assert_close(loss, torch.from_numpy(recorded[f"{prefix}/loss"]), rtol=2e-6, atol=1e-6)
            torch.testing.assert_close(parts, torch.from_numpy(recorded[f"{prefix}/items"]), rtol=2e-6, atol=1e-6)
            if (seed, epoch) == reference.GRADS_FOR:
                grads = torch.autograd.grad(loss, many + one)
                for i, grad in enumerate(grads):
                    torch.testing.assert_close(grad, torch.from_numpy(recorded[f"{prefix}/grad{i}"]), rtol=1e-5,
                                               atol=1e-6)


def test_end2end_loss_reads_the_branch_weights_when_called_and_has_no_state():
    """``set_epoch`` changes the next call's weighting in place (what a compiled or graphed step needs); the
    weights are not saved in a state dict (they follow from the epoch)."""
    _, boxes, labels = targets("ordinary")
    many, one = reference.random_maps(0), reference.random_maps(100)
    loss = End2EndLoss(NUM_CLASSES)
    assert loss.state_dict() == {}
    branch_many, _ = loss.one2many(many, boxes, labels)
    branch_one, _ = loss.one2one(one, boxes, labels)
    for epoch, expected_weight in ((0, 0.8), (5, 0.1 + 0.7 * 4 / 9), (9, 0.1)):
        loss.set_epoch(epoch, 10)
        total, _ = loss(End2EndMaps(many, one), boxes, labels)
        expected = branch_many * expected_weight + branch_one * (1 - expected_weight)
        torch.testing.assert_close(total, expected, rtol=1e-6, atol=1e-6)
