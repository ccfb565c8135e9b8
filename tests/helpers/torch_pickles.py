"""Hand-made ``torch.save``-style archives for the gate's tests: storages pickled as torch pickles them, tensors
with or without a pickled state, module stubs under Ultralytics' class name, and memo sharing as a pickler writes
it (the same Python object twice is one object and a back-reference)."""

from __future__ import annotations

import collections
import io
import pickle
import struct
import zipfile
from pathlib import Path

import numpy as np
import torch

FOUR_FLOATS = np.arange(4, dtype=np.float32).tobytes()


class Storage:
    """Pickled through ``persistent_id`` as torch pickles a storage: ('storage', type, key, location, numel)."""

    def __init__(self, key: str, numel: int, storage_type: type = torch.FloatStorage) -> None:
        self.key, self.numel, self.storage_type = key, numel, storage_type


class Tensor:
    """A tensor as ``_rebuild_tensor_v2`` builds it; ``state``, when given, is pickled after it (``BUILD``: what
    ``Tensor.__setstate__`` receives), which torch.save never writes."""

    def __init__(self, storage: Storage, size: tuple[int, ...], state: tuple | None = None) -> None:
        self.storage, self.size, self.state = storage, size, state

    def __reduce__(self):
        args = (self.storage, 0, self.size, (1,) * len(self.size), False, collections.OrderedDict())
        if self.state is None:
            return torch._utils._rebuild_tensor_v2, args
        return torch._utils._rebuild_tensor_v2, args, self.state


class Module:
    """A module object; pickled, it names ``ultralytics.nn.tasks.DetectionModel`` (see ``torch_zip``), whose
    pickled state is its ``__dict__``."""

    def __init__(self, **attributes: object) -> None:
        self.__dict__.update(attributes)


def module(parameters: dict | None = None, modules: dict | None = None, **attributes: object) -> Module:
    """A ``Module`` with ``nn.Module``'s containers, as a stub of the unpickler sees one."""
    return Module(_parameters=parameters or {}, _buffers={}, _modules=modules or {}, **attributes)


class _TorchPickler(pickle.Pickler):
    def persistent_id(self, obj: object) -> object:
        if isinstance(obj, Storage):
            return ("storage", obj.storage_type, obj.key, "cpu", obj.numel)
        return None


def pickle_bytes(payload: object) -> bytes:
    """``payload`` pickled as torch.save does (protocol 2), ``Module`` renamed to Ultralytics' class."""
    buffer = io.BytesIO()
    _TorchPickler(buffer, protocol=2).dump(payload)
    ours = f"c{Module.__module__}\n{Module.__qualname__}\n".encode()
    return buffer.getvalue().replace(ours, b"cultralytics.nn.tasks\nDetectionModel\n")


def torch_zip(path: Path, payload: object, records: dict[str, bytes]) -> Path:
    """A hand-made torch.save-style zip: ``payload`` pickled as data.pkl (bytes: data.pkl itself), plus
    ``records`` (name -> bytes)."""
    data = payload if isinstance(payload, bytes) else pickle_bytes(payload)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", data)
        archive.writestr("archive/byteorder", "little")
        archive.writestr("archive/version", "3\n")
        for name, record in records.items():
            archive.writestr(f"archive/{name}", record)
    return path


def claim_record_size(path: Path, member: str, size: int) -> Path:
    """Rewrite the central directory entry of ``member`` to claim ``size`` bytes (stored and uncompressed)."""
    raw = bytearray(path.read_bytes())
    entry = raw.index(b"PK\x01\x02")  # the first central directory entry
    while not raw[entry + 46:].startswith(member.encode()):
        entry = raw.index(b"PK\x01\x02", entry + 1)
    raw[entry + 20:entry + 28] = struct.pack("<II", size, size)
    path.write_bytes(bytes(raw))
    return path
