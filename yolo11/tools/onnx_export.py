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

OPSET = 17  # the default
MIN_OPSET = 13  # torch's exporter writes aten::unflatten (C2PSA's attention) from opset 13


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


class NmsDetector(nn.Module):
    """Ultralytics' ``nms=True`` export (8.4.190's ``NMSModel``): ``(B, 3, H, W)`` -> ``output0`` ``(B, max_det, 6)``
    rows ``[x1, y1, x2, y2, score, class]`` in input pixels, per image: each anchor's best class above ``conf``,
    class-wise NMS (torchvision's ``nms``, ONNX NonMaxSuppression in the graph) on boxes scaled as Ultralytics scales
    them, the first ``max_det`` kept by decreasing score, zero rows after them. Its metadata's ``args.nms`` tells
    Ultralytics' runtime (and ours) that the rows need no NMS of their own."""

    def __init__(self, model: nn.Module, conf: float, iou: float, max_det: int, batch: int = 1, dynamic: bool = False):
        super().__init__()
        self.decoded = DecodedDetector(model)
        self.conf, self.iou, self.max_det = conf, iou, max_det
        self.classes = model.num_classes
        self.batch, self.dynamic = batch, dynamic

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        pred = self.decoded(images).transpose(1, 2)  # (B, A, 4 + nc)
        count = pred.shape[0]
        if self.dynamic and self.batch > 1:  # the loop below is unrolled for --batch images: pad up to it
            missing = (self.batch - torch._shape_as_tensor(pred)[0]).clamp(min=0)
            pred = torch.cat((pred, pred.new_zeros(missing, *pred.shape[1:])))
        boxes, scores = xywh_to_xyxy(pred[..., :4]), pred[..., 4:]
        scores, classes = scores.max(dim=-1)
        max_det = min(self.max_det, pred.shape[1])
        out = pred.new_zeros(pred.shape[0], max_det, 6)
        scale = 1 / max(self.classes, 1)  # Ultralytics' box scaling: small class offsets (int8-safe)
        side = torch._shape_as_tensor(images)[2:].max().to(pred.dtype)
        for i in range(self.batch if self.dynamic and self.batch > 1 else count):
            mask = scores[i] > self.conf
            box, score, cls = boxes[i][mask], scores[i][mask], classes[i][mask]
            offset = cls.view(-1, 1).expand(cls.shape[0], 4) * scale
            keep = nms(scale * (box / side) + offset, score, self.iou)[:max_det]
            rows = torch.cat((box[keep], score[keep].view(-1, 1), cls[keep].view(-1, 1).to(out.dtype)), dim=-1)
            out[i] = nn.functional.pad(rows.reshape(-1), (0, (max_det - rows.shape[0]) * 6)).reshape(max_det, 6)
        return out[:count]


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
    # rows (the end-to-end top-k, or the NMS graph's): their number is the traced min(max_det, anchors)
    return axes | {"output0": {0: "batch"}}


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
        wrapped, outputs = NmsDetector(fused, *nms, batch=batch, dynamic=dynamic).eval(), ["output0"]
    example = torch.zeros(batch, 3, imgsz, imgsz)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    dynamic_axes = _dynamic_axes(["end2end"] if end2end or nms else outputs) if dynamic else None
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
               max_det: int = 300, nms: tuple[float, float, int] | None = None,
               dynamic: bool = False) -> tuple[float, float]:
    """Largest absolute onnxruntime-vs-PyTorch differences on a random batch: (boxes in pixels, class scores; with
    ``end2end`` or ``nms`` (the ``--nms`` graph's ``(conf, iou, max_det)``, against ``NmsDetector`` run by PyTorch)
    those of the rows, matched as ``_row_differences`` matches them).

    Boxes are pixel coordinates up to ``imgsz``: float32 rounding through the network leaves differences of a few
    1e-4 pixels at 320-640 px, about 1e-6 of the value, so compare them relative to ``imgsz``.
    """
    import onnxruntime

    images = torch.rand(batch, 3, imgsz, imgsz, generator=torch.Generator().manual_seed(seed))
    if nms is not None:
        wrapped = NmsDetector(model, *nms, batch=batch, dynamic=dynamic)
    else:
        wrapped = End2EndDetector(model, max_det) if end2end else DecodedDetector(model)
    with torch.no_grad():
        expected = wrapped.eval()(images).numpy()
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(["output0"], {"images": images.numpy()})
    if end2end or nms is not None:
        if got.shape != expected.shape or (got[..., 4] > 0).sum() != (expected[..., 4] > 0).sum():
            return float("inf"), float("inf")  # not the same rows
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
