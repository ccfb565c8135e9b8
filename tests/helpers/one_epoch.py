"""One training epoch in this process, built as the trainer builds it, on hand-made batches: for the tests of the
loop and of the non-finite guard."""

from __future__ import annotations

import torch
from accelerate import Accelerator

from helpers.engine_helpers import reset_accelerate_state
from yolo11.engine.build import build_train_step
from yolo11.engine.loop import train_one_epoch
from yolo11.engine.optim import OptimizerChoice, WarmupSchedule, build_optimizer, lr_lambda
from yolo11.engine.progress import Progress
from yolo11.engine.run_state import TrainState
from yolo11.loss import DetectionLoss


def make_batch(images: torch.Tensor, seed: int) -> dict:
    """A training batch of ``images`` (uint8 ``(N, 3, 64, 64)``): two random xyxy boxes of 16-24 px per image, in
    pixels, and their classes (0..2)."""
    g = torch.Generator().manual_seed(seed)
    n = images.shape[0]
    xy = torch.rand(n, 2, 2, generator=g) * 40
    boxes = torch.cat([xy, xy + 16 + torch.rand(n, 2, 2, generator=g) * 8], -1)
    return {"images": images, "boxes": boxes, "labels": torch.randint(0, 3, (n, 2), generator=g)}


def run_epoch(batches: list[dict], accumulation: int, model: torch.nn.Module, criterion=None, max_steps=None,
              ema=None, state: TrainState | None = None, ramp_iters: int = -1, lr: float = 0.05,
              log_interval: int = 1, scaler: torch.amp.GradScaler | None = None):
    """``train_one_epoch`` over ``batches`` on the CPU, with the step the trainer builds (fused SGD at ``lr``,
    ``DetectionLoss(3)`` unless ``criterion``); returns the prepared model, the state and the epoch's result.
    ``scaler``: a GradScaler in the Accelerator's place for fp16's (which Accelerate makes on CUDA only), before
    ``prepare`` hands it to the optimizer's wrapper."""
    reset_accelerate_state()  # each run is a fresh process as far as Accelerate is concerned
    # accumulation is the loop's (Accumulation), as the trainer builds it
    accelerator = Accelerator(cpu=True, mixed_precision="no" if scaler is None else "fp16")
    if scaler is not None:
        accelerator.scaler, accelerator.native_amp = scaler, True  # as on CUDA: scaled backward, unscaling clip
    optimizer = build_optimizer(model, OptimizerChoice("SGD", lr, 0.9), 5e-4)
    schedule = WarmupSchedule(optimizer, lr_lambda("linear", 10, 0.01), -1, 0.0, 0.8, 0.9)
    model, optimizer = accelerator.prepare(model, optimizer)
    state = TrainState() if state is None else state
    step = build_train_step(accelerator, model, optimizer, schedule, criterion=criterion or DetectionLoss(3), ema=ema,
                            accumulation=accumulation, warmup_iters=ramp_iters,
                            progress=Progress(accelerator, interval=log_interval, epochs=1,
                                              batches_per_epoch=len(batches), bars=False))
    result = train_one_epoch(step, batches, state, epoch=0, max_steps=max_steps)
    return model, state, result
