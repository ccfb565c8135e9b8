"""The process group of a launched job, made once, by ``launch_state``, before anything runs a collective.

**Timeout.** Every collective may wait ``COLLECTIVE_TIMEOUT`` for the slowest process: rank 0 converting a dataset
while the others wait at a barrier (``data.sources._cached``), rank 0 scoring a validation while the others wait in a
broadcast. The first ``PartialState`` of a process makes the group, and Accelerate ignores the init arguments of
every later one, an ``Accelerator``'s ``InitProcessGroupKwargs`` included: the timeout must be given to that first
one, or NCCL's default (10 minutes) applies.

**``YOLO11_SHARE_GPU=1``: several processes share the machine's one GPU**, to run the multi-process path (DDP,
SyncBatchNorm, the gathers of validation, checkpoints written by several ranks) where only one GPU is at hand. Never a
default: it is slow (every gradient all-reduce goes through the host) and exists to test, not to train faster.
- Every rank runs on ``cuda:0`` (``ACCELERATE_TORCH_DEVICE``; Accelerate's own choice, local rank modulo the GPU
  count, would agree), and Accelerate wraps the model in DDP without ``device_ids`` (``ACCELERATE_BYPASS_DEVICE_MAP``;
  with them, rank 1's inputs would go to ``cuda:1``).
- The group is gloo's: NCCL refuses two ranks on one device ("Duplicate GPU detected"). Gloo runs all_reduce,
  broadcast and all_gather (the list form) of CUDA tensors through pinned host copies, and object collectives and
  barriers on the CPU. That covers every collective of a run: DDP (all_reduce of the buckets, broadcast of the
  module states and buffers, all_gather of the parameter shapes), SyncBatchNorm (all_gather of the statistics, which
  torch sends through the list form for gloo, and all_reduce in the backward), ``accelerator.reduce`` (all_reduce),
  ``accelerate.utils.broadcast``, ``accelerator.gather`` (the list form for gloo), ``gather_for_metrics`` of objects
  and ``broadcast_object_list`` (CPU). What gloo lacks for CUDA tensors (reduce, gather, scatter, reduce_scatter,
  all_to_all, all_gather_into_tensor) no part of a run calls, so nothing is re-routed through the host here
  (``tests/test_ddp_one_gpu.py`` records the collectives a run calls and checks that set).
- One thing does not work as Accelerate calls it: ``wait_for_everyone`` passes ``device_ids=[local rank]`` to the
  barrier, which then makes a tensor on ``cuda:1`` on rank 1. Here the barrier gets no ``device_ids`` (gloo then
  waits on the CPU): ``barrier_on_the_host``, set on Accelerate's shared state.
- Refused in one line where it cannot work (``check_gpu_layout``): a CPU run, one process, no GPU or several GPUs
  visible, several machines, DeepSpeed or FSDP.

This module holds the private torch/Accelerate hooks that the above needs (``PartialState._shared_state``, a method
replaced on it, the default group's backend options), each with a test in ``tests/test_ddp_one_gpu.py``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

import torch
from accelerate import PartialState
from accelerate.state import AcceleratorState
from accelerate.utils import parse_flag_from_env

from yolo11.engine.plan import LaunchError

COLLECTIVE_TIMEOUT = timedelta(minutes=30)
SHARE_GPU_VARIABLE = "YOLO11_SHARE_GPU"
SHARED_DEVICE = torch.device("cuda", 0)
_ON, _OFF = ("1", "true", "yes"), ("", "0", "false", "no")


def launch_state(device: str | None = None) -> PartialState:
    """This process's ``PartialState``. The first one makes the process group: with ``COLLECTIVE_TIMEOUT`` and,
    under ``YOLO11_SHARE_GPU=1``, gloo with every rank on ``cuda:0``; ``device`` (``--device``: one process) places
    it. Raises ``LaunchError``, before any group exists, for a launch whose processes cannot use the GPUs as
    launched (``check_gpu_layout``) or a ``device`` this process cannot take. A state made earlier in the process
    (a notebook's, the Python API's own call of this) is returned as it is, if on ``device``."""
    chosen = chosen_device(device)
    cpu = parse_flag_from_env("ACCELERATE_USE_CPU") or (chosen is not None and chosen.type == "cpu")
    if PartialState._shared_state:  # made already: Accelerate would ignore any argument now
        state = PartialState(cpu=cpu)
        if chosen is not None and (state.device.type, state.device.index or 0) != (chosen.type, chosen.index or 0):
            raise LaunchError(f"--device {device}: this Python process placed its runs on {state.device} when the "
                              "first one started (Accelerate keeps one state per process); start a new process (a "
                              "notebook: restart its kernel) to train on another device")
        return state
    if chosen is not None and chosen.type != "cpu":  # Accelerate's one-process device; torch's current one with it
        os.environ["ACCELERATE_TORCH_DEVICE"] = str(chosen)
        if chosen.type == "cuda":
            torch.cuda.set_device(chosen)
    share = share_gpu_requested()
    check_gpu_layout(share, os.environ, torch.cuda.device_count())
    options: dict = {"timeout": COLLECTIVE_TIMEOUT}
    if share:
        os.environ.setdefault("ACCELERATE_TORCH_DEVICE", str(SHARED_DEVICE))
        os.environ["ACCELERATE_BYPASS_DEVICE_MAP"] = "true"
        options["backend"] = "gloo"
    state = PartialState(cpu=cpu, **options)
    if share:
        share_one_gpu(state)
    return state


def chosen_device(device: str | None, environ: Mapping[str, str] = os.environ) -> torch.device | None:
    """The device ``--device`` names for this one process (``cuda:N`` with its index), None without one;
    ``LaunchError`` for a device torch does not see, several GPUs, or any device under a launch of several
    processes (its config places each one)."""
    if device is None or not str(device).strip():
        return None
    from yolo11.devices import select_device

    world = int(environ.get("WORLD_SIZE", "1"))
    if world > 1:
        raise LaunchError(f"--device {device}: a launch of {world} processes places each on its own device (the "
                          "Accelerate config's gpu_ids, or accelerate launch --gpu_ids); leave --device out")
    indices = [part for part in str(device).replace(" ", "").split(",") if part]  # "0," is one GPU
    if len(indices) > 1:
        raise LaunchError(f"--device {device}: one process trains on one device; {len(indices)} GPUs train as "
                          f"{len(indices)} processes: accelerate launch --multi_gpu --num_processes {len(indices)} "
                          f"--gpu_ids {','.join(indices)} train_accelerate.py ... (or yolo11-launch with the same "
                          "arguments)")
    named = indices[0] if indices else device
    try:
        chosen = select_device(named)
    except ValueError as err:
        raise LaunchError(str(err).replace(f"device={named!r}", f"--device {device}", 1)) from None
    return torch.device("cuda", chosen.index or 0) if chosen.type == "cuda" else chosen


def configured_precision(environ: Mapping[str, str] = os.environ) -> str | None:
    """The mixed precision that Accelerate set for this process: an Accelerator's made earlier in it (Accelerate
    cannot change it afterwards) or ``accelerate launch``'s (``ACCELERATE_MIXED_PRECISION``, from its config); None
    where neither did (``plan.decide_precision`` then chooses)."""
    if AcceleratorState._shared_state:
        return AcceleratorState().mixed_precision
    return environ.get("ACCELERATE_MIXED_PRECISION") or None


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes bf16 natively (CUDA compute capability 8.0 and later), not by emulation."""
    return device.type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False)


# How a launcher that starts our processes is typed, and which it is: "accelerate" runs Accelerate's launch_command
# (its CLI, or yolo11-launch), "torchrun" torch's elastic agent. Programs by their file name; modules after `-m`.
LAUNCHER_PROGRAMS = {"accelerate": "accelerate", "yolo11-launch": "accelerate", "torchrun": "torchrun"}
LAUNCHER_MODULES = {"accelerate.commands.launch": "accelerate", "accelerate.commands.accelerate_cli": "accelerate",
                    "yolo11.launch": "accelerate", "torch.distributed.run": "torchrun"}


@dataclass(frozen=True)
class Launcher:
    """The launcher in a command line: ``words[start:]`` is it and what it was given (``start`` at ``python`` for a
    ``python -m <module>`` launcher)."""

    kind: str  # a value of LAUNCHER_PROGRAMS / LAUNCHER_MODULES
    words: list[str]
    start: int


def find_launcher(words: list[str]) -> Launcher | None:
    """The first launcher (``LAUNCHER_PROGRAMS``, ``LAUNCHER_MODULES``) in the command line ``words``, or None."""
    for index, word in enumerate(words):
        kind = LAUNCHER_PROGRAMS.get(os.path.basename(word))
        if kind is not None:
            return Launcher(kind, words, index)
        kind = LAUNCHER_MODULES.get(word)
        if kind is not None and index >= 2 and words[index - 1] == "-m":
            return Launcher(kind, words, index - 2)
    return None


def parent_process():
    """This process's parent as ``psutil.Process``; None where psutil cannot tell (gone, not ours to read)."""
    try:
        import psutil  # an Accelerate dependency

        return psutil.Process(os.getppid())
    except Exception:  # noqa: BLE001 - psutil.Error, ImportError
        return None


def chosen_omp_threads(environ: Mapping[str, str] = os.environ) -> str | None:
    """``OMP_NUM_THREADS`` where someone chose it; None where ``accelerate launch`` put it there by itself. The
    launcher always sets it for its processes: to ``--num_cpu_threads_per_process`` or, without that flag and
    without the variable in its own environment, to its default (the physical cores per process on a CPU
    config: a thread on every core of a 2-core machine, which made the README's main job train at half speed,
    benchmarks/RESULTS.md). Only a choice should replace the trainer's own thread count."""
    value = environ.get("OMP_NUM_THREADS") or None
    if value is None or "ACCELERATE_MIXED_PRECISION" not in environ:  # not started by Accelerate's launcher
        return value
    parent = parent_process()
    try:
        words = parent.cmdline()
        launcher = find_launcher(words)
        if launcher is None or launcher.kind != "accelerate":
            return value  # torch elastic's agent, mpirun...: they pass on what they were given
        chosen = "OMP_NUM_THREADS" in parent.environ() or any(
            word.startswith("--num_cpu_threads_per_process") for word in words)
    except Exception:  # noqa: BLE001 - psutil.Error, or no parent: not ours to read, so taken as chosen
        return value
    return value if chosen else None


def share_gpu_requested(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``YOLO11_SHARE_GPU`` asks for it (1/true/yes; unset, empty, 0/false/no: not); anything else is an
    error rather than a guess."""
    value = environ.get(SHARE_GPU_VARIABLE, "").strip().lower()
    if value in _ON or value in _OFF:
        return value in _ON
    raise LaunchError(f"{SHARE_GPU_VARIABLE}={environ[SHARE_GPU_VARIABLE]}: set it to 1 to share one GPU between the "
                      "processes of a launch, or leave it unset")


def check_gpu_layout(share: bool, environ: Mapping[str, str], cuda_devices: int) -> None:
    """Refuse a launch whose processes cannot use the visible GPUs as launched, before its process group exists:
    ``YOLO11_SHARE_GPU=1`` where it cannot work, and, without it, more processes on a machine than GPUs (NCCL
    refuses two processes on one GPU at their first collective)."""
    cpu = environ.get("ACCELERATE_USE_CPU", "").strip().lower() in _ON
    processes = int(environ.get("WORLD_SIZE", "1"))
    local = int(environ.get("LOCAL_WORLD_SIZE", processes))
    if not share:
        if not cpu and "LOCAL_RANK" in environ and 0 < cuda_devices < local:
            raise LaunchError(
                f"{local} processes were launched on this machine but {cuda_devices} GPU(s) are visible: NCCL "
                f"refuses two processes on one GPU. Launch one process per GPU (--num_processes {cuda_devices}), or "
                f"set {SHARE_GPU_VARIABLE}=1 to share one GPU through gloo (slow; for testing the multi-process "
                "path, accelerate_configs/2proc_1gpu.yaml)")
        return
    sharded = [name for name in ("DEEPSPEED", "FSDP")
               if environ.get(f"ACCELERATE_USE_{name}", "").strip().lower() in _ON]
    why = None
    if cpu:
        why = "this is a CPU run (ACCELERATE_USE_CPU): there is no GPU to share"
    elif processes < 2:
        why = ("this launch has one process; launch two: accelerate launch --config_file "
               "accelerate_configs/2proc_1gpu.yaml ...")
    elif cuda_devices == 0:
        why = "no CUDA GPU is visible"
    elif cuda_devices > 1:
        why = (f"{cuda_devices} GPUs are visible and it shares exactly one: CUDA_VISIBLE_DEVICES=0 picks one (or "
               "launch one process per GPU, without the variable)")
    elif local != processes:
        why = f"the {processes} processes are on several machines; it shares the GPU of one machine"
    elif sharded:
        why = f"{sharded[0]} is asked for; it runs DDP only"
    if why:
        raise LaunchError(f"{SHARE_GPU_VARIABLE}=1 cannot work here: {why}")


def share_one_gpu(state: PartialState) -> None:
    """Check that Accelerate put this rank on ``cuda:0`` with gloo, and give it a barrier without ``device_ids``."""
    if state.device != SHARED_DEVICE or state.backend != "gloo":
        raise LaunchError(f"{SHARE_GPU_VARIABLE}=1: Accelerate put process {state.process_index} on {state.device} "
                          f"with {state.backend}, not on {SHARED_DEVICE} with gloo")
    barrier_on_the_host(state)


def barrier_on_the_host(state: PartialState) -> None:
    """Replace Accelerate's ``wait_for_everyone`` by a barrier without ``device_ids`` (the module's docstring says
    why). Set on the state that Accelerate shares between its instances: every ``PartialState`` and
    ``AcceleratorState`` of the process, ``accelerator.wait_for_everyone`` and ``accelerate.utils.wait_for_everyone``
    then use it."""
    state.wait_for_everyone = _barrier_on_the_host


def _barrier_on_the_host() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.barrier()  # no device_ids: a gloo group waits on the CPU


def share_gpu_note(state: PartialState) -> str | None:
    """The run's first line when the processes share one GPU, else None."""
    if state.wait_for_everyone is not _barrier_on_the_host:
        return None
    return (f"{SHARE_GPU_VARIABLE}=1: {state.num_processes} processes share {state.device} "
            f"({torch.cuda.get_device_name(state.device)}) through gloo, which copies CUDA tensors through the host: "
            "slow, for testing the multi-process path")


def group_timeout() -> timedelta | None:
    """The default process group's timeout as its backend holds it (what a collective waits), None without a
    group. torch has no public getter: read from the backend's options (torch 2.14: ``options._timeout``)."""
    if not torch.distributed.is_initialized():
        return None
    group = torch.distributed.distributed_c10d._get_default_group()
    device = torch.device("cuda") if torch.distributed.get_backend() == "nccl" else torch.device("cpu")
    return group._get_backend(device).options._timeout
