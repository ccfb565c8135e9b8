"""The capture contract of code that runs inside a CUDA graph, checked on any device.

A CUDA graph records kernels once and replays them; what it cannot record breaks the capture or, worse, is frozen
into it. So the training micro-step (HSV, forward, loss with its assigner, backward) and validation's forward
must not, on any call after their first:

- build a tensor from host numbers (``torch.tensor``, ``new_tensor``, ``as_tensor``/``from_numpy``): on a GPU
  that is a host-to-device copy, illegal during capture (YOLO26's loss once did it, and could not train). A
  0-dim one is allowed: ``x[m] = 0`` makes one, and CUDA kernels take it by value, with no copy. The CPU check
  cannot tell ``torch.tensor(0.5, device=x.device)`` (a copy on a GPU) from that, so it lets both pass;
- synchronise with the host (``.item()``, ``bool(t)``, ``int(t)``, ``.tolist()``, ``.numpy()``, ``.cpu()``),
  which also means no Python branch on a tensor's value;
- produce data-dependent shapes (``nonzero``, boolean-mask indexing, ``masked_select``, ``unique``,
  ``repeat_interleave`` by a tensor): a replay would reuse the first call's shape.

``CaptureChecker`` is a dispatch mode that sees every op on the CPU as on CUDA and raises
``CaptureViolation`` at the first breach, naming the op and the line of our code that called it. CPU tests
(``tests/test_capture.py``) run every model family's micro-step and validation step under it, so the rule holds
in CI, which has no GPU. The first call of a shape is the warm-up (caches are filled there) and is not checked,
as ``GraphedMicroStep`` runs it eagerly.
"""

from __future__ import annotations

import traceback
from contextlib import ExitStack
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_PACKAGE = Path(__file__).resolve().parents[1]

# aten ops that break the contract, with what each means
FORBIDDEN_OPS = {
    "lift_fresh": "a tensor built from host numbers (torch.tensor / new_tensor / as_tensor)",
    "lift_fresh_copy": "a tensor built from host numbers (torch.tensor / new_tensor / as_tensor)",
    "_local_scalar_dense": "a host sync (.item(), bool(), int() or float() of a tensor, a branch on its value)",
    "nonzero": "a data-dependent shape (nonzero / torch.where with one argument / argwhere)",
    "masked_select": "a data-dependent shape (masked_select)",
    "_unique2": "a data-dependent shape (unique)",
    "unique_dim": "a data-dependent shape (unique)",
    "unique_consecutive": "a data-dependent shape (unique_consecutive)",
}
# Tensor methods that leave the device without an aten op the dispatch mode would see
HOST_METHODS = ("tolist", "numpy", "__array__")


class CaptureViolation(RuntimeError):
    """Code inside a captured region broke the capture contract."""


def _caller() -> str:
    """The innermost frame of this package outside this module: where the offending call was written."""
    for frame in reversed(traceback.extract_stack()):
        path = Path(frame.filename).resolve()
        if path.is_relative_to(_PACKAGE) and path != Path(__file__).resolve():
            return f"{path.relative_to(_PACKAGE.parent)}:{frame.lineno} ({frame.line})"
    return "outside the yolo11 package"


def _breach(what: str, op: str) -> CaptureViolation:
    return CaptureViolation(f"{what} inside a captured region: {op} at {_caller()}")


class CaptureChecker(TorchDispatchMode):
    """``with CaptureChecker(): step(...)`` raises ``CaptureViolation`` at the first op a CUDA graph could not
    capture faithfully. ``device``: where the step's tensors live (a copy to any other device is a transfer)."""

    def __init__(self, device: torch.device | str = "cpu"):
        super().__init__()
        self.device = torch.device(device)
        self._methods = ExitStack()

    def __enter__(self):
        for name in HOST_METHODS:
            self._methods.enter_context(_refusing_method(name))
        return super().__enter__()

    def __exit__(self, *exc):
        self._methods.close()
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._overloadpacket.__name__
        if name in FORBIDDEN_OPS and not (name.startswith("lift_fresh") and args[0].dim() == 0):
            raise _breach(FORBIDDEN_OPS[name], str(func))
        if name == "repeat_interleave" and func._overloadname != "self_int" and kwargs.get("output_size") is None:
            raise _breach("a data-dependent shape (repeat_interleave by a tensor)", str(func))
        if name == "index" and any(i is not None and i.dtype == torch.bool for i in args[1]):
            raise _breach("a data-dependent shape (boolean-mask indexing)", str(func))
        if name == "_to_copy" and kwargs.get("device") is not None and torch.device(kwargs["device"]).type != \
                self.device.type:
            raise _breach("a transfer to another device", str(func))
        return func(*args, **kwargs)


class _refusing_method:
    """Replace ``torch.Tensor.<name>`` by one that raises, for the life of the context."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        self.original = getattr(torch.Tensor, self.name)
        name = self.name

        def refuse(tensor, *args, **kwargs):
            raise _breach("a host sync", f"Tensor.{name}()")

        setattr(torch.Tensor, name, refuse)

    def __exit__(self, *exc):
        setattr(torch.Tensor, self.name, self.original)
