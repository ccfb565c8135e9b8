"""The run's training counters and the names of its files: what the checkpoint writer, the resume checks, the
loop, the progress lines and the outputs all share. A leaf: standard library only (the CLI reads it before torch
loads), imported by the engine, never importing it."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

STATE_FILE, EMA_FILE, CONFIG_FILE = "train_state.json", "ema.safetensors", "config.json"  # in a checkpoint folder
RUN_CONFIG = "config.yaml"  # written by the trainer into every run folder at start
CHECKPOINT_NAME = re.compile(r"checkpoint-\d+(\.\d+)?")  # what save_checkpoint names a checkpoint


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be resumed from, or a state that must not be saved."""


@dataclass
class TrainState:
    """Counters that, with the model, optimizer and EMA state, make a resume exact.

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
        unknown = set(state) - set(asdict(TrainState()))
        if unknown:
            raise CheckpointError(f"unknown training-state keys {sorted(unknown)}")
        for key, value in state.items():
            setattr(self, key, value)


def checkpoint_root(run_dir: Path) -> Path:
    return run_dir / "checkpoints"
