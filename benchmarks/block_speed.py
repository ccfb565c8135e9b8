"""Forward + backward time of single pieces of the YOLO11 step on the GPU, compiled, in several implementations.

    python benchmarks/block_speed.py --batch 128 --model yolo11n

Pieces (shapes of the training step at 640 px):

- ``sppf-pool``: SPPF's three chained 5x5 max-pools on the ``(B, C/2, 20, 20)`` map: ``nn.MaxPool2d`` eager and
  through inductor, a custom op that keeps aten's CUDA kernels (opaque to inductor), and ``separable_max_pool2d``
  (what ``SeparablePoolSPPF`` uses, the fast training variant of ``SPPF`` in ``yolo11.models.fast_layers``);
- ``stem``: the first Conv (3 input channels, 3x3, stride 2) with the uint8 -> float input step before it, as is,
  on input zero-padded to 4 or 8 channels, and as a matrix product over the input's patches
  (``MatmulConv.conv_as_matmul``, the stem's fast training variant); outputs and weight gradients are compared
  with the eager conv's.

Median of 20 timed runs after 5 warm-up runs (CUDA events). The pool variants' outputs and input gradients are
compared with eager ``nn.MaxPool2d`` (gradients differ where a window holds equal maxima).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from train_throughput import time_steps  # noqa: E402  (this folder is on sys.path when run as a script)


def time_fn(fn) -> float:
    """Median milliseconds of 20 runs after 5 warm-up runs."""
    return statistics.median(time_steps(fn, warmup=5, steps=20)) * 1e3


# The alternative to separable maxima that keeps aten's exact max-pool gradient: aten's forward and backward kernels
# as custom ops, which inductor calls as they are instead of lowering them (measured, not used by the model).
@torch.library.custom_op("yolo11_bench::max_pool2d", mutates_args=())
def aten_max_pool(x: torch.Tensor, kernel_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    pad = kernel_size // 2
    return torch.ops.aten.max_pool2d_with_indices(x, [kernel_size] * 2, [1, 1], [pad, pad])


@aten_max_pool.register_fake
def _(x, kernel_size):
    return torch.empty_like(x), torch.empty_like(x, dtype=torch.long)


@torch.library.custom_op("yolo11_bench::max_pool2d_backward", mutates_args=())
def aten_max_pool_backward(
    grad: torch.Tensor, x: torch.Tensor, indices: torch.Tensor, kernel_size: int
) -> torch.Tensor:
    pad = kernel_size // 2
    return torch.ops.aten.max_pool2d_with_indices_backward(
        grad, x, [kernel_size] * 2, [1, 1], [pad, pad], [1, 1], False, indices)


@aten_max_pool_backward.register_fake
def _(grad, x, indices, kernel_size):
    return torch.empty_like(x)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], output[1])
    ctx.kernel_size = inputs[1]


def _backward(ctx, grad, _):
    x, indices = ctx.saved_tensors
    return aten_max_pool_backward(grad.contiguous(memory_format=torch.channels_last) if x.is_contiguous(
        memory_format=torch.channels_last) else grad.contiguous(), x, indices, ctx.kernel_size), None


aten_max_pool.register_autograd(_backward, setup_context=_setup)


class AtenPool(nn.Module):
    def forward(self, x):
        return aten_max_pool(x, 5)[0]


def chained_pools(pool):
    def run(x):
        y = [x]
        for _ in range(3):
            y.append(pool(y[-1]))
        return torch.cat(y, 1)

    return run


def bench_pool(batch: int, channels: int, size: int) -> None:
    from yolo11.models.fast_layers import separable_max_pool2d

    x0 = torch.randn(batch, channels, size, size, device="cuda", dtype=torch.bfloat16)
    x0 = x0.contiguous(memory_format=torch.channels_last)
    grad = torch.randn(batch, channels * 4, size, size, device="cuda", dtype=torch.bfloat16)
    grad = grad.contiguous(memory_format=torch.channels_last)
    variants = {
        "nn.MaxPool2d eager": chained_pools(nn.MaxPool2d(5, 1, 2)),
        "nn.MaxPool2d compiled": torch.compile(chained_pools(nn.MaxPool2d(5, 1, 2))),
        "aten op compiled": torch.compile(chained_pools(AtenPool())),
        "separable compiled": torch.compile(chained_pools(functools.partial(separable_max_pool2d, kernel_size=5))),
    }
    reference = None
    for name, fn in variants.items():
        x = x0.detach().requires_grad_()

        def step(fn=fn, x=x):
            x.grad = None
            fn(x).backward(grad)

        ms = time_fn(step)
        out, = torch.autograd.grad(fn(x), x, grad)
        if reference is None:
            reference = (fn(x).detach(), out)
        same_out = torch.equal(fn(x).detach(), reference[0])
        same_grad = torch.equal(out, reference[1])
        print(f"  sppf-pool {name:28s} {ms:7.3f} ms   output equal: {same_out}  grad equal: {same_grad}")


def conv_zero_padded(conv: nn.Conv2d, x: torch.Tensor, channels: int) -> torch.Tensor:
    """``conv(x)`` with input and weight zero-padded to ``channels`` input channels (zero channels add exact
    zeros)."""
    pad = (0, 0, 0, 0, 0, channels - x.shape[1])
    x = F.pad(x, pad).contiguous(memory_format=torch.channels_last)
    return F.conv2d(x, F.pad(conv.weight, pad), conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups)


def bench_stem(batch: int, width: int, imgsz: int) -> None:
    from yolo11.models.blocks import Conv
    from yolo11.models.fast_layers import MatmulConv

    images = torch.randint(0, 256, (batch, imgsz, imgsz, 3), dtype=torch.uint8, device="cuda").permute(0, 3, 1, 2)
    conv = Conv(3, width, 3, 2).cuda().to(memory_format=torch.channels_last)
    matmul_conv = MatmulConv(conv)  # shares conv's parameters

    def eager(u8):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return conv.act(conv.bn(conv.conv(u8.contiguous(memory_format=torch.channels_last).float().div_(255))))

    def fused_input(u8):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return conv.act(conv.bn(conv.conv(u8.float() / 255)))

    def padded_input(channels):
        def run(u8):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return conv.act(conv.bn(conv_zero_padded(conv.conv, u8.float() / 255, channels)))
        return run

    def as_matmul(u8):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return matmul_conv(u8.float() / 255)

    variants = {"float input eager": eager, "float input, compiled": torch.compile(fused_input),
                "input padded to 4 channels, compiled": torch.compile(padded_input(4)),
                "input padded to 8 channels, compiled": torch.compile(padded_input(8)),
                "patches x weight (im2col), compiled": torch.compile(as_matmul)}
    reference = None
    grad = torch.randn_like(eager(images), dtype=torch.bfloat16)  # one upstream gradient for every variant
    for name, fn in variants.items():

        def step(fn=fn):
            conv.zero_grad(set_to_none=True)
            fn(images).backward(grad)

        ms = time_fn(step)
        conv.zero_grad(set_to_none=True)
        out = fn(images)
        out.backward(grad)
        if reference is None:
            reference = out.float(), conv.conv.weight.grad.float()
        out_err = (out.float() - reference[0]).abs().max().item()
        grad_err = ((conv.conv.weight.grad.float() - reference[1]).norm() / reference[1].norm()).item()
        print(f"  stem {name:36s} {ms:7.3f} ms   max |out - eager| {out_err:.3g}, weight grad rel. err {grad_err:.2g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--model", default="yolo11n")
    args = parser.parse_args()
    from yolo11.architecture import get_scale

    scale = get_scale(args.model.removeprefix("yolo11"))
    print(f"{args.model} batch {args.batch} {args.imgsz}px on {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}")
    bench_pool(args.batch, scale.channels(1024) // 2, args.imgsz // 32)
    bench_stem(args.batch, scale.channels(64), args.imgsz)


if __name__ == "__main__":
    main()
