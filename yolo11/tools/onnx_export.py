"""The ONNX graphs behind ``yolo11-export`` (its command line, and the graphs' contract: inputs, ``output0``, the
``--nms`` layout and the metadata keys, are documented in ``yolo11/tools/export.py``): the decoded model, the NMS
graph and the metadata, kept apart so that ``yolo11-export --help`` loads no torch or onnx."""

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
from yolo11.postprocess import decode, end2end_topk

OPSET = 17


class DecodedDetector(nn.Module):
    """A model whose output is ``decode`` of the raw maps: ``(B, 3, H, W)`` -> ``(B, 4 + nc, A)``; a YOLO26 model's
    one-to-many maps (Ultralytics' export with ``nms`` unset or true)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.strides = tuple(model.strides)
        self.reg_max = model.reg_max

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        maps = self.model(images)
        if hasattr(maps, "one2many"):  # YOLO26's End2EndMaps
            maps = maps.one2many
        return decode(maps, self.strides, self.reg_max)


class End2EndDetector(nn.Module):
    """A YOLO26 model's NMS-free output (Ultralytics' export with ``nms=False``): ``(B, 3, H, W)`` ->
    ``(B, k, 6)`` rows ``[x1, y1, x2, y2, score, class]`` in input pixels, k = min(``max_det``, anchors), by
    decreasing score and unfiltered (``end2end_topk`` of the one-to-one maps)."""

    def __init__(self, model: nn.Module, max_det: int = 300):
        super().__init__()
        if not getattr(model, "end2end", False):
            raise ValueError(f"{model.config['name']} has no one-to-one head to export end to end")
        self.model, self.max_det = model, max_det
        self.strides, self.reg_max = tuple(model.strides), model.reg_max

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return end2end_topk(self.model(images).one2one, self.strides, self.reg_max, self.max_det)


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
                  opset: int, end2end: bool = False) -> dict[str, str]:
    """Ultralytics' metadata keys, each value as Ultralytics writes it (``str`` of the Python value, read back
    with ``ast.literal_eval``); ``args`` holds the export settings its runtime looks up (``dynamic``, ``nms``);
    ``end2end``: the graph's output is the one-to-one top-k (Ultralytics' runtime then runs no NMS)."""
    config = getattr(model, "config", {})
    names = getattr(model, "names", None) or [str(k) for k in range(model.num_classes)]
    try:
        version = importlib.metadata.version("yolo11-accelerate")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return {
        "description": f"{config.get('name', 'YOLO11')} object detector exported by yolo11-accelerate"
                       f"{' (one-to-one head, NMS-free)' if end2end else ''}",
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
        "end2end": str(end2end),
    }


def _dynamic_axes(outputs: list[str]) -> dict[str, dict[int, str]]:
    """Ultralytics' ``dynamic=True`` axes: batch, height and width in, batch and anchors out."""
    axes = {"images": {0: "batch", 2: "height", 3: "width"}}
    if outputs == ["output0"]:
        return axes | {"output0": {0: "batch", 2: "anchors"}}
    if outputs == ["end2end"]:  # top-k rows: their number is the traced min(max_det, anchors)
        return axes | {"output0": {0: "batch"}}
    return axes | {"boxes": {0: "batch", 1: "anchors"}, "scores": {0: "batch", 2: "anchors"},
                   "selected": {0: "detections"}}


def export_onnx(model: nn.Module, output: Path, imgsz: int = 640, opset: int = OPSET, *, batch: int = 1,
                dynamic: bool = False, half: bool = False, nms: tuple[float, float, int] | None = None,
                end2end: bool = False, max_det: int = 300) -> Path:
    """Write ``output`` (.onnx) for square ``imgsz`` inputs (a multiple of 32), with ``onnx_metadata``; returns
    the path.

    Static ``(batch, 3, imgsz, imgsz)`` input unless ``dynamic``; ``half`` stores float16 weights with float32
    inputs and outputs; ``nms`` = (conf, iou, max_det) ends the graph in ONNX NonMaxSuppression (see the module
    docstring); ``end2end`` (YOLO26 only) outputs the one-to-one head's top ``max_det`` rows instead
    (``End2EndDetector``, Ultralytics' ``nms=False`` export).
    """
    if imgsz % MAX_STRIDE:
        raise ValueError(f"--imgsz must be a multiple of {MAX_STRIDE}, got {imgsz}")
    if batch < 1:
        raise ValueError(f"--batch must be at least 1, got {batch}")
    if end2end and nms is not None:
        raise ValueError("an end-to-end graph has no NMS: pass end2end or nms, not both")
    metadata = onnx_metadata(model, imgsz, batch, dynamic, half, nms is not None, opset, end2end=end2end)
    fused = model.fuse() if hasattr(model, "fuse") else model
    if end2end:
        wrapped, outputs = End2EndDetector(fused, max_det).eval(), ["output0"]
    elif nms is None:
        wrapped, outputs = DecodedDetector(fused).eval(), ["output0"]
    else:
        wrapped, outputs = NmsDetector(fused, *nms).eval(), ["boxes", "scores", "selected"]
    example = torch.zeros(batch, 3, imgsz, imgsz)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    dynamic_axes = _dynamic_axes(["end2end"] if end2end else outputs) if dynamic else \
        {"selected": {0: "detections"}} if nms else None
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="You are using the legacy TorchScript-based ONNX export")
        # NMS settings and (static exports) anchor grids are constants of the graph by design
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        torch.onnx.export(wrapped, (example,), str(output), input_names=["images"], output_names=outputs,
                          opset_version=opset, dynamic_axes=dynamic_axes, dynamo=False)
    graph = onnx.load(str(output))
    if nms is None and not end2end:  # the class split is traced from a shape: say 4 + nc, as Ultralytics' (1, 84, 8400)
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


def check_onnx(model: nn.Module, path: Path, imgsz: int, batch: int = 2, seed: int = 0, *, end2end: bool = False,
               max_det: int = 300) -> tuple[float, float]:
    """Largest absolute onnxruntime-vs-PyTorch differences on a random batch: (boxes in pixels, class scores; with
    ``end2end`` scores and class ids of the top-k rows).

    Boxes are pixel coordinates up to ``imgsz``: float32 rounding through the network leaves differences of a few
    1e-4 pixels at 320-640 px, about 1e-6 of the value, so compare them relative to ``imgsz``.
    """
    import onnxruntime

    images = torch.rand(batch, 3, imgsz, imgsz, generator=torch.Generator().manual_seed(seed))
    wrapped = End2EndDetector(model, max_det) if end2end else DecodedDetector(model)
    with torch.no_grad():
        expected = wrapped.eval()(images).numpy()
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(["output0"], {"images": images.numpy()})
    if end2end:
        return _row_differences(got, expected)
    difference = np.abs(got - expected)
    return float(difference[:, :4].max()), float(difference[:, 4:].max())


def _row_differences(got: np.ndarray, expected: np.ndarray, tie: float = 1e-5) -> tuple[float, float]:
    """Top-k rows ``(B, k, 6)`` compared as sets: rounding may swap rows whose scores differ by less than ``tie``
    (or, at the k-th score, swap one in for another), so each row is matched to the expected row of its class
    with the nearest box among those of a score within ``tie``; returns the largest (box, score) differences."""
    boxes = scores = 0.0
    for rows, reference in zip(got, expected, strict=True):
        scores = max(scores, float(np.abs(rows[:, 4] - reference[:, 4]).max()))  # both by decreasing score
        cutoff = reference[-1, 4] + tie
        for row in rows[rows[:, 4] > cutoff]:
            near = reference[(reference[:, 5] == row[5]) & (np.abs(reference[:, 4] - row[4]) <= tie)]
            box = float(np.abs(near[:, :4] - row[:4]).max(axis=1).min()) if len(near) else float("inf")
            boxes = max(boxes, box)
    return boxes, scores
