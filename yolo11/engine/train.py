"""One training epoch on an ``Accelerator``: AMP, gradient accumulation, clipping, EMA, warmup, progress."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, send_to_device
from torch import nn

from yolo11.data import BatchHSV, model_input
from yolo11.engine.checkpoint import TrainState
from yolo11.engine.ema import ModelEMA
from yolo11.engine.optim import WarmupSchedule
from yolo11.engine.profiling import StepProfiler
from yolo11.engine.progress import Progress


class NonFiniteLossError(RuntimeError):
    """The loss or the gradient norm became NaN/inf; the weights were not updated with it."""


@dataclass(frozen=True)
class Accumulation:
    """How many micro-batches each optimizer step sums, and the loss factor that makes it a sum.

    The count follows Ultralytics: ``nominal`` (``round(nominal batch / batch)``), except during the
    ``warmup_iters`` warmup iterations, over which it ramps from 1 to ``nominal`` (rounded linear interpolation
    in the batch index), so that the first steps are taken on single batches. ``warmup_iters`` -1: ``nominal``
    throughout.

    ``DetectionLoss`` returns ``parts.sum() * per_process_batch`` (Ultralytics' convention). Ultralytics then
    multiplies by the world size (DDP averages gradients over ranks) and sums gradients over the accumulated
    batches without dividing; ``accelerator.backward`` divides by the accumulation steps, so ``loss_factor``
    multiplies them back. The resulting gradient is the sum over every image of the step of the
    per-batch-normalised loss: the quantity Ultralytics' lr0 = 0.01 at nominal batch 64 was tuned for.
    """

    num_processes: int
    nominal: int
    warmup_iters: int = -1

    def steps_at(self, iteration: int) -> int:
        """Micro-batches of the step that batch ``iteration`` (counted from the start of training) belongs to."""
        if self.warmup_iters > 0 and iteration <= self.warmup_iters:
            return max(1, int(np.round(np.interp(iteration, [0, self.warmup_iters], [1, self.nominal]))))
        return self.nominal

    def loss_factor(self, steps: int) -> float:
        return float(self.num_processes * steps)


@dataclass
class EpochResult:
    mean_losses: torch.Tensor  # (3,) box, cls, dfl averaged over the epoch's batches of this process (resume-exact)
    images: int  # images seen by all processes
    seconds: float
    reached_max_steps: bool


def train_one_epoch(
    *,
    accelerator: Accelerator,
    model: nn.Module,
    criterion: nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: WarmupSchedule,
    ema: ModelEMA | None,
    loader,
    state: TrainState,
    epoch: int,
    accumulation: Accumulation,
    clip_grad: float,
    channels_last: bool,
    max_steps: int | None,
    progress: Progress,
    profiler: StepProfiler | None = None,
    batch_hsv: nn.Module | None = None,
) -> EpochResult:
    """Train over ``loader`` (already skipped to ``state.batches_in_epoch`` on resume); updates ``state``.

    ``batch_hsv`` (a ``BatchHSV`` on the device, possibly compiled; a plain one by default) applies the HSV
    augmentation of batches that carry ``hsv_gains`` (the loader left it to the device).

    No host sync per step: the non-finite check stays on the device (``NonFiniteGuard``) and the progress line
    reads the losses once per interval.
    """
    model.train()
    unwrapped = accelerator.unwrap_model(model, keep_torch_compile=False)  # EMA keys without _orig_mod.
    guard = NonFiniteGuard(accelerator, optimizer, ema)
    loss_sum = torch.zeros(3, device=accelerator.device)
    if state.loss_sum is not None:  # resumed mid-epoch
        loss_sum += torch.as_tensor(state.loss_sum, dtype=loss_sum.dtype, device=loss_sum.device)
    applied = state.loss_batches  # batches of this epoch whose losses are in `loss_sum` as of the last step
    images_seen = 0
    pending = 0  # micro-batches since the last optimizer step: counted into `state` only once applied
    reached_max_steps = False
    batch_hsv = batch_hsv if batch_hsv is not None else BatchHSV().to(accelerator.device)
    start = time.perf_counter()
    timed = _TimedIterable(DeviceFeed(loader, accelerator.device))
    for batch in timed:
        iteration = state.iteration + pending  # Ultralytics' `ni`
        schedule.step(epoch, iteration)
        # Accelerate syncs when its micro-batch counter reaches a multiple of the accumulation steps (or at the end
        # of the loader). The counter is set to the micro-batches accumulated so far, so that a count that grows
        # during warmup gives Ultralytics' rule: step once `pending + 1` batches reach it (it never shrinks).
        steps = accumulation.steps_at(iteration)
        accelerator.gradient_accumulation_steps = steps
        accelerator.step = pending
        images = batch["images"]  # uint8 travelled to the device; augment and normalise there
        if "hsv_gains" in batch:
            images = batch_hsv(images, batch["hsv_gains"])
        images = model_input(images, channels_last)
        with accelerator.accumulate(model):
            with accelerator.autocast():
                feats = model(images)
            loss, parts = criterion(feats, batch["boxes"], batch["labels"])  # upcasts the maps itself
            guard.observe_loss(loss.detach())
            accelerator.backward(loss * accumulation.loss_factor(steps))
            if accelerator.sync_gradients:
                grad_norm = accelerator.clip_grad_norm_(model.parameters(), clip_grad) if clip_grad > 0 else None
                guard.before_update(grad_norm, state)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        pending += 1
        images_seen += images.shape[0] * accelerator.num_processes
        loss_sum += parts
        if accelerator.sync_gradients:
            # A checkpoint taken now resumes after these batches, and only these: gradients of micro-batches not
            # yet applied are never lost by an interruption, they are recomputed.
            state.iteration += pending
            state.batches_in_epoch += pending
            applied += pending
            pending = 0
            state.loss_sum, state.loss_batches = loss_sum.clone(), applied
            state.optimizer_steps += 1
            if ema is not None:
                ema.update(unwrapped, skip=guard.skip_flag)
            guard.after_update(state)
            progress.step(state, epoch, loss_sum / applied, schedule.lrs(), images_seen, time.perf_counter() - start,
                          timed.seconds)
            if profiler is not None:
                profiler.step(state.optimizer_steps)
            if max_steps is not None and state.optimizer_steps >= max_steps:
                reached_max_steps = True
                break
    guard.flush(state)
    return EpochResult(loss_sum / max(applied + pending, 1), images_seen, time.perf_counter() - start,
                       reached_max_steps)


class NonFiniteGuard:
    """Stops training at the first non-finite loss or gradient norm, before that update is applied, without a
    host sync per step.

    Deferred mode (a fused optimizer, as ``build_optimizer`` makes on CUDA and CPU, without fp16's GradScaler): a
    sticky device flag is raised by the first bad step; the optimizer kernels read it as ``found_inf`` and skip
    the update, the EMA skips too, and the flag is copied to pinned host memory and read one step later, when
    the device has long computed it. Training then stops with ``state`` (and the EMA's update count) rolled back
    to the last applied step. The forward passes of the skipped steps (at most two) still updated the raw model's
    BatchNorm running statistics, as the bad step's own forward always does; the EMA's are untouched.

    Immediate mode (fp16, whose GradScaler owns ``found_inf``; DeepSpeed; foreach optimizers; and the very first
    step, where fused SGD would leave its new momentum buffer uninitialised if it skipped): the flag is read at
    once, one host sync per step. The flag is summed over ranks so that every rank stops at the same step.
    """

    def __init__(self, accelerator: Accelerator, optimizer: torch.optim.Optimizer, ema: ModelEMA | None):
        self.accelerator = accelerator
        self.optimizer = getattr(optimizer, "optimizer", optimizer)  # under Accelerate's wrapper
        self.ema = ema
        self.check_grad_norm = accelerator.mixed_precision != "fp16"  # fp16's scaler skips inf steps by design
        self.deferred = (bool(self.optimizer.defaults.get("fused")) and accelerator.scaler is None
                         and accelerator.distributed_type != DistributedType.DEEPSPEED)
        device = accelerator.device
        self._bad = torch.zeros((), device=device)  # this optimizer step's micro-batches
        self._halted = torch.zeros((), device=device)  # sticky: 1.0 from the first bad step on
        self._host = torch.zeros((), pin_memory=device.type == "cuda")
        self._in_flight: tuple | None = None  # (event, state and EMA count before the step the copy belongs to)
        self._before: tuple | None = None
        self.skip_flag: torch.Tensor | None = None  # for ModelEMA.update

    def observe_loss(self, loss: torch.Tensor) -> None:
        """Every micro-batch, before backward."""
        self._bad = torch.maximum(self._bad, (~torch.isfinite(loss)).float())

    def before_update(self, grad_norm: torch.Tensor | None, state: TrainState) -> None:
        """After backward and clipping, before ``optimizer.step()``."""
        bad = self._bad
        if self.check_grad_norm and grad_norm is not None:
            bad = torch.maximum(bad, (~torch.isfinite(grad_norm)).float())
        if self.accelerator.num_processes > 1:
            bad = self.accelerator.reduce(bad, reduction="sum").clamp(max=1.0)
        self._bad = torch.zeros_like(self._bad)
        if not self.deferred or not self.optimizer.state:
            self.skip_flag = None
            if bool(bad):  # the host sync of immediate mode
                self._raise(state)
            return
        torch.maximum(self._halted, bad, out=self._halted)
        self.optimizer.found_inf = self._halted  # read by the fused kernels when they run
        self.skip_flag = self._halted
        self._before = (copy.copy(state), self.ema.updates if self.ema is not None else 0)

    def after_update(self, state: TrainState) -> None:
        """After the step's counters were advanced: read the previous step's flag, send this one's."""
        if self.skip_flag is None:
            return
        self._check_in_flight(state)
        self._host.copy_(self._halted, non_blocking=True)
        event = None
        if self._halted.device.type == "cuda":
            event = torch.cuda.Event()
            event.record()
        self._in_flight = (event, self._before)

    def flush(self, state: TrainState) -> None:
        """End of the epoch: the last step's flag."""
        self._check_in_flight(state)

    def _check_in_flight(self, state: TrainState) -> None:
        if self._in_flight is None:
            return
        event, (before, ema_updates) = self._in_flight
        self._in_flight = None
        if event is not None:
            event.synchronize()
        if self._host.item():
            state.load_state_dict(vars(before))
            if self.ema is not None:
                self.ema.updates = ema_updates
            self._raise(state)

    @staticmethod
    def _raise(state: TrainState) -> None:
        raise NonFiniteLossError(
            f"non-finite loss or gradient at epoch {state.epoch + 1}, iteration {state.iteration + 1}; the update "
            "was not applied. Lower --lr0, check the data, or try --mixed-precision bf16/no.")


class DeviceFeed:
    """Moves each batch of a loader prepared without device placement (``prepare_training``) to ``device``; on
    CUDA the copy runs on a side stream. Batches already there (DeepSpeed places them itself) pass through.

    On the compute stream, the copy of a batch of 128 images at 640 px (157 MB) would sit between two training
    steps: about 6 ms of a 64 ms CUDA-graph step on an H200 in which the GPU does nothing else. On a side stream
    it overlaps the previous step, which the GPU is still running when the host gets here (the host runs at
    most one step ahead: ``NonFiniteGuard``). The compute stream waits for the copy only; ``record_stream``
    keeps the caching allocator from reusing the batch's memory before the compute stream is done with it.
    Batches are taken from ``loader`` one at a time, as without this class, so Accelerate's end-of-loader flag
    (gradient accumulation) is unchanged.
    """

    def __init__(self, loader, device: torch.device):
        self.loader, self.device = loader, device

    def __iter__(self):
        if self.device.type != "cuda":
            for batch in self.loader:
                yield send_to_device(batch, self.device)
            return
        copy_stream = torch.cuda.Stream(self.device)
        for batch in self.loader:
            compute = torch.cuda.current_stream(self.device)
            with torch.cuda.stream(copy_stream):
                batch = send_to_device(batch, self.device, non_blocking=True)
            compute.wait_stream(copy_stream)
            for value in batch.values():
                if isinstance(value, torch.Tensor):
                    value.record_stream(compute)
            yield batch


class _TimedIterable:
    """Iterates ``iterable`` and adds up the host time spent waiting in ``next``: the loader's share of a step."""

    def __init__(self, iterable):
        self.iterable = iterable
        self.seconds = 0.0

    def __iter__(self):
        iterator = iter(self.iterable)
        while True:
            started = time.perf_counter()
            try:
                item = next(iterator)
            except StopIteration:
                return
            self.seconds += time.perf_counter() - started
            yield item
