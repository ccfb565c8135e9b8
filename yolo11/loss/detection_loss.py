"""YOLO11 detection loss: BCE classification, CIoU box regression and Distribution Focal Loss (Ultralytics 8.4);
with ``reg_max`` 1 (YOLO26) an L1 distance term replaces DFL."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from yolo11.architecture import STRIDES
from yolo11.geometry import dfl_expectation, flatten_levels_anchor_major, ltrb_to_xyxy, make_anchors, xyxy_to_ltrb
from yolo11.loss.assigner import TaskAlignedAssigner
from yolo11.loss.boxes import complete_iou


def distribution_focal_loss(distribution: Tensor, target: Tensor, reg_max: int = 16) -> Tensor:
    """DFL of each anchor: cross-entropy against the two bins around the target distance, mean over the 4 sides.

    Args:
        distribution: logits ``(..., 4 * reg_max)``.
        target: ``(..., 4)`` ltrb distances in grid cells, already in ``[0, reg_max - 1.01]``.

    Returns:
        ``(...)`` loss per anchor (Li et al. 2020, https://arxiv.org/abs/2006.04388).
    """
    log_probs = F.log_softmax(distribution.unflatten(-1, (4, reg_max)), dim=-1)
    left = target.long()  # floor, as the distances are non-negative
    right = left + 1
    weight_left = right - target
    weight_right = 1 - weight_left
    log_left = log_probs.gather(-1, left[..., None]).squeeze(-1)
    log_right = log_probs.gather(-1, right[..., None]).squeeze(-1)
    return -(log_left * weight_left + log_right * weight_right).mean(-1)


class DetectionLoss(nn.Module):
    """Loss of the raw head maps against padded targets; an ``nn.Module`` without parameters.

    The three terms follow Ultralytics' ``v8DetectionLoss`` with its defaults: classification BCE over all anchors
    and classes against the assigner's soft targets, CIoU loss and DFL on foreground anchors weighted by their
    target score; each term is divided by ``max(sum of target scores, 1)`` and multiplied by its gain. With
    ``reg_max`` 1 (YOLO26: the box channels are the distances) the third term is Ultralytics' L1 loss of the side
    distances in pixels divided by the input width (left, right) or height (top, bottom), mean over the 4 sides,
    with the same weight, normaliser and gain (``dfl_gain``: Ultralytics' ``dfl`` gain serves both).

    Batch-size scaling: ``forward`` returns ``loss = parts.sum() * B`` with ``B`` the per-process batch, as
    Ultralytics does. Its trainer further multiplies by the world size under DDP (which averages gradients over
    ranks) and sums gradients over accumulation steps, so that the gradient is a *sum* over the global batch of
    per-batch-normalised losses; that is the scale at which lr0 = 0.01 for the nominal batch 64 was tuned. This
    module does not know the world size or accumulation: the engine applies those factors
    (``yolo11.engine.loop.TrainStep.loss_factor``).

    The forward has no ``.item()``, boolean indexing or data-dependent branches (a batch without boxes flows
    through the same masked math and gives zero box/DFL terms), so it compiles without graph breaks or host syncs.
    It runs in float32 with autocast disabled; maps produced under bf16/fp16 autocast are upcast, and their
    gradients flow back in the maps' dtype.
    """

    def __init__(
        self,
        num_classes: int,
        strides: Sequence[int] = STRIDES,
        reg_max: int = 16,
        box_gain: float = 7.5,
        cls_gain: float = 0.5,
        dfl_gain: float = 1.5,
        topk: int = 10,
        alpha: float = 0.5,
        beta: float = 6.0,
        topk2: int | None = None,
    ) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.strides = tuple(strides)
        self.reg_max = reg_max
        self.gains = (box_gain, cls_gain, dfl_gain)
        self.assigner = TaskAlignedAssigner(num_classes, topk=topk, alpha=alpha, beta=beta, strides=self.strides,
                                            topk2=topk2)

    def forward(self, feats: list[Tensor], boxes: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """Compute the loss.

        Args:
            feats: per level ``(B, 4 * reg_max + C, H / s, W / s)``, box-distribution channels first.
            boxes: ``(B, M, 4)`` xyxy in input pixels, padded.
            labels: ``int64 (B, M)`` class index, ``-1`` on padding rows.

        Returns:
            ``loss`` scalar (``parts.sum() * B``, for backward) and ``parts (3,)`` detached ``[box, cls, dfl]``
            (``[box, cls, l1]`` when ``reg_max`` is 1), gained and normalised (Ultralytics' ``loss_items``).
        """
        batch_size = feats[0].shape[0]
        if boxes.shape[1] == 0:  # a shape check, not a data-dependent branch: one padding row keeps shapes valid
            boxes = boxes.new_zeros(batch_size, 1, 4)
            labels = labels.new_full((batch_size, 1), -1)
        with torch.autocast(device_type=feats[0].device.type, enabled=False):
            parts = self._parts([f.float() for f in feats], boxes.float(), labels)
        return parts.sum() * batch_size, parts.detach()

    def _parts(self, feats: list[Tensor], boxes: Tensor, labels: Tensor) -> Tensor:
        """``(3,)`` gained ``[box, cls, dfl]`` terms; see ``forward``."""
        raw = flatten_levels_anchor_major(feats)  # (B, A, 4 * reg_max + C)
        pred_dist, pred_logits = raw.split((4 * self.reg_max, self.num_classes), dim=-1)
        points, stride = make_anchors([f.shape[2:] for f in feats], self.strides, raw.dtype, raw.device)
        # reg_max 1: the channels are the distances themselves (no distribution)
        distances = pred_dist if self.reg_max == 1 else dfl_expectation(pred_dist, self.reg_max)
        pred_boxes = ltrb_to_xyxy(distances, points)  # grid cells of each level

        target = self.assigner(
            pred_logits.detach().sigmoid(),
            pred_boxes.detach() * stride,
            points * stride,
            labels,
            boxes,
            labels >= 0,
        )
        # Box terms over all anchors with weight = target score: zero on background, so no boolean indexing.
        weight = target.scores.sum(-1) * target.foreground  # (B, A)
        # The class axis is summed first, as for `weight`, so that inductor can take both sums in one pass over the
        # (B, A, C) logits; with one sum over all elements, it writes the per-element losses out as a float32 map to
        # sum them in another kernel. The scores are zero on background anchors, so weight.sum() is their total,
        # without a second pass over the (B, A, C) scores.
        score_sum = weight.sum().clamp(min=1.0)
        cls_loss = F.binary_cross_entropy_with_logits(pred_logits, target.scores, reduction="none").sum(-1)
        cls_loss = cls_loss.sum() / score_sum

        target_boxes = target.boxes / stride  # grid cells, like pred_boxes
        box_loss = ((1.0 - complete_iou(pred_boxes, target_boxes)) * weight).sum() / score_sum
        if self.reg_max == 1:
            dfl = self._side_l1(pred_dist, target_boxes, points, stride, feats[0].shape[2:])
        else:
            target_ltrb = xyxy_to_ltrb(target_boxes, points, self.reg_max - 1 - 0.01)
            dfl = distribution_focal_loss(pred_dist, target_ltrb, self.reg_max)
        dfl_loss = (dfl * weight).sum() / score_sum

        box_gain, cls_gain, dfl_gain = self.gains
        return torch.stack((box_loss * box_gain, cls_loss * cls_gain, dfl_loss * dfl_gain))

    def _side_l1(self, distances: Tensor, target_boxes: Tensor, points: Tensor, stride: Tensor,
                 first_level: torch.Size) -> Tensor:
        """``(B, A)`` mean L1 over the 4 sides between predicted and target distances (unclamped), in pixels over the
        input width (l, r) or height (t, b), as Ultralytics' ``BboxLoss`` for ``reg_max`` 1."""
        height, width = (size * self.strides[0] for size in first_level)  # the input size, as Ultralytics derives it
        scale = distances.new_empty(4)  # filled on the device: a host tensor's copy cannot be captured in a graph
        scale[0::2], scale[1::2] = width, height
        left_top, right_bottom = target_boxes.chunk(2, -1)
        target = torch.cat((points - left_top, right_bottom - points), -1)
        return F.l1_loss(distances * stride / scale, target * stride / scale, reduction="none").mean(-1)
