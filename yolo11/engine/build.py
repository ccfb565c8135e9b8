"""``build_*`` functions: where the training config and the run plan are turned into objects."""

from __future__ import annotations

import warnings
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

from yolo11.architecture import HEAD_LAYER
from yolo11.data import BatchHSV, DetectionSource, LoaderConfig, build_train_stream
from yolo11.data.augment_params import augment_params_of
from yolo11.data.loader import DetectionDataLoader
from yolo11.engine import tracking
from yolo11.engine.config import ModelConfig, TrainConfig, frozen_layers
from yolo11.engine.ema import ModelEMA
from yolo11.engine.interrupt import StopAgreement
from yolo11.engine.loop import Accumulation, TrainStep
from yolo11.engine.optim import WarmupSchedule, lr_lambda
from yolo11.engine.plan import RunPlan
from yolo11.engine.process_group import COLLECTIVE_TIMEOUT
from yolo11.engine.profiling import StepProfiler
from yolo11.engine.progress import Progress
from yolo11.engine.weight_trace import WeightTrace
from yolo11.loss import DetectionLoss, End2EndLoss
from yolo11.models import YOLO11Detector, create_model
from yolo11.models.neck import ULTRALYTICS_LAYERS
from yolo11.run_folders import numbered_dir
from yolo11.weights import load_weights
from yolo11.weights.safetensors_io import host_copies
from yolo11.weights.transfer import describe_transfer, transfer_weights


def build_schedule(config: TrainConfig, plan: RunPlan, optimizer: torch.optim.Optimizer) -> WarmupSchedule:
    """The lr / momentum schedule of a run. As Ultralytics, optimizer 'auto' starts the biases' warmup at 0, an
    explicit choice at --warmup-bias-lr."""
    optim = config.optim
    warmup_bias_lr = 0.0 if optim.optimizer == "auto" else optim.warmup_bias_lr
    return WarmupSchedule(optimizer, lr_lambda(optim.schedule, config.run.epochs, optim.lrf), plan.warmup_iters,
                          warmup_bias_lr, optim.warmup_momentum, optim.momentum)


def resolve_run_dir(config: TrainConfig, state: PartialState) -> tuple[Path, Path | None]:
    """``output_dir/name``, or ``name2``, ``name3`` ... when it exists, and the top folder made for it now (None when
    it existed); made by the main process, and the choice (or the error, so that no rank waits for a folder that
    will not come) given to every rank. A numbered folder is claimed by ``mkdir`` itself, which fails when the
    folder exists: two jobs started at once never pick the same one."""
    run = config.run
    base = Path(run.output_dir) / run.name
    choice: list = [None, None, None]  # path, error, the top folder made now (path or a parent; None: none)
    if state.is_main_process:
        path = base
        try:
            top = next((folder for folder in reversed([base, *base.parents]) if not folder.exists()), None)
            base.parent.mkdir(parents=True, exist_ok=True)
            if run.exist_ok or run.resume == "auto":  # a copied checkpoint's resume starts a new folder
                path.mkdir(exist_ok=True)
            else:
                path = numbered_dir(base)
                top = path if top is None or top == base else top
            choice = [str(path), None, None if top is None else str(top)]
        except OSError as err:  # a file where a folder should be, no permission, a full disk
            choice = [None, f"--output-dir {run.output_dir}: cannot make the run folder {path}: {err.strerror}", None]
    if state.num_processes > 1:
        broadcast_object_list(choice, from_process=0)
    if choice[1] is not None:
        raise ValueError(choice[1])
    return Path(choice[0]), None if choice[2] is None else Path(choice[2])


def build_accelerator(plan: RunPlan, run_dir: Path, log_with: list[str]) -> Accelerator:
    """The run's Accelerator. Accumulation is the training loop's (Ultralytics' ramping count, ``no_sync`` between
    steps), except under DeepSpeed, which accumulates by its own fixed count."""
    deepspeed = PartialState().distributed_type == DistributedType.DEEPSPEED
    accelerator = Accelerator(
        mixed_precision=plan.mixed_precision,
        dynamo_backend="no",  # the config's dynamo_backend is the plan's compile choice: compiled once, by us
        gradient_accumulation_steps=plan.accumulation_steps if deepspeed else 1,
        log_with=log_with or None,
        project_config=ProjectConfiguration(project_dir=str(run_dir), logging_dir=str(run_dir)),
        dataloader_config=DataLoaderConfiguration(non_blocking=plan.pin_memory),  # pinned batches: async copies
        kwargs_handlers=[
            # The DFL conv is frozen; every other parameter gets a gradient every step.
            DistributedDataParallelKwargs(find_unused_parameters=False),
            # A rank that dies is caught by the launcher; a slow one (rank-0 evaluation) must not time out others.
            # Applies only where no PartialState made the group before: the trainer's (launch_state) has it already.
            InitProcessGroupKwargs(timeout=COLLECTIVE_TIMEOUT),
        ],
    )
    accelerator.register_save_state_pre_hook(_weights_to_host)
    return accelerator


def _weights_to_host(models: list, weights: list[dict], output_dir: str) -> None:
    """``save_state``'s model state dicts brought to the CPU in one copy per dtype (``host_copies``), before its
    safetensors writer would copy them tensor by tensor."""
    weights[:] = [host_copies(state) for state in weights]


def prepare_training(accelerator: Accelerator, model: nn.Module, optimizer: torch.optim.Optimizer, loader):
    """``accelerator.prepare`` of the model and optimizer. The train loader is not prepared: it shards its own
    batches over the processes (``EpochStream``) and ``DeviceFeed`` copies them on a side CUDA stream. DeepSpeed
    sizes its micro-batch from a loader passed to ``prepare``: there it goes through, and the prepared copy is
    dropped."""
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        model, optimizer, _ = accelerator.prepare(model, optimizer, loader)
        return model, optimizer
    if accelerator.distributed_type != DistributedType.FSDP:  # FSDP gathers its optimizer state itself
        optimizer.register_state_dict_post_hook(_optimizer_state_to_host)
    return accelerator.prepare(model, optimizer)


def _optimizer_state_to_host(optimizer: torch.optim.Optimizer, state_dict: dict) -> dict:
    """The state tensors of ``optimizer.state_dict()`` (what checkpoints save) on the CPU in one copy per dtype
    (``host_copies``), where ``torch.save`` would copy each momentum buffer on its own. New dicts: the packed
    state shares its inner dicts with the live optimizer. Loading moves them back to the parameters' device."""
    tensors = {(index, key): value for index, values in state_dict["state"].items()
               for key, value in values.items() if isinstance(value, torch.Tensor)}
    copies = host_copies(tensors)
    state_dict["state"] = {index: {key: copies.get((index, key), value) for key, value in values.items()}
                           for index, values in state_dict["state"].items()}
    return state_dict


def maybe_sync_batchnorm(model: nn.Module, requested: bool, accelerator: Accelerator) -> nn.Module:
    """SyncBatchNorm only for multi-process CUDA runs (it raises on CPU/gloo); call before ``prepare``."""
    if not requested:
        return model
    if accelerator.distributed_type == DistributedType.MULTI_GPU and accelerator.num_processes > 1:
        return nn.SyncBatchNorm.convert_sync_batchnorm(model)
    warnings.warn(f"--sync-bn ignored: it needs several CUDA processes (this run: {accelerator.num_processes} "
                  f"process(es), {accelerator.distributed_type})", stacklevel=2)
    return model


DEFAULT_MODEL = "yolo11n"


def build_criterion(model: YOLO11Detector, device: torch.device) -> nn.Module:
    """The model's training loss on ``device``: ``End2EndLoss`` (both heads, epoch-weighted) for YOLO26, else
    ``DetectionLoss``. End2EndLoss keeps its branch weights in a device buffer that a compiled or CUDA-graphed
    step reads: it must live where the maps are."""
    if model.end2end:
        return End2EndLoss(model.num_classes, strides=model.strides).to(device)
    return DetectionLoss(model.num_classes, strides=model.strides, reg_max=model.reg_max)


def build_train_step(accelerator: Accelerator, model: nn.Module, optimizer: torch.optim.Optimizer,
                     schedule: WarmupSchedule, *, criterion: nn.Module | None = None, ema: ModelEMA | None = None,
                     accumulation: int = 1, warmup_iters: int = -1, clip_grad: float = 10.0,
                     channels_last: bool = False, cuda_graphs: bool = False, batch_hsv: nn.Module | None = None,
                     progress: Progress | None = None, profiler: StepProfiler | None = None,
                     stop: StopAgreement | None = None, trace: WeightTrace | None = None) -> TrainStep:
    """The training step as the trainer runs it, for the trainer, the tests and the benchmarks alike.

    ``model`` and ``optimizer`` are prepared already (``accelerator.prepare``). Left out: ``criterion`` is the
    model's loss (``build_criterion``), ``batch_hsv`` a ``BatchHSV`` on the device, ``progress`` silent.
    ``accumulation``: micro-batches per optimizer step, ramped from 1 over ``warmup_iters`` batches (-1: none).
    ``trace``: a ``WeightTrace`` (``YOLO11_WEIGHT_TRACE``) to record each rank's weights after every step.
    """
    device = accelerator.device
    if criterion is None:
        criterion = build_criterion(accelerator.unwrap_model(model, keep_torch_compile=False), device)
    progress = progress or Progress(accelerator, interval=10**9, epochs=1, batches_per_epoch=10**9, bars=False)
    return TrainStep(accelerator=accelerator, model=model, criterion=criterion, optimizer=optimizer,
                     schedule=schedule, ema=ema, accumulation=Accumulation(accumulation, warmup_iters),
                     clip_grad=clip_grad, channels_last=channels_last,
                     batch_hsv=batch_hsv if batch_hsv is not None else BatchHSV().to(device), progress=progress,
                     profiler=profiler, stop=stop, cuda_graphs=cuda_graphs, trace=trace)


def set_loss_epoch(criterion: nn.Module, epoch: int, epochs: int) -> None:
    """Ultralytics' ``criterion.update()`` schedule for a loss that has one (``End2EndLoss``), through a
    ``CompiledLoss`` wrapper; called before every epoch, a resumed one included."""
    loss = getattr(criterion, "loss", criterion)  # CompiledLoss keeps the module it compiled as .loss
    if hasattr(loss, "set_epoch"):
        loss.set_epoch(epoch, epochs)


def _preview(names: list[str] | None, count: int, limit: int = 4) -> str:
    if not names:
        return f"{count} classes"
    more = ", ..." if len(names) > limit else ""
    return f"{count} classes: {', '.join(names[:limit])}{more}"


def build_model(config: ModelConfig, class_names: list[str], data: str = "the dataset") -> YOLO11Detector:
    """The detector for ``class_names`` (the dataset's, kept on the model). With ``--weights`` the architecture
    comes from the weights (``--model`` / ``--backbone`` must agree unless ``--partial-weights``), every tensor
    is transferred, and a different class count re-initialises the head's class branch; both are printed.
    ``--freeze`` then freezes the layers it names (``freeze_layers``)."""
    model = _built_model(config, class_names, data)
    layers = frozen_layers(config.freeze) if config.freeze is not None else frozenset()
    if layers:  # --freeze 0 or []: none, as Ultralytics' freeze=0
        frozen = freeze_layers(model, layers)
        PartialState().print(f"--freeze {config.freeze}: {frozen} tensors frozen (layers {_ranges(sorted(layers))})")
    return model


def freeze_layers(model: YOLO11Detector, layers: frozenset[int]) -> int:
    """``requires_grad`` off for the parameters of Ultralytics' layer numbers ``layers`` (0-10 the backbone, a timm
    backbone as one piece, 11-22 the neck, 23 the head), as Ultralytics' ``freeze``; returns how many were frozen.
    The optimizer, DDP and the EMA then leave them as they are, and their BatchNorm layers keep their running
    statistics (evaluation mode whatever ``model.train()`` says), as Ultralytics 8.4.190 freezes them. A freeze
    that leaves nothing to train is a ``ValueError`` (a run would fail at its first backward)."""
    neck_layers = {name: index for index, name in ULTRALYTICS_LAYERS.items()}

    def hit(name: str) -> bool:
        part, _, rest = name.partition(".")
        if part == "backbone":
            first = rest.removeprefix("layers.").partition(".")[0]
            return int(first) in layers if first.isdigit() else bool(layers & set(range(11)))  # timm: all or none
        if part == "neck":
            return neck_layers.get(rest.partition(".")[0]) in layers
        return part == "head" and HEAD_LAYER in layers

    frozen = [param for name, param in model.named_parameters() if param.requires_grad and hit(name)]
    if len(frozen) == sum(p.requires_grad for p in model.parameters()):
        raise ValueError(f"--freeze layers {_ranges(sorted(layers))} are every layer with trainable tensors: nothing "
                         "would train; freeze fewer (a count below 23, or a list)")
    for param in frozen:
        param.requires_grad_(False)
    for name, module in model.named_modules():
        if isinstance(module, nn.BatchNorm2d) and hit(name):
            module.__class__ = _stats_frozen(type(module))
            module.eval()
    return len(frozen)


_FROZEN_CLASSES: dict[type, type] = {}


def _stats_frozen(cls: type) -> type:
    """``cls`` (a BatchNorm class) whose ``train()`` keeps it in evaluation mode: its running statistics stay. A
    subclass adds no state: the state-dict keys, checkpoints and weights files are unchanged."""
    if cls not in _FROZEN_CLASSES:
        _FROZEN_CLASSES[cls] = type(f"StatsFrozen{cls.__name__}", (cls,),
                                    {"train": lambda self, mode=True: cls.train(self, False)})
    return _FROZEN_CLASSES[cls]


def _ranges(numbers: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2, 5``."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def _built_model(config: ModelConfig, class_names: list[str], data: str) -> YOLO11Detector:
    if not config.weights:
        return create_model(config.model or DEFAULT_MODEL, num_classes=len(class_names), backbone=config.backbone,
                            pretrained=config.pretrained, names=class_names)
    # a --backbone the user names may be fetched
    source = load_weights(config.weights, backbone=config.backbone)
    name, backbone = source.config["name"], source.config.get("backbone")
    described = f"--weights {config.weights} ({name}{f' + {backbone}' if backbone else ''}, " \
                f"{_preview(source.names, source.num_classes)})"
    contradictions = [f"--{flag} {wanted}" for flag, wanted, found in
                      (("model", config.model, name), ("backbone", config.backbone, backbone))
                      if wanted is not None and wanted != found]
    if contradictions and not config.partial_weights:
        verb, flags = ("contradicts", "the flag") if len(contradictions) == 1 else ("contradict", "the flags")
        raise ValueError(f"{' and '.join(contradictions)} {verb} {described}: drop {flags} (the architecture "
                         "comes from the weights), or add --partial-weights true to transfer only the tensors whose "
                         "names and shapes match")
    model = create_model(config.model or name, num_classes=len(class_names),
                         backbone=config.backbone if config.backbone is not None else backbone,
                         pretrained=config.pretrained, names=class_names)
    report = transfer_weights(source, model, allow_partial=config.partial_weights)
    state = PartialState()
    state.print(f"{described}: " + "\n  ".join(describe_transfer(report, source, model)))
    if source.num_classes != model.num_classes:
        state.print(f"  the weights predict {_preview(source.names, source.num_classes)}; --data {data} has "
                    f"{_preview(class_names, len(class_names))}")
    elif source.names and source.names != class_names:
        state.print(f"  note: --data {data} names its {len(class_names)} classes differently from the weights "
                    f"({_preview(class_names, len(class_names))}); class k of the weights is trained as class k")
    return model


def build_train_loader_config(config: TrainConfig, plan: RunPlan) -> LoaderConfig:
    """The training split's ``LoaderConfig`` (per-process batch)."""
    data = config.data
    hyp = augment_params_of(data)
    return LoaderConfig(imgsz=data.imgsz, batch_size=plan.per_process_batch, workers=plan.workers, augment=True,
                        epochs=config.run.epochs, close_mosaic=data.close_mosaic, seed=config.run.seed, hyp=hyp,
                        max_boxes=data.max_boxes, cache_images=plan.cache_images, hsv_on_device=plan.hsv_on_device,
                        full_batches=plan.compile.model,  # one batch shape for the compiled graph
                        pin_memory=plan.pin_memory)


def build_train_stream_loader(config: TrainConfig, plan: RunPlan, source: DetectionSource,
                              state: PartialState) -> DetectionDataLoader:
    """This process's training batches for every epoch (``build_train_stream``)."""
    loader = build_train_stream(source, build_train_loader_config(config, plan),
                                num_processes=state.num_processes, process_index=state.process_index)
    if loader.batch_sampler.batches_per_epoch != plan.batches_per_epoch:  # the plan and the stream must agree
        raise AssertionError(f"{loader.batch_sampler.batches_per_epoch} != {plan.batches_per_epoch} batches")
    return loader


def build_trackers(accelerator: Accelerator, config: TrainConfig, run_dir: Path, report_to: list[str],
                   previous_run_id: str | None) -> str | None:
    """Start the W&B / TensorBoard trackers (main process), continuing ``previous_run_id`` on resume; returns the
    run id to store in the training state."""
    if not report_to:
        return previous_run_id
    # only the main process starts trackers: the other ranks need not probe the W&B server
    init_kwargs = tracking.tracker_init_kwargs(report_to, run_dir, config.run.name, previous_run_id) \
        if accelerator.is_main_process else {}
    flat = {f"{section}.{key}": value for section, values in config.to_dict().items() for key, value in values.items()}
    accelerator.init_trackers(config.run.tracker_project, config=flat, init_kwargs=init_kwargs)
    return tracking.current_run_id(accelerator) or previous_run_id
