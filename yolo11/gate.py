"""The loading gate: every file the project reads from a user (weights, checkpoints, training state, configs,
YAML) is checked here before anything is built or allocated from it, and refused with one line naming the file
and what is wrong (``FileRefusedError``, a ``ValueError``: the CLIs print it as ``error: ...`` and exit 2).

- torch ``.pt``/``.bin``/``.pkl`` files: ``read_torch_file`` (``weights/torch_zip.py``), never ``torch.load``:
  TorchScript and any zip that is not a plain ``torch.save`` checkpoint are refused before a byte is unpickled,
  ``data.pkl`` goes through a restricted unpickler (``weights/safe_pickle.py``) and storages are read from the zip
  by us, their keys and sizes checked.
- safetensors: ``read_safetensors_header`` checks the header length against the file size before reading it, then
  every entry's dtype, shape and byte range; ``check_tensors`` compares names, shapes and dtypes with what the
  model expects (no silent cast) before any tensor is read; ``check_finite`` refuses NaN/inf.
- model configs (``config.json``, safetensors metadata): ``check_model_config``: a JSON object of known keys, a
  known scale, ``num_classes`` an int in 1..``MAX_CLASSES``, names matching it, and a timm backbone resolved
  among local timm names only (no network decided by a file) unless the user named it.
- JSON and YAML: ``read_json`` / ``read_yaml`` (``yaml.safe_load``: a ``!!python`` tag builds nothing, it is
  refused), sizes capped.

This module imports only the standard library and PyYAML at import time (the training CLI parses its flags
before torch loads); torch and timm are imported where a check needs them.
"""

from __future__ import annotations

import json
import math
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# The largest class count a file may claim. Big detection vocabularies have 1-22k classes (LVIS 1203,
# ImageNet-21k 21841); at 100k the head's class branch is ~30M parameters for yolo11n, while a crafted
# 1e9 would have create_model allocate ~400 GB before any other check could run.
MAX_CLASSES = 100_000
MAX_TEXT_BYTES = 64 << 20  # JSON/YAML configs: 100k class names fit in a few MB
MAX_SAFETENSORS_HEADER = 100_000_000  # the safetensors library's own limit
# DFL bins per family; here and not from yolo11.models.scales (its package imports torch; this module may not).
# tests/test_yolo26_train.py checks both agree with yolo11.models.scales.FAMILIES / MODEL_NAMES.
FAMILY_REG_MAX = {"yolo11": 16, "yolo26": 1}
SCALE_NAMES = tuple(f"{family}{scale}" for family in FAMILY_REG_MAX for scale in "nsmlx")
# config.json keys: create_model's arguments plus what save_pretrained adds for readers without our code.
_CONFIG_KEYS = {"name", "num_classes", "backbone", "names", "model_type", "task", "strides", "reg_max", "head"}
_CONFIG_FIXED = {"task": "detect", "strides": [8, 16, 32]}
# The head class per family (yolo11.models.head), as save_pretrained's config.json names it.
FAMILY_HEAD = {"yolo11": "Detect", "yolo26": "End2EndDetect"}
# safetensors dtype -> bytes per element
SAFETENSORS_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                      "BOOL": 1, "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}


class FileRefusedError(ValueError):
    """A file the gate refuses; the message is one line: the file, then what is wrong with it."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path, self.problem = str(path), " ".join(problem.split())  # one line, whatever the cause said
        super().__init__(f"{path}: {self.problem}")


# --- torch files ---------------------------------------------------------------------------------------------

def read_torch_file(path: str | Path, unpickler: type[pickle.Unpickler]) -> Any:
    """The object in a ``torch.save`` zip, read by ``unpickler`` (``safe_pickle.Unpickler`` for Ultralytics
    checkpoints, ``safe_pickle.StateUnpickler`` for optimizer and RNG state); see ``torch_zip.read_torch_zip``."""
    from yolo11.weights.torch_zip import is_zip, read_torch_zip

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    if not is_zip(path):
        raise FileRefusedError(path, "not a torch.save zip archive (a legacy pre-1.6 torch file, or not a "
                                     "checkpoint at all); refused")
    return read_torch_zip(path, unpickler)


# --- safetensors ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SafetensorsHeader:
    tensors: dict[str, tuple[str, tuple[int, ...]]]  # name -> (dtype, shape)
    metadata: dict[str, str]


def read_safetensors_header(path: str | Path) -> SafetensorsHeader:
    """The header of a safetensors file, checked against the file's size before and after it is read."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as fh:
        prefix = fh.read(8)
        if len(prefix) < 8:
            raise FileRefusedError(path, f"{size} bytes: too short for a safetensors file")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_SAFETENSORS_HEADER or 8 + length > size:
            raise FileRefusedError(path, f"safetensors header claims {length} bytes, the file has {size - 8} after "
                                         "the length field (truncated, or not a safetensors file)")
        raw = fh.read(length)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise FileRefusedError(path, "the safetensors header is not JSON (not a safetensors file?)") from None
    if not isinstance(header, dict):
        raise FileRefusedError(path, "the safetensors header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise FileRefusedError(path, "safetensors __metadata__ must map names to strings")
    data_bytes, tensors, end = size - 8 - length, {}, 0
    for name, entry in header.items():
        try:
            dtype, shape, (begin, stop) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
            valid = (dtype in SAFETENSORS_DTYPES and all(type(n) is int and n >= 0 for n in (*shape, begin, stop))
                     and begin <= stop)
        except (TypeError, KeyError, ValueError):
            valid = False
        if not valid:
            raise FileRefusedError(path, f"safetensors entry {name!r} is malformed ({str(entry)[:120]})")
        if stop - begin != math.prod(shape) * SAFETENSORS_DTYPES[dtype]:
            raise FileRefusedError(path, f"tensor {name!r}: {stop - begin} bytes for a {dtype} tensor of shape "
                                         f"{list(shape)}")
        if stop > data_bytes:
            raise FileRefusedError(path, f"tensor {name!r} ends at byte {stop} of a {data_bytes}-byte data section "
                                         "(truncated file)")
        tensors[name], end = (dtype, shape), max(end, stop)
    return SafetensorsHeader(tensors, dict(metadata))


def safetensors_dtype(dtype: Any) -> str:
    """``torch.float32`` -> ``F32`` (the names a safetensors header uses)."""
    import torch

    names = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
             torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
             torch.bool: "BOOL"}
    return names.get(dtype, str(dtype))


def check_tensors(path: str | Path, found: dict[str, tuple[str, tuple[int, ...]]], expected: dict[str, Any]) -> None:
    """Refuse a file whose tensors (``found``: name -> (safetensors dtype, shape), e.g. ``header.tensors``) differ in
    names, shapes or dtypes from ``expected`` (name -> tensor: the model's ``state_dict``); a float tensor stored as
    another dtype is refused, not cast."""
    missing = [k for k in expected if k not in found]
    extra = [k for k in found if k not in expected]
    if missing or extra:
        parts = [f"{len(missing)} tensors missing (e.g. {missing[0]})"] if missing else []
        parts += [f"{len(extra)} unexpected tensors (e.g. {extra[0]})"] if extra else []
        raise FileRefusedError(path, f"{' and '.join(parts)} for this model; not weights of this architecture")
    for name, tensor in expected.items():
        dtype, shape = found[name]
        if tuple(shape) != tuple(tensor.shape):
            raise FileRefusedError(path, f"tensor {name!r} has shape {list(shape)}, the model expects "
                                         f"{list(tensor.shape)}")
        if dtype != safetensors_dtype(tensor.dtype):
            raise FileRefusedError(path, f"tensor {name!r} is stored as {dtype}, the model expects "
                                         f"{safetensors_dtype(tensor.dtype)} (not cast)")


def tensor_layout(tensors: dict[str, Any]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (safetensors dtype, shape) of loaded tensors, for ``check_tensors``."""
    return {name: (safetensors_dtype(t.dtype), tuple(t.shape)) for name, t in tensors.items()}


def check_finite(path: str | Path, tensors: dict[str, Any]) -> None:
    """Refuse NaN/inf in any floating tensor (a model that would predict nothing, or export a NaN graph)."""
    bad = [name for name, t in tensors.items() if t.is_floating_point() and not bool(t.isfinite().all())]
    if bad:
        raise FileRefusedError(path, f"{len(bad)} tensors hold NaN or inf values (e.g. {bad[0]}); refused")


def read_safetensors(path: str | Path, expected: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict]:
    """The tensors and metadata of a safetensors file, through every check above (``expected`` as in
    ``check_tensors``; None checks only the file itself)."""
    from safetensors.torch import load_file

    header = read_safetensors_header(path)
    if expected is not None:
        check_tensors(path, header.tensors, expected)
    try:
        tensors = load_file(str(path))
    except Exception as err:  # noqa: BLE001 - the library's own checks (overlapping ranges...): the file's fault
        raise FileRefusedError(path, f"unreadable safetensors file ({err})") from None
    check_finite(path, tensors)
    return tensors, header.metadata


# --- model configs -------------------------------------------------------------------------------------------

def check_model_config(config: Any, source: str | Path, user_backbone: str | None = None) -> dict:
    """``create_model`` arguments (name, num_classes, backbone, names) from a file's config, or a refusal.

    ``user_backbone`` is the backbone the user named (``--backbone``, ``load_weights(backbone=)``): only that name
    may be one that timm would fetch (``hf-hub:...``); a file's own must be a local timm model name."""
    if not isinstance(config, dict):
        raise FileRefusedError(source, f"the model config is a JSON {type(config).__name__}, expected an object")
    unknown = sorted(set(config) - _CONFIG_KEYS)
    if unknown:
        raise FileRefusedError(source, f"unknown model config keys {unknown}")
    for key, value in _CONFIG_FIXED.items():
        if key in config and config[key] != value:
            raise FileRefusedError(source, f"config {key} is {config[key]!r}; only {value!r} is supported")
    name, num_classes = config.get("name"), config.get("num_classes")
    if name not in SCALE_NAMES:
        raise FileRefusedError(source, f"config name {repr(name)[:40]} is not one of {', '.join(SCALE_NAMES)}")
    family = name[:-1]
    reg_max = FAMILY_REG_MAX[family]
    if "reg_max" in config and config["reg_max"] != reg_max:
        raise FileRefusedError(source, f"config reg_max is {config['reg_max']!r}; {name} has {reg_max!r}")
    # model_type is the family; "yolo11" for any name in folders written before YOLO26 had its own
    if "model_type" in config and config["model_type"] not in ("yolo11", family):
        raise FileRefusedError(source, f"config model_type is {repr(config['model_type'])[:40]}; {name} is "
                                       f"{family!r}")
    if "head" in config and config["head"] != FAMILY_HEAD[family]:
        raise FileRefusedError(source, f"config head is {repr(config['head'])[:40]}; {name} has "
                                       f"{FAMILY_HEAD[family]!r}")
    if type(num_classes) is not int or not 1 <= num_classes <= MAX_CLASSES:
        raise FileRefusedError(source, f"config num_classes {repr(num_classes)[:40]} is not an integer in "
                                       f"1..{MAX_CLASSES}")
    names = config.get("names")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise FileRefusedError(source, "config names must be a list of strings")
        if len(names) != num_classes:
            raise FileRefusedError(source, f"config has {len(names)} names for num_classes {num_classes}")
    backbone = config.get("backbone")
    if backbone is not None:
        check_backbone_name(backbone, source, user_backbone)
    return {"name": name, "num_classes": num_classes, "backbone": backbone, "names": names}


def check_backbone_name(backbone: Any, source: str | Path, user_backbone: str | None = None) -> None:
    """A backbone named by a file must be a timm model registered locally: a name like ``hf-hub:owner/repo``
    would have timm download its config (network access decided by the file). The user may name one."""
    if backbone == user_backbone:
        return
    import timm

    import yolo11.models  # noqa: F401 - registers our native backbones with timm

    if not isinstance(backbone, str) or ":" in backbone or not timm.is_model(backbone):
        raise FileRefusedError(source, f"backbone {str(backbone)[:80]!r} is not a locally known timm model name; "
                                       "a backbone named by a file is never fetched (pass --backbone with that "
                                       "name to allow it)")


# --- JSON and YAML -------------------------------------------------------------------------------------------

def _read_text(path: Path, max_bytes: int = MAX_TEXT_BYTES) -> str:
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    size = path.stat().st_size
    if size > max_bytes:
        limit = "for a config file (at most {})" if max_bytes == MAX_TEXT_BYTES else "to read (at most {} bytes)"
        raise FileRefusedError(path, f"{size} bytes: too large {limit.format(max_bytes)}")
    try:
        return path.read_text()
    except UnicodeDecodeError as err:
        raise FileRefusedError(path, f"not UTF-8 text ({err.reason} at byte {err.start})") from None


def read_json(path: str | Path, max_bytes: int = MAX_TEXT_BYTES) -> Any:
    """The JSON value in the file; refused in one line when larger than ``max_bytes`` (configs by default; data
    files such as COCO annotations pass their own cap), not JSON, or nested too deeply."""
    path = Path(path)
    try:
        return json.loads(_read_text(path, max_bytes))
    except json.JSONDecodeError as err:
        raise FileRefusedError(path, f"line {err.lineno}: not valid JSON ({err.msg})") from None
    except RecursionError:
        raise FileRefusedError(path, "JSON nested too deeply") from None


def read_yaml(path: str | Path, text: str | None = None) -> Any:
    """``yaml.safe_load`` of the file (or of ``text`` read from it); a ``!!python`` tag or a syntax error is
    refused in one line with its line number."""
    path = Path(path)
    try:
        return yaml.safe_load(_read_text(path) if text is None else text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        if "python/" in str(err):
            problem = (f"{problem}; Python tags are refused: YAML files are read with safe_load, which builds no "
                       "Python objects")
        raise FileRefusedError(path, f"{where}{problem}") from None
