"""Resumable checkpoints (``accelerator.save_state``) written atomically, and the run's training counters.

Layout of a run folder::

    checkpoints/checkpoint-00000420/   model, optimizer, scheduler-free counters, EMA, RNG of every rank
    checkpoints/latest                 name of the newest complete checkpoint (written last, atomically)

A checkpoint is written to ``checkpoints/.tmp-<name>`` by every rank and renamed into place by the main process
once all ranks are done, then ``latest`` is replaced. A crash at any point leaves the previous checkpoint and
``latest`` untouched, so ``--resume auto`` always finds a complete one.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from accelerate import Accelerator


@dataclass
class TrainState:
    """Counters that, with the registered model/optimizer/EMA state, make a resume exact.

    ``batches_in_epoch`` counts the batches of ``epoch`` already consumed; the resumed epoch skips them and goes on
    summing its losses from ``loss_sum``, so the epoch's mean loss is the one of an uninterrupted run.
    """

    epoch: int = 0
    batches_in_epoch: int = 0
    iteration: int = 0  # batches since the start (drives warmup)
    optimizer_steps: int = 0
    loss_sum: object = None  # (3,) running sum of this epoch's [box, cls, dfl] over `loss_batches` batches
    loss_batches: int = 0
    best_fitness: float = -1.0
    best_epoch: int = -1
    tracker_run_id: str | None = None

    def state_dict(self) -> dict:
        state = asdict(self)
        if self.loss_sum is not None:  # a device tensor while training; plain floats on disk (exact for float32)
            state["loss_sum"] = [float(v) for v in self.loss_sum]
        return state

    def start_epoch(self, epoch: int) -> None:
        self.epoch, self.batches_in_epoch, self.loss_sum, self.loss_batches = epoch, 0, None, 0

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, value)


def checkpoint_root(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def save_checkpoint(accelerator: Accelerator, run_dir: Path, state: TrainState, keep: int) -> Path:
    """Write a resumable checkpoint; call on every rank. Returns the final checkpoint folder."""
    root = checkpoint_root(run_dir)
    name = f"checkpoint-{state.iteration:08d}"
    final, tmp = root / name, root / f".tmp-{name}"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        if final.exists():  # the same iteration saved twice (e.g. Ctrl-C right after an epoch-end save)
            shutil.rmtree(final)
        os.replace(tmp, final)
        write_text_atomic(root / "latest", name)
        _prune(root, keep)
    accelerator.wait_for_everyone()
    return final


def resolve_resume(resume: str, run_dir: Path) -> Path:
    """``auto`` -> this run's latest checkpoint; a run folder -> its latest; a checkpoint folder -> itself."""
    candidate = run_dir if resume == "auto" else Path(resume)
    latest = checkpoint_root(candidate) / "latest"
    if latest.is_file():
        candidate = checkpoint_root(candidate) / latest.read_text().strip()
    if not (candidate / "custom_checkpoint_0.pkl").is_file():
        raise FileNotFoundError(
            f"--resume {resume}: no complete checkpoint at {candidate} (expected a checkpoint-* folder or a run "
            "folder whose checkpoints/latest names one)")
    return candidate


def run_dir_of_checkpoint(checkpoint: Path) -> Path:
    return checkpoint.resolve().parent.parent


def write_text_atomic(path: Path, text: str) -> None:
    """Write through a temporary file and a rename: readers see the old or the new text, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _prune(root: Path, keep: int) -> None:
    checkpoints = sorted(p for p in root.glob("checkpoint-*") if p.is_dir())
    for old in checkpoints[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
