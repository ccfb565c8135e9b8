"""Inference post-processing: decode raw head maps, per-class NMS, letterbox -> original image coordinates.

Semantics follow Ultralytics 8.4 (``Detect`` inference output and ``utils.nms.non_max_suppression``), with
``torchvision.ops.batched_nms`` doing the suppression (it separates classes itself, so no ``max_wh`` offsets).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torchvision.ops import batched_nms, nms

from yolo11.loss.boxes import dfl_expectation, flatten_levels, ltrb_to_xyxy, make_anchors, xywh_to_xyxy, xyxy_to_xywh


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
            top = score.topk(max_nms).indices
            anchor, cls, score = anchor[top], cls[top], score[top]
        candidates = boxes[anchor]
        keep = nms(candidates, score, iou) if agnostic else batched_nms(candidates, score, cls, iou)
        keep = keep[:max_det]
        output.append(torch.cat((candidates[keep], score[keep, None], cls[keep, None].to(score.dtype)), dim=1))
    return output


def letterbox_params(orig_size: tuple[int, int], input_size: tuple[int, int],
                     scaleup: bool = True) -> tuple[float, float, int, int]:
    """``(gain_h, gain_w, pad_top, pad_left)`` of Ultralytics' centred letterbox of ``orig_size`` into ``input_size``.

    Both sizes are ``(height, width)`` in pixels. The long side is scaled to fit (``scaleup=False``: never
    enlarged) and each side is resized to ``round(side * gain)`` pixels, so each axis's gain is its own ratio of
    new to old size (as Ultralytics' ``scale_boxes`` maps boxes back); the rest is padded equally, the ``- 0.1``
    rounding of odd padding putting the extra pixel at the bottom/right.
    """
    (height, width), (input_h, input_w) = orig_size, input_size
    new_h, new_w = resized_size(orig_size, input_size, scaleup)
    return new_h / height, new_w / width, round((input_h - new_h) / 2 - 0.1), round((input_w - new_w) / 2 - 0.1)


def resized_size(orig_size: tuple[int, int], input_size: tuple[int, int], scaleup: bool = True) -> tuple[int, int]:
    """``(height, width)`` of the image inside its letterbox: scaled to fit ``input_size`` (``scaleup=False``:
    never enlarged), each side rounded."""
    (height, width), (input_h, input_w) = orig_size, input_size
    gain = min(input_h / height, input_w / width)
    if not scaleup:
        gain = min(gain, 1.0)
    return max(round(height * gain), 1), max(round(width * gain), 1)


def rect_input_size(orig_size: tuple[int, int], imgsz: int, stride: int = 32) -> tuple[int, int]:
    """The smallest letterboxed input ``(height, width)`` for one image, as Ultralytics' predict (``LetterBox``
    with ``auto``): the long side scaled to ``imgsz``, the short side padded only up to a multiple of ``stride``."""
    new_h, new_w = resized_size(orig_size, (imgsz, imgsz))
    return new_h + (imgsz - new_h) % stride, new_w + (imgsz - new_w) % stride


def scale_boxes(boxes: Tensor, ratio_pad: Tensor, orig_size: Tensor) -> Tensor:
    """Map xyxy boxes from the letterboxed network input back to the original image, clipped to it.

    Args:
        boxes: ``(n, 4)`` xyxy in input pixels.
        ratio_pad: ``(4,)`` = ``(gain_h, gain_w, pad_top, pad_left)``; ``original = (input - pad) / gain``.
        orig_size: ``(2,)`` original ``(height, width)``.

    Returns:
        a new ``(n, 4)`` tensor in original-image pixels.
    """
    gain_h, gain_w, pad_top, pad_left = torch.as_tensor(ratio_pad, dtype=boxes.dtype, device=boxes.device).unbind()
    height, width = torch.as_tensor(orig_size, dtype=boxes.dtype, device=boxes.device).unbind()
    # tensor bounds rather than Python floats: no device-to-host copy per image on CUDA
    x = torch.minimum(((boxes[:, 0::2] - pad_left) / gain_w).clamp(min=0), width)
    y = torch.minimum(((boxes[:, 1::2] - pad_top) / gain_h).clamp(min=0), height)
    return torch.stack((x[:, 0], y[:, 0], x[:, 1], y[:, 1]), dim=1)


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
        return [
            torch.cat((scale_boxes(det[:, :4], pad, size), det[:, 4:]), dim=1)
            for det, pad, size in zip(detections, ratio_pad, orig_sizes, strict=True)
        ]
