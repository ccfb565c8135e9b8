"""What a resume reads, checked before Accelerate's ``load_state`` touches it.

Accelerate reads ``optimizer.bin``, ``scaler.pt`` and ``random_states_<rank>.pkl`` with ``torch.load`` (a crafted
file gives a traceback at best) and skips RNG state it cannot read without a word. Here every file of the checkpoint
goes through the loading gate (``yolo11.gate``: no ``torch.load``, restricted unpickling) and its contents are
compared with what is being resumed: the model's tensors, the optimizer's groups and state shapes, the RNG states
(applied by us after ``load_state``, so none is skipped) and their number (one per process), the training counters'
types and ranges and their fit to the resumed run (``RunBounds``), the EMA. A file that is missing or unreadable is
a ``CheckpointError`` naming it, unless ``--allow-changes`` accepts the gap (then it is reported in a note); a file
that is present and bad is refused either way.
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

from yolo11.engine.run_state import EMA_FILE, STATE_FILE, CheckpointError, TrainState
from yolo11.gate import FileRefusedError, read_json, read_safetensors
from yolo11.weights.safe_pickle import StateUnpickler
from yolo11.weights.torch_zip import read_torch_file

MODEL_FILE, OPTIMIZER_FILE, SCALER_FILE = "model.safetensors", "optimizer.bin", "scaler.pt"
# Every file a checkpoint of ours holds (Accelerate's save_state plus ours); anything else is refused.
_KNOWN_FILE = re.compile(r"model\.safetensors|optimizer\.bin|scaler\.pt|random_states_\d+\.pkl|train_state\.json|"
                         r"ema\.safetensors|config\.json")


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


@dataclass(frozen=True)
class RunBounds:
    """What the resumed run makes of the training counters: ``epochs`` to train, ``batches_per_epoch`` (global)."""

    epochs: int
    batches_per_epoch: int


def check_train_state(path: Path, saved: Any, bounds: RunBounds | None = None, allow_changes: bool = False,
                      notes: list[str] | None = None) -> dict:
    """``train_state.json``: every key of ``TrainState``, of its type and range, and (``bounds``) within the run
    that resumes it. Each refusal names the key; what ``allow_changes`` let through is said in ``notes``."""

    fields = set(TrainState().state_dict())
    if not isinstance(saved, dict) or set(saved) != fields:
        keys = sorted(map(str, saved)) if isinstance(saved, dict) else type(saved).__name__
        raise _refuse(path, f"training state keys {keys}, expected {sorted(fields)}")
    for key in _COUNTERS:
        if type(saved[key]) is not int or saved[key] < 0:
            raise _refuse(path, f"{key} is {saved[key]!r}, expected an integer >= 0")
    epoch, batches, iteration = saved["epoch"], saved["batches_in_epoch"], saved["iteration"]
    if saved["optimizer_steps"] > iteration:
        raise _refuse(path, f"optimizer_steps is {saved['optimizer_steps']}, more than iteration {iteration} (the "
                            "batches trained): an optimizer step takes at least one batch")
    if saved["loss_batches"] > batches:
        raise _refuse(path, f"loss_batches is {saved['loss_batches']}, more than batches_in_epoch {batches}")
    if iteration < epoch + batches:
        raise _refuse(path, f"iteration is {iteration}, fewer than the {epoch} finished epoch(s) and "
                            f"batches_in_epoch {batches} take")
    loss_sum = saved["loss_sum"]
    if loss_sum is not None and not (isinstance(loss_sum, list) and len(loss_sum) == 3 and all(
            type(v) in (int, float) and math.isfinite(v) for v in loss_sum)):
        raise _refuse(path, f"loss_sum is {str(loss_sum)[:60]}, expected null or 3 finite numbers")
    if loss_sum is None and saved["loss_batches"]:
        raise _refuse(path, f"loss_sum is null, but loss_batches is {saved['loss_batches']}")
    best = saved["best_fitness"]
    if type(best) not in (int, float) or not math.isfinite(best) or not -1 <= best <= 1:
        raise _refuse(path, f"best_fitness is {best!r}, expected a finite number in -1..1 (-1: no validation yet)")
    best_epoch = saved["best_epoch"]
    if type(best_epoch) is not int or not (best_epoch == -1 or 0 <= best_epoch < epoch):
        raise _refuse(path, f"best_epoch is {best_epoch!r}, expected -1 or a finished epoch (0..{epoch - 1})")
    if saved["tracker_run_id"] is not None and not isinstance(saved["tracker_run_id"], str):
        raise _refuse(path, "tracker_run_id must be a string or null")
    if bounds is not None:
        _check_within_run(path, saved, bounds, allow_changes, notes if notes is not None else [])
    return saved


def _check_within_run(path: Path, saved: dict, bounds: RunBounds, allow_changes: bool, notes: list[str]) -> None:
    """The counters against the resumed run: an epoch beyond ``--epochs`` trains nothing, more batches than an epoch
    holds crash the epoch's skip; the iteration (warmup, accumulation) must be where the epochs put it."""
    epoch, batches, iteration = saved["epoch"], saved["batches_in_epoch"], saved["iteration"]
    if epoch > bounds.epochs:
        raise _refuse(path, f"epoch is {epoch}, beyond this run's --epochs {bounds.epochs}: nothing would train")
    if batches > bounds.batches_per_epoch and allow_changes:  # a larger batch now: fewer batches an epoch
        notes.append(f"epoch {epoch + 1}: {batches} batches were done, more than it holds at this batch size "
                     f"({bounds.batches_per_epoch}): resumed at its end")
        saved["batches_in_epoch"] = batches = bounds.batches_per_epoch
    if batches > bounds.batches_per_epoch:
        raise _refuse(path, f"batches_in_epoch is {batches}, but an epoch of this run has "
                            f"{bounds.batches_per_epoch} batches")
    if epoch == bounds.epochs and batches:
        raise _refuse(path, f"batches_in_epoch is {batches} after the run's last epoch ({epoch}), expected 0")
    expected = epoch * bounds.batches_per_epoch + batches
    if iteration != expected and not allow_changes:
        raise _refuse(path, f"iteration is {iteration}, but epoch {epoch} x {bounds.batches_per_epoch} batches + "
                            f"batches_in_epoch {batches} is {expected}; add --allow-changes true if the batch size "
                            "or the data changed in an earlier resume")


def check_ema_file(path: Path, module: nn.Module) -> dict:
    tensors, metadata = read_safetensors(path, expected=module.state_dict())
    try:
        updates, decay, tau = int(metadata["updates"]), float(metadata["decay"]), float(metadata["tau"])
    except (KeyError, ValueError) as err:
        raise _refuse(path, f"EMA metadata without a valid {err}") from None
    if updates < 0 or not 0 < decay <= 1 or not tau > 0:
        raise _refuse(path, f"EMA metadata out of range (updates {updates}, decay {decay}, tau {tau})")
    return {"module": tensors, "updates": updates, "decay": decay, "tau": tau}


def check_process_count(checkpoint: Path, num_processes: int, allow_changes: bool, notes: list[str]) -> None:
    """The checkpoint holds one RNG state per process that wrote it: resumed on another number of processes, the
    random streams and each process's share of a batch change. Refused (the same on every process) unless
    ``allow_changes``."""
    written = len(list(checkpoint.glob("random_states_*.pkl")))
    if not written or written == num_processes:
        return
    many = abs(num_processes - written) > 1
    if num_processes > written:
        lost = f"{_ranks(written, num_processes - 1)} {'have' if many else 'has'} no saved random state"
    else:
        lost = f"the saved random state{'s' if many else ''} of {_ranks(num_processes, written - 1)} " \
               f"{'are' if many else 'is'} dropped"
    change = (f"written by {written} process(es), resumed on {num_processes}: {lost}, and each process's share of a "
              "batch changes")
    if not allow_changes:
        raise _refuse(checkpoint, f"{change}. Resume on {written} process(es), or add --allow-changes true to "
                                  f"continue on {num_processes}")
    notes.append(f"{checkpoint.name} {change} (--allow-changes)")


def _ranks(first: int, last: int) -> str:
    return f"process {first}" if first == last else f"processes {first}..{last}"


def _present(path: Path) -> bool:
    """Whether anything is at ``path``: a FIFO, a device or a dangling link too, which the gate then refuses by
    kind when it is read. ``is_file()`` called them missing, which ``--allow-changes`` accepted, and Accelerate's
    ``load_state`` then blocked for ever opening the FIFO."""
    return path.exists() or path.is_symlink()


def check_checkpoint(checkpoint: Path, *, model: nn.Module | None, optimizer: torch.optim.Optimizer | None,
                     ema_module: nn.Module | None, process_index: int, allow_changes: bool,
                     num_processes: int | None = None, bounds: RunBounds | None = None) -> CheckedCheckpoint:
    """Every file of ``checkpoint`` through the gate and compared with what resumes from it (``model`` unwrapped;
    ``None`` checks that file's form only; ``num_processes``: of the resuming run; ``bounds``: its epochs and
    batches); raises ``CheckpointError`` or ``FileRefusedError`` naming the file."""
    notes: list[str] = []
    unknown = sorted(p.name for p in checkpoint.iterdir() if not _KNOWN_FILE.fullmatch(p.name))
    if unknown:
        raise _refuse(checkpoint, f"holds {unknown}, which this trainer does not write; refused (only its own "
                                  "files are read)")
    if num_processes is not None:
        check_process_count(checkpoint, num_processes, allow_changes, notes)
    model_file = checkpoint / MODEL_FILE
    if not _present(model_file):
        raise _refuse(model_file, "missing: no model weights to resume from")
    read_safetensors(model_file, expected=None if model is None else model.state_dict())
    optimizer_file = checkpoint / OPTIMIZER_FILE
    if optimizer is not None and not _present(optimizer_file):
        raise _refuse(optimizer_file, "missing: no optimizer state to resume from")
    if _present(optimizer_file):
        saved = read_torch_file(optimizer_file, StateUnpickler)
        if optimizer is not None:
            check_optimizer_state(optimizer_file, saved, optimizer)
    if _present(checkpoint / SCALER_FILE) and not isinstance(read_torch_file(checkpoint / SCALER_FILE,
                                                                               StateUnpickler), dict):
        raise _refuse(checkpoint / SCALER_FILE, "not a GradScaler state")
    rng_file = checkpoint / f"random_states_{process_index}.pkl"
    rng = None
    if _present(rng_file):
        rng = check_rng_state(rng_file, read_torch_file(rng_file, StateUnpickler))
    else:
        written = len(list(checkpoint.glob("random_states_*.pkl")))
        why = f" (the checkpoint was written by {written} process(es))" if 0 < written <= process_index else ""
        _missing(rng_file, f"process {process_index}'s random streams would differ from an uninterrupted run{why}",
                 allow_changes, notes)

    train_state = check_train_state(checkpoint / STATE_FILE, read_json(checkpoint / STATE_FILE), bounds,
                                    allow_changes, notes)
    ema = None
    if ema_module is not None:
        if _present(checkpoint / EMA_FILE):
            ema = check_ema_file(checkpoint / EMA_FILE, ema_module)
        else:
            _missing(checkpoint / EMA_FILE, "the EMA restarts from the resumed weights", allow_changes, notes)
    return CheckedCheckpoint(train_state, ema, rng, notes)


__all__ = ["CheckedCheckpoint", "CheckpointError", "FileRefusedError", "RunBounds", "apply_rng_state",
           "check_checkpoint"]
