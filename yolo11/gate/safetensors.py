"""safetensors files: the header checked against the file's size before it is read, then every entry's dtype,
shape and byte range; the tensors compared with what the model expects (names, shapes, dtypes: no silent cast, but
for weights files a float16/bfloat16 tensor widened to a float32 model's, which is exact) before any is read, and
NaN/inf refused."""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from yolo11.gate.files import FileRefusedError, open_regular

MAX_SAFETENSORS_HEADER = 100_000_000  # the safetensors library's own limit
# safetensors dtype -> bytes per element
SAFETENSORS_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                      "BOOL": 1, "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}


@dataclass(frozen=True)
class SafetensorsHeader:
    tensors: dict[str, tuple[str, tuple[int, ...]]]  # name -> (dtype, shape)
    metadata: dict[str, str]


def read_safetensors_header(path: str | Path) -> SafetensorsHeader:
    """The header of a safetensors file, checked against the file's size before and after it is read."""
    path = Path(path)
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
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


# Stored dtypes a float32 model takes from weights files: float32 holds every one of their values exactly.
WIDENED = {"F32": ("F16", "BF16")}


def check_tensors(path: str | Path, found: dict[str, tuple[str, tuple[int, ...]]], expected: dict[str, Any],
                  widen: bool = False) -> None:
    """Refuse a file whose tensors (``found``: name -> (safetensors dtype, shape), e.g. ``header.tensors``) differ in
    names, shapes or dtypes from ``expected`` (name -> tensor: the model's ``state_dict``); a float tensor stored as
    another dtype is refused, not cast, except with ``widen`` one of ``WIDENED`` (a run's float16 weights)."""
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
        wanted = safetensors_dtype(tensor.dtype)
        if dtype != wanted and not (widen and dtype in WIDENED.get(wanted, ())):
            raise FileRefusedError(path, f"tensor {name!r} is stored as {dtype}, the model expects {wanted} "
                                         "(not cast)")


def tensor_layout(tensors: dict[str, Any]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (safetensors dtype, shape) of loaded tensors, for ``check_tensors``."""
    return {name: (safetensors_dtype(t.dtype), tuple(t.shape)) for name, t in tensors.items()}


def check_finite(path: str | Path, tensors: dict[str, Any]) -> None:
    """Refuse NaN/inf in any floating tensor (a model that would predict nothing, or export a NaN graph)."""
    bad = [name for name, t in tensors.items() if t.is_floating_point() and not bool(t.isfinite().all())]
    if bad:
        raise FileRefusedError(path, f"{len(bad)} tensors hold NaN or inf values (e.g. {bad[0]}); refused")


def read_safetensors(path: str | Path, expected: dict[str, Any] | None = None,
                     widen: bool = False) -> tuple[dict[str, Any], dict]:
    """The tensors and metadata of a safetensors file, through every check above (``expected`` and ``widen`` as in
    ``check_tensors``, the widened tensors returned in ``expected``'s dtype; None checks only the file itself)."""
    from safetensors.torch import load_file

    header = read_safetensors_header(path)
    if expected is not None:
        check_tensors(path, header.tensors, expected, widen=widen)
    try:
        tensors = load_file(str(path))
    except Exception as err:  # noqa: BLE001 - the library's own checks (overlapping ranges...): the file's fault
        raise FileRefusedError(path, f"unreadable safetensors file ({err})") from None
    check_finite(path, tensors)
    if expected is not None and widen:
        tensors = {name: t.to(expected[name].dtype) if t.dtype != expected[name].dtype else t
                   for name, t in tensors.items()}
    return tensors, header.metadata
