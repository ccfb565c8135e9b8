"""Import of Ultralytics YOLO11 and YOLO26 ``.pt`` checkpoints, without importing ultralytics or running pickled
code.

Key mapping (everything after the layer index is identical, see ``yolo11.models.blocks``), the same for both:
``model.0-10.*`` -> ``backbone.layers.0-10.*``; ``model.13/16/17/19/20/22.*`` -> ``neck.<name>.*``
(``yolo11.models.neck.ULTRALYTICS_LAYERS``); ``model.23.*`` -> ``head.*`` (YOLO26's one-to-one branch
``model.23.one2one_cv2/cv3.*`` -> ``head.one2one_cv2/cv3.*``). The family is read from the head: ``reg_max`` 16
and no one-to-one branch is YOLO11, ``reg_max`` 1 with one is YOLO26.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import torch

from yolo11.architecture import FAMILIES, HEAD_LAYER, SCALES
from yolo11.gate import (
    FileRefusedError,
    check_class_names,
    check_finite,
    check_tensors,
    tensor_layout,
)
from yolo11.models.detector import YOLO11Detector, create_model
from yolo11.models.neck import ULTRALYTICS_LAYERS
from yolo11.weights.safe_pickle import StubModule, Unpickler
from yolo11.weights.torch_zip import read_torch_file

_KEY = re.compile(r"model\.(\d+)\.(.+)")


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint's top-level dict, with module objects as inert ``StubModule``s (restricted unpickling)."""
    checkpoint = read_torch_file(path, Unpickler)  # the gate: never torch.load (TorchScript)
    if not isinstance(checkpoint, dict):
        raise FileRefusedError(path, f"expected an Ultralytics checkpoint dict, got {type(checkpoint).__name__}")
    return checkpoint


def _own_tensors(module: StubModule) -> list[tuple[str, Any]]:
    """A stub module's parameters and persistent buffers, by name (``None`` entries dropped)."""
    attrs = module.__dict__
    non_persistent = attrs.get("_non_persistent_buffers_set", set())
    tensors = list(attrs.get("_parameters", {}).items())
    tensors += [(k, v) for k, v in attrs.get("_buffers", {}).items() if k not in non_persistent]
    return [(name, tensor) for name, tensor in tensors if tensor is not None]


def module_state_dict(module: StubModule, prefix: str = "") -> dict[str, torch.Tensor]:
    """Walk a stub module tree like ``nn.Module.state_dict``: parameters and persistent buffers, half floats as
    float32. Each module is visited once, by the first name that reaches it (as ``named_modules`` does): a tree
    whose levels share their children would otherwise cost 2**depth visits."""
    state: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    pending = [(prefix, module)]
    while pending:
        prefix, module = pending.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        for name, tensor in _own_tensors(module):
            tensor = tensor.detach()
            # Ultralytics stores fp16: widened exactly; any other dtype is kept, for the gate to compare with ours
            state[prefix + name] = tensor.float() if tensor.dtype in (torch.float16, torch.bfloat16) else tensor
        children = [(f"{prefix}{name}.", child) for name, child in module.__dict__.get("_modules", {}).items()
                    if child is not None]
        pending += reversed(children)  # depth first, in order: the keys come out as state_dict orders them
    return state


def _stored_model(checkpoint: dict[str, Any], path: str | Path) -> StubModule:
    """The checkpoint's EMA model, else its ``model`` (a finished Ultralytics run keeps only ``model``)."""
    model = checkpoint.get("ema")
    model = checkpoint.get("model") if model is None else model
    if not isinstance(model, StubModule):
        keys = [key[:40] if isinstance(key, str) else type(key).__name__ for key in itertools.islice(checkpoint, 10)]
        raise FileRefusedError(path, f"no 'ema' or 'model' module in the checkpoint (keys {keys})")
    return model


def ultralytics_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """Ultralytics-named state dict (``model.N.*``) of the checkpoint's EMA model, else its ``model``."""
    return module_state_dict(_stored_model(read_checkpoint(path), path))


def class_names(model: StubModule, path: str | Path) -> list[str] | None:
    """The ``names`` of an Ultralytics model (``{0: "person", ...}`` or a list), as a list by class id; ``None``
    when it has none. Names that the gate's ``check_class_names`` refuses (too many, too long) refuse the file."""
    stored = getattr(model, "names", None)
    return check_class_names(stored, path) if stored else None


def infer_model_args(state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """``{"name": "yolo11?" or "yolo26?", "num_classes": nc}`` from the head (family), the stem width and the
    layer-2 block count (scale)."""
    # Layer 10 is C2PSA and layer 23 Detect only in YOLO11/YOLO26 detection models (YOLOv8 has Detect at 22).
    required = ["model.0.conv.weight", "model.10.m.0.attn.qkv.conv.weight", f"model.{HEAD_LAYER}.cv3.0.2.weight"]
    missing = [key for key in required if key not in state]
    if missing:
        # the message's start is what callers match on; YOLO26 needs the same layers
        raise ValueError(f"not a YOLO11 detection checkpoint: no {', '.join(missing)} (nor a YOLO26 one)")
    reg_max = state[f"model.{HEAD_LAYER}.cv2.0.2.weight"].shape[0] // 4
    end2end = f"model.{HEAD_LAYER}.one2one_cv2.0.2.weight" in state
    families = [f for f in FAMILIES.values() if (f.reg_max, f.end2end) == (reg_max, end2end)]
    if len(families) != 1:
        raise ValueError(f"a head with reg_max {reg_max} and {'a' if end2end else 'no'} one-to-one branch is neither "
                         "YOLO11's (reg_max 16, none) nor YOLO26's (reg_max 1, one)")
    stem_width = state["model.0.conv.weight"].shape[0]
    blocks = len({key.split(".")[3] for key in state if key.startswith("model.2.m.")})
    keys = [k for k, s in SCALES.items() if s.channels(64) == stem_width and s.repeats(2) == blocks]
    if len(keys) != 1:
        raise ValueError(f"no {families[0].name} scale has stem width {stem_width} and {blocks} blocks in layer 2")
    return {"name": families[0].name + keys[0], "num_classes": state[f"model.{HEAD_LAYER}.cv3.0.2.weight"].shape[0]}


def map_key(key: str) -> str:
    """Ultralytics key -> ours, e.g. ``model.19.m.0.cv1.conv.weight`` -> ``neck.bottom_up_p4.m.0.cv1.conv.weight``."""
    match = _KEY.fullmatch(key)
    if match is None:
        raise KeyError(f"not an Ultralytics layer key: {key}")
    layer, rest = int(match.group(1)), match.group(2)
    if layer <= 10:
        return f"backbone.layers.{layer}.{rest}"
    if layer in ULTRALYTICS_LAYERS:
        return f"neck.{ULTRALYTICS_LAYERS[layer]}.{rest}"
    if layer == HEAD_LAYER:
        return f"head.{rest}"
    raise KeyError(f"Ultralytics layer {layer} has no parameters in YOLO11/YOLO26: {key}")


def ultralytics_key(key: str) -> str:
    """Our key -> Ultralytics', the inverse of ``map_key`` (for exporting back or checking the mapping)."""
    part, _, rest = key.partition(".")
    if part == "backbone":
        layer, _, rest = rest.removeprefix("layers.").partition(".")
        return f"model.{layer}.{rest}"
    if part == "neck":
        name, _, rest = rest.partition(".")
        layer = next(i for i, n in ULTRALYTICS_LAYERS.items() if n == name)
        return f"model.{layer}.{rest}"
    if part == "head":
        return f"model.{HEAD_LAYER}.{rest}"
    raise KeyError(f"not a native YOLO11/YOLO26 key: {key}")


def load_ultralytics(path: str | Path) -> YOLO11Detector:
    """Build the matching ``YOLO11Detector`` (a ``YOLO26Detector`` for a YOLO26 checkpoint) and load the
    checkpoint's weights into it (strict); the class names are the checkpoint's (dropped, with a missing count, only
    if they do not fit the head). Half-precision floats (as Ultralytics stores them) become float32; any other
    dtype, shape or NaN/inf is refused."""
    stored = _stored_model(read_checkpoint(path), path)
    try:
        ultralytics_state = module_state_dict(stored)
        state = {map_key(k): v for k, v in ultralytics_state.items()}
        args = infer_model_args(ultralytics_state)
    except (ValueError, KeyError, AttributeError, TypeError, RecursionError) as err:  # a crafted module tree
        raise FileRefusedError(path, f"not a YOLO11 or YOLO26 checkpoint ({err})") from None
    names = class_names(stored, path)
    model = create_model(**args, names=names if names and len(names) == args["num_classes"] else None)
    check_tensors(path, tensor_layout(state), model.state_dict())
    check_finite(path, state)
    model.load_state_dict(state, strict=True)
    return model
