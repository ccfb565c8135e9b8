"""Box helpers shared by the loss and the post-processing: anchors, DFL decoding, box formats and CIoU.

Conventions: boxes are ``xyxy`` unless a name says ``xywh``; ``ltrb`` are distances from an anchor point to the
left, top, right and bottom sides. Units are given per function (grid cells of one level or input pixels).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor


def make_anchors(
    feature_sizes: Sequence[tuple[int, int]],
    strides: Sequence[int],
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    offset: float = 0.5,
) -> tuple[Tensor, Tensor]:
    """Anchor points at the cell centres of every level, flattened level after level, row-major.

    Args:
        feature_sizes: ``(height, width)`` of each level's map, in cells.
        strides: pixels per cell of each level.
        offset: position of the point inside its cell (0.5 = centre, as Ultralytics).

    Returns:
        ``points (A, 2)`` as ``(x, y)`` in grid cells of their own level, ``stride (A, 1)`` in pixels; multiply the
        two to get input pixels. ``A = sum(h * w)``.
    """
    points, stride_column = [], []
    for (height, width), stride in zip(feature_sizes, strides, strict=True):
        xs = torch.arange(width, dtype=dtype, device=device) + offset
        ys = torch.arange(height, dtype=dtype, device=device) + offset
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
        points.append(torch.stack((grid_x, grid_y), -1).view(-1, 2))
        stride_column.append(torch.full((height * width, 1), stride, dtype=dtype, device=device))
    return torch.cat(points), torch.cat(stride_column)


def flatten_levels(feats: Sequence[Tensor]) -> Tensor:
    """Concatenate per-level maps ``(B, C, H_l, W_l)`` into ``(B, C, A)`` in the anchor order of ``make_anchors``."""
    batch, channels = feats[0].shape[:2]
    return torch.cat([f.reshape(batch, channels, -1) for f in feats], dim=2)


def flatten_levels_anchor_major(feats: Sequence[Tensor]) -> Tensor:
    """The same values as ``flatten_levels(feats).transpose(1, 2)``, ``(B, A, C)`` and contiguous.

    For channels_last maps (the training layout on CUDA) each level is already ``(B, H, W, C)`` in memory, so the
    only copy is the concatenation.
    """
    batch, channels = feats[0].shape[:2]
    return torch.cat([f.permute(0, 2, 3, 1).reshape(batch, -1, channels) for f in feats], dim=1)


def dfl_expectation(distribution: Tensor, reg_max: int = 16) -> Tensor:
    """Expected distance of each side under the softmax over ``reg_max`` bins (Distribution Focal Loss decoding).

    Args:
        distribution: logits ``(..., 4 * reg_max)``, the four sides' bins consecutive (l, t, r, b).

    Returns:
        ``(..., 4)`` distances ``ltrb`` in grid cells, in ``[0, reg_max - 1]``.
    """
    bins = torch.arange(reg_max, dtype=distribution.dtype, device=distribution.device)
    probabilities = distribution.unflatten(-1, (4, reg_max)).softmax(-1)
    return probabilities.matmul(bins)


def ltrb_to_xyxy(distances: Tensor, points: Tensor) -> Tensor:
    """Box from an anchor point ``(..., 2)`` and its side distances ``(..., 4)`` (same units), as ``(..., 4)`` xyxy."""
    left_top, right_bottom = distances.chunk(2, -1)
    return torch.cat((points - left_top, points + right_bottom), -1)


def xyxy_to_ltrb(boxes: Tensor, points: Tensor, max_distance: float) -> Tensor:
    """Side distances of xyxy ``boxes`` from ``points`` (same units), clamped to ``[0, max_distance]``.

    ``max_distance`` is ``reg_max - 1 - 0.01`` for DFL targets, so the right bin index ``floor(d) + 1`` exists.
    """
    top_left, bottom_right = boxes.chunk(2, -1)
    return torch.cat((points - top_left, bottom_right - points), -1).clamp(0, max_distance)


def xyxy_to_xywh(boxes: Tensor) -> Tensor:
    """``(..., 4)`` xyxy -> centre x, centre y, width, height."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    return torch.stack(((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1), -1)


def xywh_to_xyxy(boxes: Tensor) -> Tensor:
    """``(..., 4)`` centre x, centre y, width, height -> xyxy."""
    cx, cy, w, h = boxes.unbind(-1)
    half_w, half_h = w / 2, h / 2
    return torch.stack((cx - half_w, cy - half_h, cx + half_w, cy + half_h), -1)


def complete_iou(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7) -> Tensor:
    """Complete IoU (IoU - centre distance term - aspect-ratio term) of xyxy boxes, broadcasting ``(..., 4)``.

    Hand-written rather than ``torchvision.ops.complete_box_iou`` because the assigner needs it broadcast over
    ``(B, M, A)`` (torchvision's is pairwise ``(N, M)`` for one image only) and because the ``eps`` placement
    follows Ultralytics' ``bbox_iou(..., CIoU=True)`` exactly (``eps`` added to the heights, the union and the
    enclosing diagonal), which keeps zero-area ground-truth boxes finite where torchvision's ``w / h`` is ``0 / 0``.
    For positive-area boxes the two agree to float rounding (``tests/test_loss.py`` checks it).

    Returns:
        ``(...)`` CIoU in ``[-1.5, 1]``; scale-free, so any common unit works. The aspect-ratio weight ``alpha`` is
        a constant for autograd, as in the CIoU paper's reference code.
    """
    b1_x1, b1_y1, b1_x2, b1_y2 = boxes1.unbind(-1)
    b2_x1, b2_y1, b2_x2, b2_y2 = boxes2.unbind(-1)
    w1, h1 = b1_x2 - b1_x1, b1_y2 - b1_y1 + eps
    w2, h2 = b2_x2 - b2_x1, b2_y2 - b2_y1 + eps

    inter = (torch.minimum(b1_x2, b2_x2) - torch.maximum(b1_x1, b2_x1)).clamp(0) * (
        torch.minimum(b1_y2, b2_y2) - torch.maximum(b1_y1, b2_y1)
    ).clamp(0)
    union = w1 * h1 + w2 * h2 - inter + eps
    iou = inter / union

    enclosing_w = torch.maximum(b1_x2, b2_x2) - torch.minimum(b1_x1, b2_x1)
    enclosing_h = torch.maximum(b1_y2, b2_y2) - torch.minimum(b1_y1, b2_y1)
    diagonal_sq = enclosing_w.pow(2) + enclosing_h.pow(2) + eps
    centre_dist_sq = ((b2_x1 + b2_x2 - b1_x1 - b1_x2).pow(2) + (b2_y1 + b2_y2 - b1_y1 - b1_y2).pow(2)) / 4
    aspect = (4 / math.pi**2) * ((w2 / h2).atan() - (w1 / h1).atan()).pow(2)
    with torch.no_grad():
        alpha = aspect / (aspect - iou + (1 + eps))
    return iou - (centre_dist_sq / diagonal_sq + aspect * alpha)
