"""What a resume reads, checked before Accelerate's ``load_state`` touches it.

Accelerate reads ``optimizer.bin``, ``scaler.pt`` and ``random_states_<rank>.pkl`` with ``torch.load`` (a crafted
file gives a traceback at best) and skips RNG state it cannot read without a word. Here every file of the
checkpoint goes through the loading gate (``yolo11.gate``: no ``torch.load``, restricted unpickling) and its
contents are compared with what is being resumed: the model's tensors, the optimizer's groups and state shapes,
the RNG states (applied by us after ``load_state``, so none is skipped), the training counters' types and ranges,
the EMA. A file that is missing or unreadable is a ``CheckpointError`` naming it, unless ``--allow-changes``
accepts the gap (then it is reported in a note); a file that is present and bad is refused either way.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from yolo11.gate import FileRefusedError, read_json, read_safetensors, read_torch_file
from yolo11.weights.safe_pickle import StateUnpickler

MODEL_FILE, OPTIMIZER_FILE, SCALER_FILE = "model.safetensors", "optimizer.bin", "scaler.pt"
# Every file a checkpoint of ours holds (Accelerate's save_state plus ours); anything else is refused.
_KNOWN_FILE = re.compile(r"model\.safetensors|optimizer\.bin|scaler\.pt|random_states_\d+\.pkl|train_state\.json|"
                         r"ema\.safetensors|config\.json")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be resumed from, or a state that must not be saved."""


@dataclass
class CheckedCheckpoint:
    train_state: dict
    ema: dict | None  # ModelEMA.load_state_dict's argument, None when the checkpoint has none (allowed)
    rng: dict | None  # this process's RNG states, None when missing (allowed)
    notes: list[str] = field(default_factory=list)


def _refuse(path: Path, problem: str) -> CheckpointError:
    return CheckpointError(f"{path}: {problem}")


def _missing(path: Path, consequence: str, allow_changes: bool, notes: list[str]) -> None:
    if not allow_changes:
        raise _refuse(path, f"missing; {consequence}. Resume from a complete checkpoint, or add --allow-changes "
                            "true to continue without it")
    notes.append(f"{path.name} missing (--allow-changes): {consequence}")


def check_optimizer_state(path: Path, saved: Any, optimizer: torch.optim.Optimizer) -> None:
    """``saved`` (an ``optimizer.state_dict()`` read through the gate) fits ``optimizer``: same groups, parameter
    counts and group keys; per-parameter state of scalars or the parameter's shape, finite."""
    ours = optimizer.state_dict()
    if not isinstance(saved, dict) or set(saved) != {"state", "param_groups"}:
        raise _refuse(path, "not an optimizer state (expected a dict of 'state' and 'param_groups')")
    groups = saved["param_groups"]
    if not isinstance(groups, list) or len(groups) != len(ours["param_groups"]):
        raise _refuse(path, f"{len(groups) if isinstance(groups, list) else 'no'} parameter groups, the optimizer "
                            f"has {len(ours['param_groups'])}")
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for k, (theirs, mine) in enumerate(zip(groups, ours["param_groups"], strict=True)):
        if not isinstance(theirs, dict) or set(theirs) != set(mine):
            raise _refuse(path, f"parameter group {k} has keys {sorted(map(str, theirs))[:12]}, the optimizer "
                                f"{sorted(mine)}")
        if theirs["params"] != mine["params"]:
            raise _refuse(path, f"parameter group {k} lists other parameters than the model's "
                                f"({len(theirs['params']) if isinstance(theirs['params'], list) else '?'} vs "
                                f"{len(mine['params'])})")
        for key, value in theirs.items():
            if key != "params" and isinstance(value, float) and not math.isfinite(value):
                raise _refuse(path, f"parameter group {k}: {key} is {value}")
    state = saved["state"]
    if not isinstance(state, dict):
        raise _refuse(path, "optimizer 'state' is not a dict")
    for index, entry in state.items():
        if type(index) is not int or not 0 <= index < len(params) or not isinstance(entry, dict):
            raise _refuse(path, f"optimizer state for unknown parameter {str(index)[:20]}")
        for name, value in entry.items():
            if not isinstance(value, (torch.Tensor, int, float)):
                raise _refuse(path, f"optimizer state {index}.{name} is a {type(value).__name__}")
            if isinstance(value, torch.Tensor):
                if value.dim() and tuple(value.shape) != tuple(params[index].shape):
                    raise _refuse(path, f"optimizer state {index}.{name} has shape {list(value.shape)}, its "
                                        f"parameter {list(params[index].shape)}")
                if value.is_floating_point() and not bool(value.isfinite().all()):
                    raise _refuse(path, f"optimizer state {index}.{name} holds NaN or inf")


def check_rng_state(path: Path, saved: Any) -> dict:
    """The RNG states of ``random_states_<rank>.pkl`` (Accelerate's), each tried on a throwaway generator."""
    if not isinstance(saved, dict):
        raise _refuse(path, "not an RNG state (expected a dict)")
    required = ("random_state", "numpy_random_seed", "torch_manual_seed")
    absent = [key for key in required if key not in saved]
    if absent:
        raise _refuse(path, f"RNG state without {', '.join(absent)}")
    try:
        random.Random().setstate(saved["random_state"])
        np.random.RandomState().set_state(saved["numpy_random_seed"])
        torch.Generator().set_state(saved["torch_manual_seed"])
    except (TypeError, ValueError, RuntimeError, OverflowError, IndexError) as err:
        raise _refuse(path, f"invalid RNG state ({' '.join(str(err).split())[:160]})") from None
    cuda = saved.get("torch_cuda_manual_seed")
    if cuda is not None and not (isinstance(cuda, list) and all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8
                                                                 for t in cuda)):
        raise _refuse(path, "invalid CUDA RNG state")
    return saved


def apply_rng_state(rng: dict) -> None:
    """Set the process's generators as Accelerate's ``load_state`` does (it skips them silently on an error)."""
    random.setstate(rng["random_state"])
    np.random.set_state(rng["numpy_random_seed"])
    torch.set_rng_state(rng["torch_manual_seed"])
    if rng.get("torch_cuda_manual_seed") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["torch_cuda_manual_seed"])


_COUNTERS = ("epoch", "batches_in_epoch", "iteration", "optimizer_steps", "loss_batches")


def check_train_state(path: Path, saved: Any) -> dict:
    """``train_state.json``: every key of ``TrainState``, of its type and range."""
    from yolo11.engine.checkpoint import TrainState

    fields = set(TrainState().state_dict())
    if not isinstance(saved, dict) or set(saved) != fields:
        keys = sorted(map(str, saved)) if isinstance(saved, dict) else type(saved).__name__
        raise _refuse(path, f"training state keys {keys}, expected {sorted(fields)}")
    for key in _COUNTERS:
        if type(saved[key]) is not int or saved[key] < 0:
            raise _refuse(path, f"{key} is {saved[key]!r}, expected an integer >= 0")
    if saved["optimizer_steps"] > saved["iteration"] or saved["loss_batches"] > saved["batches_in_epoch"]:
        raise _refuse(path, "counters that contradict each other (more optimizer steps than batches, or more loss "
                            "batches than batches in the epoch)")
    loss_sum = saved["loss_sum"]
    if loss_sum is not None and not (isinstance(loss_sum, list) and len(loss_sum) == 3 and all(
            type(v) in (int, float) and math.isfinite(v) for v in loss_sum)):
        raise _refuse(path, f"loss_sum is {str(loss_sum)[:60]}, expected null or 3 finite numbers")
    if type(saved["best_fitness"]) not in (int, float) or not math.isfinite(saved["best_fitness"]):
        raise _refuse(path, f"best_fitness is {saved['best_fitness']!r}, expected a finite number")
    if type(saved["best_epoch"]) is not int or not -1 <= saved["best_epoch"] <= saved["epoch"]:
        raise _refuse(path, f"best_epoch is {saved['best_epoch']!r}, expected an integer in -1..epoch")
    if saved["tracker_run_id"] is not None and not isinstance(saved["tracker_run_id"], str):
        raise _refuse(path, "tracker_run_id must be a string or null")
    return saved


def check_ema_file(path: Path, module: nn.Module) -> dict:
    tensors, metadata = read_safetensors(path, expected=module.state_dict())
    try:
        updates, decay, tau = int(metadata["updates"]), float(metadata["decay"]), float(metadata["tau"])
    except (KeyError, ValueError) as err:
        raise _refuse(path, f"EMA metadata without a valid {err}") from None
    if updates < 0 or not 0 < decay <= 1 or not tau > 0:
        raise _refuse(path, f"EMA metadata out of range (updates {updates}, decay {decay}, tau {tau})")
    return {"module": tensors, "updates": updates, "decay": decay, "tau": tau}


def check_checkpoint(checkpoint: Path, *, model: nn.Module | None, optimizer: torch.optim.Optimizer | None,
                     ema_module: nn.Module | None, process_index: int, allow_changes: bool) -> CheckedCheckpoint:
    """Every file of ``checkpoint`` through the gate and compared with what resumes from it (``model`` unwrapped;
    ``None`` checks that file's form only); raises ``CheckpointError`` or ``FileRefusedError`` naming the file."""
    notes: list[str] = []
    unknown = sorted(p.name for p in checkpoint.iterdir() if not _KNOWN_FILE.fullmatch(p.name))
    if unknown:
        raise _refuse(checkpoint, f"holds {unknown}, which this trainer does not write; refused (only its own "
                                  "files are read)")
    model_file = checkpoint / MODEL_FILE
    if not model_file.is_file():
        raise _refuse(model_file, "missing: no model weights to resume from")
    read_safetensors(model_file, expected=None if model is None else model.state_dict())
    optimizer_file = checkpoint / OPTIMIZER_FILE
    if optimizer is not None and not optimizer_file.is_file():
        raise _refuse(optimizer_file, "missing: no optimizer state to resume from")
    if optimizer_file.is_file():
        saved = read_torch_file(optimizer_file, StateUnpickler)
        if optimizer is not None:
            check_optimizer_state(optimizer_file, saved, optimizer)
    if (checkpoint / SCALER_FILE).is_file() and not isinstance(read_torch_file(checkpoint / SCALER_FILE,
                                                                               StateUnpickler), dict):
        raise _refuse(checkpoint / SCALER_FILE, "not a GradScaler state")
    rng_file = checkpoint / f"random_states_{process_index}.pkl"
    rng = None
    if rng_file.is_file():
        rng = check_rng_state(rng_file, read_torch_file(rng_file, StateUnpickler))
    else:
        written = len(list(checkpoint.glob("random_states_*.pkl")))
        why = f" (the checkpoint was written by {written} process(es))" if 0 < written <= process_index else ""
        _missing(rng_file, f"process {process_index}'s random streams would differ from an uninterrupted run{why}",
                 allow_changes, notes)
    from yolo11.engine.checkpoint import EMA_FILE, STATE_FILE

    train_state = check_train_state(checkpoint / STATE_FILE, read_json(checkpoint / STATE_FILE))
    ema = None
    if ema_module is not None:
        if (checkpoint / EMA_FILE).is_file():
            ema = check_ema_file(checkpoint / EMA_FILE, ema_module)
        else:
            _missing(checkpoint / EMA_FILE, "the EMA restarts from the resumed weights", allow_changes, notes)
    return CheckedCheckpoint(train_state, ema, rng, notes)


__all__ = ["CheckedCheckpoint", "CheckpointError", "FileRefusedError", "apply_rng_state", "check_checkpoint"]
