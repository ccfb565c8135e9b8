"""Our weight format: safetensors tensors plus the ``create_model`` config (with the class names) as JSON.

- ``save_pretrained(model, directory)`` -> ``directory/model.safetensors`` + ``config.json`` + ``README.md``
  (a Hub model card: metrics, dataset, classes, training config, usage);
- ``save_weights(model, file)`` -> one ``.safetensors`` file, the config in its metadata; ``half=True`` stores the
  float32 tensors as float16, as a run's ``weights/last.safetensors`` and ``best.safetensors`` are (half the size,
  as Ultralytics' ``.pt``; the predictions move by float16's rounding: ``weights_snapshot``);
- ``load_pretrained`` / ``load_weights`` rebuild the model with ``create_model(**config)`` and load strictly
  (float16 tensors widened to the float32 model's, exactly);
  ``load_weights`` takes any reference ``yolo11.weights.resolve_weights`` understands (local, Hub, official name).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from yolo11.gate import FileRefusedError, check_model_config, read_json, read_safetensors, read_safetensors_header
from yolo11.models.blocks import Conv
from yolo11.models.detector import YOLO11Detector, create_model
from yolo11.output_errors import replaced, write_file, writing
from yolo11.weights.model_card import render_model_card
from yolo11.weights.resolve import resolve_weights
from yolo11.weights.torch_zip import is_zip

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
CARD_NAME = "README.md"


def _check_not_fused(model: YOLO11Detector) -> None:
    if any(isinstance(m, Conv) and not isinstance(m.bn, nn.BatchNorm2d) for m in model.modules()):
        raise ValueError("cannot save a fused model (its BatchNorms are folded away); save before fuse()")


def host_copies(tensors: dict) -> dict:
    """``tensors`` contiguous on the CPU, as ``.contiguous().cpu()`` each would give, with those on an accelerator
    brought over in one copy per (device, dtype) rather than one blocking copy each: yolo11n's ~500 state
    tensors took ~30 ms that way on a GPU, per file and per epoch. Names that alias one tensor keep sharing it."""
    out: dict = {}
    groups: dict[tuple, list[tuple[str, torch.Tensor]]] = {}
    for name, tensor in tensors.items():
        tensor = tensor.detach()
        if tensor.device.type == "cpu":
            out[name] = tensor.contiguous()
        else:
            groups.setdefault((tensor.device, tensor.dtype), []).append((name, tensor))
    for members in groups.values():
        unique: dict[tuple, torch.Tensor] = {}  # one copy per aliased tensor
        for _, tensor in members:
            unique.setdefault((tensor.data_ptr(), tensor.shape, tensor.stride()), tensor)
        host = torch.cat([t.reshape(-1) for t in unique.values()]).cpu()
        pieces = host.split([t.numel() for t in unique.values()])
        copies = {key: piece.view(t.shape).clone() for (key, t), piece in zip(unique.items(), pieces, strict=True)}
        for name, tensor in members:
            out[name] = copies[(tensor.data_ptr(), tensor.shape, tensor.stride())]
    return {name: out[name] for name in tensors}  # the caller's order


def _build(config: dict, weights: Path) -> YOLO11Detector:
    """The model ``config`` (checked by the gate) describes, with the tensors of ``weights`` after the gate has
    compared them with the model's (names, shapes, dtypes) and found them finite."""
    model = create_model(**config)
    tensors, _ = read_safetensors(weights, expected=model.state_dict(), widen=True)
    model.load_state_dict(tensors, strict=True)
    return model


def non_finite_flag(tensors: list[torch.Tensor]) -> torch.Tensor:
    """A 0-dim float tensor on the tensors' device, 1.0 when any value is nan or inf; no host sync (one norm per
    tensor, fused: a per-tensor ``isfinite`` costs a kernel launch, or a thread-pool round, each)."""
    if not tensors:
        return torch.zeros(())
    return (~torch.isfinite(torch.stack(torch._foreach_norm(tensors)))).any().float()


def _segment_peaks(values: np.ndarray, sizes: list[int]) -> np.ndarray:
    """The largest magnitude of each of the consecutive segments of ``sizes`` elements of the flat ``values`` (nan
    or inf where one holds it; 0 when empty), in one pass: per-tensor reductions cost ~500 calls per file."""
    sizes_array = np.array(sizes, dtype=np.int64)
    peaks = np.zeros(len(sizes))
    if sizes_array.sum() == 0:
        return peaks
    starts = np.concatenate(([0], np.cumsum(sizes_array)[:-1]))
    filled = sizes_array > 0  # an empty tensor has no segment: the next one starts where it would have
    peaks[filled] = np.maximum.reduceat(np.abs(values[:sizes_array.sum()]), starts[filled])  # nan propagates
    return peaks


def _metadata(model: YOLO11Detector) -> dict[str, str]:
    """safetensors metadata: the config (how we rebuild), and the class names on their own for other readers."""
    metadata = {"format": "pt", "config": json.dumps(model.config)}
    if model.names is not None:
        metadata["names"] = json.dumps(model.names)
    return metadata


def hub_config(model: YOLO11Detector) -> dict:
    """``config.json``: ``model.config`` (``create_model`` arguments, class names) plus what a reader of the Hub
    folder needs without our code: the family as ``model_type`` (``yolo11``, ``yolo26``), task, strides, box bins
    (``reg_max``) and the head (``Detect``; YOLO26: ``End2EndDetect``, one-to-many and one-to-one branches)."""
    return {**model.config, "model_type": model.config["name"][:-1], "task": "detect",
            "strides": list(model.strides), "reg_max": model.reg_max, "head": type(model.head).__name__}


def save_pretrained(model: YOLO11Detector, directory: str | Path, *, metrics: dict | None = None,
                    dataset: str | None = None, train_config: dict | None = None, repo_id: str | None = None) -> Path:
    """Write ``model.safetensors`` (config in its metadata too), ``config.json`` and the ``README.md`` model card
    (``metrics``: validation metrics as ``yolo11-val`` computes them; ``dataset``: the ``--data`` spec;
    ``train_config``: the resolved training config; ``repo_id``: the Hub name used in the card)."""
    directory = Path(directory)
    write_weights(weights_snapshot(model), directory / WEIGHTS_NAME)
    write_file(directory / CONFIG_NAME, json.dumps(hub_config(model), indent=2) + "\n")
    card = render_model_card(model.config, metrics=metrics, dataset=dataset, train_config=train_config,
                             repo_id=repo_id)
    write_file(directory / CARD_NAME, card)
    return directory


def load_pretrained(directory: str | Path, *, backbone: str | None = None) -> YOLO11Detector:
    """The model of a ``save_pretrained`` folder; ``backbone``: a timm name the caller allows even when it is not
    a local one (``check_model_config``)."""
    directory = Path(directory)
    missing = [name for name in (CONFIG_NAME, WEIGHTS_NAME) if not (directory / name).is_file()]
    if missing:
        found = sorted(p.name for p in directory.glob("*.pt")) + sorted(p.name for p in directory.glob("*.safetensors"))
        hint = f"; pass one of its weights files instead: {', '.join(found)}" if found else ""
        raise FileNotFoundError(f"{directory} is not a save_pretrained folder (no {' or '.join(missing)}){hint}")
    config_path = directory / CONFIG_NAME
    config = check_model_config(read_json(config_path), config_path, user_backbone=backbone)
    return _build(config, directory / WEIGHTS_NAME)


def save_weights(model: YOLO11Detector, file: str | Path, half: bool = False) -> Path:
    """Write ``model``'s tensors and config (``half``: float32 tensors as float16); refuses (``ValueError``) weights
    that are not all finite."""
    return write_weights(weights_snapshot(model, half=half), file)


# safetensors' names of the dtypes a model's state holds
SAFETENSORS_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                      torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
                      torch.bool: "BOOL"}


@dataclass
class WeightsSnapshot:
    """A model's state on its way to the CPU, one flat buffer per dtype, and its metadata, not yet checked or
    converted: ``write_weights`` waits for the copy and does both, in whichever thread writes the file."""

    buffers: list[torch.Tensor]  # flat, on the CPU: complete once ``ready`` has passed
    layout: list[tuple[str, int, int, tuple[int, ...]]]  # per tensor, in the state's order: name, buffer, offset, shape
    metadata: dict[str, str]
    half: bool = False
    ready: list = field(default_factory=list)  # CUDA events


def weights_snapshot(model: YOLO11Detector, half: bool = False) -> WeightsSnapshot:
    """``model``'s state as it is now, for ``write_weights`` (in another thread, say, while the model trains on): on
    the calling thread one ``state_dict`` and one copy per dtype (from a GPU into pinned memory, not waited for);
    the wait for it, the finiteness check, the float16 conversion and the file are the writer's, each over whole
    buffers, not ~500 tensors one by one (their small ops waited for the GIL beside a training run's threads).

    ``half``: float32 tensors as float16 (a tensor with a value beyond float16's range stays float32), as
    Ultralytics saves its weights. Measured on YOLO11n fine-tuned one epoch on coco128 (320 px): the raw outputs
    move by at most 0.03 on logits up to 19, and coco128's mAP50-95 from 0.015816 to 0.015814 (mAP50 0.028884 to
    0.028871), for files of 5.3 MB instead of 10.6 MB. Resumable checkpoints stay float32: resume is bitwise."""
    _check_not_fused(model)
    with torch.no_grad():  # the tensors themselves (keep_vars), not a detached view of each: ~500 ops fewer
        state = model.state_dict(keep_vars=True)
        groups: dict[tuple, list[tuple[str, torch.Tensor]]] = {}
        for name, tensor in state.items():
            groups.setdefault((tensor.device, tensor.dtype), []).append((name, tensor))
        flats = {key: torch.cat([tensor.reshape(-1) for _, tensor in members])  # copies: a CPU model trains on
                 for key, members in groups.items()}
    buffers, layout, ready = [], [], []
    for index, ((device, dtype), members) in enumerate(groups.items()):
        flat = flats[(device, dtype)]
        if device.type == "cuda":  # a blocking copy waited for the epoch's queued kernels: ~31 ms an epoch
            host = torch.empty(flat.shape, dtype=dtype, pin_memory=True)
            host.copy_(flat, non_blocking=True)  # the GPU buffer may be freed now: its reuse is stream-ordered
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(device))
            ready.append(event)
            flat = host
        elif device.type != "cpu":
            flat = flat.cpu()
        buffers.append(flat)
        offset = 0
        for name, tensor in members:
            layout.append((name, index, offset, tuple(tensor.shape)))
            offset += tensor.numel()
    order = {name: k for k, name in enumerate(state)}
    layout.sort(key=lambda item: order[item[0]])
    return WeightsSnapshot(buffers, layout, _metadata(model), half, ready)


def write_weights(snapshot: WeightsSnapshot, file: str | Path) -> Path:
    """Write ``weights_snapshot``'s tensors and metadata as a safetensors file, through a temporary name: a write
    that fails (a full disk: its ``OSError``) leaves the previous file whole; ``ValueError`` naming ``file``, and
    nothing written, when a tensor is not finite. The file is laid out from the snapshot's buffers (safetensors'
    format: an 8-byte header length, the JSON header, the tensors' bytes in its order), with no per-tensor copy."""
    file = Path(file)
    for event in snapshot.ready:
        event.synchronize()
    pieces = _file_pieces(snapshot, file)
    header: dict = {"__metadata__": snapshot.metadata} if snapshot.metadata else {}
    offset = 0
    for name, dtype, shape, data in pieces:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the format aligns the data to 8 bytes
    file.parent.mkdir(parents=True, exist_ok=True)
    with replaced(file) as tmp, writing(file):
        write_safetensors_file(tmp, text, [data for *_, data in pieces])
        honour_umask(tmp)
    return file


def write_safetensors_file(path: Path, header: bytes, data: list[memoryview]) -> None:
    """A safetensors file of an (8-byte aligned) JSON ``header`` and the tensors' bytes in its order."""
    with open(path, "wb") as fh:
        fh.write(len(header).to_bytes(8, "little"))
        fh.write(header)
        for piece in data:
            fh.write(piece)


def _file_pieces(snapshot: WeightsSnapshot, file: Path) -> list[tuple[str, str, tuple[int, ...], memoryview]]:
    """``(name, safetensors dtype, shape, bytes)`` per tensor, in the snapshot's order: views of its buffers (float32
    ones halved once, where ``half``), each tensor float16 where its values fit; ``ValueError`` naming ``file`` when
    one is not finite."""
    by_buffer: dict[int, list[tuple[str, int, tuple[int, ...]]]] = {}
    for name, index, offset, shape in snapshot.layout:
        by_buffer.setdefault(index, []).append((name, offset, shape))
    sizes = {name: math.prod(shape) for name, _, _, shape in snapshot.layout}
    peaks: dict[str, float] = {}
    halves: dict[int, torch.Tensor] = {}
    for index, members in by_buffer.items():
        buffer = snapshot.buffers[index]
        if buffer.is_floating_point():
            values = buffer.numpy() if buffer.dtype in (torch.float32, torch.float64) else buffer.float().numpy()
            members = sorted(members, key=lambda member: member[1])
            peaks |= dict(zip((m[0] for m in members), _segment_peaks(values, [sizes[m[0]] for m in members]).tolist(),
                              strict=True))
            if snapshot.half and buffer.dtype == torch.float32:
                halves[index] = buffer.half()  # values beyond float16's range become inf: those tensors stay float32
    bad = [name for name, peak in peaks.items() if not math.isfinite(peak)]
    if bad:
        raise ValueError(f"not writing {file}: {len(bad)} tensors hold non-finite values (e.g. {bad[0]})")
    limit = torch.finfo(torch.float16).max
    raw: dict[tuple[int, bool], np.ndarray] = {}  # per buffer (halved or not): its own bytes, bfloat16 included
    pieces = []
    for name, index, offset, shape in snapshot.layout:
        halved = index in halves and peaks[name] <= limit
        buffer = halves[index] if halved else snapshot.buffers[index]
        if (index, halved) not in raw:
            raw[index, halved] = buffer.view(torch.uint8).numpy()
        data = raw[index, halved]
        width = buffer.element_size()
        pieces.append((name, SAFETENSORS_DTYPES[buffer.dtype], shape,
                       memoryview(data[offset * width:(offset + sizes[name]) * width])))
    return pieces


def current_umask() -> int:
    """The process's umask, read from Linux's /proc without changing it (``os.umask`` can only set it)."""
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1], 8) for line in fh if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        mask = os.umask(0o022)  # set-and-restore: the only portable read
        os.umask(mask)
        return mask


def honour_umask(*paths: str | Path) -> None:
    """Give files the mode a plain ``open`` would (``0o666`` less the umask: 0644 typically): safetensors writes
    through a private temporary file, which leaves 0600 weights that other users and containers cannot read."""
    mode = 0o666 & ~current_umask()
    for path in paths:
        os.chmod(path, mode)


def load_weights(ref: str | Path, *, backbone: str | None = None) -> YOLO11Detector:
    """Load a ``.safetensors`` file, a ``save_pretrained`` folder or an Ultralytics ``.pt`` checkpoint (through
    the restricted unpickler), local or named as ``resolve_weights`` accepts (``hf://owner/repo/file``,
    ``owner/repo``, ``yolo11n.pt``, ``yolo26n.pt`` ...), YOLO11 or YOLO26. Every file passes the loading gate
    (``yolo11.gate``); ``backbone`` is a timm backbone name the caller allows the file to name even if timm would
    fetch it (``hf-hub:...``)."""
    path = resolve_weights(ref)
    if path.is_dir():
        return load_pretrained(path, backbone=backbone)
    if path.suffix in (".pt", ".pth") or is_zip(path):  # by content too: a renamed torch file is still one
        from yolo11.weights.ultralytics import load_ultralytics

        return load_ultralytics(path)
    if path.suffix.lower() == ".onnx":  # onnxruntime runs it (tools/onnx_model.py); no model is built from one
        raise FileRefusedError(path, "an ONNX export, not weights to build a model from: yolo11 val and yolo11 predict "
                                     "run it; training, export, convert and info need the .safetensors or .pt it "
                                     "was exported from")
    metadata = read_safetensors_header(path).metadata
    if "config" not in metadata:
        raise FileRefusedError(path, "no model config in the safetensors metadata; was it written by save_weights?")
    try:
        config = json.loads(metadata["config"])
    except ValueError:
        raise FileRefusedError(path, "the model config in the safetensors metadata is not JSON") from None
    return _build(check_model_config(config, path, user_backbone=backbone), path)
