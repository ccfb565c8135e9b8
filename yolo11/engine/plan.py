"""``plan_run``: every value derived from the config and the launch, computed once (world size, per-process
batch, accumulation, scaled weight decay, the optimizer 'auto' choice, warmup, memory format, where HSV runs);
the rest of the engine receives these values as explicit arguments."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass

from accelerate import PartialState
from accelerate.utils import DistributedType

from yolo11.data.collate import CHANNELS_LAST_DEVICES, INFERENCE_CHANNELS_LAST_DEVICES
from yolo11.data.dataset import CACHE_RAM_SHARE
from yolo11.data.workers import cores_per_process
from yolo11.engine.config import TrainConfig
from yolo11.engine.optim import OptimizerChoice, lr_scale_for_batch, resolve_optimizer
from yolo11.evaluation.coco import GPU_EVALUATION_MIN_IMAGES


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
    channels_last: bool  # the trained model and its inputs are channels_last (CUDA and CPU)
    val_channels_last: bool  # validation's model copy and inputs too (the CPU only: INFERENCE_CHANNELS_LAST_DEVICES)
    hsv_on_device: bool  # the loader leaves the HSV pixels to BatchHSV on the device
    val_batch_size: int  # per process
    cache_images: bool  # decoded images in RAM for the train and val loaders
    cache_reason: str  # why, for the run's first lines
    workers: int  # loader worker processes per process, before the loader caps them at its cores
    workers_reason: str  # for the run's first lines
    cpu_threads: int | None  # torch's host threads on a CPU or CUDA run (None: torch's default, or OMP_NUM_THREADS)
    compile: CompileChoice  # torch.compile of the model and the loss
    cuda_graphs: GraphsChoice  # the training micro-step replayed as CUDA graphs
    fused_optimizer: bool  # the optimizer's fused kernels (CUDA and CPU have them)
    fast_layers: bool  # a compiled model gets the fast training variants of its blocks (measured on CUDA only)
    eval_device: str  # where the COCO evaluator scores: the GPU from GPU_EVALUATION_MIN_IMAGES images, else the CPU
    pin_memory: bool  # the loaders' batches in pinned memory, copied to the device without blocking
    mixed_precision: str  # "no", "bf16", "fp16" (Accelerate's names): the Accelerator is made with it
    precision_reason: str  # for the run's first lines

    @property
    def effective_batch(self) -> int:
        return self.per_process_batch * self.num_processes * self.accumulation_steps


# Process counts of MPI launchers, the only way Accelerate runs several processes from a CPU (use_cpu) config.
MPI_SIZES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_SIZE")


def check_launch(state: PartialState) -> None:
    """Refuse N processes that each think they are alone (FIELD-NOTES: a MULTI_GPU config on a CPU-only host), and
    one process where several were asked for: ``--num_processes 2`` with a ``use_cpu`` config and no mpirun
    starts one (FIELD-NOTES); Accelerate's launcher then sets ``MASTER_ADDR`` but no ``WORLD_SIZE``."""
    env = os.environ
    if (env.get("ACCELERATE_USE_CPU", "").lower() in ("true", "1", "yes") and "MASTER_ADDR" in env
            and "WORLD_SIZE" not in env and not any(name in env for name in MPI_SIZES)):
        raise LaunchError(
            "several processes were asked for with a CPU config (use_cpu: true), but Accelerate starts one "
            "without mpirun; for 2 CPU processes: ACCELERATE_USE_CPU=1 accelerate launch --config_file "
            "accelerate_configs/cpu_2proc.yaml ... (or --num_processes 1)")
    launched = int(env.get("WORLD_SIZE", "1"))
    if launched != state.num_processes:
        raise LaunchError(
            f"{launched} processes were launched (WORLD_SIZE={launched}) but this one sees a world of "
            f"{state.num_processes} ({state.distributed_type}): they would train independently and overwrite one "
            "another's outputs. On a machine without GPUs set ACCELERATE_USE_CPU=1 for multi-process CPU training, "
            "or use accelerate_configs/cpu.yaml.")


def cpu_fallback_warning(device_type: str) -> str | None:
    """A warning when the Accelerate config asks for GPUs (``accelerate launch`` then sets ``ACCELERATE_USE_CPU``
    false) but none is visible, so that Accelerate trains on the CPU; None otherwise."""
    if device_type != "cpu" or os.environ.get("ACCELERATE_USE_CPU", "").lower() not in ("false", "0", "no"):
        return None
    return ("warning: the Accelerate config asks for GPUs (use_cpu: false) but none is visible: training on the "
            "CPU, much more slowly (accelerate_configs/cpu.yaml says so explicitly)")


def plan_run(config: TrainConfig, num_processes: int, num_train_images: int, num_classes: int,
             device_type: str = "cpu", cache_bytes: int = 0, available_ram: int | None = None,
             mixed_precision: str | None = "no", *, local_processes: int | None = None, distributed_type: str = "NO",
             num_val_images: int = 0, omp_num_threads: str | None = None, bf16_native: bool = False,
             dynamo_backend: str | None = None) -> RunPlan:
    """Every value derived from the config and the launch, computed once, from explicit inputs only (nothing read
    from the environment or Accelerate's state here): ``device_type`` "cuda", "cpu"...; ``cache_bytes``: one
    process's RAM for ``--cache-images``; ``available_ram``: bytes, None if unknown; ``mixed_precision`` "no",
    "bf16", "fp16" as the Accelerate config gives it, None without one (``decide_precision``); ``bf16_native``:
    the GPU computes bf16 natively (compute capability 8.0 and later); ``local_processes``: the processes of this
    machine (default all); ``distributed_type``: Accelerate's (``DistributedType`` value, "DEEPSPEED"...);
    ``num_val_images``: for the evaluator's device; ``dynamo_backend``: the Accelerate config's (``INDUCTOR``...),
    which compiles the model unless ``--compile`` says otherwise."""
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
    choice = dataclasses.replace(choice, lr=choice.lr * scale)
    # Ultralytics 8.4: warmup_epochs x batches per epoch, no longer at least 100 iterations, and never into the last
    # epoch (a 1-epoch run has none); -1: no warmup.
    warmup_epochs = min(optim.warmup_epochs, max(run.epochs - 1, 0))
    warmup = round(warmup_epochs * batches_per_epoch) if warmup_epochs > 0 else 0
    warmup = warmup or -1
    cache = decide_cache(config.data.cache_images, cache_bytes, available_ram,
                         num_processes if local_processes is None else local_processes)
    workers = decide_workers(config.data.workers, device_type, config.data.imgsz)
    threads, threads_reason = decide_cpu_threads(device_type, cores_per_process(), omp_num_threads)
    if threads_reason:
        workers = (workers[0], f"{workers[1]}; {threads_reason}")
    compile_choice = decide_compile(config.run.compile, config.run.compile_loss, config.run.compile_mode,
                                    device_type, run.epochs * num_train_images, num_processes, dynamo_backend)
    precision, precision_reason = decide_precision(mixed_precision, device_type, bf16_native)
    graphs = decide_cuda_graphs(config.run.cuda_graphs, device_type, num_processes, compile_choice.model,
                                distributed_type)
    return RunPlan(
        num_processes=num_processes,
        per_process_batch=per_process,
        accumulation_steps=accumulation,
        weight_decay=weight_decay,
        optimizer=choice,
        steps_per_epoch=math.ceil(batches_per_epoch / accumulation),
        batches_per_epoch=batches_per_epoch,
        warmup_iters=warmup,
        channels_last=run.channels_last and device_type in CHANNELS_LAST_DEVICES,
        val_channels_last=run.channels_last and device_type in INFERENCE_CHANNELS_LAST_DEVICES,
        hsv_on_device=config.data.hsv_on_device if config.data.hsv_on_device is not None else device_type == "cuda",
        val_batch_size=max((run.val_batch_size or 2 * run.batch_size) // num_processes, 1),
        cache_images=cache[0],
        cache_reason=cache[1],
        workers=workers[0],
        workers_reason=workers[1],
        cpu_threads=threads,
        compile=compile_choice,
        cuda_graphs=graphs,
        fused_optimizer=device_type in ("cuda", "cpu"),
        fast_layers=device_type == "cuda",
        eval_device=device_type if device_type == "cuda" and num_val_images >= GPU_EVALUATION_MIN_IMAGES else "cpu",
        pin_memory=device_type == "cuda",
        mixed_precision=precision,
        precision_reason=precision_reason,
    )


def decide_precision(configured: str | None, device_type: str, bf16_native: bool) -> tuple[str, str]:
    """The run's mixed precision and why. ``configured``: the Accelerate config's (``accelerate launch`` always
    sets one), None without a launcher (``yolo11 train``, the Python API, ``python train_accelerate.py``). Without
    one a CUDA run autocasts as Ultralytics' default AMP does, so that one process on a GPU is not float32 for want
    of a config: bf16 where the GPU computes it natively, fp16 with a gradient scaler elsewhere
    (V100, T4)."""
    if configured:
        return configured, f"mixed precision: {configured} (the Accelerate config)"
    if device_type != "cuda":
        return "no", f"mixed precision: no (a {device_type} run)"
    chosen = "bf16" if bf16_native else "fp16"
    why = "the GPU computes bf16 natively" if bf16_native else "the GPU has no native bf16"
    return chosen, (f"mixed precision: {chosen} (no Accelerate config: {why}; ACCELERATE_MIXED_PRECISION=no for "
                    "float32)")


@dataclass(frozen=True)
class CompileChoice:
    model: bool
    loss: bool
    mode: str  # torch.compile mode of the model
    reason: str  # for the run's first lines


# --compile auto compiles a CUDA run that trains at least this many images (epochs x train images). yolo11n at
# batch 128 on an H200: eager about 1200 img/s, compiled 2742, so compiling saves about 0.46 ms per image, and it
# took 112 s with an empty compile cache (benchmarks/RESULTS.md): even at ~240k images cold, sooner with the cache
# warm. Below this a small run (coco128 x 150 epochs: 19,200 images) finishes sooner eager.
COMPILE_MIN_IMAGES = 100_000


def decide_compile(model: bool | None, loss: bool | None, mode: str, device_type: str,
                   images_to_train: int, num_processes: int = 1, dynamo_backend: str | None = None) -> CompileChoice:
    """``--compile``/``--compile-loss``/``--compile-mode`` as asked; auto (None / "auto"): compile model and loss
    on CUDA when the run is long enough to repay the compilation, never on other devices. The auto mode is
    reduce-overhead (CUDA graphs) for one process; with several, DDP's gradient hooks split the compiled graph at
    every bucket and CUDA graphs of it have not been measured here, so inductor's default mode."""
    cuda = device_type == "cuda"
    configured = dynamo_backend and dynamo_backend.upper() != "NO"
    if model is None and configured:  # the Accelerate config asked for it: compiled here, once, not by prepare
        model, why = True, f"the Accelerate config's dynamo_backend {dynamo_backend.lower()}"
    elif model is None:
        model = cuda and images_to_train >= COMPILE_MIN_IMAGES
        if not cuda:
            why = f"auto: {device_type} run"
        else:
            verdict = "at least" if model else "fewer than"
            why = f"auto: this run trains {images_to_train:,} images, {verdict} {COMPILE_MIN_IMAGES:,}"
    else:
        why = f"--compile {str(model).lower()}"
        if configured and not model:  # the flag wins over the config, said
            why += f", not the Accelerate config's dynamo_backend {dynamo_backend.lower()}"
    loss = model if loss is None else loss
    if mode == "auto":
        mode = "reduce-overhead" if cuda and num_processes == 1 else "default"
    if model or loss:
        what = " and ".join(p for p, on in (("model", model), ("loss", loss)) if on)
        text = f"compiled: {what}, mode {mode} ({why}; --compile false for eager)"
    else:
        text = f"compiled: no, eager ({why}; --compile true to compile)"
    return CompileChoice(model, loss, mode, text)


@dataclass(frozen=True)
class GraphsChoice:
    enabled: bool
    reason: str  # for the run's first lines


def decide_cuda_graphs(requested: bool | None, device_type: str, num_processes: int, compiled: bool,
                       distributed_type: str = "NO") -> GraphsChoice:
    """``--cuda-graphs`` true/false as asked (true where it cannot work is an error); auto (None): on wherever the
    graphed micro-step is known to equal the eager one, which is every one-process CUDA run whose model is not
    compiled (a compiled model gets inductor's own CUDA graphs under reduce-overhead). Capture costs about one eager
    step per input shape (benchmarks/RESULTS.md), so there is no run too short for it."""
    blocker = None
    if device_type != "cuda":
        blocker = f"a {device_type} run"
    elif num_processes > 1:
        blocker = f"{num_processes} processes: DDP's gradient all-reduce is not captured"
    elif distributed_type == DistributedType.DEEPSPEED:
        blocker = "DeepSpeed runs its own step"
    elif compiled:
        blocker = "the compiled model has inductor's CUDA graphs"
    if requested and blocker:
        raise ValueError(f"--cuda-graphs true is not possible here ({blocker}); leave it at auto")
    if requested is False:
        return GraphsChoice(False, "CUDA graphs: no (--cuda-graphs false: the eager step)")
    if blocker:
        return GraphsChoice(False, f"CUDA graphs: no ({blocker})")
    why = "--cuda-graphs true" if requested else "auto: a one-process CUDA run"
    return GraphsChoice(True, f"CUDA graphs: the training step's forward, loss and backward, one graph per input "
                              f"shape ({why}; --cuda-graphs false for the eager step)")


DEFAULT_WORKERS = 8  # Ultralytics' default; the loader caps it at the cores per process
# A CPU run's step at 320 px and more keeps every core busy (oneDNN's threads): on 2 cores, 2 workers made a
# coco128 run 14% slower than making the batches in the training process, validation most of all; at 160 px
# both took the same time, and at 64 px (the synthetic demo) the workers were 7% faster (benchmarks/RESULTS.md).
CPU_RUN_MAX_CORES_WITHOUT_WORKERS = 2
CPU_RUN_MIN_IMGSZ_WITHOUT_WORKERS = 320


def decide_workers(requested: int | None, device_type: str, imgsz: int = 640) -> tuple[int, str]:
    """``--workers`` as asked; auto (None): ``DEFAULT_WORKERS``, or none on a CPU run with few cores per process
    whose step keeps them busy. Returns the count and, for the run's first lines, why."""
    if requested == 0:
        return 0, "loader workers: none, batches made in the training process (--workers 0)"
    if requested is not None:
        return requested, f"loader workers: {requested} per process (--workers {requested})"
    cores = cores_per_process()
    if (device_type == "cpu" and cores <= CPU_RUN_MAX_CORES_WITHOUT_WORKERS
            and imgsz >= CPU_RUN_MIN_IMGSZ_WITHOUT_WORKERS):
        return 0, (f"loader workers: none, batches made in the training process (auto: a CPU run at {imgsz} px "
                   f"with {cores} core(s) per process, which the step keeps busy; --workers N to choose)")
    count = min(DEFAULT_WORKERS, cores)
    return DEFAULT_WORKERS, f"loader workers: {count} per process (auto; --workers N to choose)"




def decide_cpu_threads(device_type: str, cores: int, omp_num_threads: str | None = None) -> tuple[int | None, str]:
    """Torch's compute threads on a CPU run: one fewer than this process's cores, at least 1, as Ultralytics sets
    them. With a thread on every core, OpenMP's threads spin at each of a step's thousands of barriers whenever
    anything else (the loader, a plot worker, another program) holds a core: on 2 cores with one busy elsewhere, a
    yolo11n step at 160 px took 5-9 s of spinning against 0.09 s on one thread (benchmarks/RESULTS.md).
    ``omp_num_threads`` (the variable, when set) decides instead. Returns the count (None: torch's own choice) and
    the words for the run's first lines ("" when not a CPU run). A CUDA run's host work (scoring a small
    validation, the weights' snapshot) takes one thread, as under ``accelerate launch`` (its GPU configs export
    OMP_NUM_THREADS=1) and as Ultralytics sets: torch's default, a thread per core, spun beside the loader's workers
    and took the coco128 tutorial's scoring from 4.3 s to 9.9 s without the launcher (benchmarks/RESULTS.md)."""
    if device_type not in ("cpu", "cuda"):
        return None, ""
    if device_type == "cuda":
        return (None, "") if omp_num_threads else (1, "")
    if omp_num_threads:
        return None, f"compute threads: {omp_num_threads} (OMP_NUM_THREADS)"
    threads = max(cores - 1, 1)
    why = "one left for the loader and the rest of the machine" if cores > 1 else "this process's one core"
    return threads, f"compute threads: {threads} of {cores} core(s) (auto: {why}; OMP_NUM_THREADS=N to choose)"


def decide_cache(requested: bool | None, needed: int, available: int | None, processes: int = 1) -> tuple[bool, str]:
    """``--cache-images`` true/false as asked; auto (None): when the copies of this machine's ``processes`` fit in
    ``CACHE_RAM_SHARE`` of the RAM available now, the one rule (``true`` beyond it is refused here, before any
    image is decoded). Returns the choice and the reason in words."""
    total = f"{needed * processes / 2**30:.2f} GiB ({processes} process(es))"
    if requested and available is not None and needed * processes > CACHE_RAM_SHARE * available:
        raise ValueError(f"--cache-images true needs about {total} of RAM, more than {CACHE_RAM_SHARE:.0%} of the "
                         f"{available / 2**30:.1f} GiB available: train without it, or at a smaller --imgsz")
    if requested is not None:
        return requested, f"images cached in RAM: {'yes' if requested else 'no'} (--cache-images {requested})"
    if available is None:
        return False, "images cached in RAM: no (the available RAM is unknown; --cache-images true to force)"
    fits = needed * processes <= CACHE_RAM_SHARE * available
    verdict = "fit" if fits else "do not fit"
    return fits, (f"images cached in RAM: {'yes' if fits else 'no'} ({total} {verdict} in "
                  f"{CACHE_RAM_SHARE:.0%} of the {available / 2**30:.1f} GiB available; --cache-images to choose)")
