"""YOLO26's end-to-end loss against Ultralytics 8.4.190's ``E2ELoss`` (live; skips when Ultralytics is not
importable): values and gradients on tiny, border, overlapping and empty targets over several seeds, the topk2
assignment, and the one-to-many/one-to-one weight schedule."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
import torch

from yolo11.geometry import make_anchors
from yolo11.loss import End2EndLoss, TaskAlignedAssigner, one2many_weight
from yolo11.models import End2EndMaps

needs_ultralytics = pytest.mark.skipif(importlib.util.find_spec("ultralytics") is None,
                                       reason="ultralytics 8.4.190 is not importable (PYTHONPATH=/work/ultra)")
NUM_CLASSES = 4
HEIGHT, WIDTH = 128, 96  # 16 x 12 + 8 x 6 + 4 x 3 = 252 anchors

# Targets per image as (class, x1, y1, x2, y2) in input pixels.
CASES = {
    "ordinary": [[(0, 10, 12, 60, 70), (2, 40, 50, 90, 120)], [(1, 5, 5, 30, 40)]],
    "tiny": [[(3, 20, 20, 23, 26), (1, 50, 60, 50.5, 60.5)], [(0, 70, 100, 74, 101)]],
    "border": [[(0, 0, 0, 30, 128), (1, 60, 100, 96, 128)], [(2, 0, 0, 96, 128)]],
    "overlapping": [[(0, 10, 10, 60, 60), (1, 12, 12, 62, 62), (0, 20, 20, 50, 50), (3, 10, 10, 60, 60)],
                    [(2, 30, 30, 80, 90), (2, 31, 29, 81, 91)]],
    "one_empty_image": [[(1, 15, 25, 70, 95)], []],
    "no_boxes": [[], []],
}


def random_maps(seed: int) -> list[torch.Tensor]:
    """Per-level raw maps ``(2, 4 + C, H / s, W / s)``: distances 0.2-4 cells (some negative), logits ~ N(-2, 2)."""
    generator = torch.Generator().manual_seed(seed)
    maps = []
    for stride in (8, 16, 32):
        shape = (2, 4 + NUM_CLASSES, HEIGHT // stride, WIDTH // stride)
        level = torch.randn(shape, generator=generator) * 2 - 2
        level[:, :4] = torch.rand(shape[:1] + (4,) + shape[2:], generator=generator) * 4.2 - 0.2
        maps.append(level.requires_grad_(True))
    return maps


def targets(case: str) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """Ultralytics' batch (normalised xywh) and ours (padded xyxy pixels, labels ``-1`` on padding) for ``case``;
    our boxes are Ultralytics' own conversion of its batch, so both losses see the same floats."""
    from ultralytics.utils.ops import xywh2xyxy

    rows = [(i, *box) for i, image in enumerate(CASES[case]) for box in image]
    table = torch.tensor(rows, dtype=torch.float32).view(-1, 6)
    xyxy = table[:, 2:]
    scale = torch.tensor([WIDTH, HEIGHT, WIDTH, HEIGHT], dtype=torch.float32)
    xywh = torch.cat(((xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2]), 1) / scale
    batch = {"batch_idx": table[:, 0], "cls": table[:, 1:2], "bboxes": xywh}
    most = max(len(image) for image in CASES[case])
    boxes, labels = torch.zeros(2, most, 4), torch.full((2, most), -1, dtype=torch.long)
    pixels = xywh2xyxy(xywh * scale)
    for image in range(2):
        mine = table[:, 0] == image
        boxes[image, : int(mine.sum())] = pixels[mine]
        labels[image, : int(mine.sum())] = table[mine, 1].long()
    return batch, boxes, labels


def ultralytics_criterion(epochs: int):
    from ultralytics.nn.tasks import DetectionModel
    from ultralytics.utils.loss import E2ELoss

    model = DetectionModel("yolo26n.yaml", nc=NUM_CLASSES, verbose=False)
    model.args = SimpleNamespace(box=7.5, cls=0.5, dfl=1.5, epochs=epochs)  # Ultralytics' default gains
    return E2ELoss(model)


def ultralytics_preds(maps: list[torch.Tensor]) -> dict:
    """Ultralytics' training output of one branch from our per-level maps (the same tensors, so one graph)."""
    batch = maps[0].shape[0]
    flat = torch.cat([m.view(batch, 4 + NUM_CLASSES, -1) for m in maps], 2)
    return {"boxes": flat[:, :4], "scores": flat[:, 4:], "feats": maps}


@pytest.fixture(scope="module")
def criterion():
    if importlib.util.find_spec("ultralytics") is None:
        pytest.skip("ultralytics 8.4.190 is not importable (PYTHONPATH=/work/ultra)")
    return ultralytics_criterion(epochs=10)


@needs_ultralytics
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_end2end_loss_and_gradients_equal_ultralytics(criterion, case, seed):
    batch, boxes, labels = targets(case)
    many, one = random_maps(seed), random_maps(seed + 100)
    criterion.one2one.hyp.epochs = 10
    for epoch in (0, 4):  # the weights before any update and after four epochs (of 10)
        criterion.updates = 0
        criterion.o2m, criterion.o2o = criterion.o2m_copy, criterion.total - criterion.o2m_copy
        for _ in range(epoch):
            criterion.update()
        expected, expected_items = criterion({"one2many": ultralytics_preds(many), "one2one": ultralytics_preds(one)},
                                             batch)
        expected_grads = torch.autograd.grad(expected.sum(), many + one)
        weight = one2many_weight(epoch, 10)
        assert weight == criterion.o2m
        loss, parts = End2EndLoss(NUM_CLASSES)(End2EndMaps(many, one), boxes, labels, weight)
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
    points, _ = make_anchors([(HEIGHT // 8, WIDTH // 8)], [8])
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
    for epoch in range(min(epochs, 12)):
        assert one2many_weight(epoch, epochs) == criterion.o2m
        assert max(1.0 - one2many_weight(epoch, epochs), 0) == criterion.o2o
        criterion.update()
