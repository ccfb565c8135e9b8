"""``build_*`` functions: the only place where the training config is read and turned into objects.

``plan_run`` computes, once, every value derived from the config and the launch (world size, per-process batch,
accumulation, scaled weight decay, the optimizer 'auto' choice, warmup length); the rest of the engine receives
those values as explicit arguments.
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
from accelerate import Accelerator, DataLoaderConfiguration, PartialState
from accelerate.utils import (
    DistributedDataParallelKwargs,
    DistributedType,
    InitProcessGroupKwargs,
    ProjectConfiguration,
    broadcast_object_list,
)
from torch import nn

from yolo11.data import AugmentParams
from yolo11.engine.config import ModelConfig, TrainConfig
from yolo11.engine.optim import OptimizerChoice, WarmupSchedule, lr_lambda, lr_scale_for_batch, resolve_optimizer
from yolo11.models import YOLO11Detector, create_model
from yolo11.weights import load_weights


class LaunchError(RuntimeError):
    """The processes were started in a way that would not train correctly."""


@dataclass(frozen=True)
class RunPlan:
    num_processes: int
    per_process_batch: int
    accumulation_steps: int
    weight_decay: float
    optimizer: OptimizerChoice
    steps_per_epoch: int  # optimizer steps
    batches_per_epoch: int  # per process
    warmup_iters: int  # batches; -1 disables warmup

    @property
    def effective_batch(self) -> int:
        return self.per_process_batch * self.num_processes * self.accumulation_steps


def check_launch(state: PartialState) -> None:
    """Refuse N processes that each think they are alone (FIELD-NOTES: a MULTI_GPU config on a CPU-only host)."""
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched != state.num_processes:
        raise LaunchError(
            f"{launched} processes were launched (WORLD_SIZE={launched}) but this one sees a world of "
            f"{state.num_processes} ({state.distributed_type}): they would train independently and overwrite one "
            "another's outputs. On a machine without GPUs set ACCELERATE_USE_CPU=1 for multi-process CPU training, "
            "or use accelerate_configs/cpu.yaml.")


def plan_run(config: TrainConfig, num_processes: int, num_train_images: int, num_classes: int) -> RunPlan:
    run, optim = config.run, config.optim
    if run.batch_size % num_processes:
        raise ValueError(f"--batch-size {run.batch_size} is the global batch and must be divisible by the "
                         f"{num_processes} processes")
    per_process = run.batch_size // num_processes
    accumulation = optim.grad_accum or max(round(optim.nominal_batch / run.batch_size), 1)
    weight_decay = optim.weight_decay * run.batch_size * accumulation / optim.nominal_batch
    batches_per_epoch = math.ceil(num_train_images / run.batch_size)
    # As Ultralytics (after the weight decay): never more micro-batches per step than the whole run has.
    accumulation = min(accumulation, batches_per_epoch * run.epochs)
    # Ultralytics counts iterations for optimizer='auto' at the nominal batch.
    auto_iterations = math.ceil(num_train_images / max(run.batch_size, optim.nominal_batch)) * run.epochs
    choice = resolve_optimizer(optim, num_classes, auto_iterations)
    scale = lr_scale_for_batch(optim.lr_scaling, run.batch_size * accumulation, optim.nominal_batch)
    choice = OptimizerChoice(choice.name, choice.lr * scale, choice.momentum)
    # Ultralytics 8.4: warmup_epochs x batches per epoch, no longer at least 100 iterations, and never into the last
    # epoch (a 1-epoch run has none); -1: no warmup.
    warmup_epochs = min(optim.warmup_epochs, max(run.epochs - 1, 0))
    warmup = round(warmup_epochs * batches_per_epoch) if warmup_epochs > 0 else 0
    warmup = warmup or -1
    return RunPlan(
        num_processes=num_processes,
        per_process_batch=per_process,
        accumulation_steps=accumulation,
        weight_decay=weight_decay,
        optimizer=choice,
        steps_per_epoch=math.ceil(batches_per_epoch / accumulation),
        batches_per_epoch=batches_per_epoch,
        warmup_iters=warmup,
    )


def build_schedule(config: TrainConfig, plan: RunPlan, optimizer: torch.optim.Optimizer) -> WarmupSchedule:
    """The lr / momentum schedule of a run. As Ultralytics, optimizer 'auto' starts the biases' warmup at 0, an
    explicit choice at --warmup-bias-lr."""
    optim = config.optim
    warmup_bias_lr = 0.0 if optim.optimizer == "auto" else optim.warmup_bias_lr
    return WarmupSchedule(optimizer, lr_lambda(optim.schedule, config.run.epochs, optim.lrf), plan.warmup_iters,
                          warmup_bias_lr, optim.warmup_momentum, optim.momentum)


def resolve_run_dir(config: TrainConfig, state: PartialState) -> Path:
    """``output_dir/name``, or ``name2``, ``name3`` ... when it exists; decided on the main process for all ranks."""
    run = config.run
    base = Path(run.output_dir) / run.name
    choice = [None]
    if state.is_main_process:
        path = base
        if not (run.exist_ok or run.resume):
            index = 2
            while path.exists():
                path, index = base.with_name(f"{base.name}{index}"), index + 1
        path.mkdir(parents=True, exist_ok=True)
        choice = [str(path)]
    if state.num_processes > 1:
        broadcast_object_list(choice, from_process=0)
    return Path(choice[0])


def build_accelerator(plan: RunPlan, run_dir: Path, log_with: list[str]) -> Accelerator:
    return Accelerator(
        gradient_accumulation_steps=plan.accumulation_steps,
        log_with=log_with or None,
        project_config=ProjectConfiguration(project_dir=str(run_dir), logging_dir=str(run_dir)),
        dataloader_config=DataLoaderConfiguration(non_blocking=torch.cuda.is_available()),
        kwargs_handlers=[
            # The DFL conv is frozen; every other parameter gets a gradient every step.
            DistributedDataParallelKwargs(find_unused_parameters=False),
            # A rank that dies is caught by the launcher; a slow one (rank-0 evaluation) must not time out others.
            InitProcessGroupKwargs(timeout=timedelta(minutes=30)),
        ],
    )


def prepare_training(accelerator: Accelerator, model: nn.Module, optimizer: torch.optim.Optimizer, loader):
    """``accelerator.prepare`` of the three, the train loader without device placement: its batches stay on the
    host and ``DeviceFeed`` copies them on a side CUDA stream. DeepSpeed allows no per-object placement (and sizes
    its micro-batch from the loader, so the loader stays in this call): there the loader places its batches."""
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        return accelerator.prepare(model, optimizer, loader)
    return accelerator.prepare(model, optimizer, loader, device_placement=[None, None, False])


def maybe_sync_batchnorm(model: nn.Module, requested: bool, accelerator: Accelerator) -> nn.Module:
    """SyncBatchNorm only for multi-process CUDA runs (it raises on CPU/gloo); call before ``prepare``."""
    if not requested:
        return model
    if accelerator.distributed_type == DistributedType.MULTI_GPU and accelerator.num_processes > 1:
        return nn.SyncBatchNorm.convert_sync_batchnorm(model)
    warnings.warn(f"--sync-bn ignored: it needs several CUDA processes (this run: {accelerator.num_processes} "
                  f"process(es), {accelerator.distributed_type})", stacklevel=2)
    return model


def build_model(config: ModelConfig, num_classes: int) -> YOLO11Detector:
    """The detector; ``--weights`` initialises every tensor whose name and shape match (a new class count keeps
    the backbone and neck, re-initialises the class branch), as Ultralytics' transfer does."""
    model = create_model(config.model, num_classes=num_classes, backbone=config.backbone,
                         pretrained=config.pretrained)
    if config.weights:
        source = load_weights(config.weights).state_dict()
        target = model.state_dict()
        matched = {k: v for k, v in source.items() if k in target and v.shape == target[k].shape}
        if not matched:
            raise ValueError(f"--weights {config.weights}: no tensor matches {config.model} "
                             f"(backbone {config.backbone}); is it the same architecture?")
        model.load_state_dict(matched, strict=False)
        print(f"--weights {config.weights}: transferred {len(matched)}/{len(target)} tensors")
    return model


# Inductor writes an intermediate to memory, instead of recomputing it inside each kernel that uses it, once it has
# several users and reads more than `realize_reads_threshold` (default 4) buffers. In the backward graph, the
# reduction and the pointwise kernel of each BatchNorm + SiLU backward both use the BN output (five reads: x, mean,
# rstd, weight, bias) and the gradient at the BN output (six: the incoming gradient too). With the default, the BN
# output had a kernel of its own that wrote it as a float32 map, read back by both (seen in inductor's code); at 5,
# the gradient at the BN output still had a kernel of its own (seen in the kernel profile). At 6, both can be
# recomputed from the conv output and the incoming gradient, which the two kernels read anyway. H200, yolo11n,
# batch 128, model step: 2456 -> 2612 img/s at 5 (fifth session); 2614 -> 2798 img/s at 6 together with the stem
# as a matrix product (`Conv._conv_as_matmul`; sixth session, not measured apart; benchmarks/RESULTS.md).
MODEL_INDUCTOR_OPTIONS = {"realize_reads_threshold": 6}


def compile_model(model: nn.Module, mode: str | None = None, **inductor_options) -> nn.Module:
    """``torch.compile(model, mode=mode)`` with ``MODEL_INDUCTOR_OPTIONS`` (and ``inductor_options``) added.

    The options apply to this model's graphs only, not to other compiled code in the process (the loss).
    """
    import torch._inductor

    options = {**torch._inductor.list_mode_options(mode or "default"), **MODEL_INDUCTOR_OPTIONS, **inductor_options}
    return torch.compile(model, options=options)


class CompiledLoss(nn.Module):
    """``torch.compile`` of the loss with the box-row dimension dynamic from the first call.

    Every batch pads its targets to its own largest box count M, so M changes from batch to batch. Left to
    itself, dynamo first compiles for the first batch's M as a constant, then recompiles once M changes; marking
    M dynamic up front gives one graph for every M, and no kernel specialised to a small constant M (on torch
    2.11 / triton 3.6, inductor's kernels for a constant M = 8 failed to compile on an H200, while the dynamic
    graph compiled and trained).
    """

    def __init__(self, loss: nn.Module, **compile_kwargs):
        super().__init__()
        self.loss = loss
        self.compiled = torch.compile(loss, **compile_kwargs)

    def forward(self, feats: list[torch.Tensor], boxes: torch.Tensor, labels: torch.Tensor):
        torch._dynamo.maybe_mark_dynamic(boxes, 1)
        torch._dynamo.maybe_mark_dynamic(labels, 1)
        return self.compiled(feats, boxes, labels)


def build_train_loader_kwargs(config: TrainConfig, plan: RunPlan, device: torch.device) -> dict:
    """Arguments of ``yolo11.data.build_dataloader`` for the training split (per-process batch)."""
    data = config.data
    hsv_on_device = data.hsv_on_device if data.hsv_on_device is not None else device.type == "cuda"
    hyp = AugmentParams(**{f.name: getattr(data, f.name) for f in dataclasses.fields(AugmentParams)})
    return dict(split="train", imgsz=data.imgsz, batch_size=plan.per_process_batch, workers=data.workers,
                augment=True, epochs=config.run.epochs, close_mosaic=data.close_mosaic, seed=config.run.seed,
                hyp=hyp, max_boxes=data.max_boxes, cache_images=data.cache_images,
                hsv_on_device=hsv_on_device)
