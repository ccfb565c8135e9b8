"""The loading gate: every file the project reads from a user (weights, checkpoints, training state, configs)
is checked here before anything is built from it, and refused with one line naming the file and what is wrong.

- torch ``.pt``/``.bin``/``.pkl`` files: ``read_torch_file`` (``torch_zip.py``), never ``torch.load``: TorchScript
  and any zip that is not a plain ``torch.save`` checkpoint are refused before a byte is unpickled, and ``data.pkl``
  goes through a restricted unpickler (``safe_pickle.py``).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any


class FileRefusedError(ValueError):
    """A file the gate refuses; the message is one line: the file, then what is wrong with it."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path, self.problem = str(path), problem
        super().__init__(f"{path}: {problem}")


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
