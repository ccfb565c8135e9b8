"""DetectionLoss: parity with Ultralytics' v8DetectionLoss, edge cases, gradients, graph capture."""

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import make_ultralytics_reference as reference_cases
from torchvision.ops import complete_box_iou_loss

from yolo11.loss import DetectionLoss, distribution_focal_loss
from yolo11.loss.boxes import complete_iou

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "reference" / "yolo11n_coco128_outputs.npz"
RECORDED = Path(__file__).resolve().parent / "data" / "ultralytics_loss_cases.npz"
NUM_CLASSES = 80


def padded_targets(rows: torch.Tensor, batch_size: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ultralytics rows ``[image, class, cx, cy, w, h]`` (normalised) -> padded xyxy pixels and labels (-1 = pad).

    Same float operations as Ultralytics' ``preprocess`` (scale, then centre +- half size), so boxes are identical.
    """
    counts = torch.bincount(rows[:, 0].long(), minlength=batch_size)
    boxes = torch.zeros(batch_size, int(counts.max()), 4)
    labels = torch.full((batch_size, int(counts.max())), -1, dtype=torch.long)
    for b in range(batch_size):
        mine = rows[rows[:, 0] == b]
        cx, cy, w, h = (mine[:, 2:6] * size).unbind(-1)
        boxes[b, : len(mine)] = torch.stack((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2), -1)
        labels[b, : len(mine)] = mine[:, 1].long()
    return boxes, labels


@pytest.fixture(scope="module")
def reference():
    if not REFERENCE.exists():
        pytest.skip(f"reference outputs not found at {REFERENCE}")
    data = np.load(REFERENCE)
    feats = [torch.from_numpy(data[f"raw_p{level}"]) for level in (3, 4, 5)]
    boxes, labels = padded_targets(torch.from_numpy(data["targets"]), feats[0].shape[0], 640)
    return feats, boxes, labels, data


def random_feats(batch: int, size: int, seed: int = 0, num_classes: int = NUM_CLASSES) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, 64 + num_classes, size // s, size // s, generator=gen) for s in (8, 16, 32)]


def random_targets(batch: int, num_boxes: int, size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(batch, num_boxes, 2, generator=gen) * size * 0.8
    wh = torch.rand(batch, num_boxes, 2, generator=gen) * size * 0.3 + 4
    labels = torch.randint(0, NUM_CLASSES, (batch, num_boxes), generator=gen)
    return torch.cat((xy, xy + wh), -1), labels


def test_matches_ultralytics_reference(reference):
    feats, boxes, labels, data = reference
    feats = [f.clone().requires_grad_() for f in feats]
    loss, parts = DetectionLoss(NUM_CLASSES)(feats, boxes, labels)
    expected_parts = torch.from_numpy(data["loss_items_box_cls_dfl"]).float()
    torch.testing.assert_close(parts, expected_parts, rtol=1e-5, atol=0)
    # Ultralytics returns the three terms times the batch size; the trainer sums them
    torch.testing.assert_close(loss, torch.from_numpy(data["loss_returned"]).sum(), rtol=1e-5, atol=0)
    assert not parts.requires_grad and loss.requires_grad


@pytest.mark.parametrize("seed", reference_cases.SEEDS)
def test_matches_recorded_ultralytics_loss_and_gradients_with_tiny_and_border_boxes(seed):
    """Random maps and targets with 2-8 px, 8-16 px, border and overlapping boxes (make_ultralytics_reference.py):
    loss items within 1e-5 and map gradients within 1e-4 of Ultralytics 8.4.190, relative to each map's largest."""
    recorded = np.load(RECORDED)
    maps = [m.requires_grad_() for m in reference_cases.random_maps(seed)]
    boxes, labels = padded_targets(torch.from_numpy(recorded[f"targets_{seed}"]), maps[0].shape[0],
                                   reference_cases.IMGSZ)
    assert ((boxes[..., 2:] - boxes[..., :2]) < 8).any() and ((boxes[..., 2:] - boxes[..., :2]) < 16).any()
    loss, parts = DetectionLoss(reference_cases.NUM_CLASSES)(maps, boxes, labels)
    loss.backward()
    torch.testing.assert_close(parts, torch.from_numpy(recorded[f"loss_items_{seed}"]), rtol=1e-5, atol=0)
    for level, grad in zip((3, 4, 5), (m.grad for m in maps), strict=True):
        expected = torch.from_numpy(recorded[f"grad_{seed}_p{level}"])
        scale = expected.abs().max().item()
        torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-4 * scale, msg=f"P{level} gradient")


def test_complete_iou_agrees_with_torchvision():
    gen = torch.Generator().manual_seed(0)
    xy = torch.rand(500, 2, 2, generator=gen) * 50
    wh = torch.rand(500, 2, 2, generator=gen) * 30 + 0.5
    boxes = torch.cat((xy, xy + wh), -1)
    ours = 1 - complete_iou(boxes[:, 0], boxes[:, 1])
    torch.testing.assert_close(ours, complete_box_iou_loss(boxes[:, 0], boxes[:, 1]), rtol=1e-5, atol=1e-6)


def test_distribution_focal_loss_is_cross_entropy_of_neighbouring_bins():
    logits = torch.randn(7, 4 * 16)
    target = torch.rand(7, 4) * 14.99
    left = target.floor().long()
    flat = logits.view(-1, 16)
    expected = (
        F.cross_entropy(flat, left.view(-1), reduction="none") * (left + 1 - target).view(-1)
        + F.cross_entropy(flat, (left + 1).view(-1), reduction="none") * (target - left).view(-1)
    ).view(7, 4).mean(-1)
    torch.testing.assert_close(distribution_focal_loss(logits, target), expected)


@pytest.mark.parametrize("num_rows", [0, 3])
def test_batch_without_boxes_is_pure_background_bce(num_rows):
    feats = random_feats(2, 64)
    boxes = torch.full((2, num_rows, 4), 7.0)  # padding rows hold real-looking boxes: they must be ignored
    labels = torch.full((2, num_rows), -1)
    loss, parts = DetectionLoss(NUM_CLASSES)(feats, boxes, labels)
    logits = torch.cat([f[:, 64:].flatten(2) for f in feats], 2)
    background = F.binary_cross_entropy_with_logits(logits, torch.zeros_like(logits), reduction="sum")
    assert parts[0] == 0 and parts[2] == 0
    torch.testing.assert_close(parts[1], background * 0.5)
    torch.testing.assert_close(loss, parts.sum() * 2)


def test_padding_and_empty_images_do_not_change_the_loss():
    """Image 1 without boxes, extra padding rows with garbage: same loss as the unpadded batch."""
    feats = random_feats(2, 64, seed=1)
    boxes, labels = random_targets(2, 3, 64, seed=1)
    labels[1] = -1
    padded_boxes = torch.cat((boxes, torch.tensor([1e4, -3.0, 2.0, 9e3]).expand(2, 4, 4)), 1)
    padded_labels = torch.cat((labels, torch.full((2, 4), -1)), 1)
    loss_fn = DetectionLoss(NUM_CLASSES)
    _, parts = loss_fn(feats, boxes, labels)
    _, parts_padded = loss_fn(feats, padded_boxes, padded_labels)
    torch.testing.assert_close(parts_padded, parts)
    assert parts[0] > 0 and parts[2] > 0


@pytest.mark.parametrize(
    "box",
    [
        [20.0, 20.0, 20.0, 40.0],  # zero width
        [-30.0, 10.0, 25.0, 50.0],  # partly left of the image
        [40.0, 40.0, 90.0, 100.0],  # partly beyond the bottom-right corner
    ],
)
def test_degenerate_and_clipped_boxes_give_finite_loss_and_gradients(box):
    feats = [f.requires_grad_() for f in random_feats(1, 64, seed=2)]
    boxes = torch.tensor([[box, [8.0, 8.0, 30.0, 28.0]]])
    loss, parts = DetectionLoss(NUM_CLASSES)(feats, boxes, torch.tensor([[3, 5]]))
    loss.backward()
    assert torch.isfinite(parts).all() and parts[0] > 0
    assert all(torch.isfinite(f.grad).all() for f in feats)


def test_three_hundred_boxes_in_one_image():
    feats = [f.requires_grad_() for f in random_feats(2, 640, seed=3)]
    boxes, labels = random_targets(2, 300, 640, seed=3)
    labels[1, 5:] = -1  # the other image has 5
    loss, parts = DetectionLoss(NUM_CLASSES)(feats, boxes, labels)
    loss.backward()
    assert torch.isfinite(parts).all() and (parts > 0).all()
    assert all(torch.isfinite(f.grad).all() for f in feats)


@pytest.mark.parametrize("autocast", [False, True])
def test_gradients_are_finite(autocast):
    dtype = torch.bfloat16 if autocast else torch.float32
    feats = [f.to(dtype).requires_grad_() for f in random_feats(2, 64, seed=4)]
    boxes, labels = random_targets(2, 4, 64, seed=4)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss, parts = DetectionLoss(NUM_CLASSES)(feats, boxes, labels)
    loss.backward()
    assert parts.dtype == torch.float32 and torch.isfinite(parts).all()
    for f in feats:
        assert f.grad.dtype == dtype and torch.isfinite(f.grad).all() and f.grad.abs().sum() > 0


def test_box_terms_pull_predictions_towards_targets():
    """A gradient step on the box distribution channels lowers the box and DFL terms."""
    feats = [f.requires_grad_() for f in random_feats(1, 64, seed=5)]
    boxes, labels = random_targets(1, 3, 64, seed=5)
    loss_fn = DetectionLoss(NUM_CLASSES)
    loss, before = loss_fn(feats, boxes, labels)
    loss.backward()
    with torch.no_grad():
        stepped = [f - 0.5 * f.grad for f in feats]
    _, after = loss_fn(stepped, boxes, labels)
    assert after[0] < before[0] and after[2] < before[2]


def test_captures_as_one_graph():
    """``fullgraph=True`` fails on any graph break (``.item()``, data-dependent branches, boolean indexing)."""
    torch._dynamo.reset()
    compiled = torch.compile(DetectionLoss(NUM_CLASSES), backend="eager", fullgraph=True)
    feats = random_feats(2, 64, seed=6)
    boxes, labels = random_targets(2, 3, 64, seed=6)
    labels[1, 1:] = -1
    loss, parts = compiled(feats, boxes, labels)
    torch.testing.assert_close(parts, DetectionLoss(NUM_CLASSES)(feats, boxes, labels)[1])


def test_channels_last_maps_give_the_same_loss_and_gradients():
    """Training on CUDA feeds channels_last maps; the anchor-major flattening must not depend on the layout."""
    feats = random_feats(2, 64, seed=7)
    boxes, labels = random_targets(2, 4, 64, seed=7)
    results = []
    for layout in (torch.contiguous_format, torch.channels_last):
        maps = [f.clone().contiguous(memory_format=layout).requires_grad_() for f in feats]
        loss, parts = DetectionLoss(NUM_CLASSES)(maps, boxes, labels)
        loss.backward()
        results.append((parts, [m.grad for m in maps]))
    (parts_a, grads_a), (parts_b, grads_b) = results
    torch.testing.assert_close(parts_a, parts_b)
    for grad_a, grad_b in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(grad_a, grad_b)
