"""One training epoch on an ``Accelerator``: AMP, gradient accumulation, clipping, EMA, warmup, progress."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from accelerate import Accelerator
from torch import nn

from yolo11.engine.checkpoint import TrainState
from yolo11.engine.ema import ModelEMA
from yolo11.engine.optim import WarmupSchedule
from yolo11.engine.progress import Progress


class NonFiniteLossError(RuntimeError):
    """The loss or the gradient norm became NaN/inf; the weights were not updated with it."""


@dataclass(frozen=True)
class LossScale:
    """Factor applied to the loss before ``accelerator.backward``.

    ``DetectionLoss`` returns ``parts.sum() * per_process_batch`` (Ultralytics' convention). Ultralytics then
    multiplies by the world size (DDP averages gradients over ranks) and sums gradients over accumulation steps
    without dividing; ``accelerator.backward`` divides by the accumulation steps, so we multiply them back. The
    resulting gradient is the sum over every image of the effective batch of the per-batch-normalised loss: the
    quantity Ultralytics' lr0 = 0.01 at nominal batch 64 was tuned for.
    """

    num_processes: int
    accumulation_steps: int

    @property
    def factor(self) -> float:
        return float(self.num_processes * self.accumulation_steps)


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
    loss_scale: LossScale,
    clip_grad: float,
    channels_last: bool,
    max_steps: int | None,
    progress: Progress,
) -> EpochResult:
    """Train over ``loader`` (already skipped to ``state.batches_in_epoch`` on resume); updates ``state``."""
    model.train()
    unwrapped = accelerator.unwrap_model(model, keep_torch_compile=False)  # EMA keys without _orig_mod.
    check_grad_norm = accelerator.mixed_precision != "fp16"  # fp16's scaler skips inf steps by design
    loss_sum = torch.zeros(3, device=accelerator.device)
    if state.loss_sum is not None:  # resumed mid-epoch
        loss_sum += torch.as_tensor(state.loss_sum, dtype=loss_sum.dtype, device=loss_sum.device)
    applied = state.loss_batches  # batches of this epoch whose losses are in `loss_sum` as of the last step
    bad_loss = torch.zeros((), dtype=torch.bool, device=accelerator.device)
    images_seen = 0
    pending = 0  # micro-batches since the last optimizer step: counted into `state` only once applied
    reached_max_steps = False
    start = time.perf_counter()
    for batch in loader:
        schedule.step(epoch, state.iteration + pending)
        images = batch["images"].float().div_(255.0)  # uint8 travelled to the device; normalise there
        if channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        with accelerator.accumulate(model):
            with accelerator.autocast():
                feats = model(images)
            loss, parts = criterion([f.float() for f in feats], batch["boxes"], batch["labels"])
            bad_loss |= ~torch.isfinite(loss.detach())
            accelerator.backward(loss * loss_scale.factor)
            if accelerator.sync_gradients:
                grad_norm = accelerator.clip_grad_norm_(model.parameters(), clip_grad) if clip_grad > 0 else None
                bad = bad_loss | (~torch.isfinite(grad_norm) if check_grad_norm and grad_norm is not None else False)
                _raise_if_nonfinite(accelerator, bad, state, loss.detach())
                bad_loss.zero_()
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
                ema.update(unwrapped)
            progress.step(state, epoch, loss_sum / applied, schedule.lrs(), images_seen, time.perf_counter() - start)
            if max_steps is not None and state.optimizer_steps >= max_steps:
                reached_max_steps = True
                break
    return EpochResult(loss_sum / max(applied + pending, 1), images_seen, time.perf_counter() - start,
                       reached_max_steps)


def _raise_if_nonfinite(accelerator: Accelerator, bad: torch.Tensor, state: TrainState, loss: torch.Tensor) -> None:
    """One host sync per optimizer step; the flag is summed over ranks so that every rank stops together."""
    if accelerator.num_processes > 1:
        bad = accelerator.reduce(bad.to(torch.int32), reduction="sum")
    if bool(bad):
        raise NonFiniteLossError(
            f"non-finite loss or gradient at epoch {state.epoch}, iteration {state.iteration} (loss={loss.item()}); "
            "the update was not applied. Lower --lr0, check the data, or try --mixed-precision bf16/no.")
