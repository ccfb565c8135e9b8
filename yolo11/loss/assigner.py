"""Task-aligned assignment of ground-truth boxes to anchor points (TOOD, as Ultralytics 8.4 uses it for YOLO11).

The whole batch is one set of dense ``(B, M, A)`` tensors (images x padded GT rows x anchors): no Python loop over
images or boxes, no boolean indexing, no host synchronisation, so it runs under ``torch.compile`` with static
shapes. The price is memory proportional to ``B * M * A``:

- kept at the same time: two float32 maps (CIoU ``overlaps`` and the alignment metric) and three bool maps
  (in-box candidates, top-k selection, positives), about ``11 * B * M * A`` bytes;
- transient: the CIoU evaluation in eager mode holds several more float32 maps while it runs; ``torch.compile``
  fuses most of them away.

Peak memory therefore follows the padded box count M (figures: ``benchmarks/RESULTS.md``, "Loss + assigner
alone"). Callers that need less can pad to the batch's largest box count rather than a fixed 300, or compile the
loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from yolo11.architecture import STRIDES
from yolo11.geometry import xywh_to_xyxy, xyxy_to_xywh
from yolo11.loss.boxes import complete_iou


@dataclass(frozen=True)
class Assignment:
    """Per-anchor training targets; ``A`` anchors, ``C`` classes.

    Attributes:
        labels: ``int64 (B, A)`` class of the assigned GT (GT row 0's class where background: read with ``foreground``).
        boxes: ``(B, A, 4)`` xyxy pixels of the assigned GT (GT row 0's box where background).
        scores: ``(B, A, C)`` soft one-hot targets: the normalised alignment metric at the GT class, else 0.
        foreground: ``bool (B, A)`` anchors with a GT.
        gt_index: ``int64 (B, A)`` row of the assigned GT in the padded targets (0 where background).
    """

    labels: Tensor
    boxes: Tensor
    scores: Tensor
    foreground: Tensor
    gt_index: Tensor


class TaskAlignedAssigner(nn.Module):
    """Assign each GT the ``topk`` anchors with the best ``score**alpha * CIoU**beta`` among those inside it.

    Semantics follow Ultralytics 8.4 ``TaskAlignedAssigner`` as built by ``v8DetectionLoss``:

    - candidates are anchor points strictly inside the GT box (margin ``eps``); a GT side shorter than
      ``strides[1]`` pixels (16 for YOLO11) is first widened to ``strides[1]`` around its centre, for the candidate
      test only (Ultralytics 8.4's ``stride_val``, so tiny and zero-size boxes still get anchors);
    - an anchor picked by several GTs keeps the GT with the highest CIoU over *all* GTs it is inside;
    - with ``topk2`` (YOLO26's one-to-one branch: ``topk`` 7, ``topk2`` 1), each GT then keeps only its ``topk2``
      positives of highest metric (Ultralytics' second selection, after the conflicts are resolved);
    - target scores are the alignment metric rescaled per GT so that its best anchor gets the GT's best CIoU.

    Padding rows (``gt_mask`` False) take no part; their box values may be anything finite.
    """

    def __init__(
        self,
        num_classes: int,
        topk: int = 10,
        alpha: float = 0.5,
        beta: float = 6.0,
        strides: Sequence[int] = STRIDES,
        eps: float = 1e-9,
        topk2: int | None = None,
    ) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.topk = topk
        self.topk2 = topk2 or topk  # Ultralytics' `topk2 or topk`: None (and 0) mean no second selection
        self.alpha = alpha
        self.beta = beta
        self.min_side = float(strides[1] if len(strides) > 1 else strides[0])
        self.eps = eps

    @torch.no_grad()
    def forward(
        self,
        pred_scores: Tensor,
        pred_boxes: Tensor,
        anchor_points: Tensor,
        gt_labels: Tensor,
        gt_boxes: Tensor,
        gt_mask: Tensor,
    ) -> Assignment:
        """Compute the targets.

        Args:
            pred_scores: ``(B, A, C)`` class probabilities (after sigmoid), detached.
            pred_boxes: ``(B, A, 4)`` predicted xyxy boxes in input pixels, detached.
            anchor_points: ``(A, 2)`` anchor centres ``(x, y)`` in input pixels.
            gt_labels: ``int64 (B, M)`` classes (any value on padding rows).
            gt_boxes: ``(B, M, 4)`` xyxy in input pixels.
            gt_mask: ``bool (B, M)`` real rows.
        """
        pred_scores, pred_boxes = pred_scores.float(), pred_boxes.float()
        anchor_points = anchor_points.float()
        valid = gt_mask.bool()
        gt_boxes = torch.where(valid[..., None], gt_boxes.float(), 0.0)  # padding may hold garbage
        gt_labels = torch.where(valid, gt_labels.long(), 0)

        inside = self.candidates_inside(anchor_points, gt_boxes, valid)  # (B, M, A)
        overlaps, align = self.alignment(pred_scores, pred_boxes, gt_labels, gt_boxes, inside)
        positive = self.select_topk(align, valid) & inside
        positive = self.resolve_conflicts(positive, overlaps)
        if self.topk2 != self.topk:
            positive = self.keep_topk2(positive, align)
        foreground = positive.any(1)  # (B, A)
        # the single GT left per anchor (0 if none); max's index, the first on ties as argmax's: argmax over a
        # middle dimension is 10x slower on the CPU
        gt_index = positive.to(torch.uint8).max(1).indices

        labels = gt_labels.gather(1, gt_index)
        boxes = gt_boxes.gather(1, gt_index[..., None].expand(-1, -1, 4))
        one_hot = torch.zeros(*labels.shape, self.num_classes, dtype=pred_scores.dtype, device=labels.device)
        one_hot.scatter_(2, labels[..., None], 1.0)
        one_hot = one_hot * foreground[..., None]

        # Rescale the metric per GT so that its best anchor scores the GT's best CIoU (TOOD's normalisation).
        align = torch.where(positive, align, 0.0)
        best_align = align.amax(-1, keepdim=True)  # (B, M, 1)
        best_overlap = torch.where(positive, overlaps, 0.0).amax(-1, keepdim=True)
        norm = (align * best_overlap / (best_align + self.eps)).amax(1)  # (B, A)
        return Assignment(labels, boxes, one_hot * norm[..., None], foreground, gt_index)

    def candidates_inside(self, anchor_points: Tensor, gt_boxes: Tensor, valid: Tensor) -> Tensor:
        """``bool (B, M, A)``: anchor strictly inside the GT box (sides below ``min_side`` widened), real rows only."""
        xywh = xyxy_to_xywh(gt_boxes)
        sides = xywh[..., 2:]
        widen = (sides < self.min_side) & valid[..., None]
        xywh = torch.cat((xywh[..., :2], torch.where(widen, self.min_side, sides)), -1)
        x1, y1, x2, y2 = xywh_to_xyxy(xywh)[..., None, :].unbind(-1)  # each (B, M, 1)
        ax, ay = anchor_points[:, 0], anchor_points[:, 1]
        margin = torch.minimum(torch.minimum(ax - x1, ay - y1), torch.minimum(x2 - ax, y2 - ay))
        return (margin > self.eps) & valid[..., None]

    def alignment(
        self, pred_scores: Tensor, pred_boxes: Tensor, gt_labels: Tensor, gt_boxes: Tensor, inside: Tensor
    ) -> tuple[Tensor, Tensor]:
        """CIoU (clamped at 0) and ``score**alpha * CIoU**beta``, each ``(B, M, A)``, zero outside candidates."""
        num_anchors = pred_boxes.shape[1]
        # Probability of each GT's class at every anchor: gather along the class axis of (B, C, A).
        index = gt_labels[..., None].expand(-1, -1, num_anchors)
        class_scores = pred_scores.transpose(1, 2).gather(1, index)
        overlaps = complete_iou(gt_boxes[:, :, None, :], pred_boxes[:, None, :, :]).clamp_(0)
        overlaps = torch.where(inside, overlaps, 0.0)
        align = torch.where(inside, class_scores.pow(self.alpha) * overlaps.pow(self.beta), 0.0)
        return overlaps, align

    def select_topk(self, align: Tensor, valid: Tensor) -> Tensor:
        """``bool (B, M, A)``: the ``topk`` anchors of highest metric for each real GT row.

        Ties (for instance a GT with fewer candidates than ``topk``, whose remaining picks have metric 0) are
        broken by ``torch.topk``, as in Ultralytics; non-candidates are removed afterwards by the caller.
        """
        k = min(self.topk, align.shape[-1])
        top_index = align.topk(k, dim=-1).indices
        selected = torch.zeros_like(align, dtype=torch.bool).scatter_(-1, top_index, True)
        return selected & valid[..., None]

    def keep_topk2(self, positive: Tensor, align: Tensor) -> Tensor:
        """``positive`` reduced to each GT's ``topk2`` positives of highest metric (ties broken by ``torch.topk``
        over all anchors, as Ultralytics: a GT whose positives all score 0 may keep none)."""
        top_index = torch.where(positive, align, 0.0).topk(self.topk2, dim=-1).indices
        return positive & torch.zeros_like(positive).scatter_(-1, top_index, True)

    @staticmethod
    def resolve_conflicts(positive: Tensor, overlaps: Tensor) -> Tensor:
        """Keep one GT per anchor: where several GTs claim an anchor, the one of highest CIoU over all rows wins.

        Ultralytics takes the arg-max over every GT row (including GTs that contain the anchor but did not pick
        it), first index on ties; reproduced here. Without conflicts this returns ``positive`` unchanged.
        """
        claimed_by_many = positive.sum(1, keepdim=True) > 1  # (B, 1, A)
        best_gt = overlaps.max(1, keepdim=True).indices  # (B, 1, A); argmax's first index on ties, faster
        rows = torch.arange(positive.shape[1], device=positive.device)[None, :, None]
        return torch.where(claimed_by_many, rows == best_gt, positive)
