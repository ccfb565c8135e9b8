"""Inference post-processing: decode raw head maps, per-class NMS, letterbox -> original image coordinates.

Semantics follow Ultralytics 8.4 (``Detect`` inference output and ``utils.nms.non_max_suppression``), classes
separated as it does, by offsetting each class's boxes ``max_wh`` pixels apart for one ``torchvision.ops.nms`` call.
The geometry (anchors, box formats, ``scale_boxes``) is ``yolo11.geometry``'s.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torchvision.ops import nms

from yolo11.geometry import (
    dfl_expectation,
    flatten_levels,
    ltrb_to_xyxy,
    make_anchors,
    scale_boxes,
    xywh_to_xyxy,
    xyxy_to_xywh,
)


def decode(feats: Sequence[Tensor], strides: Sequence[int] = (8, 16, 32), reg_max: int = 16) -> Tensor:
    """Raw maps -> boxes and class probabilities for every anchor (Ultralytics' inference output).

    Args:
        feats: per level ``(B, 4 * reg_max + C, H / s, W / s)``, box-distribution channels first.

    Returns:
        ``(B, 4 + C, A)``: rows 0-3 are ``xywh`` in input pixels, rows 4.. the sigmoid class scores.
    """
    raw = flatten_levels(feats)  # (B, 4 * reg_max + C, A)
    dist, logits = raw.split((4 * reg_max, raw.shape[1] - 4 * reg_max), dim=1)
    points, stride = make_anchors([f.shape[2:] for f in feats], strides, raw.dtype, raw.device)
    boxes = ltrb_to_xyxy(dfl_expectation(dist.transpose(1, 2), reg_max), points)  # grid cells
    xywh = xyxy_to_xywh(boxes) * stride  # pixels; scaling after the conversion, as Ultralytics
    return torch.cat((xywh.transpose(1, 2), logits.sigmoid()), dim=1)


def non_max_suppression(
    decoded: Tensor,
    conf: float = 0.001,
    iou: float = 0.7,
    max_det: int = 300,
    multi_label: bool = True,
    agnostic: bool = False,
    max_nms: int = 30000,
    max_wh: int = 7680,
) -> list[Tensor]:
    """Per-image, per-class NMS of ``decode``'s output.

    Args:
        decoded: ``(B, 4 + C, A)`` as returned by ``decode``.
        conf: keep scores strictly above this (val 0.001, predict 0.25).
        iou: suppress same-class boxes overlapping a higher-scored one by more than this IoU.
        max_det: detections kept per image, highest scores first.
        multi_label: one candidate per (box, class) above ``conf`` rather than the best class only (ignored for a
            single class, as Ultralytics).
        agnostic: suppress across classes.
        max_nms: at most this many highest-scored candidates enter NMS.
        max_wh: the offset between classes, in pixels, for class-aware NMS in one call (Ultralytics' 7680).

    Returns:
        per image ``(n, 6)`` rows ``[x1, y1, x2, y2, score, class]``, input pixels, by decreasing score.
    """
    num_classes = decoded.shape[1] - 4
    multi_label = multi_label and num_classes > 1
    output = []
    for prediction in decoded.transpose(1, 2):  # (A, 4 + C) per image; NMS output sizes differ per image
        boxes = xywh_to_xyxy(prediction[:, :4])
        scores = prediction[:, 4:]
        if multi_label:
            anchor, cls = torch.nonzero(scores > conf, as_tuple=True)
            score = scores[anchor, cls]
        else:
            score, cls = scores.max(1)
            anchor = torch.nonzero(score > conf, as_tuple=True)[0]
            score, cls = score[anchor], cls[anchor]
        if score.numel() > max_nms:
            top = score.argsort(descending=True)[:max_nms]  # Ultralytics' order among tied scores, not topk's
            anchor, cls, score = anchor[top], cls[top], score[top]
        candidates = boxes[anchor]
        # one NMS over classes moved max_wh apart, as Ultralytics (the same float rounding of its IoUs): torchvision's
        # batched_nms runs one NMS per class, with a host sync each, above 5000 candidates on CUDA (4000 on CPU)
        offset = 0 if agnostic else cls.to(candidates.dtype)[:, None] * max_wh
        keep = nms(candidates + offset, score, iou)
        keep = keep[:max_det]
        output.append(torch.cat((candidates[keep], score[keep, None], cls[keep, None].to(score.dtype)), dim=1))
    return output


def to_original_pixels(detections: Sequence[Tensor], ratio_pad: Tensor, orig_sizes: Tensor) -> list[Tensor]:
    """``non_max_suppression``'s detections per image mapped from input pixels to original-image pixels.

    Args:
        ratio_pad: ``(B, 4)`` letterbox parameters per image, see ``yolo11.geometry.scale_boxes``.
        orig_sizes: ``(B, 2)`` original ``(height, width)``.
    """
    return [
        torch.cat((scale_boxes(det[:, :4], pad, size), det[:, 4:]), dim=1)
        for det, pad, size in zip(detections, ratio_pad, orig_sizes, strict=True)
    ]


class Postprocessor:
    """Raw maps -> detections per image, in original-image pixels when letterbox parameters are given."""

    def __init__(
        self,
        conf: float = 0.001,
        iou: float = 0.7,
        max_det: int = 300,
        multi_label: bool = True,
        agnostic: bool = False,
        strides: Sequence[int] = (8, 16, 32),
        reg_max: int = 16,
        max_nms: int = 30000,
    ) -> None:
        self.conf, self.iou, self.max_det = conf, iou, max_det
        self.multi_label, self.agnostic, self.max_nms = multi_label, agnostic, max_nms
        self.strides, self.reg_max = tuple(strides), reg_max

    @torch.no_grad()
    def __call__(
        self, feats: Sequence[Tensor], ratio_pad: Tensor | None = None, orig_sizes: Tensor | None = None
    ) -> list[Tensor]:
        """Detections ``(n, 6)`` ``[x1, y1, x2, y2, score, class]`` per image.

        Args:
            feats: raw maps of the model, see ``decode``.
            ratio_pad: ``(B, 4)`` letterbox parameters per image; with ``orig_sizes (B, 2)`` boxes are mapped to
                original pixels, otherwise they stay in input pixels.
        """
        decoded = decode([f.float() for f in feats], self.strides, self.reg_max)
        detections = non_max_suppression(
            decoded, self.conf, self.iou, self.max_det, self.multi_label, self.agnostic, self.max_nms
        )
        if ratio_pad is None or orig_sizes is None:
            return detections
        return to_original_pixels(detections, ratio_pad, orig_sizes)
