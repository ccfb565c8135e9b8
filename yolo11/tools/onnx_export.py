"""The ONNX graphs of ``yolo11-export`` (the command line: ``yolo11/tools/export.py``): decoded YOLO11 outputs.

    yolo11-export weights/best.safetensors --imgsz 640 --output yolo11n.onnx
    yolo11-export yolo11n.pt --imgsz 640 --check
    yolo11-export weights/best.safetensors --format pt --output best.pt   # for Ultralytics' YOLO(...)

The ONNX graph takes ``images`` float32 ``(batch, 3, imgsz, imgsz)`` in [0, 1] and returns ``output0``
``(batch, 4 + nc, A)``: xywh in input pixels and sigmoid class scores per anchor, A = sum of (imgsz / s)^2 over
strides 8, 16, 32 (8400 at 640), i.e. ``yolo11.postprocess.decode`` of the raw maps. BatchNorms are folded first.
As Ultralytics' export, every dimension is static by default (``--batch``, default 1: ``(1, 84, 8400)`` for COCO
at 640), which Ultralytics' runtime (``YOLO("model.onnx")``) needs to predict and validate with it; ``--dynamic``
makes batch, height and width dynamic (``output0`` ``(batch, 4 + nc, anchors)``), as Ultralytics' ``dynamic=True``.
``--half`` stores the weights in float16 (inputs and outputs stay float32, as Ultralytics' CPU ``half=True``).

With ``--nms`` the graph ends in ONNX ``NonMaxSuppression`` instead and returns ``boxes`` ``(B, A, 4)`` xyxy input
pixels, ``scores`` ``(B, nc, A)`` and ``selected`` ``(K, 3)`` int64 rows ``[image, class, anchor]``: per image and
class, scores above ``--conf`` and IoU above ``--iou`` suppressed, as ``non_max_suppression(multi_label=True)``;
but ``--max-det`` caps each class (the operator's ``max_output_boxes_per_class``), not the image total. This layout
is for onnxruntime users; Ultralytics' runtime reads only the default graph.

The ONNX model's metadata (``metadata_props``) has Ultralytics' keys and formats, so tools that read Ultralytics
exports read ours (Ultralytics' ``AutoBackend`` reads ``stride``, ``batch``, ``imgsz``, ``names``, ``task``,
``args``, ``channels``, ``end2end``): ``names`` (``{0: 'person', ...}``), ``stride`` (32), ``imgsz``
(``[640, 640]``), ``task`` (``detect``), ``head`` (``Detect``), ``batch``, ``channels`` (3), ``end2end`` (False),
``args`` (``{'batch': 1, 'half': False, 'dynamic': False, 'nms': False, 'opset': 17}``), ``author``, ``version``,
``license``, ``date`` and ``description``.

``--format pt`` writes an Ultralytics checkpoint (``yolo11.weights.ultralytics_writer``); it needs the ultralytics
package importable, see there.

The legacy TorchScript-based exporter (``dynamo=False``) is used: it handles this graph and dynamic axes in
torch 2.14 without extra dependencies.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn
from torchvision.ops import nms

from yolo11.geometry import MAX_STRIDE, xywh_to_xyxy
from yolo11.postprocess import decode

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


class OnnxNonMaxSuppression(torch.autograd.Function):
    """ONNX ``NonMaxSuppression`` in the exported graph; in PyTorch the same selection with torchvision's NMS.

    ``boxes`` (B, A, 4) xyxy, ``scores`` (B, C, A) -> ``(K, 3)`` int64 rows ``[image, class, anchor]``, per image
    and class by decreasing score (the operator's output order).
    """

    @staticmethod
    def forward(ctx, boxes, scores, max_per_class, iou, conf):
        rows = []
        for image in range(boxes.shape[0]):
            for cls in range(scores.shape[1]):
                candidates = torch.nonzero(scores[image, cls] > conf).flatten()
                keep = nms(boxes[image, candidates], scores[image, cls, candidates], float(iou))
                anchors = candidates[keep[: int(max_per_class)]]
                rows.append(torch.stack((torch.full_like(anchors, image), torch.full_like(anchors, cls), anchors), 1))
        return torch.cat(rows)

    @staticmethod
    def symbolic(g, boxes, scores, max_per_class, iou, conf):
        return g.op("NonMaxSuppression", boxes, scores, max_per_class, iou, conf, center_point_box_i=0)


class NmsDetector(nn.Module):
    """``(B, 3, H, W)`` -> ``boxes`` (B, A, 4) xyxy px, ``scores`` (B, nc, A), ``selected`` (K, 3)."""

    def __init__(self, model: nn.Module, conf: float, iou: float, max_det: int):
        super().__init__()
        self.decoded = DecodedDetector(model)
        self.register_buffer("max_per_class", torch.tensor([max_det]), persistent=False)
        self.register_buffer("iou", torch.tensor([iou]), persistent=False)
        self.register_buffer("conf", torch.tensor([conf]), persistent=False)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        decoded = self.decoded(images)
        boxes = xywh_to_xyxy(decoded[:, :4].transpose(1, 2))
        scores = decoded[:, 4:]
        selected = OnnxNonMaxSuppression.apply(boxes, scores, self.max_per_class, self.iou, self.conf)
        return boxes, scores, selected


def onnx_metadata(model: nn.Module, imgsz: int, batch: int, dynamic: bool, half: bool, nms: bool,
                  opset: int) -> dict[str, str]:
    """Ultralytics' metadata keys, each value as Ultralytics writes it (``str`` of the Python value, read back
    with ``ast.literal_eval``); ``args`` holds the export settings its runtime looks up (``dynamic``, ``nms``)."""
    config = getattr(model, "config", {})
    names = getattr(model, "names", None) or [str(k) for k in range(model.num_classes)]
    try:
        version = importlib.metadata.version("yolo11-accelerate")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return {
        "description": f"{config.get('name', 'YOLO11')} object detector exported by yolo11-accelerate",
        "author": "yolo11-accelerate",
        "date": datetime.datetime.now().astimezone().isoformat(),
        "version": version,
        "license": "Apache-2.0",
        "stride": str(max(model.strides)),
        "task": "detect",
        "head": "Detect",
        "batch": str(batch),
        "imgsz": str([imgsz, imgsz]),
        "names": str(dict(enumerate(names))),
        "args": str({"batch": batch, "half": half, "dynamic": dynamic, "nms": nms, "opset": opset}),
        "channels": "3",
        "end2end": "False",
    }


def _dynamic_axes(outputs: list[str]) -> dict[str, dict[int, str]]:
    """Ultralytics' ``dynamic=True`` axes: batch, height and width in, batch and anchors out."""
    axes = {"images": {0: "batch", 2: "height", 3: "width"}}
    if outputs == ["output0"]:
        return axes | {"output0": {0: "batch", 2: "anchors"}}
    return axes | {"boxes": {0: "batch", 1: "anchors"}, "scores": {0: "batch", 2: "anchors"},
                   "selected": {0: "detections"}}


def export_onnx(model: nn.Module, output: Path, imgsz: int = 640, opset: int = OPSET, *, batch: int = 1,
                dynamic: bool = False, half: bool = False, nms: tuple[float, float, int] | None = None) -> Path:
    """Write ``output`` (.onnx) for square ``imgsz`` inputs (a multiple of 32), with ``onnx_metadata``; returns
    the path.

    Static ``(batch, 3, imgsz, imgsz)`` input unless ``dynamic``; ``half`` stores float16 weights with float32
    inputs and outputs; ``nms`` = (conf, iou, max_det) ends the graph in ONNX NonMaxSuppression (see the module
    docstring).
    """
    if imgsz % MAX_STRIDE:
        raise ValueError(f"--imgsz must be a multiple of {MAX_STRIDE}, got {imgsz}")
    if batch < 1:
        raise ValueError(f"--batch must be at least 1, got {batch}")
    metadata = onnx_metadata(model, imgsz, batch, dynamic, half, nms is not None, opset)
    fused = model.fuse() if hasattr(model, "fuse") else model
    wrapped = (DecodedDetector(fused) if nms is None else NmsDetector(fused, *nms)).eval()
    outputs = ["output0"] if nms is None else ["boxes", "scores", "selected"]
    example = torch.zeros(batch, 3, imgsz, imgsz)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    dynamic_axes = _dynamic_axes(outputs) if dynamic else {"selected": {0: "detections"}} if nms else None
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="You are using the legacy TorchScript-based ONNX export")
        # NMS settings and (static exports) anchor grids are constants of the graph by design
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        torch.onnx.export(wrapped, (example,), str(output), input_names=["images"], output_names=outputs,
                          opset_version=opset, dynamic_axes=dynamic_axes, dynamo=False)
    graph = onnx.load(str(output))
    if nms is None:  # the class split is traced from a shape: say 4 + nc, as Ultralytics' (1, 84, 8400)
        graph.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 4 + model.num_classes
    if half:
        graph = _to_float16(graph)
    onnx.helper.set_model_props(graph, metadata)
    onnx.save(graph, str(output))
    return output


def _to_float16(graph: onnx.ModelProto) -> onnx.ModelProto:
    """float16 weights and arithmetic, float32 inputs and outputs (Ultralytics' CPU ``half=True`` conversion)."""
    try:
        from onnxruntime.transformers import float16
    except ImportError as error:
        raise SystemExit("error: --half needs onnxruntime (pip install onnxruntime)") from error
    return float16.convert_float_to_float16(graph, keep_io_types=True)


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
    (got,) = session.run(["output0"], {"images": images.numpy()})
    difference = np.abs(got - expected)
    return float(difference[:, :4].max()), float(difference[:, 4:].max())
