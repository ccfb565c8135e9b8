"""Train YOLO11 with Hugging Face Accelerate.

    accelerate launch --config_file accelerate_configs/4gpu.yaml train_accelerate.py --model yolo11n \
        --data ../shared/data/coco128.yaml --epochs 100 --batch-size 64

``--batch-size`` is the global batch, split evenly over the processes. Run ``python train_accelerate.py --help``
for every flag. The Accelerate config file (or ``accelerate config``) chooses devices, process count and mixed
precision; this script only wires the parts of ``yolo11`` together.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from accelerate import PartialState
from accelerate.utils import DistributedType, parse_flag_from_env, set_seed

from yolo11.data import BatchHSV, DataSourceError, build_dataloader, load_source, save_batch_preview
from yolo11.engine import tracking
from yolo11.engine.checkpoint import TrainState, resolve_resume, run_dir_of_checkpoint, save_checkpoint
from yolo11.engine.config import parse_config, save_config
from yolo11.engine.ema import ModelEMA
from yolo11.engine.evaluate import Validator
from yolo11.engine.optim import build_optimizer
from yolo11.engine.profiling import StepProfiler
from yolo11.engine.progress import Progress, print_summary
from yolo11.engine.run_outputs import RunOutputs
from yolo11.engine.setup import (
    CompiledLoss,
    LaunchError,
    build_accelerator,
    build_model,
    build_schedule,
    build_train_loader_kwargs,
    check_launch,
    compile_model,
    maybe_sync_batchnorm,
    plan_run,
    prepare_training,
    resolve_run_dir,
)
from yolo11.engine.train import Accumulation, NonFiniteLossError, train_one_epoch
from yolo11.loss import DetectionLoss
from yolo11.weights import UnsafeCheckpointError


def main(argv: list[str] | None = None) -> int:
    config = parse_config(argv)
    # As AcceleratorState would: the process group is created here, once, for the Accelerator built later.
    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))
    data = config.data
    try:  # everything that can be wrong with the launch, the data or --resume, before any training
        check_launch(state)
        if config.run.resume and config.run.resume != "auto":
            run_dir = run_dir_of_checkpoint(resolve_resume(config.run.resume, Path(config.run.resume)))
        else:
            run_dir = resolve_run_dir(config, state)
        train_source = load_source(data.data, split=data.train_split, cache_dir=data.cache_dir)
        val_source = load_source(data.data, split=data.val_split, cache_dir=data.cache_dir)
    except (LaunchError, DataSourceError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    num_classes = len(train_source.class_names)
    plan = plan_run(config, state.num_processes, len(train_source.dataset), num_classes)
    report_to = tracking.resolve_report_to(config.run.report_to)
    set_seed(config.run.seed)
    try:  # --model, --backbone, --pretrained, --weights
        model = build_model(config.model, num_classes)
    except (ValueError, FileNotFoundError, UnsafeCheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    accelerator = build_accelerator(plan, run_dir, report_to)

    model = maybe_sync_batchnorm(model, config.run.sync_bn, accelerator)
    channels_last = config.run.channels_last and accelerator.device.type == "cuda"
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    ema = ModelEMA(model, config.optim.ema_decay, config.optim.ema_tau) if config.optim.ema else None
    criterion = DetectionLoss(num_classes, strides=model.strides, reg_max=model.reg_max)
    optimizer = build_optimizer(model, plan.optimizer, plan.weight_decay,
                                fused=accelerator.device.type in ("cuda", "cpu"))
    schedule = build_schedule(config, plan, optimizer)
    loader_kwargs = build_train_loader_kwargs(config, plan, accelerator.device)
    batch_hsv = BatchHSV().to(accelerator.device)
    try:
        train_loader = build_dataloader(train_source, **loader_kwargs)
        validator = Validator.build(config, val_source, accelerator, model)
    except MemoryError as err:  # --cache-images that does not fit
        print(f"error: {err}", file=sys.stderr)
        return 2
    if config.run.plots and state.is_main_process and not config.run.resume:
        # Augmentation is a function of (seed, epoch, index): this is exactly the first training batch.
        first = next(iter(build_dataloader(train_source, **{**loader_kwargs, "workers": 0, "cache_images": False})))
        if "hsv_gains" in first:
            first["images"] = BatchHSV()(first["images"], first["hsv_gains"])
        save_batch_preview(first, train_source.class_names, run_dir / "train_batch0.jpg")
    if config.run.compile:
        model = compile_model(model, config.run.compile_mode)
        batch_hsv = torch.compile(batch_hsv)  # one fused kernel instead of ~40 passes over the batch
    if config.run.compile_loss:
        criterion = CompiledLoss(criterion)
    model, optimizer, train_loader = prepare_training(accelerator, model, optimizer, train_loader)
    if ema is not None:
        ema.module.to(accelerator.device)
    train_state = TrainState()
    accelerator.register_for_checkpointing(*(obj for obj in (train_state, ema) if obj is not None))
    if config.run.resume:
        checkpoint = resolve_resume(config.run.resume, run_dir)
        accelerator.load_state(str(checkpoint))
        accelerator.print(f"resumed from {checkpoint} at epoch {train_state.epoch + 1}, "
                          f"batch {train_state.batches_in_epoch}")
    if accelerator.is_main_process:
        save_config(config, run_dir / "config.yaml")
    outputs = RunOutputs(accelerator, run_dir, train_source.class_names, config, train_state, report_to,
                         lr_groups=len(optimizer.param_groups))
    accelerator.print(f"{config.model.model}: {sum(p.numel() for p in model.parameters()):,} parameters | "
                      f"{plan.num_processes} process(es) x batch {plan.per_process_batch} x accumulation "
                      f"{plan.accumulation_steps} | {plan.optimizer.name} lr {plan.optimizer.lr:g} | "
                      f"{len(train_source.dataset)} train / {len(val_source.dataset)} val images | {run_dir}")

    if accelerator.device.type == "cuda" and not config.run.compile:
        accelerator.print("note: the eager step is bound by Python launching its kernels; --compile true "
                          "--compile-loss true --compile-mode reduce-overhead trains about 2x faster after a few "
                          "minutes of compilation (README, 'Fast training on a GPU')")
    progress = Progress(accelerator, config.run.log_interval, config.run.epochs, plan.steps_per_epoch)
    profiler = StepProfiler(run_dir / "profile", config.run.profile and accelerator.is_main_process, accelerator.device)
    # DeepSpeed divides the loss by its own fixed accumulation count: no warmup ramp there.
    ramp = plan.warmup_iters if accelerator.distributed_type != DistributedType.DEEPSPEED else -1
    accumulation = Accumulation(accelerator.num_processes, plan.accumulation_steps, ramp)
    start, images_seen, exit_code = time.perf_counter(), 0, 0
    try:
        for epoch in range(train_state.epoch, config.run.epochs):
            if train_state.epoch != epoch or not train_state.batches_in_epoch:
                train_state.start_epoch(epoch)
            train_loader.set_epoch(epoch)
            loader = train_loader
            if train_state.batches_in_epoch:  # resumed mid-epoch
                loader = accelerator.skip_first_batches(train_loader, train_state.batches_in_epoch)
            result = train_one_epoch(
                accelerator=accelerator, model=model, criterion=criterion, optimizer=optimizer, schedule=schedule,
                ema=ema, loader=loader, state=train_state, epoch=epoch, accumulation=accumulation,
                clip_grad=config.optim.clip_grad, channels_last=channels_last, max_steps=config.run.max_steps,
                progress=progress, profiler=profiler, batch_hsv=batch_hsv)
            images_seen += result.images
            if result.reached_max_steps and train_state.batches_in_epoch < plan.batches_per_epoch:
                save_checkpoint(accelerator, run_dir, train_state, config.run.keep_checkpoints)
                accelerator.print(f"stopped after --max-steps {config.run.max_steps}; resume with --resume auto")
                break
            train_state.start_epoch(epoch + 1)
            last_epoch = epoch + 1 == config.run.epochs or result.reached_max_steps
            metrics = None
            if config.run.val_interval and (last_epoch or (epoch + 1) % config.run.val_interval == 0):
                metrics = validator.run(ema.module if ema is not None else model, criterion)
            stop = outputs.end_epoch(epoch, result, schedule.lrs(), metrics, ema.module if ema else model)
            if last_epoch or stop or (epoch + 1) % config.run.save_period == 0:
                save_checkpoint(accelerator, run_dir, train_state, config.run.keep_checkpoints)
            if stop or result.reached_max_steps:
                break
    except KeyboardInterrupt:
        accelerator.print("interrupted: saving a resumable checkpoint")
        save_checkpoint(accelerator, run_dir, train_state, config.run.keep_checkpoints)
        exit_code = 130
    except NonFiniteLossError as err:
        save_checkpoint(accelerator, run_dir, train_state, config.run.keep_checkpoints)
        if accelerator.is_main_process:
            print(f"error: {err}\nthe last good state is saved in {run_dir / 'checkpoints'}", file=sys.stderr)
        exit_code = 1
    profiler.close(train_state.optimizer_steps)
    print_summary(accelerator, time.perf_counter() - start, images_seen, outputs.best_summary())
    outputs.finish()
    accelerator.end_training()
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
