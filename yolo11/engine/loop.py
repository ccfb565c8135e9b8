"""One training epoch on an ``Accelerator``: AMP, gradient accumulation, clipping, EMA, warmup, progress."""

from __future__ import annotations

import contextlib
import functools
import time
from dataclasses import dataclass

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import AutocastKwargs, DistributedType
from torch import nn

from yolo11.engine.cuda_graphs import GraphedMicroStep, MicroStep
from yolo11.engine.device_feed import DeviceFeed, TimedIterable
from yolo11.engine.ema import ModelEMA
from yolo11.engine.guard import NonFiniteGuard
from yolo11.engine.interrupt import StopAgreement
from yolo11.engine.optim import WarmupSchedule
from yolo11.engine.profiling import StepProfiler
from yolo11.engine.progress import BatchReport, Progress
from yolo11.engine.run_state import TrainState
from yolo11.engine.weight_trace import WeightTrace


@dataclass(frozen=True)
class Accumulation:
    """How many micro-batches each optimizer step sums.

    The count follows Ultralytics: ``nominal`` (``round(nominal batch / batch)``), except during the
    ``warmup_iters`` warmup iterations, over which it ramps from 1 to ``nominal`` (rounded linear interpolation
    in the batch index), so that the first steps are taken on single batches. ``warmup_iters`` -1: ``nominal``
    throughout. A step is taken once the batches since the last one reach the count (it never shrinks), and
    at the end of an epoch with whatever was accumulated.
    """

    nominal: int
    warmup_iters: int = -1

    def steps_at(self, iteration: int) -> int:
        """Micro-batches of the step that batch ``iteration`` (counted from the start of training) belongs to."""
        if self.warmup_iters > 0 and iteration <= self.warmup_iters:
            return max(1, int(np.round(np.interp(iteration, [0, self.warmup_iters], [1, self.nominal]))))
        return self.nominal


@dataclass
class TrainStep:
    """What one optimizer step uses, prepared once per run.

    ``batch_hsv`` (a ``BatchHSV`` on the device, possibly compiled) applies the HSV augmentation of batches that
    carry ``hsv_gains`` (the loader left it to the device). ``channels_last``: the model's memory format.
    ``cuda_graphs``: replay each micro-batch's forward, loss and backward as a CUDA graph (``GraphedMicroStep``);
    the gradients then stay allocated between steps (zeroed, not freed).
    """

    accelerator: Accelerator
    model: nn.Module
    criterion: nn.Module
    optimizer: torch.optim.Optimizer
    schedule: WarmupSchedule
    ema: ModelEMA | None
    accumulation: Accumulation
    clip_grad: float
    channels_last: bool
    batch_hsv: nn.Module
    progress: Progress
    profiler: StepProfiler | None = None
    stop: StopAgreement | None = None  # SIGINT/SIGTERM: stop after the current optimizer step
    cuda_graphs: bool = False
    trace: WeightTrace | None = None  # YOLO11_WEIGHT_TRACE: digests of the weights after every optimizer step

    def __post_init__(self):
        autocast = self.accelerator.autocast
        if self.cuda_graphs:  # a cached bf16 copy of a weight must not outlive the graph that made it
            autocast = functools.partial(autocast, AutocastKwargs(cache_enabled=False))
        self.micro_step = MicroStep(self.model, self.criterion, self.batch_hsv, autocast, self.accelerator.backward,
                                    self.loss_factor, self.channels_last)
        self.graphed = GraphedMicroStep(self.micro_step, self.accelerator.device) if self.cuda_graphs else None
        # Listed once: model.parameters() walks every module (2+ ms per call for yolo11n on a slow core), and the
        # clip and the weight check each took one walk per optimizer step. Freezing is decided before this.
        self.parameters = list(self.model.parameters())  # all of them: what Accelerate's FSDP clip compares with
        self.trainable = [p for p in self.parameters if p.requires_grad]

    @property
    def loss_factor(self) -> float:
        """``DetectionLoss`` returns ``parts.sum() * per_process_batch`` (Ultralytics' convention); Ultralytics
        then multiplies by the world size (DDP averages gradients over ranks) and sums gradients over the
        accumulated batches. Accelerate divides by its own accumulation count (1 except under DeepSpeed, which
        accumulates itself), so that is multiplied back: the gradient is the sum over every image of the step
        of the per-batch-normalised loss, the quantity lr0 = 0.01 at nominal batch 64 was tuned for."""
        return float(self.accelerator.num_processes * self.accelerator.gradient_accumulation_steps)


@dataclass
class EpochResult:
    mean_losses: torch.Tensor  # (3,) box, cls, dfl averaged over the epoch's batches of this process (resume-exact)
    images: int  # images seen by all processes
    seconds: float
    reached_max_steps: bool
    interrupted: bool = False  # a stop signal ended the epoch after a complete optimizer step


def train_one_epoch(step: TrainStep, loader, state: TrainState, epoch: int,
                    max_steps: int | None = None) -> EpochResult:
    """Train over ``loader`` (already skipped to ``state.batches_in_epoch`` on resume); updates ``state``.

    No host sync per step: the non-finite check stays on the device (``NonFiniteGuard``) and the progress line
    reads the losses once per ``--log-interval`` batches.
    """
    accelerator, model = step.accelerator, step.model
    model.train()
    unwrapped = accelerator.unwrap_model(model, keep_torch_compile=False)  # EMA keys without _orig_mod.
    guard = NonFiniteGuard(accelerator, step.optimizer, step.ema)
    loss_sum = torch.zeros(3, device=accelerator.device)
    if state.loss_sum is not None:  # resumed mid-epoch
        loss_sum += torch.as_tensor(state.loss_sum, dtype=loss_sum.dtype, device=loss_sum.device)
    applied = state.loss_batches  # batches of this epoch whose losses are in `loss_sum` as of the last step
    images_seen = 0
    pending = 0  # micro-batches since the last optimizer step: counted into `state` only once applied
    reached_max_steps = interrupted = False
    start = time.perf_counter()
    timed = TimedIterable(DeviceFeed(loader, accelerator.device))
    for batch, last in _with_last_flag(timed):
        iteration = state.iteration + pending  # Ultralytics' `ni`
        step.schedule.step(epoch, iteration)
        with _micro_batch(step, sync=last or pending + 1 >= step.accumulation.steps_at(iteration)) as sync:
            parts = _forward_backward(step, batch, guard)
            if sync:
                grad_norm = accelerator.clip_grad_norm_(step.parameters, step.clip_grad) \
                    if step.clip_grad > 0 else None
                guard.before_update(grad_norm, state)
                step.optimizer.step()
                step.optimizer.zero_grad(set_to_none=step.graphed is None)
                guard.observe_weights(step.trainable)
        pending += 1
        images_seen += batch["images"].shape[0] * accelerator.num_processes
        loss_sum += parts
        if sync:
            # A checkpoint taken now resumes after these batches, and only these: gradients of micro-batches not
            # yet applied are never lost by an interruption, they are recomputed.
            state.iteration += pending
            state.batches_in_epoch += pending
            applied += pending
            pending = 0
            state.loss_sum, state.loss_batches = loss_sum.clone(), applied
            state.optimizer_steps += 1
            if step.ema is not None:
                step.ema.update(unwrapped, skip=guard.skip_flag)
            guard.after_update(state)
            if step.trace is not None:
                step.trace.record(epoch, state.optimizer_steps, step.trainable, loss_sum, applied)
        step.progress.batch(state, BatchReport(
            epoch, state.batches_in_epoch + pending, loss_sum, applied + pending, step.schedule.lrs(), images_seen,
            time.perf_counter() - start, timed.seconds, last))
        if not sync:
            continue
        if step.profiler is not None:
            step.profiler.step(state.optimizer_steps)
        if max_steps is not None and state.optimizer_steps >= max_steps:
            reached_max_steps = True
            break
        if step.stop is not None and step.stop.should_stop():
            interrupted = True
            break
    step.progress.end_epoch()
    guard.flush(state)
    return EpochResult(loss_sum / max(applied + pending, 1), images_seen, time.perf_counter() - start,
                       reached_max_steps, interrupted)


def _forward_backward(step: TrainStep, batch: dict, guard: NonFiniteGuard) -> torch.Tensor:
    """Forward, loss and backward of one micro-batch (replayed as a CUDA graph where the step has them); returns
    the loss parts (box, cls, dfl)."""
    if step.graphed is not None:
        loss, parts = step.graphed(batch)
    else:
        loss, parts = step.micro_step(batch["images"], batch.get("hsv_gains"), batch["boxes"], batch["labels"])
    guard.observe_loss(loss)
    return parts


@contextlib.contextmanager
def _micro_batch(step: TrainStep, sync: bool):
    """Gradient synchronisation of one micro-batch; yields whether the optimizer steps after it.

    The step decides (Ultralytics' ramping count, through ``Accumulation``), and the micro-batches before it run
    under ``no_sync`` (no all-reduce). DeepSpeed accumulates by its own fixed count (no ramp): there
    ``accumulate`` decides."""
    accelerator = step.accelerator
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        with accelerator.accumulate(step.model):
            yield accelerator.sync_gradients
    elif sync:
        yield True
    else:
        with accelerator.no_sync(step.model):
            yield False


def _with_last_flag(iterable):
    """``(item, is_last)`` pairs, one item of look-ahead: the last batch of an epoch steps with what it has."""
    iterator = iter(iterable)
    try:
        current = next(iterator)
    except StopIteration:
        return
    for following in iterator:
        yield current, False
        current = following
    yield current, True
