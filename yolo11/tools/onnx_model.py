"""An exported ``.onnx`` model run by onnxruntime where ``val`` and ``predict`` run our PyTorch model.

    yolo11 predict best.onnx images/        # as Ultralytics' `yolo predict model=best.onnx`
    yolo11 val best.onnx data=coco8.yaml

``OnnxModel`` is a module without parameters whose ``forward`` takes the tools' uint8 batch ``(B, 3, H, W)`` and
returns the graph's ``output0``: ``decode``'s ``(B, 4 + C, A)`` (the default export, NMS after it as for our
model), or for an end-to-end YOLO26 export (``--nms false``) its top-k rows ``(B, k, 6)``; ``Postprocessor``
takes either. The class names, input size, batch and the graph's kind come from the metadata that
``yolo11-export`` writes (Ultralytics' keys, ``tools/onnx_export.onnx_metadata``), so Ultralytics' own ONNX
exports read the same way. As Ultralytics' runtime, a static graph runs at its exported size, square
(``rect`` off), and its batch: a larger batch is cut, a smaller one padded. Graphs that end in NonMaxSuppression
(``--nms``) are for onnxruntime users and are refused here.

Providers: CUDA when onnxruntime has it and the device asked for is a GPU, else the CPU.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from yolo11.devices import select_device

ONNX_SUFFIX = ".onnx"
_SCALE = re.compile(r"yolo(?:11|26)[nsmlx]", re.IGNORECASE)


def is_onnx(path: str | Path) -> bool:
    """An ONNX file, by its suffix or, renamed, by its first bytes: a protobuf ``ModelProto`` starts with field 1
    (``ir_version``, a small varint) then field 2 or 3 (producer name or version), where a safetensors file starts
    with its header length and a ``{`` at byte 8, and a torch file with ``PK``."""
    path = Path(path)
    if path.suffix.lower() == ONNX_SUFFIX:
        return True
    if not path.is_file():
        return False
    with path.open("rb") as stream:
        head = stream.read(9)
    return len(head) == 9 and head[0] == 0x08 and head[1] < 0x80 and head[2] in (0x12, 0x1A) and head[8:9] != b"{"


@dataclass(frozen=True)
class OnnxMetadata:
    """What an export's metadata says (``None``/empty: not written)."""

    names: list[str]
    imgsz: tuple[int, int] | None  # (height, width) of the exported input
    batch: int | None
    dynamic: bool
    end2end: bool  # output0 is the one-to-one head's top-k rows
    nms: bool  # the graph ends in NonMaxSuppression
    name: str  # yolo11n ... yolo26x, from the description; "onnx" when it names none

    @classmethod
    def from_props(cls, props: dict[str, str]) -> OnnxMetadata:
        def literal(key: str, default: Any = None) -> Any:
            try:
                return ast.literal_eval(props[key]) if key in props else default
            except (ValueError, SyntaxError):
                return default

        names = literal("names", {})
        names = [str(names[k]) for k in sorted(names)] if isinstance(names, dict) else [str(n) for n in names or []]
        imgsz = literal("imgsz")
        imgsz = (int(imgsz), int(imgsz)) if isinstance(imgsz, int) else \
            (int(imgsz[0]), int(imgsz[1])) if isinstance(imgsz, (list, tuple)) and len(imgsz) == 2 else None
        args = literal("args", {})
        args = args if isinstance(args, dict) else {}
        batch = literal("batch")
        scale = _SCALE.search(props.get("description", ""))
        return cls(names=names, imgsz=imgsz, batch=batch if isinstance(batch, int) else None,
                   dynamic=bool(args.get("dynamic", False)), end2end=literal("end2end", False) is True,
                   nms=bool(args.get("nms", False)) and literal("end2end", False) is not True,
                   name=scale.group(0).lower() if scale else "onnx")


def read_metadata(path: str | Path) -> OnnxMetadata:
    """The metadata of the ONNX file ``path`` (its tensors are not read)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return OnnxMetadata.from_props({prop.key: prop.value for prop in model.metadata_props})


def providers_for(device: str | torch.device | None) -> list[str]:
    """onnxruntime's providers for ``device`` (default: a GPU when torch sees one): CUDA first when both sides
    have it, the CPU always last."""
    import onnxruntime

    device = select_device(device)
    available = onnxruntime.get_available_providers()
    cuda = ["CUDAExecutionProvider"] if device.type == "cuda" and "CUDAExecutionProvider" in available else []
    return [*cuda, "CPUExecutionProvider"]


class OnnxModel(nn.Module):
    """An ONNX export behind our model's interface (``names``, ``num_classes``, ``strides``, ``end2end``,
    ``config``, ``fuse``): ``forward`` runs the graph with onnxruntime."""

    exported = True  # the head is the graph's: val and predict ask the model (select_head) rather than --nms

    def __init__(self, path: str | Path, device: str | torch.device | None = None) -> None:
        super().__init__()
        import onnxruntime

        self.path = Path(path)
        self.metadata = read_metadata(self.path)
        self.providers = providers_for(device)
        self.session = onnxruntime.InferenceSession(str(self.path), providers=self.providers)
        inputs, outputs = self.session.get_inputs(), self.session.get_outputs()
        self.input_name, self.output_name = inputs[0].name, outputs[0].name
        shape = inputs[0].shape  # ints for static axes, names for dynamic ones
        self.static_batch = shape[0] if isinstance(shape[0], int) else None
        self.static_size = (shape[2], shape[3]) if all(isinstance(s, int) for s in shape[2:4]) else None
        # rows [x1, y1, x2, y2, score, class] out: YOLO26's one-to-one top-k, or the rows of a graph that ends in NMS
        self.end2end = self.metadata.end2end or self.metadata.nms
        classes = outputs[0].shape[1] - 4 if not self.end2end and isinstance(outputs[0].shape[1], int) \
            else len(self.metadata.names)
        self.num_classes = classes or len(self.metadata.names)
        self.strides, self.reg_max = (8, 16, 32), 1  # a decoded output needs neither; Postprocessor takes them
        self.config = {"name": self.metadata.name, "num_classes": self.num_classes,
                       "names": self.metadata.names or None}

    @property
    def names(self) -> list[str] | None:
        return self.metadata.names or None

    @property
    def imgsz(self) -> int | None:
        """The exported square size (the metadata's, else the static input's)."""
        size = self.metadata.imgsz or self.static_size
        return max(size) if size else None

    def fuse(self) -> OnnxModel:
        return self  # folded at export

    def select_head(self, nms: bool | None) -> bool:
        """Whether detections come from the one-to-one top-k: the graph's choice, made at export. ``nms`` (the
        user's) must not ask for the other one."""
        if self.metadata.nms:  # its rows are NMS's already: nms=false would ask for YOLO26's NMS-free head
            if nms is False:
                raise ValueError(f"{self.path} ends in NMS (exported with --nms): nms=false asks for the NMS-free "
                                 "head; leave nms out, or export the weights again")
            return True
        if nms is not None and nms == self.end2end:
            graph = "end-to-end (exported with --nms false)" if self.end2end else "decoded (NMS runs after it)"
            raise ValueError(f"{self.path} is {graph}: nms={str(nms).lower()} asks for the other head; leave nms "
                             "out, or export the weights again")
        return self.end2end

    def input_settings(self, imgsz: int | None, rect: bool) -> tuple[int, bool, str | None]:
        """The ``imgsz`` and ``rect`` this graph can run (a static graph: its own size, square, as Ultralytics'
        runtime) and a note when they differ from those asked for."""
        if self.static_size is None:
            return imgsz or self.imgsz or 640, rect, None
        size = max(self.static_size)
        note = None
        if imgsz is not None and imgsz != size:
            note = (f"{self.path.name} has a static {size}x{size} input: running at imgsz {size}, not {imgsz} "
                    "(export with --dynamic for other sizes)")
        return size, False, note

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``images`` ``(B, 3, H, W)`` uint8 (or float in [0, 1]) -> ``output0`` as a float32 tensor on their
        device."""
        if self.static_size is not None and tuple(images.shape[2:]) != self.static_size:
            raise ValueError(f"{self.path} takes {self.static_size[0]}x{self.static_size[1]} inputs (a static "
                             f"graph), got {images.shape[2]}x{images.shape[3]}")
        array = images.float().div(255.0) if images.dtype == torch.uint8 else images.float()
        array = array.contiguous().cpu().numpy()
        step = self.static_batch or len(array)
        outputs = []
        for start in range(0, len(array), step):
            chunk = array[start:start + step]
            count = len(chunk)
            if count < step:  # a static batch: pad, and drop the padding's outputs
                chunk = np.concatenate([chunk, np.zeros((step - count, *chunk.shape[1:]), chunk.dtype)])
            (output,) = self.session.run([self.output_name], {self.input_name: chunk})
            outputs.append(output[:count])
        return torch.from_numpy(np.concatenate(outputs)).float().to(images.device)
