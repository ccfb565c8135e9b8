"""The HSV augmentation of a whole batch on the training device, after the batch has travelled there.

On a GPU the loader workers are the limit of a CUDA-graph training step, and the HSV pass was the largest part
of their work per sample (two colour conversions and a lookup over 640 x 640 x 3 bytes: about half of a
cached mosaic sample's CPU time, benchmarks/RESULTS.md). The workers still draw the gains from the sample's own
random generator (``RandomHSV.draw``), so the augmentation stays a function of (seed, epoch, index); they send
them with the batch and the device applies them to all images at once.

``BatchHSV`` reproduces OpenCV's 8-bit ``BGR2HSV`` (integer arithmetic with its division tables),
the lookup tables of ``RandomHSV`` and OpenCV's ``HSV2BGR`` (float32, truncated to uint8 as its vector path
does). Against ``cv2`` 4.12 and 5.1 every pixel is within 1 of ``RandomHSV``'s output (tested); the rare
differences come from where OpenCV's compiled kernels fuse multiply-adds. OpenCV is not consistent with itself
either: cv2 5.1 on an AVX-512 CPU rounds instead of truncating in the block of 32 pixels that its main loop leaves
at the end of a row whose width is not a multiple of 64 (so the same pixel can come out 1 apart in two images).
"""

from __future__ import annotations

import torch
from torch import nn

_SHIFT = 12  # OpenCV's hsv_shift: fixed-point bits of the division tables
_HUE_RANGE = 180  # OpenCV's 8-bit hue is 0..179


def _division_tables() -> tuple[torch.Tensor, torch.Tensor]:
    """OpenCV's ``sdiv_table`` (255 / v) and ``hdiv_table180`` (180 / (6 diff)), fixed point, entry 0 = 0."""
    i = torch.arange(1, 256, dtype=torch.float64)
    zero = torch.zeros(1, dtype=torch.float64)
    sdiv = torch.cat([zero, torch.round((255 << _SHIFT) / i)])
    hdiv = torch.cat([zero, torch.round((_HUE_RANGE << _SHIFT) / (6 * i))])
    return sdiv.to(torch.int32), hdiv.to(torch.int32)


class BatchHSV(nn.Module):
    """``RandomHSV`` of a batch: ``forward(images, gains)`` with uint8 RGB ``images (B, 3, H, W)`` and per-image
    ``gains (B, 3)`` (hue, saturation, value, as ``RandomHSV.draw`` gives them); returns a new uint8 batch in
    the memory format of ``images``.

    A module so that OpenCV's division tables live on the device as buffers (moved once with ``.to``, never
    copied per step, which would synchronise the host), and so that it can be ``torch.compile``d into one
    kernel.
    """

    def __init__(self):
        super().__init__()
        sdiv, hdiv = _division_tables()
        self.register_buffer("sdiv", sdiv, persistent=False)
        self.register_buffer("hdiv", hdiv, persistent=False)

    def forward(self, images: torch.Tensor, gains: torch.Tensor) -> torch.Tensor:
        hsv = self.rgb_to_hsv(images)
        luts = hsv_luts(gains).to(torch.int32)  # (B, 3, 256)
        hsv = torch.gather(luts, 2, hsv.reshape(hsv.shape[0], 3, -1).long()).reshape(hsv.shape)
        return torch.empty_like(images).copy_(hsv_to_rgb(hsv))  # empty_like keeps the memory format

    def rgb_to_hsv(self, rgb: torch.Tensor) -> torch.Tensor:
        """OpenCV's 8-bit RGB -> HSV of uint8 ``(B, 3, H, W)``, as int32 (H 0..179, S and V 0..255)."""
        r, g, b = rgb.to(torch.int32).unbind(1)
        v = torch.maximum(torch.maximum(r, g), b)
        diff = v - torch.minimum(torch.minimum(r, g), b)
        half = 1 << (_SHIFT - 1)
        s = (diff * self.sdiv[v] + half) >> _SHIFT
        h = torch.where(v == r, g - b, torch.where(v == g, b - r + 2 * diff, r - g + 4 * diff))
        h = (h * self.hdiv[diff] + half) >> _SHIFT
        h = torch.where(h < 0, h + _HUE_RANGE, h)
        return torch.stack([h, s, v], 1)


def hsv_luts(gains: torch.Tensor) -> torch.Tensor:
    """``(B, 3, 256)`` uint8 lookup tables of ``RandomHSV.apply`` (hue, saturation, value) for ``(B, 3)`` gains."""
    x = torch.arange(256, dtype=torch.float64, device=gains.device)
    gains = gains.to(torch.float64).unsqueeze(-1)
    hue = torch.remainder(x + gains[:, 0] * _HUE_RANGE, _HUE_RANGE)
    sat = (x * (gains[:, 1] + 1)).clamp(0, 255)
    sat[:, 0] = 0  # saturation 0 stays 0: greys keep no colour (Ultralytics >= 8.3.79)
    val = (x * (gains[:, 2] + 1)).clamp(0, 255)
    return torch.stack([hue, sat, val], 1).to(torch.uint8)  # float -> uint8 truncates, as numpy's astype


def hsv_to_rgb(hsv: torch.Tensor) -> torch.Tensor:
    """OpenCV's 8-bit HSV -> RGB of integer HSV ``(B, 3, H, W)``, as uint8 RGB (float32, truncated)."""
    h, s, v = hsv.to(torch.float32).unbind(1)
    h = h * (6.0 / _HUE_RANGE)
    s = s * (1.0 / 255.0)
    v = v * (1.0 / 255.0)
    sector = torch.trunc(h)
    frac = h - sector
    sector = sector - torch.trunc(sector * (1.0 / 6.0)) * 6
    p = v * (1 - s)  # OpenCV's tab[1]
    q = v * (1 - s * frac)  # tab[2]
    t = v * (1 - s * (1 - frac))  # tab[3]
    # per sector 0..5: r = v q p p t v, g = t v v q p p, b = p p t v v q
    r = torch.where((sector < 1) | (sector > 4), v, torch.where(sector == 1, q, torch.where(sector == 4, t, p)))
    g = torch.where(sector < 1, t, torch.where(sector < 3, v, torch.where(sector == 3, q, p)))
    b = torch.where(sector < 2, p, torch.where(sector == 2, t, torch.where(sector < 5, v, q)))
    rgb = torch.stack([r, g, b], 1) * 255.0
    return torch.trunc(rgb).clamp_(0, 255).to(torch.uint8)

