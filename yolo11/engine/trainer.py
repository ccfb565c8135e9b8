"""The trainer behind ``yolo11.train``: plan -> build -> fit -> finish of a parsed ``TrainConfig``.

``yolo11/train.py`` parses the command line before importing this module, so that ``--help`` and flag errors
answer without loading torch, accelerate, datasets and timm.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from accelerate import PartialState
from accelerate.utils import DistributedType, broadcast, set_seed

from yolo11.data import (
    BatchHSV,
    DataSourceError,
    DetectionSource,
    LoaderConfig,
    first_batches,
    load_source,
    most_objects,
    save_batch_preview,
)
from yolo11.data.dataset import available_memory, cache_bytes
from yolo11.data.schema import single_class
from yolo11.data.sources import VAL_FALLBACKS, report_same_data
from yolo11.engine import dashboards, tracking
from yolo11.engine.build import (
    build_accelerator,
    build_criterion,
    build_model,
    build_schedule,
    build_trackers,
    build_train_loader_config,
    build_train_step,
    build_train_stream_loader,
    maybe_sync_batchnorm,
    prepare_training,
    resolve_run_dir,
    set_loss_epoch,
)
from yolo11.engine.checkpoint import (
    CheckpointError,
    TrainState,
    check_resume_config,
    checkpoint_root,
    latest_checkpoint,
    load_checkpoint,
    remove_checkpoints,
    save_checkpoint,
    set_aside_checkpoints,
)
from yolo11.engine.compile import CompiledLoss, compile_model, use_compile_cache
from yolo11.engine.config import TrainConfig, save_args_yaml, save_config
from yolo11.engine.ema import ModelEMA
from yolo11.engine.evaluate import PendingValidation, Validator
from yolo11.engine.failures import FailedElsewhere, agreed, job_token, say_error
from yolo11.engine.guard import NonFiniteLossError
from yolo11.engine.interrupt import StopAgreement, StopRequested, StopSignal, tell_launcher
from yolo11.engine.loop import TrainStep, train_one_epoch
from yolo11.engine.optim import auto_optimizer_note, build_optimizer
from yolo11.engine.plan import LaunchError, RunPlan, check_launch, cpu_fallback_warning, plan_run
from yolo11.engine.process_group import (
    chosen_omp_threads,
    configured_precision,
    launch_state,
    native_bf16,
    share_gpu_note,
)
from yolo11.engine.profiling import StepProfiler
from yolo11.engine.progress import Progress, loss_names, print_summary
from yolo11.engine.resume import Resume, RunProgress, finished, prepare_resume, resume_command
from yolo11.engine.resume_check import RunBounds
from yolo11.engine.run_clock import RunClock, mark_startup
from yolo11.engine.run_lock import RunFolderBusyError, RunLock, lock_run_dir
from yolo11.engine.run_outputs import EpochFacts, RunOutputs
from yolo11.engine.weight_trace import WeightTrace
from yolo11.evaluation import ValidationStopped
from yolo11.evaluation.plots import plot_labels
from yolo11.output_errors import FULL_ERRNOS, WRITE_ERRNOS, error_text, replaced, write_error_message, writing
from yolo11.postprocess import max_det_for_data
from yolo11.weights import UnsafeCheckpointError, resolve_weights

# --save-period auto: a checkpoint at the end of the first epoch that ends this long after the last one. Writing
# one takes ~0.2 s (model, optimizer, EMA, RNG): every epoch of a 128-image dataset would add a sixth to the run,
# and a kill without a signal (which would have saved) then loses at most this much more work.
AUTO_CHECKPOINT_SECONDS = 60.0

# An epoch shorter than this, on one GPU, is scored while the next one trains: its ~30 ms of scoring (128 images,
# 300 detections each) are a visible share of it, and its line comes at most this much later. A longer epoch gains
# too little to print its line a whole epoch late.
SCORE_BESIDE_MAX_EPOCH_SECONDS = 10.0

# What a user can get wrong (launch, data, flags, weights, --resume, RAM for --cache-images): one line, exit 2.
USER_ERRORS = (LaunchError, DataSourceError, FileNotFoundError, ValueError, UnsafeCheckpointError, MemoryError,
               CheckpointError)


@dataclass
class Run:
    """Everything built for one training run."""

    config: TrainConfig
    plan: RunPlan
    run_dir: Path
    train_source: DetectionSource
    step: TrainStep
    train_loader: object
    validator: Validator
    state: TrainState
    stop: StopSignal
    outputs: RunOutputs | None = None
    clock: RunClock = dataclasses.field(default_factory=lambda: RunClock(process_start()))  # every phase's time
    last_checkpoint: float = dataclasses.field(default_factory=time.monotonic)  # --save-period auto's clock
    pending: PendingEpoch | None = None  # the epoch being scored while the next one trains


@dataclass
class PendingEpoch:
    """An epoch whose validation the evaluator scores while the next epoch trains; ``settle`` records it."""

    facts: EpochFacts
    validation: PendingValidation
    val_seconds: float


def train(config: TrainConfig, typed: frozenset[str] | None = None) -> int:
    """Train as ``config`` says; returns the process's exit code (2: a user error or a write that failed, printed on
    one line by each process that met it; 130 or 143: stopped by SIGINT or SIGTERM, the same on every rank).
    ``typed``: the flags the user set (``parse_command_line``); a resume reads the others from the checkpoint
    (None: every flag counts as set)."""
    _CALLS.append(time.time())
    mark_startup("imports", first=True)  # the interpreter, the imports and the command line
    stop = StopSignal(raise_first=True).install()  # until training starts, a signal ends the start-up at once
    # The process group is made here, once, for the Accelerator built later (which could no longer set its options).
    try:
        launch = launch_state(config.run.device)
    except LaunchError as err:  # no process group yet to agree on who says it: the first rank does
        stop.uninstall()
        if os.environ.get("RANK", "0") == "0":
            print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    except StopRequested as stopped:  # the launcher forwards a stop to every rank, some still forming the group
        stop.uninstall(signal.SIG_DFL)
        tell_launcher(stopped.signum)
        return 128 + stopped.signum
    held: list[RunLock] = []  # the run folder's lock, held until the run ends
    threads = torch.get_num_threads()  # a CPU run sets its own (plan.cpu_threads); a caller's process gets it back
    code = None
    try:
        code = _train(config, typed, launch, stop, held)
        return code
    finally:
        torch.set_num_threads(threads)
        for lock in held:
            lock.release()
        # Leaving after a stop, this rank's signal or another's (agreed): the launcher forwards its signal to every
        # rank, and one may get it only now, during the exit, where Python's handler would raise KeyboardInterrupt
        # (in a finaliser, or in uninstall itself). It ends the exit quietly instead, from this moment on.
        stop.uninstall(signal.SIG_DFL if stop.requested or code in STOP_EXIT_CODES else None)
        # A start that failed never reached end_training: the process group goes now, not at the interpreter's exit,
        # where gloo's threads met their destructors and aborted the process ("terminate called without an active
        # exception", exit 134 instead of 2)
        if code is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


STOP_EXIT_CODES = (128 + signal.SIGINT, 128 + signal.SIGTERM)  # what a run stopped by a signal returns


def _train(config: TrainConfig, typed: frozenset[str] | None, launch: PartialState, stop: StopSignal,
           held: list[RunLock]) -> int:
    made: list[Path] = []  # a run folder this start made: removed again when the start fails
    job, run_dir, resume = "", None, None
    try:
        # inside the try: the launcher forwards a stop to every rank, and one may get it during this collective
        job = job_token(launch)  # names this job's error markers: a line several processes meet alike is said once
        stop.enter("startup", launch.process_index)
        check_launch(launch)
        warning = cpu_fallback_warning(launch.device.type) if config.run.device is None else None  # chosen
        if warning and launch.is_main_process:
            print(warning, file=sys.stderr, flush=True)
        sharing = share_gpu_note(launch)
        if sharing and launch.is_main_process:
            print(sharing, flush=True)
        config, resume = prepare_resume(config, typed)
        if resume is not None and resume.note and launch.is_main_process:  # which run `yolo11 train resume` took
            print(resume.note, flush=True)
        mark_startup("process group")
        stop.enter("conversion", launch.process_index)
        run_dir, train_source, val_source = locate_inputs(config, launch, resume, made)
        max_det, note = max_det_for_data(config.run.max_det, {"train": most_objects(train_source.dataset),
                                                              "val": most_objects(val_source.dataset)})
        if note and launch.is_main_process:
            print(note, flush=True)
        config = dataclasses.replace(config, run=dataclasses.replace(config.run, max_det=max_det))
        mark_startup("data")
        lock = hold_run_dir(run_dir, launch, made)
        if lock is not None:
            held.append(lock)
        needed = 0 if config.data.cache_images is False else sum(  # auto weighs the RAM, true is checked by it
            cache_bytes(source.dataset, config.data.imgsz) for source in (train_source, val_source))
        # the launch's facts, read once here and handed to the plan (which reads neither state nor environment)
        plan = plan_run(config, launch.num_processes, len(train_source.dataset), len(train_source.class_names),
                        launch.device.type, cache_bytes=needed, available_ram=available_memory(),
                        mixed_precision=configured_precision(), bf16_native=native_bf16(launch.device),
                        local_processes=int(os.environ.get("LOCAL_WORLD_SIZE", launch.num_processes)),
                        distributed_type=launch.distributed_type, num_val_images=len(val_source.dataset),
                        omp_num_threads=chosen_omp_threads(),
                        dynamo_backend=os.environ.get("ACCELERATE_DYNAMO_BACKEND"))
        if plan.cpu_threads is not None:
            torch.set_num_threads(plan.cpu_threads)
        note = auto_optimizer_note(config.optim, plan.optimizer, typed)
        if note and launch.is_main_process:
            print(note, flush=True)
        run = build_run(config, plan, run_dir, train_source, val_source, resume, stop)
        start_run(run, val_source, resume)
        mark_startup("run start")
    except FailedElsewhere:  # another process said why
        stop.leaving()
        remove_unused(made, launch)
        return 2
    except USER_ERRORS as err:
        stop.leaving()
        remove_unused(made, launch)
        say_error(error_text(err), launch, job)
        return 2
    except (StopRequested, KeyboardInterrupt) as stopped:
        remove_unused(made, launch)
        signum = stopped.signum if isinstance(stopped, StopRequested) else signal.SIGINT
        tell_launcher(signum)
        return 128 + signum
    except BaseException as err:
        remove_unused(made, launch)
        signum = stopped_by_peer(err, launch, stop)
        if signum is not None:
            return 128 + signum
        if not isinstance(err, OSError) or err.errno not in WRITE_ERRNOS:
            raise
        stop.leaving()
        say_error(write_failure(err, run_dir, resume.checkpoint if resume is not None else None), launch, job)
        return 2
    stop.defer()  # from here a signal is honoured at the next step, validation batch or the end of a save
    run.clock.end_startup()
    if config.run.profile and launch.is_main_process:  # where start-up went, beside the steps' profile
        print(f"start-up: {run.clock.startup_split()}", flush=True)
    try:
        exit_code, images_seen = fit(run)
        # a failed upload (offline, no token) does not fail the finished run: the warning says how to push it later
        finish(run, images_seen, push=exit_code == 0)
    except FailedElsewhere:
        stop.leaving()
        return 2
    except OSError as err:
        if err.errno not in WRITE_ERRNOS:
            raise
        # a full disk mid-run: saves are written aside and renamed, so the last complete checkpoint is intact
        stop.leaving()
        say_error(write_failure(err, run.run_dir, resume.checkpoint if resume is not None else None), launch, job)
        return 2
    if run.step.stop.signum is not None:  # agreed by every rank in fit or finish
        if run.step.accelerator.is_local_main_process:
            tell_launcher(run.step.stop.signum)
        return run.step.stop.exit_code
    return exit_code


def write_failure(err: OSError, run_dir: Path | None, resumed: Path | None) -> str:
    """One line for a write that failed: the file, why, and the complete checkpoint to resume from (``run_dir``'s
    latest, else the one this run ``resumed`` from)."""
    intact = (latest_checkpoint(run_dir) if run_dir is not None else None) or resumed
    then = "free space, then " if err.errno in FULL_ERRNOS else ""
    if intact is None:
        return f"{write_error_message(err)}; no checkpoint was written yet: {then}start the run again"
    ours = run_dir is not None and intact.parent == checkpoint_root(run_dir)
    command = resume_command(run_dir) if ours else f"--resume {intact}"
    return f"{write_error_message(err)}; the last complete checkpoint, {intact}, is intact: {then}resume with {command}"


def hold_run_dir(run_dir: Path, launch: PartialState, made: list[Path]) -> RunLock | None:
    """Lock the run folder for this job (``lock_run_dir``); refused, a folder this start made is the other job's
    now and stays."""
    try:
        return lock_run_dir(run_dir, launch)
    except RunFolderBusyError:
        made.clear()
        raise


def remove_unused(made: list[Path], launch: PartialState) -> None:
    """A start that failed or was stopped leaves no run folder behind that it made (nothing trained is in it)."""
    if launch.is_main_process:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)


def locate_inputs(config: TrainConfig, launch: PartialState, resume: Resume | None = None,
                  made: list[Path] | None = None) -> tuple[Path, DetectionSource, DetectionSource]:
    """The train and val sources and the run folder (the run that owns the ``--resume`` checkpoint, else
    ``--output-dir/--name``); a new run folder is made only once the inputs are known to be good, and appended
    to ``made``."""
    data = config.data
    options = {"cache_dir": data.cache_dir, "images": data.images, "bbox_format": data.bbox_format}
    train_source = load_source(data.data, split=data.train_split, split_flag="--train-split", **options)
    val_source = load_source(data.data, split=data.val_split, fallback_splits=VAL_FALLBACKS, split_flag="--val-split",
                             **options)
    report_same_data(train_source, val_source)
    if data.single_cls:
        if launch.is_main_process:
            print(f"single_cls: the {len(train_source.class_names)} classes of {data.data} trained and scored as one, "
                  "'item'", flush=True)
        train_source, val_source = single_class(train_source), single_class(val_source)
    if config.model.weights and not initial_weights_replaced(resume):
        resolve_weights(config.model.weights)  # downloaded now, so that missing weights fail before the folder
    if resume is not None and resume.run_dir is not None and resume.run_dir.is_dir():
        return resume.run_dir, train_source, val_source
    run_dir, made_now = resolve_run_dir(config, launch)
    if made_now is not None and made is not None:
        made.append(made_now)
    return run_dir, train_source, val_source


def initial_weights_replaced(resume: Resume | None) -> bool:
    """A resume whose checkpoint names its architecture replaces every tensor: ``--weights`` and ``--pretrained``
    (files or downloads the resumed machine may not have) are not loaded."""
    return resume is not None and resume.checkpoint is not None and resume.architecture_saved


def build_run(config: TrainConfig, plan: RunPlan, run_dir: Path, train_source: DetectionSource,
              val_source: DetectionSource, resume: Resume | None = None, stop: StopSignal | None = None) -> Run:
    """Model, accelerator, EMA, loss, optimizer, schedule, loaders and validator, prepared for training."""
    set_seed(config.run.seed)
    model_config = config.model
    if initial_weights_replaced(resume):
        model_config = dataclasses.replace(model_config, weights=None, pretrained=False, partial_weights=False)
    model = build_model(model_config, train_source.class_names, config.data.data)
    mark_startup("model")
    model_name, backbone = model.config["name"], model.config.get("backbone")
    losses = loss_names(model.end2end)  # read before the model is wrapped (DDP, compile)
    accelerator = build_accelerator(plan, run_dir, tracking.resolve_report_to(config.run.report_to))
    mark_startup("accelerator")
    model = maybe_sync_batchnorm(model, config.run.sync_bn, accelerator)
    if plan.channels_last:
        model = model.to(memory_format=torch.channels_last)
    ema = ModelEMA(model, config.optim.ema_decay, config.optim.ema_tau) if config.optim.ema else None
    criterion = build_criterion(model, accelerator.device)
    optimizer = build_optimizer(model, plan.optimizer, plan.weight_decay,
                                fused=plan.fused_optimizer)
    schedule = build_schedule(config, plan, optimizer)
    train_loader = build_train_stream_loader(config, plan, train_source, accelerator.state)
    validator = Validator.build(config, plan, val_source, accelerator, model)
    mark_startup("optimizer and loaders")
    batch_hsv = BatchHSV().to(accelerator.device)
    if plan.compile.model or plan.compile.loss:
        use_compile_cache(config.run.compile_cache_dir)
    if plan.compile.model:
        model = compile_model(model, plan.compile.mode, fast_layers=plan.fast_layers)
        batch_hsv = torch.compile(batch_hsv)  # one fused kernel instead of ~40 passes over the batch
    if plan.compile.loss:
        criterion = CompiledLoss(criterion)
    model, optimizer = prepare_training(accelerator, model, optimizer, train_loader)
    mark_startup("prepare")
    if ema is not None:
        ema.module.to(accelerator.device)
    # DeepSpeed divides the loss by its own fixed accumulation count: no warmup ramp there.
    ramp = plan.warmup_iters if accelerator.distributed_type != DistributedType.DEEPSPEED else -1
    stop = stop or StopSignal()
    step = build_train_step(
        accelerator, model, optimizer, schedule, criterion=criterion, ema=ema, accumulation=plan.accumulation_steps,
        warmup_iters=ramp, clip_grad=config.optim.clip_grad, channels_last=plan.channels_last, batch_hsv=batch_hsv,
        progress=Progress(accelerator, config.run.log_interval, config.run.epochs, plan.batches_per_epoch,
                          loss_names=losses),
        profiler=StepProfiler(run_dir / "profile", config.run.profile and accelerator.is_main_process,
                              accelerator.device),
        stop=StopAgreement(accelerator, stop), cuda_graphs=plan.cuda_graphs.enabled,
        trace=WeightTrace.from_environment(accelerator, accelerator.unwrap_model(model, keep_torch_compile=False)))
    # The architecture as built (--model may be left to the weights): what checkpoints store and resumes compare.
    resolved = dataclasses.replace(config.model, model=model_name, backbone=backbone)
    config = dataclasses.replace(config, model=resolved)
    return Run(config, plan, run_dir, train_source, step, train_loader, validator, TrainState(), stop)


def start_run(run: Run, val_source: DetectionSource, resume: Resume | None = None) -> None:
    """Resume (or preview the first batch), set aside checkpoints this run does not continue, save the config, open
    the outputs, say what runs."""
    accelerator, config, plan = run.step.accelerator, run.config, run.plan
    resume_from = resume.checkpoint if resume is not None else None
    if resume_from is not None:
        for change in check_resume_config(resume_from, config.to_dict(), config.run.allow_changes):
            accelerator.print(f"resume: {change}")
        for note in load_checkpoint(accelerator, resume_from, run.state, run.step.ema, model=run.step.model,
                                    optimizer=run.step.optimizer, allow_changes=config.run.allow_changes,
                                    bounds=RunBounds(config.run.epochs, plan.batches_per_epoch)):
            accelerator.print(f"resume: {note}")
        accelerator.print(f"resumed from {resume_from} at epoch {run.state.epoch + 1}, "
                          f"batch {run.state.batches_in_epoch}")
    else:
        if config.run.resume:  # --resume auto before the first checkpoint (a requeued job that never saved)
            accelerator.print(f"--resume auto: no checkpoint in {run.run_dir} yet, starting from the beginning")
    report_to = tracking.resolve_report_to(config.run.report_to)
    with agreed(accelerator):  # a full disk on the main process ends every process here
        if accelerator.is_main_process:
            report_set_aside(run.run_dir, resume_from)
            save_config(config, run.run_dir / "config.yaml")
            save_args_yaml(config, run.run_dir / "args.yaml")
        run.state.tracker_run_id = build_trackers(accelerator, config, run.run_dir, report_to,
                                                  run.state.tracker_run_id)
        model = accelerator.unwrap_model(run.step.model, keep_torch_compile=False)
        run.outputs = RunOutputs(accelerator, run.run_dir, run.train_source.class_names, run.state,
                                 epochs=config.run.epochs, patience=config.run.patience, plots=config.run.plots,
                                 report_to=report_to, lr_groups=len(run.step.optimizer.param_groups),
                                 loss_names=loss_names(model.end2end), clock=run.clock)
        if resume_from is None and config.run.plots and accelerator.is_main_process:
            # on the writer thread: 0.9 s of mosaics at 640 px that the first steps need not wait for
            run.outputs.write_in_background(save_first_batches, run.train_source, build_train_loader_config(
                run.config, run.plan), run.run_dir)
            run.outputs.draw(plot_labels, *labels_plot_data(run.train_source), run.run_dir / "labels.jpg")
            mark_startup("previews started")
    dashboards.log_model_info(accelerator, model, config.data.imgsz)
    accelerator.print(f"{model.config['name']}: {sum(p.numel() for p in model.parameters()):,} parameters | "
                      f"{plan.num_processes} process(es) x batch {plan.per_process_batch} x accumulation "
                      f"{plan.accumulation_steps} | {plan.optimizer.name} lr {plan.optimizer.lr:g} | "
                      f"{len(run.train_source.dataset)} train / {len(val_source.dataset)} val images | "
                      f"{run.run_dir}")
    accelerator.print(plan.precision_reason)
    accelerator.print(plan.cache_reason)
    accelerator.print(plan.workers_reason)
    accelerator.print(plan.compile.reason)
    accelerator.print(plan.cuda_graphs.reason)


def report_set_aside(run_dir: Path, resumed: Path | None) -> None:
    """``set_aside_checkpoints`` on the main process, said in one line."""
    moved = set_aside_checkpoints(run_dir, resumed)
    if moved is None:
        return
    aside, names = moved
    if resumed is not None and resumed.resolve().parent == checkpoint_root(run_dir).resolve():
        print(f"resume: {len(names)} later checkpoint(s) of this folder ({names[0]}..{names[-1]}), which this resume "
              f"of {resumed.name} does not continue, moved to {aside} (not deleted)", flush=True)
    else:
        print(f"{checkpoint_root(run_dir)} held {len(names)} checkpoint(s) of an earlier run ({names[0]}..{names[-1]}):"
              f" moved to {aside} (not deleted; --resume {aside / names[-1]} continues that run); this run's "
              "checkpoints start afresh", flush=True)


def save_first_batches(source: DetectionSource, config: LoaderConfig, run_dir: Path, count: int = 3) -> None:
    """train_batch0.jpg ... train_batch2.jpg, the first training batches as Ultralytics draws them. Augmentation is
    a function of (seed, epoch, index): these are exactly the first batches. Their HSV is OpenCV's, as workers
    apply it (the same gains; the device's ``BatchHSV`` is within 1 of it per pixel), which on the CPU takes
    milliseconds where ``BatchHSV`` takes seconds of the run's start."""
    config = dataclasses.replace(config, cache_images=False, hsv_on_device=False)
    for index, batch in enumerate(first_batches(source, config, count)):
        path = run_dir / f"train_batch{index}.jpg"
        with replaced(path) as tmp, writing(path):
            save_batch_preview(batch, source.class_names, tmp)


def labels_plot_data(source: DetectionSource) -> tuple[np.ndarray, list[int], list[str]]:
    """``plot_labels``' inputs for labels.jpg (Ultralytics' ``plot_labels``): every training box as normalised
    centre xywh, its class, the class names."""
    rows = source.dataset.select_columns(["width", "height", "objects"])
    boxes, classes = [], []
    for row in rows:
        bbox = row["objects"]["bbox"]  # COCO xywh in pixels -> normalised centre xywh
        if bbox:
            xywh = torch.tensor(bbox, dtype=torch.float64).reshape(-1, 4)
            xywh[:, :2] += xywh[:, 2:] / 2
            boxes.append(xywh / torch.tensor([row["width"], row["height"]] * 2, dtype=torch.float64))
            classes.extend(row["objects"]["category"])
    stacked = torch.cat(boxes).numpy() if boxes else torch.zeros(0, 4).numpy()
    return stacked, classes, source.class_names


def fit(run: Run) -> tuple[int, int]:
    """The epochs, from where the state says; returns the exit code and the images trained on."""
    config, state, step = run.config.run, run.state, run.step
    accelerator, images_seen = step.accelerator, 0
    run.train_loader.set_epoch(state.epoch, state.batches_in_epoch)
    stream = iter(run.train_loader)  # every remaining epoch: the workers run ahead across epoch boundaries
    run.stop.enter("training", accelerator.process_index)
    try:
        for epoch in range(state.epoch, config.epochs):
            if state.epoch != epoch or not state.batches_in_epoch:
                state.start_epoch(epoch)
            set_loss_epoch(step.criterion, epoch, config.epochs)  # YOLO26's branch weights, resumed runs too
            # a checkpoint taken during validation resumes here with every batch done: no batch, then validation
            loader = itertools.islice(stream, run.plan.batches_per_epoch - state.batches_in_epoch)
            result = train_one_epoch(step, loader, state, epoch, config.max_steps)
            images_seen += result.images
            run.clock.add("training", result.seconds)
            if result.interrupted or (result.reached_max_steps and state.batches_in_epoch < run.plan.batches_per_epoch):
                return stop_mid_epoch(run, result), images_seen
            try:
                stop_training, saved = end_epoch(run, epoch, result)
            except ValidationStopped:
                checkpoint(run)  # the trained epoch, before its validation
                accelerator.print(f"stopped by a signal during the validation of epoch {epoch + 1}; the checkpoint "
                                  f"holds the trained epoch; resume with: {resume_command(run.run_dir)} (it "
                                  "validates the epoch again)")
                return step.stop.exit_code, images_seen
            if stop_training or result.reached_max_steps:
                if stop_training:  # as Ultralytics' EarlyStopping says it
                    accelerator.print(f"early stop: no improvement in the last {config.patience} epochs (--patience); "
                                      f"the best was epoch {state.best_epoch + 1}, best.safetensors holds it")
                if result.reached_max_steps and not stop_training and epoch + 1 < config.epochs:
                    accelerator.print(f"stopped after --max-steps {config.max_steps} at the end of epoch {epoch + 1}; "
                                      f"resume with: {resume_command(run.run_dir)}")
                break
            if step.stop.agreed_now():  # a signal during the epoch's outputs or its checkpoint
                if not saved:
                    checkpoint(run)
                accelerator.print(f"stopped by a signal after epoch {epoch + 1}; resume with: "
                                  f"{resume_command(run.run_dir)}")
                return step.stop.exit_code, images_seen
    except NonFiniteLossError as err:
        return stop_non_finite(run, err), images_seen
    except Exception:
        # an error in the epoch after one still being scored: that epoch's record is whole, write it as the run
        # would have before the error; the error itself is what the run reports, whatever the record does
        if run.pending is not None:
            with contextlib.suppress(Exception):
                settle(run)
                run.outputs.wait_for_writes()
        raise
    return 0, images_seen


def stop_mid_epoch(run: Run, result) -> int:
    """Checkpoint after a stop signal or ``--max-steps`` inside an epoch; returns the exit code."""
    config, step = run.config.run, run.step
    checkpoint(run)
    if result.interrupted:
        step.accelerator.print(f"stopped by a signal at step {run.state.optimizer_steps}; checkpoint saved, resume "
                               f"with: {resume_command(run.run_dir)}")
        return step.stop.exit_code
    step.accelerator.print(f"stopped after --max-steps {config.max_steps}; resume with: {resume_command(run.run_dir)}")
    return 0


def stop_non_finite(run: Run, err: NonFiniteLossError) -> int:
    """Save the last good state when the weights are still finite (a skipped update); never save others."""
    step, root = run.step, run.run_dir / "checkpoints"
    try:
        checkpoint(run)
        where = f"the last good state is saved in {root}"
    except CheckpointError:
        earlier = (f"the last good checkpoint is in {root}" if (root / "latest").is_file() else
                   "no checkpoint was written before it (--save-period sets how often one is)")
        where = f"the weights are no longer finite and were not saved; {earlier}"
    if step.accelerator.is_main_process:
        print(f"error: {err}\n{where}", file=sys.stderr)
    return 1


def end_epoch(run: Run, epoch: int, result) -> tuple[bool, bool]:
    """Validate when due, record the epoch, checkpoint when due; returns whether training stops here and whether
    a checkpoint was written. Raises ``ValidationStopped`` (every rank) when a stop request cut the validation
    short: the state is then still the trained epoch's, with nothing of the epoch recorded.

    Where ``score_beside_training`` allows, the epoch's record waits for its scoring, which runs while the next
    epoch trains: ``settle`` records it before anything reads the best epoch (the next validation, a checkpoint)."""
    config, state, step = run.config.run, run.state, run.step
    settle(run)  # the previous epoch's, if it was scored beside this one
    last_epoch = epoch + 1 == config.epochs or result.reached_max_steps
    model = step.ema.module if step.ema is not None else step.model
    with run.clock("saving"):
        # before the validation starts its scoring thread: the copy's ~1,500 small ops each wait for the GIL
        # beside it (22 ms an epoch of the coco128 tutorial on an H200 after it, 4-6 ms alone)
        weights = run.outputs.weights_now(model)
    validation, val_seconds, later = None, 0.0, False
    interval = config.val_interval  # -1: the last epoch only
    if interval and (last_epoch or (interval > 0 and (epoch + 1) % interval == 0)):
        # the plots and the 12 COCO stats come at the last epoch or where patience may stop the run (as Ultralytics
        # plots); other epochs log the headline metrics; trackers get sample images every validation
        final = last_epoch or run.outputs.may_stop(epoch)
        plots = config.plots and final
        later = score_beside_training(run, epoch, result, final)
        run.stop.enter("validation", step.accelerator.process_index)
        before = run.clock.seconds("validation")
        with run.clock("validation"):
            validation = run.validator.run(model, step.criterion, plots=plots,
                                           images=plots or bool(run.outputs.report_to), all_stats=final,
                                           stop=lambda: run.stop.requested, score_later=later)
        val_seconds = run.clock.seconds("validation") - before
        if not later:
            run.clock.add("scoring", validation.score_seconds)
            run.clock.add("validation data", validation.data_seconds)
    state.start_epoch(epoch + 1)
    with run.clock("saving"), agreed(step.accelerator):  # a full disk on the main process ends every process here
        facts = run.outputs.epoch_facts(epoch, result, step.schedule.lrs(), weights, state.optimizer_steps)
        if later:
            run.pending = PendingEpoch(facts, validation, val_seconds)
            return False, False  # score_beside_training: neither a stop nor a checkpoint can be due here
        outcome = run.outputs.record(facts, validation, final=last_epoch, val_seconds=val_seconds)
    state.best_fitness, state.best_epoch = outcome.best_fitness, outcome.best_epoch
    due = last_epoch or outcome.stop or checkpoint_due(run, epoch)
    if due:
        checkpoint(run)
    return outcome.stop, due


def score_beside_training(run: Run, epoch: int, result, final: bool) -> bool:
    """Whether ``epoch``'s validation may be scored while the next epoch trains: one process training on a GPU and
    scoring on its host (whose cores wait while the GPU trains; a CPU run's are all training, and scoring on the
    GPU would queue behind the training's kernels), without trackers (they take the epoch's metrics at its step,
    before the next epoch's steps), an epoch shorter than ``SCORE_BESIDE_MAX_EPOCH_SECONDS``, and nothing due now
    that needs the metrics: not the ``final`` epoch (plots, the stop decision), no checkpoint (it holds the best
    epoch)."""
    accelerator = run.step.accelerator
    return (accelerator.num_processes == 1 and accelerator.device.type != "cpu" and run.plan.eval_device == "cpu"
            and not run.outputs.report_to and result.seconds < SCORE_BESIDE_MAX_EPOCH_SECONDS and not final
            and not checkpoint_due(run, epoch))


def settle(run: Run) -> None:
    """Record the epoch that was scored while the next one trained (``end_epoch``), once its scoring is done: its
    row, line, best epoch and weights files, as ``end_epoch`` would have. Before every checkpoint and validation."""
    pending, run.pending = run.pending, None
    if pending is None:
        return
    state, step = run.state, run.step
    with run.clock("validation", "scoring"):  # the part of the scoring that training did not hide
        validation = pending.validation.result()
    run.clock.add("training scoring alongside", validation.score_seconds)
    run.clock.add("validation data", validation.data_seconds)
    with run.clock("saving"), agreed(step.accelerator):
        outcome = run.outputs.record(pending.facts, validation, val_seconds=pending.val_seconds)
    state.best_fitness, state.best_epoch = outcome.best_fitness, outcome.best_epoch


def checkpoint_due(run: Run, epoch: int) -> bool:
    """Whether ``--save-period`` asks for a checkpoint after ``epoch``; under auto, the main process's clock
    decides for every rank (each rank must take part in the save)."""
    period = run.config.run.save_period
    if period is not None:
        return (epoch + 1) % period == 0
    due = time.monotonic() - run.last_checkpoint >= AUTO_CHECKPOINT_SECONDS
    accelerator = run.step.accelerator
    if accelerator.num_processes == 1:
        return due
    return bool(broadcast(torch.tensor([float(due)], device=accelerator.device), from_process=0).item())


def checkpoint(run: Run) -> None:
    """A resumable checkpoint of the run as it stands (every rank), with the resolved config."""
    step = run.step
    settle(run)  # the state's best epoch and the weights files up to date
    run.stop.enter("checkpoint", step.accelerator.process_index)  # a signal now: the write completes first
    with run.clock("saving", "saving checkpoints"):
        save_checkpoint(step.accelerator, run.run_dir, run.state, run.config.run.keep_checkpoints, step.model,
                        step.ema, run.config.to_dict())
    run.last_checkpoint = time.monotonic()


def drop_finished_checkpoints(run: Run) -> None:
    """``--keep-checkpoints 0``: delete the checkpoints of a finished run (its last epoch done, or patience stopped
    it), said in one line; a run stopped early (``--max-steps``) keeps its newest, to be resumed."""
    state, config = run.state, run.config.run
    if finished(RunProgress(state.epoch, state.batches_in_epoch, state.best_epoch), config.epochs,
                config.patience):
        names = remove_checkpoints(run.run_dir)
        if names:
            print(f"--keep-checkpoints 0: the finished run's checkpoint ({', '.join(names)}) removed; "
                  f"{run.run_dir / 'weights'} holds its weights", flush=True)


PEER_STOP_GRACE = 5.0  # seconds for a launcher's forwarded stop signal to reach this rank


def stopped_by_peer(err: BaseException, launch: PartialState, stop: StopSignal) -> int | None:
    """The signal that stops this rank when ``err`` is a collective that a stopping peer broke during start-up:
    the launcher forwards a stop to every rank, but the first rank to stop may exit, and close its connections
    under this rank's barrier, before the signal reaches this one. Waits up to ``PEER_STOP_GRACE`` for it; None
    for any other error (which is then raised as it is, that much later)."""
    if launch.num_processes == 1 or not isinstance(err, RuntimeError):
        return None
    try:
        return stop.wait(PEER_STOP_GRACE)
    except StopRequested as stopped:  # the start-up's handler raises at the first signal
        return stopped.signum


_CALLS: list[float] = []  # when each train() of this process began (a script or notebook may train twice)


def process_start() -> float | None:
    """When this run started (``time.time()``): the process's launch for the process's first run (its start-up
    then counts the imports), the ``train`` call for a later one; None where unknown."""
    if len(_CALLS) > 1:
        return _CALLS[-1]
    try:
        import psutil  # an Accelerate dependency
    except ImportError:
        return None
    return psutil.Process().create_time()


def finish(run: Run, images_seen: int, push: bool) -> bool:
    """Summary, plots, trackers closed; ``--push-to-hub`` when ``push`` (a run that ended normally), from the main
    process. Returns False when the push failed. A stop request (now or before) skips the plots and the push: the
    last checkpoint is whole, and a resume draws them."""
    step, config = run.step, run.config
    run.stop.enter("finish", step.accelerator.process_index)
    if step.profiler is not None:
        step.profiler.close(run.state.optimizer_steps)
    settle(run)  # a safety net: the last epoch, a stop and an error settle already; a pending epoch must not be lost
    with run.clock("saving"), agreed(step.accelerator):  # the weights written in the background: their error
        run.outputs.wait_for_writes()
    if step.graphed is not None:
        run.clock.add("training captures", step.graphed.capture_seconds)
    run.clock.add("validation captures", run.validator.capture_seconds())
    stopping = step.stop.agreed_now()
    with agreed(step.accelerator):
        run.outputs.finish_figures(cancel=stopping)  # drawn by workers since the last epoch; a stop drops the rest
    print_summary(step.accelerator, run.clock, images_seen, run.outputs.best_summary())
    run.validator.close()
    table = run.outputs.class_table(run.validator.evaluator.ground_truth)
    if table and step.accelerator.is_main_process:
        print(table)
    pushed = True
    if stopping:
        step.accelerator.print("stopped by a signal: the final plots and any --push-to-hub are skipped (the last "
                               "checkpoint is complete)")
    else:
        with agreed(step.accelerator):
            run.outputs.finish(run.validator.evaluator.ground_truth)
            if config.run.keep_checkpoints == 0 and step.accelerator.is_main_process:
                drop_finished_checkpoints(run)
            if push and config.run.push_to_hub:
                pushed = run.outputs.push_to_hub(config.run.push_to_hub, config.data.data, config.to_dict())
    step.stop.agreed_now()  # a signal during the plots: every rank exits with its code
    step.accelerator.wait_for_everyone()
    step.accelerator.end_training()
    return pushed
