"""A restricted pickle module for reading Ultralytics checkpoints without running their code.

``weights/torch_zip.py`` reads a checkpoint's ``data.pkl`` with a subclass of ``Unpickler`` (never through
``torch.load``, which runs TorchScript archives before any pickle module is consulted), so every global the
pickle names goes through ``Unpickler.find_class``. That allows only

- the tensor-rebuild functions of ``torch._utils`` (wrapped: the view must lie inside its storage, no hooks),
  ``torch.Size``, ``collections.OrderedDict``, ``set``; no state for a tensor (``BUILD``: ``Tensor.__setstate__``,
  which torch.save never writes and whose legacy form ``set_``s the tensor to any size, growing its storage);
- storages (``torch_zip`` resolves ``torch.FloatStorage`` etc. itself, before calling ``find_class``);
- module classes of ``ultralytics.*`` and ``torch.nn.modules.*``, replaced by inert ``StubModule`` subclasses
  that only record their pickled state (``__dict__``), so nothing of Ultralytics is imported or executed.

``StateUnpickler`` (Accelerate's ``optimizer.bin`` and ``random_states_<rank>.pkl``) allows no stubs, and the numpy
array of numpy's RNG state through wrapped numpy callables. Any other global (``os.system``, ``builtins.eval``,
``subprocess.Popen`` ...) raises ``UnsafeCheckpointError``.
"""

from __future__ import annotations

import _compat_pickle
import collections
import io
import math
import pickle
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

UnpicklingError = pickle.UnpicklingError


class _NoTensorState(TorchFunctionMode):
    """Refuses ``Tensor.__setstate__`` (a pickle's ``BUILD`` on a tensor or parameter) while a pickle loads: torch
    dispatches it through this mode before it runs ``set_`` or installs hooks."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.Tensor.__setstate__:
            raise UnpicklingError("state set on a tensor (pickle BUILD: Tensor.__setstate__, which torch.save never "
                                  "writes; it could resize the tensor's storage to any size)")
        return func(*args, **(kwargs or {}))


def _rebuild_tensor(storage: Any, storage_offset: Any, size: Any, stride: Any) -> torch.Tensor:
    """``torch._utils._rebuild_tensor`` after checking the view lies inside its storage (``Tensor.set_`` does not
    check: a crafted size would read past the storage's memory)."""
    if not isinstance(storage, torch.storage.TypedStorage):
        raise UnpicklingError("a tensor whose storage is not a storage")
    if not (isinstance(size, (tuple, list)) and isinstance(stride, (tuple, list)) and len(size) == len(stride)
            and all(type(v) is int and v >= 0 for v in (storage_offset, *size, *stride))):
        raise UnpicklingError("a tensor with an invalid offset, size or stride")
    last = storage_offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    # elements of the storage (TypedStorage.size() warns that TypedStorage is deprecated; torch itself uses it)
    elements = storage._untyped_storage.nbytes() // torch.empty((), dtype=storage.dtype).element_size()
    if math.prod(size) and last >= elements:
        raise UnpicklingError(f"a tensor view of {list(size)} reaches element {last} of a {elements}-element storage")
    return torch._utils._rebuild_tensor(storage, storage_offset, tuple(size), tuple(stride))


def _check_flags(requires_grad: Any, backward_hooks: Any) -> None:
    if type(requires_grad) is not bool or not isinstance(backward_hooks, dict) or backward_hooks:
        raise UnpicklingError("a tensor with backward hooks or a non-boolean requires_grad")


def _rebuild_tensor_v2(storage: Any, storage_offset: Any, size: Any, stride: Any, requires_grad: Any,
                       backward_hooks: Any, metadata: Any = None) -> torch.Tensor:
    _check_flags(requires_grad, backward_hooks)
    if metadata and not (isinstance(metadata, dict) and all(type(v) is bool for v in metadata.values())):
        raise UnpicklingError("a tensor with unknown metadata")
    tensor = _rebuild_tensor(storage, storage_offset, size, stride)
    tensor.requires_grad = requires_grad
    if metadata:
        torch._utils.set_tensor_metadata(tensor, metadata)
    return tensor


def _rebuild_parameter(data: Any, requires_grad: Any, backward_hooks: Any) -> torch.nn.Parameter:
    _check_flags(requires_grad, backward_hooks)
    if not isinstance(data, torch.Tensor):
        raise UnpicklingError("a parameter that holds no tensor")
    return torch.nn.Parameter(data, requires_grad)


_ALLOWED: dict[tuple[str, str], Any] = {
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch", "Size"): torch.Size,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("builtins", "set"): set,
}
_STUB_PREFIXES = ("ultralytics.", "torch.nn.modules.")
# C modules whose functions pickle under an implementation name: say the public one in errors too.
_PUBLIC_NAMES = {"posix": "os", "nt": "os"}


class UnsafeCheckpointError(pickle.UnpicklingError):
    """The checkpoint names a global outside the allow-list; loading it could run arbitrary code."""


class StubModule:
    """Placeholder for a pickled module class: keeps its state (``_parameters``, ``_buffers``, ``_modules``...)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> StubModule:
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (dict state, slot state)
            state = {**(state[0] or {}), **(state[1] or {})}
        if isinstance(state, dict):
            self.__dict__.update(state)


# Module classes one file may name: a YOLO11 checkpoint names ~30. Each stub class costs ~2 KB, so a 30 MB pickle
# naming a million would cost gigabytes.
MAX_STUB_CLASSES = 1000


class Unpickler(pickle.Unpickler):
    """For Ultralytics checkpoints: tensors, containers and inert stubs of module classes."""

    allowed: dict[tuple[str, str], Any] = _ALLOWED
    stub_prefixes: tuple[str, ...] = _STUB_PREFIXES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stub_classes: dict[tuple[str, str], type] = {}  # this file's, made when first named

    def _stub(self, module: str, name: str) -> type:
        if (module, name) not in self.stub_classes:
            if len(self.stub_classes) >= MAX_STUB_CLASSES:
                raise UnpicklingError(f"more than MAX_STUB_CLASSES = {MAX_STUB_CLASSES} module classes named")
            self.stub_classes[(module, name)] = type(name, (StubModule,), {"__module__": f"stub:{module}",
                                                                          "__qualname__": name})
        return self.stub_classes[(module, name)]

    def load(self) -> Any:
        with _NoTensorState():
            return super().load()

    def find_class(self, module: str, name: str) -> Any:
        # Protocol-2 pickles (torch.save's) spell names the Python 2 way (__builtin__.set, commands.getoutput);
        # translate them as pickle's own find_class does, so the allow-list and the errors use Python 3 names.
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        if (module, name) in self.allowed:
            return self.allowed[(module, name)]
        if self.stub_prefixes and module.startswith(self.stub_prefixes):
            return self._stub(module, name)
        public = _PUBLIC_NAMES.get(module)
        alias = f" ({public}.{name[:100]})" if public else ""
        raise UnsafeCheckpointError(  # names cut short: a pickle may name a global of megabytes
            f"refusing to load checkpoint: it references the global {module[:100]}.{name[:100]}{alias}, which is not "
            "a tensor, storage or module class. Loading it could execute arbitrary code; only open it with trusted "
            "tools."
        )


# --- training state (Accelerate's optimizer.bin, random_states_<rank>.pkl): tensors, containers, and the numpy
# array of numpy's RNG state, each numpy callable wrapped so that it builds nothing else.

class _NdarrayClass:
    """What ``numpy.ndarray`` unpickles to: only ``_reconstruct`` accepts it (calling it would allocate freely)."""


def _np_reconstruct(cls: Any, shape: Any, dtype_code: Any) -> Any:
    import numpy as np

    if cls is not _NdarrayClass or shape != (0,):  # numpy pickles an empty array, then fills it via __setstate__
        raise UnpicklingError("numpy _reconstruct with unexpected arguments")
    return np.ndarray.__new__(np.ndarray, (0,), dtype=np.uint8)


def _np_dtype(spec: Any, align: Any = False, copy: Any = False) -> Any:
    import numpy as np

    if not isinstance(spec, str) or len(spec) > 8:
        raise UnpicklingError("numpy dtype with unexpected arguments")
    dtype = np.dtype(spec)
    if dtype.hasobject:  # an object array would unpickle its items with no allow-list of ours in between
        raise UnpicklingError("numpy object arrays are refused")
    return dtype


def _latin1_bytes(text: Any, encoding: Any = "latin1") -> bytes:
    """``_codecs.encode`` as protocol-2 pickles use it for bytes: a str in latin-1, nothing else."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise UnpicklingError("_codecs.encode with unexpected arguments")
    return text.encode("latin1")


_STATE_ALLOWED: dict[tuple[str, str], Any] = {
    **_ALLOWED,
    ("numpy._core.multiarray", "_reconstruct"): _np_reconstruct,
    ("numpy.core.multiarray", "_reconstruct"): _np_reconstruct,
    ("numpy", "ndarray"): _NdarrayClass,
    ("numpy", "dtype"): _np_dtype,
    ("_codecs", "encode"): _latin1_bytes,
}


class StateUnpickler(Unpickler):
    """For training state written by ``torch.save`` (optimizer, RNG): no module stubs, numpy arrays allowed."""

    allowed = _STATE_ALLOWED
    stub_prefixes = ()


def load(file: Any, **kwargs: Any) -> Any:
    return Unpickler(file, **kwargs).load()


def loads(data: bytes, **kwargs: Any) -> Any:
    return Unpickler(io.BytesIO(data), **kwargs).load()
