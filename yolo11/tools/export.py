"""Export a YOLO11 model to ONNX with decoded outputs.

    yolo11-export weights/best.safetensors --imgsz 640 --output yolo11n.onnx
    yolo11-export yolo11n.pt --imgsz 640 --check

The graph takes ``images`` float32 ``(B, 3, imgsz, imgsz)`` in [0, 1] (B dynamic) and returns ``output``
``(B, 4 + nc, A)``: xywh in input pixels and sigmoid class scores per anchor, A = sum of (imgsz / s)^2 over
strides 8, 16, 32 (8400 at 640), i.e. ``yolo11.postprocess.decode`` of the raw maps; NMS stays outside the graph
(run ``yolo11.postprocess.non_max_suppression`` or the runtime's own on it). BatchNorms are folded first.

The legacy TorchScript-based exporter (``dynamo=False``) is used: it handles this graph and a dynamic batch axis
in torch 2.14 without extra dependencies.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from yolo11.postprocess import decode
from yolo11.weights import load_weights

OPSET = 17


class DecodedDetector(nn.Module):
    """A model whose output is ``decode`` of the raw maps: ``(B, 3, H, W)`` -> ``(B, 4 + nc, A)``."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.strides = tuple(model.strides)
        self.reg_max = model.reg_max

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return decode(self.model(images), self.strides, self.reg_max)


def export_onnx(model: nn.Module, output: Path, imgsz: int = 640, opset: int = OPSET,
                dynamic_batch: bool = True) -> Path:
    """Write ``output`` (.onnx) for square ``imgsz`` inputs (a multiple of 32); returns the path."""
    if imgsz % 32:
        raise ValueError(f"--imgsz must be a multiple of 32, got {imgsz}")
    wrapped = DecodedDetector(model.fuse() if hasattr(model, "fuse") else model).eval()
    example = torch.zeros(1, 3, imgsz, imgsz)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    dynamic_axes = {"images": {0: "batch"}, "output": {0: "batch"}} if dynamic_batch else None
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="You are using the legacy TorchScript-based ONNX export")
        torch.onnx.export(wrapped, (example,), str(output), input_names=["images"], output_names=["output"],
                          opset_version=opset, dynamic_axes=dynamic_axes, dynamo=False)
    return output


def check_onnx(model: nn.Module, path: Path, imgsz: int, batch: int = 2, seed: int = 0) -> tuple[float, float]:
    """Largest absolute onnxruntime-vs-PyTorch differences on a random batch: (boxes in pixels, class scores).

    Boxes are pixel coordinates up to ``imgsz``: float32 rounding through the network leaves differences of a few
    1e-4 pixels at 320-640 px, about 1e-6 of the value, so compare them relative to ``imgsz``.
    """
    import onnxruntime

    images = torch.rand(batch, 3, imgsz, imgsz, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        expected = DecodedDetector(model).eval()(images).numpy()
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(["output"], {"images": images.numpy()})
    difference = np.abs(got - expected)
    return float(difference[:, :4].max()), float(difference[:, 4:].max())


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("weights", type=Path, help="our .safetensors file or folder, or an Ultralytics .pt")
    parser.add_argument("--output", type=Path, default=None, help="ONNX file (default: the weights name + .onnx)")
    parser.add_argument("--imgsz", type=int, default=640, help="square input size in pixels, multiple of 32")
    parser.add_argument("--opset", type=int, default=OPSET, help="ONNX opset (>= 17)")
    parser.add_argument("--static-batch", action="store_true", help="fix the batch axis to 1")
    parser.add_argument("--check", action="store_true", help="compare onnxruntime with PyTorch after export")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.opset < OPSET:
        raise SystemExit(f"error: --opset must be >= {OPSET}, got {args.opset}")
    model = load_weights(args.weights).eval()
    output = args.output or args.weights.with_suffix(".onnx")
    path = export_onnx(model, output, args.imgsz, args.opset, dynamic_batch=not args.static_batch)
    anchors = sum((args.imgsz // s) ** 2 for s in model.strides)
    print(f"{args.weights} -> {path}: images (B, 3, {args.imgsz}, {args.imgsz}) -> output "
          f"(B, {4 + model.num_classes}, {anchors})")
    if args.check:
        boxes, scores = check_onnx(model, path, args.imgsz)
        print(f"onnxruntime vs PyTorch: max |difference| boxes {boxes:.2e} px, scores {scores:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
