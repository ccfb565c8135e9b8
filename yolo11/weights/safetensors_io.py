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
from safetensors.torch import save_file
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
    views, _ = _gathered(tensors, pinned=False)
    return _owned(views)


def _gathered(tensors: dict, pinned: bool) -> tuple[dict, list]:
    """``tensors`` on the CPU as views into one host buffer per (device, dtype) of those on an accelerator (CPU
    tensors as they are, contiguous), and the CUDA events after which the buffers hold them: ``pinned`` copies a
    CUDA group into page-locked memory without waiting (the caller synchronizes the events before reading), else
    every copy is done on return. The copy is taken in stream order: later in-place updates do not reach it."""
    out: dict = {}
    groups: dict[tuple, list[tuple[str, torch.Tensor]]] = {}
    for name, tensor in tensors.items():
        tensor = tensor.detach()
        if tensor.device.type == "cpu":
            out[name] = tensor.contiguous()
        else:
            groups.setdefault((tensor.device, tensor.dtype), []).append((name, tensor))
    events = []
    for (device, dtype), members in groups.items():
        unique: dict[tuple, torch.Tensor] = {}  # one copy per aliased tensor
        for _, tensor in members:
            unique.setdefault((tensor.data_ptr(), tensor.shape, tensor.stride()), tensor)
        flat = torch.cat([t.reshape(-1) for t in unique.values()])
        if pinned and device.type == "cuda":
            host = torch.empty(flat.shape, dtype=dtype, pin_memory=True)
            host.copy_(flat, non_blocking=True)  # the GPU buffer may be freed now: its reuse is stream-ordered
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(device))
            events.append(event)
        else:
            host = flat.cpu()
        pieces = host.split([t.numel() for t in unique.values()])
        views = {key: piece.view(t.shape) for (key, t), piece in zip(unique.items(), pieces, strict=True)}
        for name, tensor in members:
            out[name] = views[(tensor.data_ptr(), tensor.shape, tensor.stride())]
    return {name: out[name] for name in tensors}, events  # the caller's order


def _owned(tensors: dict) -> dict:
    """Each CPU tensor in a storage of its own (safetensors refuses tensors that share one, as views of one copy
    or of a CPU model do), names that alias one tensor still sharing its copy."""
    copies: dict[tuple, torch.Tensor] = {}
    return {name: copies.setdefault((t.data_ptr(), t.shape, t.stride()), t.clone()) for name, t in tensors.items()}


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


def _checked(tensors: dict, file: Path, half: bool = False) -> dict:
    """``tensors`` (on the CPU) as written: ``ValueError`` naming ``file`` when one is not finite; ``half``: float32
    tensors whose values fit float16 converted to it (a tensor beyond its range stays float32)."""
    floats = [name for name, tensor in tensors.items() if tensor.is_floating_point()]
    peaks = dict(zip(floats, _peaks([tensors[name] for name in floats]), strict=True))
    bad = [name for name, peak in peaks.items() if not math.isfinite(peak)]
    if bad:
        raise ValueError(f"not writing {file}: {len(bad)} tensors hold non-finite values (e.g. {bad[0]})")
    if not half:
        return tensors
    limit = torch.finfo(torch.float16).max
    halves: dict[int, torch.Tensor] = {}  # aliases stay one tensor
    return {name: halves.setdefault(tensor.data_ptr(), tensor.half())
            if tensor.dtype == torch.float32 and peaks[name] <= limit else tensor for name, tensor in tensors.items()}


def _peaks(tensors: list[torch.Tensor]) -> list[float]:
    """The largest magnitude of each CPU tensor (nan or inf where it holds one; 0 when empty), in one pass over
    all of them: per-tensor reductions cost ~500 calls per file, and a small run writes one every epoch."""
    sizes = np.array([tensor.numel() for tensor in tensors], dtype=np.int64)
    peaks = np.zeros(len(tensors))
    if sizes.sum() == 0:
        return peaks.tolist()
    values = np.abs(torch.cat([tensor.reshape(-1).float() for tensor in tensors]).numpy())
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    filled = sizes > 0  # an empty tensor has no segment: the next one starts where it would have
    peaks[filled] = np.maximum.reduceat(values, starts[filled])  # nan propagates
    return peaks.tolist()


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


@dataclass
class WeightsSnapshot:
    """A model's state on its way to the CPU and its metadata, not yet checked or converted: ``write_weights``
    waits for the copy and does both, in whichever thread writes the file."""

    tensors: dict  # views into host buffers, complete once ``ready`` has passed
    metadata: dict[str, str]
    half: bool = False
    ready: list = field(default_factory=list)  # CUDA events

    def host_tensors(self) -> dict:
        """The tensors once copied, each in a storage of its own."""
        for event in self.ready:
            event.synchronize()
        return _owned(self.tensors)


def weights_snapshot(model: YOLO11Detector, half: bool = False) -> WeightsSnapshot:
    """``model``'s state as it is now, for ``write_weights`` (in another thread, say, while the model trains on): on
    the calling thread only the copy's launch (one per dtype; from a GPU into pinned memory, not waited for); the
    wait for it, the finiteness check and the float16 conversion are the writer's.

    ``half``: float32 tensors as float16 (a tensor with a value beyond float16's range stays float32), as
    Ultralytics saves its weights. Measured on YOLO11n fine-tuned one epoch on coco128 (320 px): the raw outputs
    move by at most 0.03 on logits up to 19, and coco128's mAP50-95 from 0.015816 to 0.015814 (mAP50 0.028884 to
    0.028871), for files of 5.3 MB instead of 10.6 MB. Resumable checkpoints stay float32: resume is bitwise."""
    _check_not_fused(model)
    # from a GPU, into pinned memory without waiting: a blocking copy waited for the epoch's queued kernels, ~31 ms
    # an epoch of the coco128 tutorial on an H100 (benchmarks/RESULTS.md)
    state = model.state_dict()  # detached tensors already
    tensors, ready = _gathered(state, pinned=True)
    # a CPU model's tensors are its live weights: copied now, before it trains on
    tensors |= _owned({name: tensors[name] for name, tensor in state.items() if tensor.device.type == "cpu"})
    return WeightsSnapshot(tensors, _metadata(model), half, ready)


def write_weights(snapshot: WeightsSnapshot, file: str | Path) -> Path:
    """Write ``weights_snapshot``'s tensors and metadata as a safetensors file, through a temporary name: a write
    that fails (a full disk: its ``OSError``) leaves the previous file whole; ``ValueError`` naming ``file``, and
    nothing written, when a tensor is not finite."""
    file = Path(file)
    tensors = _checked(snapshot.host_tensors(), file, snapshot.half)
    file.parent.mkdir(parents=True, exist_ok=True)
    with replaced(file) as tmp, writing(file):
        save_file(tensors, tmp, metadata=snapshot.metadata)
        honour_umask(tmp)
    return file


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
