"""Training progress: a bar per epoch on a terminal, plain lines in logs, tracker logging, the end-of-run summary.

Only the main process shows anything. On a terminal (stdout is a TTY) each epoch gets a tqdm bar with the running
losses, img/s, the loader-wait share and tqdm's ETA; in a log (CI, SLURM, ``> file``) a line is printed every
``--log-interval`` batches and at each epoch's last batch. The trackers get the same values at the same points
whatever the output is.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import torch
from accelerate import Accelerator
from tqdm import tqdm

from yolo11.engine.run_clock import RunClock
from yolo11.engine.run_state import TrainState

LOSS_NAMES = ("box_loss", "cls_loss", "dfl_loss")
END2END_LOSS_NAMES = ("box_loss", "cls_loss", "l1_loss")  # YOLO26 (reg_max 1): an L1 term, named as Ultralytics


def loss_names(end2end: bool) -> tuple[str, ...]:
    """The logged loss items' names: Ultralytics names YOLO26's third term ``l1_loss``, YOLO11's ``dfl_loss``."""
    return END2END_LOSS_NAMES if end2end else LOSS_NAMES
BAR_REFRESH_SECONDS = 1.0  # a terminal bar reads the losses (a host sync) at most this often between intervals


def peak_memory_gb(device: torch.device) -> float:
    """CUDA: the device's peak allocated memory; elsewhere the process's peak resident memory (RSS), GiB."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    try:
        import resource
    except ImportError:  # Windows
        return 0.0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**30 if sys.platform == "darwin" else 2**20)  # bytes on macOS, KiB on Linux


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600:d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def use_bars(accelerator: Accelerator) -> bool:
    """Carriage-return bars only where someone watches: the main process, writing to a terminal."""
    return accelerator.is_main_process and sys.stdout.isatty()


@dataclass(frozen=True)
class BatchReport:
    """Where the epoch stands after a batch; ``images``, ``seconds``, ``data_seconds``: images trained (all
    processes), time spent and time waited for the loader (host clock) since this epoch's loop began."""

    epoch: int
    batch: int  # batches of this epoch done, 1-based
    loss_sum: torch.Tensor  # (3,) summed over `loss_batches`, on the device
    loss_batches: int
    lrs: list[float]
    images: int
    seconds: float
    data_seconds: float
    last: bool  # the epoch's last batch


class Progress:
    """Reading the running losses is the only host sync it causes: every ``interval`` batches and at the end of
    an epoch (and, with a bar, at most once a second). ``data`` is the share of the window the training loop
    spent waiting for the next batch: near 0 the GPU (or the Python launching work for it) is the limit, well
    above 0 the loader is: add ``--workers`` or lighten the augmentation."""

    def __init__(self, accelerator: Accelerator, interval: int, epochs: int, batches_per_epoch: int,
                 bars: bool | None = None, loss_names: tuple[str, ...] = LOSS_NAMES):
        self.accelerator = accelerator
        self.loss_names = loss_names
        self.interval = interval
        self.epochs = epochs
        self.batches_per_epoch = batches_per_epoch
        self.bars = use_bars(accelerator) if bars is None else bars
        self.start = time.perf_counter()
        self.batches_done = 0  # since this process started, for the ETA
        self._bar = None
        self._window: tuple[int, int, float, float] | None = None  # (epoch, images, time, data wait), last sync
        self._last_refresh = 0.0

    def batch(self, state: TrainState, report: BatchReport) -> None:
        """After every micro-batch (``state`` as of the last optimizer step)."""
        self.batches_done += 1
        if self.bars:
            self._advance_bar(report)
        due = report.batch % self.interval == 0 or report.last
        refresh = self.bars and time.perf_counter() - self._last_refresh >= BAR_REFRESH_SECONDS
        if not (due or refresh):
            return
        losses = (report.loss_sum / max(report.loss_batches, 1)).tolist()  # the host sync
        throughput, data_share = self._rates(report)
        self._last_refresh = time.perf_counter()
        memory = peak_memory_gb(self.accelerator.device)
        if self.bars:
            third = self.loss_names[2].split("_")[0]
            self._bar.set_postfix_str(f"box {losses[0]:.4f} cls {losses[1]:.4f} {third} {losses[2]:.4f} | "
                                      f"{throughput:.1f} img/s | data {data_share:.0%}", refresh=True)
        if not due:
            return
        values = {f"train/{name}": value for name, value in zip(self.loss_names, losses, strict=True)}
        values.update({f"lr/pg{i}": lr for i, lr in enumerate(report.lrs)})
        values.update({"throughput/img_s": throughput, "throughput/data_wait": data_share, "memory/peak_gb": memory,
                       "epoch": report.epoch})
        self.accelerator.log(values, step=state.optimizer_steps)
        if self.accelerator.is_main_process and not self.bars:
            loss_text = " ".join(f"{name.split('_')[0]} {value:#.4g}" for name, value in zip(self.loss_names, losses))
            eta = format_duration(self._eta(report))
            # under 120 columns up to 9999 batches an epoch, 99,999 steps and losses below 10 (a log line that wraps
            # is hard to scan): the learning rate goes to the trackers only, as Ultralytics' bar leaves it out;
            # the memory is the GPU's peak, or on the CPU the process's peak RSS
            memory_label = "mem" if self.accelerator.device.type == "cuda" else "RSS"
            print(f"epoch {report.epoch + 1}/{self.epochs} batch {report.batch}/{self.batches_per_epoch} "
                  f"step {state.optimizer_steps} | {loss_text} | "
                  f"{throughput:.{0 if throughput >= 100 else 1}f} img/s data {data_share:.0%} | "
                  f"{memory_label} {memory:.1f}G ETA {eta}", flush=True)

    def end_epoch(self) -> None:
        """Close the epoch's bar (the loop also ends an epoch early: ``--max-steps``, a stop signal)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _advance_bar(self, report: BatchReport) -> None:
        if self._bar is None:
            self._bar = tqdm(total=self.batches_per_epoch, initial=report.batch - 1, file=sys.stdout,
                             desc=f"epoch {report.epoch + 1}/{self.epochs}", unit="batch", dynamic_ncols=True,
                             bar_format="{desc} {percentage:3.0f}%|{bar:20}| {n_fmt}/{total_fmt} "
                                        "[{elapsed}<{remaining}{postfix}]")
        self._bar.update(1)

    def _rates(self, report: BatchReport) -> tuple[float, float]:
        """img/s and loader-wait share since the previous sync of this epoch (or the epoch's start: the previous
        one may lie epochs back, with validation in between)."""
        now = time.perf_counter()
        if self._window is None or self._window[0] != report.epoch:
            throughput = report.images / max(report.seconds, 1e-9)
            data_share = report.data_seconds / max(report.seconds, 1e-9)
        else:  # measured after the sync
            _, last_images, last_time, last_data = self._window
            elapsed = max(now - last_time, 1e-9)
            throughput = (report.images - last_images) / elapsed
            data_share = (report.data_seconds - last_data) / elapsed
        self._window = (report.epoch, report.images, now, report.data_seconds)
        return throughput, data_share

    def _eta(self, report: BatchReport) -> float:
        """Wall time per batch so far (validation included: it recurs) times the batches left."""
        remaining = (self.epochs - report.epoch) * self.batches_per_epoch - report.batch
        return (time.perf_counter() - self.start) / max(self.batches_done, 1) * max(remaining, 0)


def print_summary(accelerator: Accelerator, clock: RunClock, images: int, best: dict | None) -> None:
    """Final summary: wall time, training throughput (training time only) and validation time, then where the
    main process's time went (``clock.split()``: start-up from its launch; saving: checkpoints, weights files and
    results); peak memory is gathered from every device."""
    memory = torch.tensor([peak_memory_gb(accelerator.device)], device=accelerator.device)
    memories = accelerator.gather(memory).tolist()
    if not accelerator.is_main_process:
        return
    train_seconds = clock.seconds("training")
    print(f"finished in {format_duration(clock.since_start())} | training {format_duration(train_seconds)} at "
          f"{images / max(train_seconds, 1e-9):.1f} img/s | validation {format_duration(clock.seconds('validation'))}")
    print(f"time: {clock.split()}")
    if accelerator.device.type == "cuda":
        print("peak memory per device: " + ", ".join(f"rank {i}: {m:.2f} GiB" for i, m in enumerate(memories)))
    if best:
        print("best: " + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in best.items()))
