"""Progress lines and tracker logging during training (main process only), and the end-of-run summary."""

from __future__ import annotations

import time

import torch
from accelerate import Accelerator

from yolo11.engine.checkpoint import TrainState

LOSS_NAMES = ("box_loss", "cls_loss", "dfl_loss")


def peak_memory_gb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return 0.0


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600:d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class Progress:
    """Prints a line every ``interval`` optimizer steps and logs the same values to the trackers.

    Reading the running losses is the only host sync it causes, once per interval. ``data`` is the share of the
    window the training loop spent waiting for the next batch: near 0 the GPU (or the Python launching work for
    it) is the limit, well above 0 the loader is: add ``--workers`` or lighten the augmentation.
    """

    def __init__(self, accelerator: Accelerator, interval: int, epochs: int, steps_per_epoch: int):
        self.accelerator = accelerator
        self.interval = interval
        self.epochs = epochs
        self.steps_per_epoch = steps_per_epoch
        self.start = time.perf_counter()
        self.steps_at_start: int | None = None
        self._window: tuple[int, int, float, float] | None = None  # (epoch, images, time, data wait), last line

    def step(self, state: TrainState, epoch: int, mean_losses: torch.Tensor, lrs: list[float], images: int,
             epoch_seconds: float, data_seconds: float) -> None:
        """``images``, ``epoch_seconds``, ``data_seconds``: images trained, time spent and time waited for the
        loader (host clock) since this epoch's loop began."""
        if self.steps_at_start is None:
            self.steps_at_start = state.optimizer_steps - 1
        if state.optimizer_steps % self.interval:
            return
        losses = mean_losses.tolist()  # the host sync: everything queued so far has run
        now = time.perf_counter()
        if self._window is None or self._window[0] != epoch:
            # First line of the run or of this epoch: the figures of the epoch so far (the previous line may lie
            # epochs back, with validation in between, when the interval is longer than an epoch).
            throughput = images / max(epoch_seconds, 1e-9)
            data_share = data_seconds / max(epoch_seconds, 1e-9)
        else:  # since the previous line, measured after the sync
            _, last_images, last_time, last_data = self._window
            elapsed = max(now - last_time, 1e-9)
            throughput = (images - last_images) / elapsed
            data_share = (data_seconds - last_data) / elapsed
        self._window = (epoch, images, now, data_seconds)
        memory = peak_memory_gb(self.accelerator.device)
        done = state.optimizer_steps - self.steps_at_start
        remaining = self.epochs * self.steps_per_epoch - state.optimizer_steps
        eta = (now - self.start) / max(done, 1) * remaining
        values = {f"train/{name}": value for name, value in zip(LOSS_NAMES, losses, strict=True)}
        values.update({f"lr/pg{i}": lr for i, lr in enumerate(lrs)})
        values.update({"throughput/img_s": throughput, "throughput/data_wait": data_share, "memory/peak_gb": memory,
                       "epoch": epoch})
        self.accelerator.log(values, step=state.optimizer_steps)
        if self.accelerator.is_main_process:
            loss_text = " ".join(f"{name.split('_')[0]} {value:.4f}" for name, value in zip(LOSS_NAMES, losses))
            print(f"epoch {epoch + 1}/{self.epochs} step {state.optimizer_steps} | {loss_text} | lr {lrs[0]:.6f} | "
                  f"{throughput:.1f} img/s | data {data_share:.0%} | mem {memory:.2f} GiB | "
                  f"ETA {format_duration(eta)}", flush=True)


def print_summary(accelerator: Accelerator, seconds: float, images: int, best: dict | None) -> None:
    """Final summary; peak memory is gathered from every device."""
    memory = torch.tensor([peak_memory_gb(accelerator.device)], device=accelerator.device)
    memories = accelerator.gather(memory).tolist()
    if not accelerator.is_main_process:
        return
    print(f"finished in {format_duration(seconds)} | {images / max(seconds, 1e-9):.1f} img/s over the run")
    if accelerator.device.type == "cuda":
        print("peak memory per device: " + ", ".join(f"rank {i}: {m:.2f} GiB" for i, m in enumerate(memories)))
    if best:
        print("best: " + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in best.items()))
