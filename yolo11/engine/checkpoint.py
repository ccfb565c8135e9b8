"""Resumable checkpoints written atomically and without pickles of our own, and the run's training counters.

Layout of a run folder::

    checkpoints/checkpoint-00000420/   Accelerate's save_state (model, optimizer, RNG of every rank) plus
                                       train_state.json (TrainState) and ema.safetensors (EMA weights, counters)
    checkpoints/latest                 name of the newest complete checkpoint (written last, atomically)

A checkpoint is written to ``checkpoints/.tmp-<name>`` by every rank and renamed into place by the main process once
all ranks are done, then ``latest`` is replaced, then older checkpoints are deleted (never the one just written): a
crash at any point leaves a complete checkpoint that ``latest`` names, and a write that fails on any rank (a full
disk) fails every rank, with the temporary folder removed. Checkpoints in the folder that the run does not continue
(an earlier run's, under ``--exist-ok``) are moved aside at its start, never pruned. Our own state is JSON and
safetensors. Before Accelerate's ``load_state`` reads a folder, ``resume_check.check_checkpoint`` passes every file
through the loading gate (no ``torch.load``, restricted unpickling) and compares it with the model and optimizer, so
resuming executes no code from the folder and refuses a crafted, truncated or incomplete one in one line. A state
holding a non-finite weight is never written.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from safetensors.torch import save_file
from torch import nn

from yolo11.engine.config import FIXED, LOCAL, resume_rules
from yolo11.engine.ema import ModelEMA
from yolo11.engine.failures import FailedElsewhere, agreed
from yolo11.engine.resume_check import RunBounds, apply_rng_state, check_checkpoint
from yolo11.engine.run_state import (  # noqa: F401 - re-exported: the writer's callers name them from here
    CHECKPOINT_NAME,
    CONFIG_FILE,
    EMA_FILE,
    STATE_FILE,
    CheckpointError,
    TrainState,
    checkpoint_root,
)
from yolo11.gate import read_json, read_regular
from yolo11.output_errors import write_file, writing
from yolo11.weights.safetensors_io import honour_umask, host_copies, non_finite_flag

MAX_LATEST_BYTES = 4096  # checkpoints/latest holds one folder name


def save_checkpoint(accelerator: Accelerator, run_dir: Path, state: TrainState, keep: int, model: nn.Module,
                    ema: ModelEMA | None = None, config: dict | None = None) -> Path:
    """Write a resumable checkpoint; call on every rank. Returns the final checkpoint folder.

    Raises ``CheckpointError`` (on every rank, before anything is written) when a weight of the model or the
    EMA is not finite: the previous checkpoint stays the latest. A write that fails on any rank (a full disk) raises
    on every rank (``agreed``: its ``OSError`` where it failed, ``FailedElsewhere`` elsewhere), after the
    half-written folder is removed: ``latest`` still names the previous checkpoint.
    """
    check_finite(accelerator, model, ema)
    root = checkpoint_root(run_dir)
    name = _free_name(root, f"checkpoint-{state.iteration:08d}")
    final, tmp = root / name, root / f".tmp-{name}"
    try:
        with agreed(accelerator), writing(tmp):
            if accelerator.is_main_process:
                shutil.rmtree(tmp, ignore_errors=True)
                tmp.mkdir(parents=True)
        with agreed(accelerator), writing(tmp):
            accelerator.save_state(str(tmp))
            if accelerator.is_main_process:
                _write_own_state(tmp, state, ema, config)
        with agreed(accelerator), writing(root / "latest"):
            if accelerator.is_main_process:
                os.replace(tmp, final)
                write_text_atomic(root / "latest", name)
                _prune(root, keep, name)
    except (OSError, FailedElsewhere):
        if accelerator.is_main_process:  # frees the space it took; `latest` names the previous checkpoint
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def load_checkpoint(accelerator: Accelerator, checkpoint: Path, state: TrainState, ema: ModelEMA | None, *,
                    model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None,
                    allow_changes: bool = False, bounds: RunBounds | None = None) -> list[str]:
    """Check every file of ``checkpoint`` against ``model`` and ``optimizer`` (the prepared ones; None checks only
    the files' form) and the training counters against ``bounds`` (the run's epochs and batches), then restore
    Accelerate's objects (model, optimizer, RNG), the training state and the EMA. Returns notes on what
    ``allow_changes`` let through (a missing RNG state or EMA, another number of processes). A check that fails on
    one process (its own RNG file) fails every process (``agreed``), each saying its own error."""
    unwrapped = None if model is None else accelerator.unwrap_model(model, keep_torch_compile=False)
    with agreed(accelerator, catch=(CheckpointError, ValueError, OSError)):  # FileRefusedError is a ValueError
        checked = check_checkpoint(checkpoint, model=unwrapped, optimizer=optimizer,
                                   ema_module=None if ema is None else ema.module,
                                   process_index=accelerator.process_index, allow_changes=allow_changes,
                                   num_processes=accelerator.num_processes, bounds=bounds)
    accelerator.load_state(str(checkpoint))
    if optimizer is not None:
        match_parameter_layouts(optimizer)
    if checked.rng is not None:  # Accelerate skips RNG state it cannot apply without a word: apply it ourselves
        apply_rng_state(checked.rng)
    state.load_state_dict(checked.train_state)
    if ema is not None and checked.ema is not None:
        ema.load_state_dict(checked.ema)
    return checked.notes


def match_parameter_layouts(optimizer: torch.optim.Optimizer) -> None:
    """Give each optimizer state tensor its parameter's memory layout (channels_last convs), in place.

    Checkpoints store the state contiguous, and ``load_state_dict`` keeps the layout it reads. Fused optimizer
    kernels walk a parameter, its gradient and its state as flat arrays: on the CPU a contiguous momentum buffer
    beside a channels_last weight gave each element another element's momentum (a resumed run left the straight
    one's weights; caught by the bitwise resume test), and PyTorch's CUDA fused kernels check sizes and strides
    and refuse the step ("must have same dtype, device, and layout")."""
    inner = getattr(optimizer, "optimizer", optimizer)  # under Accelerate's wrapper
    for param, state in inner.state.items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.shape == param.shape and value.stride() != param.stride():
                state[key] = torch.empty_like(param, dtype=value.dtype).copy_(value)


def check_resume_config(checkpoint: Path, current: dict, allow_changes: bool) -> list[str]:
    """The differences between the checkpoint's resolved config and ``current`` (``TrainConfig.to_dict()``), one
    line each; raises ``CheckpointError`` for flags that change the run unless ``allow_changes``."""
    path = checkpoint / CONFIG_FILE
    if not path.is_file():
        if not allow_changes:
            raise CheckpointError(f"{path}: missing, so the flags of this resume cannot be compared with the run's; "
                                  "add --allow-changes true to resume with the flags given now")
        return [f"{path.name} missing (--allow-changes): the flags given now are used unchecked"]
    saved = read_json(path)
    if not isinstance(saved, dict) or not all(isinstance(v, dict) for v in saved.values()):
        raise CheckpointError(f"{path}: expected the run's resolved config (sections of flags)")
    changes, refused, rules = [], [], resume_rules()
    for section, values in current.items():
        for key, value in values.items():
            if rules.get(key) == LOCAL:  # where and how this invocation runs, not a change of the run
                continue
            before = saved.get(section, {}).get(key, value)
            if before != value:
                line = f"--{key.replace('_', '-')}: {_shown(before, key)} in the checkpoint, {_shown(value, key)} now"
                if key in STRUCTURAL:  # the checkpoint's tensors could not be loaded: said now, whatever is allowed
                    weights = checkpoint.parent.parent / "weights" / "last.safetensors"  # <run>/checkpoints/<name>
                    raise CheckpointError(f"{line}: it cannot change on resume ({STRUCTURAL[key]}); start a new run "
                                          f"from the run's weights instead (--weights {weights})")
                changes.append(line)
                if rules.get(key, FIXED) == FIXED:  # a key the flags no longer declare is compared strictly
                    refused.append(line)
    if refused and not allow_changes:
        raise CheckpointError("--resume with flags that change the run:\n  " + "\n  ".join(refused) +
                              "\nresume with the checkpoint's flags, or add --allow-changes true to continue anyway")
    return changes


# Flags whose change the checkpoint's tensors cannot follow, --allow-changes or not: why, for the refusal.
STRUCTURAL = {"freeze": "the optimizer's state holds the tensors it trains",
              "single_cls": "the head's class branch has one output per class"}


def _shown(value: object, key: str = "") -> str:
    """A flag's value as the command line writes it: ``auto`` for one chosen at run time (stored as None), ``none``
    for a --freeze that freezes nothing."""
    return ("none" if key == "freeze" else "auto") if value is None else repr(value)


def check_finite(accelerator: Accelerator, model: nn.Module, ema: ModelEMA | None) -> None:
    """Raise ``CheckpointError`` on every rank when a model or EMA tensor of the main process is not finite."""
    model = accelerator.unwrap_model(model, keep_torch_compile=False)
    modules = [model] + ([ema.module] if ema is not None else [])
    # parameters and buffers, not state_dict(): the same tensors without a walk that builds every key
    tensors = [t.detach() for m in modules for t in itertools.chain(m.parameters(), m.buffers())
               if t.is_floating_point()]
    bad = torch.zeros((), device=accelerator.device)
    if accelerator.is_main_process:
        bad = non_finite_flag(tensors).to(bad.device)
    if accelerator.num_processes > 1:
        bad = accelerator.reduce(bad, reduction="sum")
    if bool(bad):
        raise CheckpointError("non-finite weights: the checkpoint was not written (the previous one is kept)")


def _write_own_state(folder: Path, state: TrainState, ema: ModelEMA | None, config: dict | None) -> None:
    """train_state.json, ema.safetensors and the resolved config (``config``: what the state was trained with)."""
    (folder / STATE_FILE).write_text(json.dumps(state.state_dict()) + "\n")
    if ema is not None:
        tensors = host_copies(ema.module.state_dict())
        metadata = {"updates": str(ema.updates), "decay": repr(ema.decay), "tau": repr(ema.tau)}
        save_file(tensors, str(folder / EMA_FILE), metadata=metadata)
    honour_umask(*(path for path in folder.iterdir() if path.is_file()))  # safetensors leaves them 0600
    if config is not None:
        (folder / CONFIG_FILE).write_text(json.dumps(config, indent=1) + "\n")


def _free_name(root: Path, name: str) -> str:
    """``name``, or ``name.1``, ``name.2``... when a checkpoint of that iteration exists (a Ctrl-C right after an
    epoch-end save): the new one is written beside it, named later in sort order, and the old one pruned."""
    candidate, index = name, 0
    while (root / candidate).exists():
        index += 1
        candidate = f"{name}.{index}"
    return candidate


def resolve_resume(resume: str, run_dir: Path, missing_ok: bool = False) -> Path | None:
    """``auto`` -> this run's latest checkpoint; a run folder -> its latest; a checkpoint folder -> itself.
    ``missing_ok``: None instead of an error when the folder has no checkpoint yet."""
    candidate = run_dir if resume == "auto" else Path(resume)
    latest = checkpoint_root(candidate) / "latest"
    if latest.exists():
        try:
            name = _latest_name(latest)
        except (OSError, ValueError) as err:  # a pipe, a device, gigabytes: refused by the gate, named
            raise CheckpointError(str(err)) from None
        if not CHECKPOINT_NAME.fullmatch(name):  # a crafted "../../elsewhere" would resume from another folder
            raise CheckpointError(f"{latest}: names {name[:80]!r}, not a checkpoint-<iteration> folder beside it")
        candidate = checkpoint_root(candidate) / name
    if not (candidate / STATE_FILE).is_file():
        if missing_ok and not latest.is_file():
            return None
        raise FileNotFoundError(
            f"--resume {resume}: no complete checkpoint at {candidate} (expected a checkpoint-* folder or a run "
            "folder whose checkpoints/latest names one)")
    pickles = sorted(p.name for p in candidate.glob("custom_checkpoint_*.pkl"))
    if pickles:  # written by an older version, or crafted: never unpickled
        raise CheckpointError(f"--resume {resume}: {candidate} holds pickled state {pickles}, which is not loaded "
                              "(it could run code); resume from a checkpoint written by this version")
    return candidate


def write_text_atomic(path: Path, text: str) -> None:
    """Write through a temporary file and a rename: readers see the old or the new text, never half of one."""
    write_file(path, text)


def _prune(root: Path, keep: int, current: str) -> None:
    """Delete all but the newest ``keep`` checkpoints up to ``current`` (just written: never deleted). Checkpoints
    ordered after it are not this run's (``set_aside_checkpoints`` moves them away at the start) and are left."""
    upto = _checkpoint_order(root / current)
    ours = sorted((p for p in _checkpoints(root) if _checkpoint_order(p) <= upto), key=_checkpoint_order)
    for old in ours[:-max(keep, 1)]:  # --keep-checkpoints 0 keeps the newest until the run finishes
        shutil.rmtree(old, ignore_errors=True)


def remove_checkpoints(run_dir: Path) -> list[str]:
    """Delete the run's checkpoints (``--keep-checkpoints 0`` once the run is finished); returns their names. The
    folders set aside from other runs (``checkpoints.old-*``) are not touched."""
    root = checkpoint_root(run_dir)
    names = sorted(p.name for p in _checkpoints(root))
    (root / "latest").unlink(missing_ok=True)  # first: a crash half-way leaves no `latest` naming a deleted folder
    for name in names:
        shutil.rmtree(root / name, ignore_errors=True)
    return names


def _checkpoints(root: Path) -> list[Path]:
    return [p for p in root.glob("checkpoint-*") if p.is_dir() and CHECKPOINT_NAME.fullmatch(p.name)]


def _latest_name(latest: Path) -> str:
    """The checkpoint folder name a ``latest`` file holds, read as a small regular file (a run folder may come from
    elsewhere: a named pipe there would block the read, a huge file fill the memory)."""
    return read_regular(latest, MAX_LATEST_BYTES).decode("utf-8", errors="replace").strip()


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The complete checkpoint ``checkpoints/latest`` names, None when there is none."""
    latest = checkpoint_root(run_dir) / "latest"
    try:
        name = _latest_name(latest)
    except (OSError, ValueError):  # none, or not a small regular file: no usable checkpoint
        return None
    folder = checkpoint_root(run_dir) / name
    return folder if CHECKPOINT_NAME.fullmatch(name) and (folder / STATE_FILE).is_file() else None


def set_aside_checkpoints(run_dir: Path, resumed: Path | None) -> tuple[Path, list[str]] | None:
    """Move the checkpoints of ``run_dir`` that this run does not continue from to ``checkpoints.old-<time>``:
    all of them for a new run (an earlier run's, under ``--exist-ok``), those after ``resumed`` for a resume of an
    earlier checkpoint. Pruning keeps the highest iterations: another run's later checkpoints would make it delete
    this run's, and ``latest`` name a deleted folder. Returns the folder and the names moved, None when none."""
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return None
    ours = resumed if resumed is not None and resumed.resolve().parent == root.resolve() else None
    after = [p for p in _checkpoints(root) if ours is None or _checkpoint_order(p) > _checkpoint_order(ours)]
    if not after:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = root.with_name(f"checkpoints.old-{stamp}")
    for index in itertools.count(2):
        try:
            aside.mkdir()
            break
        except FileExistsError:
            aside = root.with_name(f"checkpoints.old-{stamp}-{index}")
    after.sort(key=_checkpoint_order)
    for folder in after:
        os.replace(folder, aside / folder.name)
    write_text_atomic(aside / "latest", after[-1].name)
    if ours is not None:
        write_text_atomic(root / "latest", ours.name)
    else:
        (root / "latest").unlink(missing_ok=True)
    return aside, [folder.name for folder in after]


def _checkpoint_order(path: Path) -> tuple[int, int]:
    iteration, _, index = path.name.removeprefix("checkpoint-").partition(".")
    return int(iteration), int(index or 0)
