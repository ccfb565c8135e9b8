"""Faster training variants of YOLO11 blocks, swapped in explicitly for compiled training on CUDA.

``use_fast_training_layers(model)`` replaces, in place, the blocks that ``torch.compile`` (inductor) runs slowly
on CUDA with variants that compute the same outputs another way:

- the stem ``Conv`` (fewer than 8 input channels, groups 1) -> ``MatmulConv``: one matrix product over the input's
  patches, because cuDNN's kernels for convs of few input channels are slow;
- ``C3k2`` / ``C2PSA`` -> ``DenseSplitC3k2`` / ``DenseSplitC2PSA``: a dense copy of the split-off half, which
  inductor fuses into the kernel that writes the split, where cuDNN would copy the strided view itself;
- ``SPPF`` -> ``SeparablePoolSPPF``: max-pools as row then column maxima, because inductor lowers the max-pool
  backward to an index scatter;
- the neck's ``nn.Upsample`` -> ``RepeatUpsample2x``: a broadcast and a reshape, whose backward is a plain sum
  instead of inductor's index-put scatter.

Each variant subclasses its block and adopts the block's own submodules, so parameters, buffers and state-dict
keys are unchanged (checkpoints, EMA, weights files, the Ultralytics key mapping). Outputs are the same in every
mode (the stem's up to rounding: its products sum in another order); gradients differ only in summation order
and, for the pools, where a window holds equal maxima.
The trainer applies the swap through ``yolo11.engine.compile.compile_model(..., fast_layers=True)``; nothing else
in the package depends on this module. Speed of each piece: ``benchmarks/block_speed.py``, ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from yolo11.models.blocks import C2PSA, SPPF, C3k2, Conv
from yolo11.models.neck import YOLO11Neck

__all__ = [
    "DenseSplitC2PSA",
    "DenseSplitC3k2",
    "MatmulConv",
    "RepeatUpsample2x",
    "SeparablePoolSPPF",
    "dense_copy",
    "repeat_nearest_2x",
    "separable_max_pool2d",
    "use_fast_training_layers",
]


def use_fast_training_layers(model: nn.Module) -> nn.Module:
    """Replace, in place, every submodule of ``model`` that has a fast variant; returns ``model``.

    Call it before ``torch.compile``. Modules it does not know (a timm backbone's layers, the head) stay as they
    are; blocks already swapped are left alone, so a second call changes nothing.
    """
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            fast = _fast_variant(child, parent)
            if fast is not None:
                setattr(parent, name, fast)
    return model


def _fast_variant(module: nn.Module, parent: nn.Module) -> nn.Module | None:
    kind = type(module)  # exact types: subclasses (DWConv, the variants themselves) are not swapped
    if kind is Conv and module.conv.groups == 1 and module.conv.in_channels < 8:  # the RGB stem
        return MatmulConv(module)
    if kind is C3k2:
        return DenseSplitC3k2(module)
    if kind is C2PSA:
        return DenseSplitC2PSA(module)
    if kind is SPPF:
        return SeparablePoolSPPF(module)
    if kind is nn.Upsample and isinstance(parent, YOLO11Neck):
        return RepeatUpsample2x()
    return None


def adopt(variant: nn.Module, plain: nn.Module) -> None:
    """Give ``variant`` the submodules, parameters, buffers and attributes of ``plain`` (the same objects, not
    copies), so the swap keeps every parameter and state-dict key."""
    nn.Module.__init__(variant)
    variant.__dict__.update(plain.__dict__)


class MatmulConv(Conv):
    """``Conv`` whose convolution (groups 1) is one matrix product over the input's patches (im2col), the patch
    length zero-padded to a multiple of 8; returns a channels_last map.

    Compiled, one inductor kernel builds the patches and the forward and the weight's gradient are two skinny
    cuBLAS products. An input gradient is correct but slow (the patches' gradient summed back into the padded
    input); the stem's input is the image, which needs none. Meant for compiled training: run eagerly, the
    patches are materialised as a ``(B, H', W', C * kh * kw)`` tensor.
    """

    def __init__(self, plain: Conv) -> None:
        conv = plain.conv
        if conv.groups != 1 or conv.dilation != (1, 1) or conv.padding_mode != "zeros":
            raise ValueError(f"MatmulConv needs groups 1, dilation 1 and zero padding, got {conv}")
        adopt(self, plain)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv_as_matmul(x)))

    def conv_as_matmul(self, x: torch.Tensor) -> torch.Tensor:
        """``self.conv(x)`` for ``x (B, C, H, W)``, as a channels_last ``(B, out_channels, H', W')`` map."""
        weight, bias = self.conv.weight, self.conv.bias
        out_channels, _, kh, kw = weight.shape
        (sh, sw), (ph, pw) = self.conv.stride, self.conv.padding
        x = F.pad(x, (pw, pw, ph, ph))
        batch, _, height, width = x.shape
        out_h, out_w = (height - kh) // sh + 1, (width - kw) // sw + 1
        taps = [x[:, :, i:i + sh * (out_h - 1) + 1:sh, j:j + sw * (out_w - 1) + 1:sw]
                for i in range(kh) for j in range(kw)]  # each (B, C, out_h, out_w)
        # (B, out_h, out_w, C * kh * kw) in the weight's (C, kh, kw) order
        patches = torch.stack(taps, 2).permute(0, 3, 4, 1, 2).reshape(batch, out_h, out_w, -1)
        pad = (0, -patches.shape[-1] % 8)  # a patch length that is a multiple of 8 suits the matmul kernels
        out = F.pad(patches, pad) @ F.pad(weight.reshape(out_channels, -1), pad).t()
        if bias is not None:  # after fuse()
            out = out + bias
        return out.permute(0, 3, 1, 2)


class DenseSplitC3k2(C3k2):
    """``C3k2`` that hands its inner blocks a dense copy (``dense_copy``) of the half it splits off."""

    def __init__(self, plain: C3k2) -> None:
        adopt(self, plain)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        y[-1] = dense_copy(y[-1])
        for block in self.m:
            y.append(block(y[-1]))
        return self.cv2(torch.cat(y, 1))


class DenseSplitC2PSA(C2PSA):
    """``C2PSA`` that hands its PSABlocks a dense copy (``dense_copy``) of the half it splits off."""

    def __init__(self, plain: C2PSA) -> None:
        adopt(self, plain)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.cv1(x).split((self.hidden, self.hidden), dim=1)
        return self.cv2(torch.cat((a, self.m(dense_copy(b))), 1))


class SeparablePoolSPPF(SPPF):
    """``SPPF`` whose max-pools are ``separable_max_pool2d`` (its ``m``, an ``nn.MaxPool2d``, stays for the
    kernel size and for the module tree); YOLO26's residual variant keeps its residual."""

    def __init__(self, plain: SPPF) -> None:
        adopt(self, plain)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv1(x)]
        for _ in range(self.num_pools):
            y.append(separable_max_pool2d(y[-1], self.m.kernel_size))
        out = self.cv2(torch.cat(y, 1))
        return out + x if self.add else out


class RepeatUpsample2x(nn.Module):
    """``nn.Upsample(scale_factor=2, mode="nearest")`` as ``repeat_nearest_2x``; no parameters."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return repeat_nearest_2x(x)


def separable_max_pool2d(x: torch.Tensor, kernel_size: int) -> torch.Tensor:
    """Stride-1 ``k x k`` max-pool with ``k // 2`` padding as a max over ``k`` shifted rows, then over ``k`` shifted
    columns: the same output as ``nn.MaxPool2d``, as pointwise maxima that ``torch.compile`` fuses.

    The gradient differs only where a window holds equal maxima: it is shared between them (``torch.maximum``)
    instead of going to one of them, whose choice already differs between PyTorch's own kernels.
    """
    pad = kernel_size // 2
    height, width = x.shape[-2:]
    padded = F.pad(x, (pad, pad, 0, 0), value=float("-inf"))
    rows = padded[..., :width]
    for shift in range(1, kernel_size):
        rows = torch.maximum(rows, padded[..., shift:shift + width])
    padded = F.pad(rows, (0, 0, pad, pad), value=float("-inf"))
    out = padded[..., :height, :]
    for shift in range(1, kernel_size):
        out = torch.maximum(out, padded[..., shift:shift + height, :])
    return out


def dense_copy(x: torch.Tensor) -> torch.Tensor:
    """A dense copy of a channel slice of a map, in the map's memory format (channels_last when channels are the
    innermost dimension). The half that C3k2 and C2PSA split off is a view whose pixels lie ``2 * hidden``
    channels apart."""
    channels_last = x.dim() == 4 and x.stride(1) == 1 and x.shape[1] > 1
    return x.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


def repeat_nearest_2x(x: torch.Tensor) -> torch.Tensor:
    """``nn.Upsample(scale_factor=2, mode="nearest")`` of ``x (B, C, H, W)`` as a broadcast and a reshape, in ``x``'s
    memory format. The output is the same; the gradient, a sum over each 2x2 block, is the same up to summation
    order."""
    b, c, h, w = x.shape
    if x.is_contiguous(memory_format=torch.channels_last):  # repeat in NHWC, return the channels_last view
        nhwc = x.permute(0, 2, 3, 1)[:, :, None, :, None, :].expand(b, h, 2, w, 2, c)
        return nhwc.reshape(b, 2 * h, 2 * w, c).permute(0, 3, 1, 2)
    return x[:, :, :, None, :, None].expand(b, c, h, 2, w, 2).reshape(b, c, 2 * h, 2 * w)
