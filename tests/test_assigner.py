"""TaskAlignedAssigner: equals a plain per-image, per-box loop; batch-independent; conflict and small-box rules."""

import pytest
import torch

from yolo11.geometry import make_anchors
from yolo11.loss import TaskAlignedAssigner
from yolo11.loss.boxes import complete_iou

STRIDES = (8, 16, 32)


def anchors_px(size: int) -> torch.Tensor:
    """``(A, 2)`` anchor centres in pixels for a square input of ``size`` pixels."""
    points, stride = make_anchors([(size // s, size // s) for s in STRIDES], STRIDES)
    return points * stride


def loop_assign(assigner, scores, pred, anchors, labels, boxes):
    """Reference: the assignment rules spelt out one image and one GT at a time."""
    batch, num_anchors, num_classes = scores.shape
    out_scores = torch.zeros_like(scores)
    out_fg = torch.zeros(batch, num_anchors, dtype=torch.bool)
    out_idx = torch.zeros(batch, num_anchors, dtype=torch.long)
    for b in range(batch):
        num_rows = labels.shape[1]
        overlaps = torch.zeros(num_rows, num_anchors)
        metric = torch.zeros(num_rows, num_anchors)
        claims = [set() for _ in range(num_anchors)]
        for m in range(num_rows):
            if labels[b, m] < 0:
                continue
            x1, y1, x2, y2 = boxes[b, m].tolist()
            cx, cy, w, h = (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1
            w = max(w, assigner.min_side)
            h = max(h, assigner.min_side)
            inside = []
            for a, (ax, ay) in enumerate(anchors.tolist()):
                if min(ax - (cx - w / 2), ay - (cy - h / 2), (cx + w / 2) - ax, (cy + h / 2) - ay) > assigner.eps:
                    inside.append(a)
                    overlaps[m, a] = complete_iou(boxes[b, m], pred[b, a]).clamp(0)
                    score = scores[b, a, labels[b, m]]
                    metric[m, a] = score**assigner.alpha * overlaps[m, a] ** assigner.beta
            for a in metric[m].topk(assigner.topk).indices.tolist():
                if a in inside:
                    claims[a].add(m)
        owner = {}
        for a, claimants in enumerate(claims):
            if len(claimants) == 1:
                owner[a] = claimants.pop()
            elif len(claimants) > 1:
                owner[a] = int(overlaps[:, a].argmax())  # highest CIoU over all rows wins
        for m in set(owner.values()):
            mine = [a for a, o in owner.items() if o == m]
            best_metric = max(metric[m, a] for a in mine)
            best_overlap = max(overlaps[m, a] for a in mine)
            for a in mine:
                out_scores[b, a, labels[b, m]] = metric[m, a] * best_overlap / (best_metric + assigner.eps)
                out_fg[b, a] = True
                out_idx[b, a] = m
    return out_scores, out_fg, out_idx


def random_problem(batch=2, size=64, num_rows=4, num_classes=3, seed=0):
    """Large overlapping GTs (many conflicts) and predictions jittered around them, with padding rows."""
    gen = torch.Generator().manual_seed(seed)
    anchors = anchors_px(size)
    centre = torch.rand(batch, num_rows, 2, generator=gen) * size * 0.5 + size * 0.25
    half = torch.rand(batch, num_rows, 2, generator=gen) * size * 0.2 + size * 0.15
    boxes = torch.cat((centre - half, centre + half), -1)
    labels = torch.randint(0, num_classes, (batch, num_rows), generator=gen)
    labels[1, -1] = -1  # a padding row
    boxes[1, -1] = torch.tensor([1e4, -5.0, 3.0, 7.0])  # with garbage in it
    owner = torch.randint(0, num_rows - 1, (batch, anchors.shape[0]), generator=gen)
    pred = boxes.gather(1, owner[..., None].expand(-1, -1, 4)) + torch.randn(batch, anchors.shape[0], 4, generator=gen)
    scores = torch.rand(batch, anchors.shape[0], num_classes, generator=gen)
    return scores, pred, anchors, labels, boxes


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_equals_loop(seed):
    assigner = TaskAlignedAssigner(num_classes=3, topk=5)
    scores, pred, anchors, labels, boxes = random_problem(seed=seed)
    result = assigner(scores, pred, anchors, labels, boxes, labels >= 0)
    ref_scores, ref_fg, ref_idx = loop_assign(assigner, scores, pred, anchors, labels, boxes)
    assert ref_fg.sum() > 0
    assert torch.equal(result.foreground, ref_fg)
    assert torch.equal(result.gt_index[ref_fg], ref_idx[ref_fg])
    torch.testing.assert_close(result.scores, ref_scores, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(result.boxes[ref_fg], boxes.gather(1, ref_idx[..., None].expand(-1, -1, 4))[ref_fg])


def test_conflicts_happen_in_the_random_problem():
    """Guards the test above: several GTs do claim the same anchors, so conflict resolution is exercised."""
    assigner = TaskAlignedAssigner(num_classes=3, topk=5)
    scores, pred, anchors, labels, boxes = random_problem()
    valid = labels >= 0
    inside = assigner.candidates_inside(anchors, boxes, valid)
    _, align = assigner.alignment(scores, pred, labels.clamp(0), boxes, inside)
    claimed = (assigner.select_topk(align, valid) & inside).sum(1)
    assert (claimed > 1).sum() >= 3
    # and every GT has at least topk candidates of positive metric, so top-k has no ties to break
    assert ((align > 0).sum(-1)[valid] >= assigner.topk).all()


def test_images_are_assigned_independently():
    """Assigning a batch equals assigning each image alone (with its own padding)."""
    assigner = TaskAlignedAssigner(num_classes=3, topk=5)
    scores, pred, anchors, labels, boxes = random_problem(seed=3)
    joint = assigner(scores, pred, anchors, labels, boxes, labels >= 0)
    for b in range(2):
        keep = labels[b] >= 0
        alone = assigner(scores[b : b + 1], pred[b : b + 1], anchors, labels[b : b + 1, keep], boxes[b : b + 1, keep],
                         keep[keep][None])
        assert torch.equal(alone.foreground[0], joint.foreground[b])
        torch.testing.assert_close(alone.scores[0], joint.scores[b])


@pytest.mark.parametrize("small_gt_is_better", [True, False])
def test_shared_anchor_goes_to_highest_iou(small_gt_is_better):
    """Two GTs both pick anchor (8, 8); it is kept by the GT its predicted box overlaps most."""
    anchors = torch.tensor([[8.0, 8.0], [24.0, 8.0], [8.0, 24.0], [24.0, 24.0]])
    boxes = torch.tensor([[[0.0, 0.0, 32.0, 32.0], [0.0, 0.0, 18.0, 18.0]]])  # big GT 0, small GT 1
    labels = torch.tensor([[0, 1]])
    pred = torch.tensor([[0.0, 0.0, 16.0, 16.0] if small_gt_is_better else [0.0, 0.0, 30.0, 30.0]]).repeat(4, 1)[None]
    scores = torch.full((1, 4, 2), 0.5)
    result = TaskAlignedAssigner(num_classes=2)(scores, pred, anchors, labels, boxes, labels >= 0)
    assert result.foreground.all()
    assert int(result.gt_index[0, 0]) == (1 if small_gt_is_better else 0)
    assert result.gt_index[0, 1:].tolist() == [0, 0, 0]  # only the big GT contains the other anchors
    assert int(result.labels[0, 0]) == (1 if small_gt_is_better else 0)


def test_a_tie_between_gts_goes_to_the_first_row():
    """Duplicate GTs (same box, another class) overlap every anchor equally: the first row keeps them all, as
    Ultralytics' argmax over the rows (first index on ties)."""
    anchors = torch.tensor([[8.0, 8.0], [24.0, 8.0], [8.0, 24.0], [24.0, 24.0]])
    boxes = torch.tensor([[[0.0, 0.0, 32.0, 32.0], [0.0, 0.0, 32.0, 32.0], [0.0, 0.0, 32.0, 32.0]]])
    labels = torch.tensor([[-1, 1, 0]])  # a padding row first: real rows 1 and 2 tie
    pred = torch.tensor([[0.0, 0.0, 30.0, 30.0]]).repeat(4, 1)[None]
    scores = torch.full((1, 4, 2), 0.5)
    result = TaskAlignedAssigner(num_classes=2)(scores, pred, anchors, labels, boxes, labels >= 0)
    assert result.foreground.all()
    assert result.gt_index[0].tolist() == [1, 1, 1, 1] and result.labels[0].tolist() == [1, 1, 1, 1]


def test_small_and_zero_size_boxes_get_candidates():
    """Sides under the second stride (16 px) are widened to it for the candidate test (Ultralytics 8.4)."""
    anchors = anchors_px(64)
    boxes = torch.tensor([[[30.0, 30.0, 30.0, 33.0], [9.0, 9.0, 11.0, 11.0]]])  # zero-width, 2x2 px
    labels = torch.tensor([[0, 0]])
    assigner = TaskAlignedAssigner(num_classes=1)
    inside = assigner.candidates_inside(anchors, boxes, labels >= 0)
    stride8 = slice(0, 64)  # the 8 x 8 grid of the first level
    assert inside[..., stride8].sum(-1).tolist() == [[4, 4]]  # a 16 x 16 window holds 4 stride-8 centres
    unwidened = TaskAlignedAssigner(num_classes=1, strides=(1, 1, 1))  # no side is below 1 px except width 0
    assert unwidened.candidates_inside(anchors, boxes, labels >= 0).sum(-1).tolist() == [[0, 0]]

    # Predictions that overlap the 2x2 box: all its candidates become positives (fewer than topk). The zero-width
    # box has IoU 0 with everything, hence metric 0: like Ultralytics it gets no positive of its own.
    pred = torch.tensor([8.0, 8.0, 12.0, 12.0]).expand(1, anchors.shape[0], 4)
    scores = torch.full((1, anchors.shape[0], 1), 0.5)
    result = assigner(scores, pred, anchors, labels, boxes, labels >= 0)
    assert torch.equal(result.foreground[0], inside[0, 1])
    assert (result.gt_index[0][result.foreground[0]] == 1).all()
    torch.testing.assert_close(result.scores[0, result.foreground[0], 0].max(), torch.tensor(0.25))  # best CIoU


def test_padding_rows_and_empty_images_assign_nothing():
    anchors = anchors_px(64)
    boxes = torch.tensor([[[8.0, 8.0, 40.0, 40.0], [0.0, 0.0, 0.0, 0.0]], [[5.0, 5.0, 60.0, 60.0]] * 2])
    labels = torch.tensor([[2, -1], [-1, -1]])  # image 1 has only padding (with a real-looking box)
    pred = torch.tensor([8.0, 8.0, 40.0, 40.0]).expand(2, anchors.shape[0], 4)
    scores = torch.full((2, anchors.shape[0], 3), 0.5)
    result = TaskAlignedAssigner(num_classes=3)(scores, pred, anchors, labels, boxes, labels >= 0)
    assert result.foreground[0].sum() == 10  # topk anchors of the one GT
    assert (result.gt_index[0][result.foreground[0]] == 0).all()
    assert not result.foreground[1].any()
    assert result.scores[1].abs().sum() == 0
    assert (result.scores[0, :, [0, 1]] == 0).all() and result.scores[0, :, 2].max() > 0


def test_anchor_on_the_box_edge_is_not_a_candidate():
    anchors = anchors_px(64)  # stride-8 centres at 4, 12, 20, ...
    boxes = torch.tensor([[[4.0, 4.0, 20.0, 20.0]]])  # edges exactly on anchor centres
    inside = TaskAlignedAssigner(num_classes=1).candidates_inside(anchors, boxes, torch.tensor([[True]]))
    assert inside[0, 0, :64].nonzero().flatten().tolist() == [9]  # only (12, 12): row 1, column 1 of the 8x8 grid
