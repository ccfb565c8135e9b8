"""The YOLO11 and YOLO26 building blocks, under Ultralytics' published names.

Submodule names (``conv``, ``bn``, ``cv1``, ``cv2``, ``cv3``, ``m``, ``qkv``, ``proj``, ``pe``, ``attn``, ``ffn``)
are the ones Ultralytics uses, so an Ultralytics state-dict key such as ``model.4.m.0.cv1.conv.weight`` maps onto
ours by renaming only its ``model.N`` prefix (see ``yolo11.weights.ultralytics``). Every block takes and returns
``(B, C, H, W)`` feature maps.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

# Ultralytics' initialize_weights() sets these on every BatchNorm2d; training dynamics depend on them.
BN_EPS = 1e-3
BN_MOMENTUM = 0.03


class Conv(nn.Module):
    """Conv2d (no bias) -> BatchNorm2d -> SiLU, padded to keep ``H / stride``. ``fuse()`` folds the BN away."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 1,
        stride: int = 1,
        groups: int = 1,
        act: bool = True,
    ) -> None:
        super().__init__()
        self.conv = nn.Conv2d(
            in_channels, out_channels, kernel_size, stride, kernel_size // 2, groups=groups, bias=False
        )
        self.bn = nn.BatchNorm2d(out_channels, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.act = nn.SiLU() if act else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda and self.conv.groups > 1 and self.conv.groups == self.conv.in_channels:
            return self.act(self.bn(_depthwise_nchw(self.conv, x)))
        return self.act(self.bn(self.conv(x)))

    @torch.no_grad()
    def fuse(self) -> None:
        """Fold the BatchNorm (running statistics) into the conv's weight and a new bias; inference only."""
        # Fold in float64 so the fused weights carry no extra rounding beyond the final float32 cast.
        dtype = self.conv.weight.dtype
        fused = fuse_conv_bn_eval(self.conv.eval().double(), self.bn.eval().double())
        self.conv = fused.to(dtype)
        self.bn = nn.Identity()


def _depthwise_nchw(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """A depthwise convolution run NCHW on CUDA, whatever the model's layout: cuDNN compiles its channels_last
    depthwise kernels at run time (cudnn-frontend issue 1066), ~1 s for each new input shape and pass, which made a
    run's first training step ~8 s slower than NCHW's and every new validation shape ~1.2 s slower (bf16, H100;
    benchmarks/RESULTS.md); its NCHW depthwise kernels are built in. The same arithmetic: only the layout differs.
    The weight (C, 1, k, k) is viewed with NCHW strides: its channels_last strides are ambiguous for cuDNN."""
    weight = conv.weight.flatten(1).unflatten(1, conv.weight.shape[1:])
    return nn.functional.conv2d(x.contiguous(), weight, conv.bias, conv.stride, conv.padding, conv.dilation,
                                conv.groups)


class DWConv(Conv):
    """Depth-wise Conv: groups = gcd(in, out), i.e. one filter group per channel when in == out."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 1, stride: int = 1, act: bool = True):
        super().__init__(in_channels, out_channels, kernel_size, stride, math.gcd(in_channels, out_channels), act)


class Bottleneck(nn.Module):
    """Two Convs (hidden width ``out * expansion``), residual when ``shortcut`` and widths agree."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        shortcut: bool = True,
        kernel_sizes: tuple[int, int] = (3, 3),
        expansion: float = 0.5,
    ) -> None:
        super().__init__()
        hidden = int(out_channels * expansion)
        self.cv1 = Conv(in_channels, hidden, kernel_sizes[0])
        self.cv2 = Conv(hidden, out_channels, kernel_sizes[1])
        self.add = shortcut and in_channels == out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3k(nn.Module):
    """CSP block with ``num_blocks`` Bottlenecks of kernel ``kernel_size`` (Ultralytics' C3k, a C3 variant)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        num_blocks: int = 1,
        shortcut: bool = True,
        expansion: float = 0.5,
        kernel_size: int = 3,
    ) -> None:
        super().__init__()
        hidden = int(out_channels * expansion)
        self.cv1 = Conv(in_channels, hidden)
        self.cv2 = Conv(in_channels, hidden)
        self.cv3 = Conv(2 * hidden, out_channels)
        self.m = nn.Sequential(
            *(Bottleneck(hidden, hidden, shortcut, (kernel_size, kernel_size), 1.0) for _ in range(num_blocks))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class C3k2(nn.Module):
    """YOLO11's C2f-style block: split, ``num_blocks`` inner blocks chained on one half, concat all, 1x1 Conv.

    The inner block is a Bottleneck then a PSABlock when ``attn`` (YOLO26's last neck layer), else a C3k (two
    Bottlenecks) when ``c3k`` (scales m/l/x), else a Bottleneck.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        num_blocks: int = 1,
        c3k: bool = False,
        expansion: float = 0.5,
        shortcut: bool = True,
        attn: bool = False,
    ) -> None:
        super().__init__()
        self.hidden = int(out_channels * expansion)
        self.cv1 = Conv(in_channels, 2 * self.hidden)
        self.cv2 = Conv((2 + num_blocks) * self.hidden, out_channels)
        self.m = nn.ModuleList(self._inner_block(c3k, shortcut, attn) for _ in range(num_blocks))

    def _inner_block(self, c3k: bool, shortcut: bool, attn: bool) -> nn.Module:
        if attn:  # Ultralytics' precedence: attn wins over c3k (YOLO26 m/l/x set both)
            return nn.Sequential(
                Bottleneck(self.hidden, self.hidden, shortcut),
                PSABlock(self.hidden, attn_ratio=0.5, num_heads=max(self.hidden // 64, 1)),
            )
        if c3k:
            return C3k(self.hidden, self.hidden, 2, shortcut)
        return Bottleneck(self.hidden, self.hidden, shortcut)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        for block in self.m:
            y.append(block(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    """Spatial pyramid pooling (fast): ``num_pools`` chained ``kernel_size`` max-pools, concat, 1x1 Conv.

    ``residual`` is YOLO26's variant (``SPPF [1024, 5, 3, True]``): the first 1x1 conv has no activation and the
    block adds its input when the widths agree. YOLO11's rows (no ``shortcut`` argument) keep the SiLU.
    """

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: int = 5, num_pools: int = 3, residual: bool = False
    ) -> None:
        super().__init__()
        hidden = in_channels // 2
        self.cv1 = Conv(in_channels, hidden, act=not residual)
        self.cv2 = Conv(hidden * (num_pools + 1), out_channels)
        self.m = nn.MaxPool2d(kernel_size, stride=1, padding=kernel_size // 2)
        self.num_pools = num_pools
        self.add = residual and in_channels == out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv1(x)]
        for _ in range(self.num_pools):
            y.append(self.m(y[-1]))
        out = self.cv2(torch.cat(y, 1))
        return out + x if self.add else out


class Attention(nn.Module):
    """Multi-head self-attention over the ``H * W`` positions, plus a depth-wise 3x3 positional term on values.

    Keys and queries have ``head_dim * attn_ratio`` channels per head; values ``head_dim = channels / num_heads``.
    """

    def __init__(self, channels: int, num_heads: int = 8, attn_ratio: float = 0.5) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = channels // num_heads
        self.key_dim = int(self.head_dim * attn_ratio)
        self.scale = self.key_dim**-0.5
        qkv_channels = channels + 2 * self.key_dim * num_heads
        self.qkv = Conv(channels, qkv_channels, 1, act=False)
        self.proj = Conv(channels, channels, 1, act=False)
        self.pe = Conv(channels, channels, 3, groups=channels, act=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = x.shape
        positions = height * width
        q, k, v = (
            self.qkv(x)
            .view(batch, self.num_heads, 2 * self.key_dim + self.head_dim, positions)
            .split([self.key_dim, self.key_dim, self.head_dim], dim=2)
        )
        attn = ((q.transpose(-2, -1) @ k) * self.scale).softmax(dim=-1)  # (B, heads, N, N)
        out = (v @ attn.transpose(-2, -1)).view(batch, channels, height, width)
        out = out + self.pe(v.reshape(batch, channels, height, width))
        return self.proj(out)


class PSABlock(nn.Module):
    """Attention then a 2x-wide 1x1 feed-forward, each residual when ``shortcut``."""

    def __init__(self, channels: int, attn_ratio: float = 0.5, num_heads: int = 4, shortcut: bool = True) -> None:
        super().__init__()
        self.attn = Attention(channels, num_heads=num_heads, attn_ratio=attn_ratio)
        self.ffn = nn.Sequential(Conv(channels, channels * 2), Conv(channels * 2, channels, act=False))
        self.add = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x) if self.add else self.attn(x)
        return x + self.ffn(x) if self.add else self.ffn(x)


class C2PSA(nn.Module):
    """CSP block whose processed half goes through ``num_blocks`` PSABlocks (one head per 64 channels)."""

    def __init__(self, in_channels: int, out_channels: int, num_blocks: int = 1, expansion: float = 0.5) -> None:
        super().__init__()
        if in_channels != out_channels:
            raise ValueError(f"C2PSA keeps its width: in_channels {in_channels} != out_channels {out_channels}")
        self.hidden = int(in_channels * expansion)
        self.cv1 = Conv(in_channels, 2 * self.hidden)
        self.cv2 = Conv(2 * self.hidden, in_channels)
        self.m = nn.Sequential(
            *(PSABlock(self.hidden, attn_ratio=0.5, num_heads=self.hidden // 64) for _ in range(num_blocks))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.cv1(x).split((self.hidden, self.hidden), dim=1)
        return self.cv2(torch.cat((a, self.m(b)), 1))


class DFL(nn.Module):
    """Distribution focal loss integral: expected bin index of a softmax over ``reg_max`` bins.

    Input ``(B, 4 * reg_max, A)``, output ``(B, 4, A)`` distances in stride units. The 1x1 conv holds the fixed
    weights ``0..reg_max-1`` and is frozen, as in Ultralytics (it appears in the state dict and parameter count).
    """

    def __init__(self, reg_max: int = 16) -> None:
        super().__init__()
        self.reg_max = reg_max
        self.conv = nn.Conv2d(reg_max, 1, 1, bias=False).requires_grad_(False)
        with torch.no_grad():
            self.conv.weight.copy_(torch.arange(reg_max, dtype=torch.float32).view(1, reg_max, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, _, anchors = x.shape
        probs = x.view(batch, 4, self.reg_max, anchors).transpose(2, 1).softmax(1)  # (B, reg_max, 4, A)
        return self.conv(probs).view(batch, 4, anchors)
