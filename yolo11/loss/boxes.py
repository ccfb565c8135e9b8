"""Complete IoU: the loss's box term and the overlap in the assigner's alignment metric.

Box formats, anchors and DFL decoding are shared with the post-processing and live in ``yolo11.geometry``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


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
