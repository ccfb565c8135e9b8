"""Geometry shared by data, loss, post-processing and tools: the stride rule, box formats, the anchor grid of the
head's maps and the letterbox.

Conventions: boxes are ``xyxy`` unless a name says ``xywh``; ``ltrb`` are distances from an anchor point to the
left, top, right and bottom sides. Sizes are ``(height, width)``. Units are given per function (grid cells of one
level, network-input pixels or original-image pixels).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from yolo11.architecture import MAX_STRIDE, STRIDES  # noqa: F401 - MAX_STRIDE re-exported for its importers


def round_up_to_stride(size: int, stride: int = MAX_STRIDE) -> int:
    """The smallest multiple of ``stride`` that holds ``size`` pixels."""
    return -(-size // stride) * stride


# Box formats


def xyxy_to_xywh(boxes: Tensor) -> Tensor:
    """``(..., 4)`` xyxy -> centre x, centre y, width, height."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    return torch.stack(((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1), -1)


def xywh_to_xyxy(boxes: Tensor) -> Tensor:
    """``(..., 4)`` centre x, centre y, width, height -> xyxy."""
    cx, cy, w, h = boxes.unbind(-1)
    half_w, half_h = w / 2, h / 2
    return torch.stack((cx - half_w, cy - half_h, cx + half_w, cy + half_h), -1)


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


# The anchor grid of the head's maps and its box encoding, the same for the loss's targets and for decoding


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


# Letterbox: original image <-> network input


def resized_size(orig_size: tuple[int, int], input_size: tuple[int, int], scaleup: bool = True) -> tuple[int, int]:
    """``(height, width)`` of the image inside its letterbox: scaled to fit ``input_size`` (``scaleup=False``:
    never enlarged), each side rounded."""
    (height, width), (input_h, input_w) = orig_size, input_size
    gain = min(input_h / height, input_w / width)
    if not scaleup:
        gain = min(gain, 1.0)
    return max(round(height * gain), 1), max(round(width * gain), 1)


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


def rect_input_size(orig_size: tuple[int, int], imgsz: int, stride: int = MAX_STRIDE) -> tuple[int, int]:
    """The smallest letterboxed input ``(height, width)`` for one image, as Ultralytics' predict (``LetterBox``
    with ``auto``): the long side scaled to ``imgsz`` (a multiple of ``stride``), each side padded only up to a
    multiple of ``stride``."""
    if imgsz % stride:
        raise ValueError(f"imgsz must be a multiple of {stride}, got {imgsz}")
    new_h, new_w = resized_size(orig_size, (imgsz, imgsz))
    return round_up_to_stride(new_h, stride), round_up_to_stride(new_w, stride)


def scale_boxes(boxes: Tensor, ratio_pad: Tensor, orig_size: Tensor) -> Tensor:
    """Map xyxy boxes from the letterboxed network input back to the original image, clipped to it.

    Args:
        boxes: ``(n, 4)`` xyxy in input pixels.
        ratio_pad: ``(4,)`` = ``(gain_h, gain_w, pad_top, pad_left)``, or ``(n, 4)``, one per box;
            ``original = (input - pad) / gain``.
        orig_size: ``(2,)`` original ``(height, width)``, or ``(n, 2)``, one per box.

    Returns:
        a new ``(n, 4)`` tensor in original-image pixels.
    """
    # tensor bounds rather than Python floats: no device-to-host copy per image on CUDA
    ratio_pad = torch.as_tensor(ratio_pad, dtype=boxes.dtype, device=boxes.device)
    orig_size = torch.as_tensor(orig_size, dtype=boxes.dtype, device=boxes.device)
    gain_h, gain_w, pad_top, pad_left = (v[..., None] for v in ratio_pad.unbind(-1))
    height, width = (v[..., None] for v in orig_size.unbind(-1))
    x = torch.minimum(((boxes[:, 0::2] - pad_left) / gain_w).clamp(min=0), width)
    y = torch.minimum(((boxes[:, 1::2] - pad_top) / gain_h).clamp(min=0), height)
    return torch.stack((x[:, 0], y[:, 0], x[:, 1], y[:, 1]), dim=1)
