"""Reading a ``torch.save`` zip archive without ``torch.load``: the member list checked, ``data.pkl`` through a
restricted unpickler, the storages read from the zip by us.

``torch.load`` hands a TorchScript archive to ``torch.jit.load`` before any pickle module is consulted, and a
scripted ``__setstate__`` then runs; so nothing untrusted goes through ``torch.load`` here. The archive must be
exactly what ``torch.save`` writes: one top-level folder holding ``data.pkl``, ``data/<key>`` storages (stored,
not compressed), and the small records ``version``, ``byteorder``, ``.format_version``, ``.storage_alignment``,
``.data/serialization_id``, ``.data/version``. A TorchScript archive (``code/``, ``constants.pkl``) or any other
member is refused, and so is a storage key that is not a plain record name or whose record size differs from
what the pickle claims.

The bounds of ``yolo11.gate.pickles`` hold: ``data.pkl`` is scanned before it is unpickled, each storage is read into
memory it cannot grow beyond (a tensor's legacy state would ``set_`` it to any size), and every tensor of the result
must view its own record.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from yolo11.gate import (
    MAX_PICKLE_BYTES,
    FileRefusedError,
    check_object_graph,
    check_regular_file,
    open_regular,
    scan_pickle,
)
from yolo11.weights.safe_pickle import UnsafeCheckpointError

ZIP_MAGIC = b"PK\x03\x04"
# The records torch.save writes besides data.pkl and data/<key> (torch 1.6 to 2.14).
_SMALL_RECORDS = frozenset({"version", "byteorder", ".format_version", ".storage_alignment",
                            ".data/serialization_id", ".data/version"})
_STORAGE_KEY = re.compile(r"[0-9A-Za-z_]{1,64}")  # torch writes "0", "1", ...: never a path
_TORCHSCRIPT_SIGNS = ("code/", "constants.pkl", "extra/", ".debug_pkl", "bytecode.pkl")
# Storage class names in a torch pickle -> dtype (torch resolves these itself in torch.load).
_STORAGE_DTYPES = {
    "FloatStorage": torch.float32, "HalfStorage": torch.float16, "BFloat16Storage": torch.bfloat16,
    "DoubleStorage": torch.float64, "LongStorage": torch.int64, "IntStorage": torch.int32,
    "ShortStorage": torch.int16, "CharStorage": torch.int8, "ByteStorage": torch.uint8, "BoolStorage": torch.bool,
    "UntypedStorage": torch.uint8,
}


class _StorageType:
    """What a storage class name unpickles to: only its dtype is used (in ``persistent_load``)."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype


def is_zip(path: Path) -> bool:
    with open_regular(path) as fh:
        return fh.read(4) == ZIP_MAGIC


def _members(archive: zipfile.ZipFile, path: Path, size: int) -> tuple[str, dict[str, zipfile.ZipInfo]]:
    """The archive's top-level folder and its records by name (without the folder); refuses anything else.
    ``size``: the file's, in bytes, which no stored record can exceed."""
    infos = archive.infolist()
    names = [info.filename for info in infos]
    if any(sign in name for name in names for sign in _TORCHSCRIPT_SIGNS):
        raise FileRefusedError(path, "a TorchScript archive, not a torch.save checkpoint (loading TorchScript runs "
                                     "the code inside it); refused")
    prefixes = {name.split("/", 1)[0] for name in names}
    if len(prefixes) != 1 or any("/" not in name for name in names):
        raise FileRefusedError(path, "not a torch.save archive (its members do not share one top-level folder)")
    if len(set(names)) != len(names):
        raise FileRefusedError(path, "a zip with duplicate member names; refused")
    prefix = prefixes.pop()
    records = {info.filename.split("/", 1)[1]: info for info in infos}
    for name, info in records.items():
        if name != "data.pkl" and name not in _SMALL_RECORDS and not name.startswith("data/"):
            raise FileRefusedError(path, f"unexpected member {info.filename!r} for a torch.save checkpoint; refused")
        if name.startswith("data/") and not _STORAGE_KEY.fullmatch(name[5:]):
            raise FileRefusedError(path, f"storage member {info.filename!r} is not a plain record name; refused")
        if info.compress_type != zipfile.ZIP_STORED:
            raise FileRefusedError(path, f"member {info.filename!r} is compressed; torch.save stores its records "
                                         "uncompressed")
        if max(info.file_size, info.compress_size) > size:  # zipfile would allocate the claim to read it
            raise FileRefusedError(path, f"member {info.filename!r} claims {info.file_size} bytes, more than the "
                                         f"file's {size}; truncated or corrupt")
    if "data.pkl" not in records:
        raise FileRefusedError(path, "a zip without data.pkl: not a torch.save checkpoint")
    return prefix, records


def _read_record(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path) -> bytes:
    try:
        return archive.read(info)
    except (zipfile.BadZipFile, OSError, EOFError) as err:  # CRC mismatch, cut short
        raise FileRefusedError(path, f"member {info.filename!r} is unreadable ({err}); truncated or corrupt") from None


def _fixed_storage(data: bytes, dtype: torch.dtype) -> torch.storage.TypedStorage:
    """``data`` as a storage that cannot be resized: ``Tensor.set_`` grows a resizable storage to whatever size it
    is given (numpy-owned memory, unlike ``UntypedStorage.from_buffer``'s, may not; empty records too)."""
    untyped = torch.from_numpy(np.frombuffer(bytearray(data), dtype=np.uint8)).untyped_storage()
    return torch.storage.TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)


def _storage_loader(archive: zipfile.ZipFile, records: dict[str, zipfile.ZipInfo], path: Path,
                    storages: dict[str, torch.storage.TypedStorage]) -> Callable[[Any], torch.storage.TypedStorage]:
    """``persistent_load`` for ``data.pkl``: each storage it names read from its record, once, into ``storages``."""

    def persistent_load(saved_id: Any) -> torch.storage.TypedStorage:
        if not (isinstance(saved_id, tuple) and len(saved_id) == 5 and saved_id[0] in ("storage", b"storage")):
            raise FileRefusedError(path, f"data.pkl names an unknown persistent object {str(saved_id)[:80]}")
        _, storage_type, key, _location, numel = saved_id
        if not isinstance(storage_type, _StorageType) or not isinstance(numel, int) or numel < 0:
            raise FileRefusedError(path, "data.pkl names a storage of an unknown type or size")
        if not isinstance(key, str) or not _STORAGE_KEY.fullmatch(key):
            raise FileRefusedError(path, f"data.pkl names storage {str(key)[:80]!r}, not a plain record name "
                                         "(a path outside the archive?); refused")
        if key in storages:
            if storages[key].dtype != storage_type.dtype:
                raise FileRefusedError(path, f"storage {key} is read with two dtypes")
            return storages[key]
        info = records.get(f"data/{key}")
        if info is None:
            raise FileRefusedError(path, f"data.pkl names storage data/{key}, which the archive lacks")
        nbytes = numel * torch.empty((), dtype=storage_type.dtype).element_size()
        if info.file_size != nbytes:
            raise FileRefusedError(path, f"storage data/{key} holds {info.file_size} bytes, data.pkl claims "
                                         f"{nbytes}")
        storages[key] = _fixed_storage(_read_record(archive, info, path), storage_type.dtype)
        return storages[key]

    return persistent_load


def _tensor_checker(storages: dict[str, torch.storage.TypedStorage]) -> Callable[[Any], str | None]:
    """``check_object_graph``'s ``check_leaf``: a tensor must be a plain tensor or parameter without hooks, on one
    of the records' storages at its record's size, its view inside it."""
    record_bytes = {s._untyped_storage.data_ptr(): s._untyped_storage.nbytes() for s in storages.values()}

    def problem(obj: Any) -> str | None:
        if not isinstance(obj, torch.Tensor):
            return None
        if type(obj) not in (torch.Tensor, torch.nn.Parameter) or obj._backward_hooks or obj.__dict__:
            return f"a tensor of type {type(obj).__name__} with hooks or attributes, which torch.save never writes"
        storage = obj.untyped_storage()
        if record_bytes.get(storage.data_ptr()) != storage.nbytes():
            return f"a tensor on a storage of {storage.nbytes()} bytes that is not one of the archive's records"
        last = obj.storage_offset() + sum((n - 1) * s for n, s in zip(obj.shape, obj.stride(), strict=True))
        if obj.numel() and (last + 1) * obj.element_size() > storage.nbytes():
            return f"a tensor view of {list(obj.shape)} beyond its {storage.nbytes()}-byte storage"
        return None

    return problem


def _unpickle(data: bytes, unpickler: type[pickle.Unpickler], persistent_load: Callable, path: Path) -> Any:
    """``data.pkl`` read by ``unpickler``, storage class names resolved to dtypes; any failure is a refusal."""

    class ZipUnpickler(unpickler):  # type: ignore[misc, valid-type]
        def find_class(self, module: str, name: str) -> Any:
            if module == "torch" and name in _STORAGE_DTYPES:
                return _StorageType(_STORAGE_DTYPES[name])
            return super().find_class(module, name)

    reader = ZipUnpickler(io.BytesIO(data))
    reader.persistent_load = persistent_load
    try:
        return reader.load()
    except FileRefusedError:
        raise
    except UnsafeCheckpointError as err:
        raise UnsafeCheckpointError(f"{path}: {err}") from None
    except (RecursionError, MemoryError) as err:
        raise FileRefusedError(path, f"data.pkl is not a plain checkpoint ({type(err).__name__})") from None
    except Exception as err:  # noqa: BLE001 - any failure of a garbage pickle is the file's fault, not ours
        first = str(err).splitlines()[0][:200] if str(err) else ""
        raise FileRefusedError(path, f"data.pkl is not a readable checkpoint pickle ({type(err).__name__}"
                                     f"{': ' + first if first else ''})") from None


def read_torch_zip(path: str | Path, unpickler: type[pickle.Unpickler]) -> Any:
    """The object a ``torch.save`` zip at ``path`` holds, unpickled by ``unpickler`` (a restricted
    ``pickle.Unpickler`` whose ``find_class`` refuses globals outside its allow-list); tensors on the CPU.

    Raises ``FileRefusedError`` (one line naming the file) for anything but a plain checkpoint, and
    ``UnsafeCheckpointError`` for a global outside the allow-list."""
    path = Path(path)
    with open_regular(path) as fh:
        try:
            archive = zipfile.ZipFile(fh)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
            raise FileRefusedError(path, f"not a readable zip archive ({err}); truncated or not a torch.save "
                                         "checkpoint") from None
        with archive:
            _, records = _members(archive, path, os.fstat(fh.fileno()).st_size)
            byteorder = _read_record(archive, records["byteorder"], path) if "byteorder" in records else b"little"
            if byteorder != b"little":
                raise FileRefusedError(path, f"byteorder {byteorder[:16]!r}: only little-endian checkpoints are read")
            if records["data.pkl"].file_size > MAX_PICKLE_BYTES:
                raise FileRefusedError(path, f"data.pkl holds {records['data.pkl'].file_size} bytes, more than "
                                             f"MAX_PICKLE_BYTES = {MAX_PICKLE_BYTES}; refused")
            data = _read_record(archive, records["data.pkl"], path)
            scan_pickle(path, data)
            storages: dict[str, torch.storage.TypedStorage] = {}
            loaded = _unpickle(data, unpickler, _storage_loader(archive, records, path, storages), path)
    check_object_graph(path, loaded, _tensor_checker(storages))
    return loaded


def read_torch_file(path: str | Path, unpickler: type[pickle.Unpickler]) -> Any:
    """The object in a ``torch.save`` zip, read by ``unpickler`` (``safe_pickle.Unpickler`` for Ultralytics
    checkpoints, ``safe_pickle.StateUnpickler`` for optimizer and RNG state); see ``torch_zip.read_torch_zip``."""
    path = check_regular_file(path)
    if not is_zip(path):
        raise FileRefusedError(path, "not a torch.save zip archive (a legacy pre-1.6 torch file, or not a "
                                     "checkpoint at all); refused")
    return read_torch_zip(path, unpickler)
