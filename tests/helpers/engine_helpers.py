"""Running the trainer in subprocesses for the end-to-end tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "accelerate_configs"
ACCELERATE = str(Path(sys.executable).with_name("accelerate"))

# Small, fast synthetic data: 24 train images of 64 px.
TINY_DATA = "synthetic:num_images=24,imgsz=64"
TINY_FLAGS = ["--data", TINY_DATA, "--imgsz", "64", "--workers", "0", "--plots", "false", "--optimizer", "SGD",
              "--warmup-epochs", "0", "--log-interval", "1"]
# The suite's one tiny run (conftest.py's ``tiny_trained_run``): 2 epochs of 6 optimizer steps, mosaic in the first
# only (--close-mosaic 1: a resume in epoch 1 continues mosaic's random draws, one in epoch 2 the plain images), a
# checkpoint after each (checkpoint-00000006, checkpoint-00000012). TINY_RUN_TRAINING is every flag that sets its
# values; the checkpoint flags change none (test_main_job.py), so a run of TINY_RUN_TRAINING ends on its weights.
TINY_RUN_TRAINING = [*TINY_FLAGS, "--batch-size", "4", "--nominal-batch", "4", "--epochs", "2", "--close-mosaic", "1"]
TINY_RUN_FLAGS = [*TINY_RUN_TRAINING, "--save-period", "1", "--keep-checkpoints", "5"]


def launch(args: list[str], *, config: str = "cpu.yaml", script: Path = ROOT / "train_accelerate.py",
           env: dict | None = None, timeout: float = 600, cpu_ddp: bool = False,
           launch_args: tuple[str, ...] = (), wrapper: bool = False) -> subprocess.CompletedProcess:
    """``accelerate launch --config_file accelerate_configs/<config> <launch_args> <script> <args>``; ``wrapper``:
    ``python -m yolo11.launch`` instead, which exits with the trainer's code (2 for a user error)."""
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    environment = {k: v for k, v in environment.items() if v is not None}  # None in `env` removes a variable
    environment.pop("ACCELERATE_USE_CPU", None)
    if cpu_ddp:
        environment["ACCELERATE_USE_CPU"] = "1"
    launcher = [sys.executable, "-m", "yolo11.launch"] if wrapper else [ACCELERATE, "launch"]
    command = [*launcher, "--config_file", str(CONFIGS / config if "/" not in config else config),
               *launch_args, str(script), *args]
    return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=timeout, cwd=ROOT)


def default_signals() -> None:
    """``preexec_fn`` of a launch started as a terminal's foreground job: SIGINT and SIGTERM at their defaults. A test
    run started in the background by a script (``pytest ... &``) has SIGINT ignored (POSIX), the launched
    ``accelerate launch`` inherits that, and a Ctrl-C sent to its group then never reaches its Python."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


def start_in_own_group(args: list[str], config: str = "cpu.yaml", cpu_ddp: bool = False, env: dict | None = None,
                       script: Path = ROOT / "train_accelerate.py") -> subprocess.Popen:
    """``accelerate launch`` in a process group of its own, as a shell starts a foreground job."""
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    environment = {k: v for k, v in environment.items() if v is not None}  # None in `env` removes a variable
    environment.pop("ACCELERATE_USE_CPU", None)
    if cpu_ddp:
        environment["ACCELERATE_USE_CPU"] = "1"
    command = [ACCELERATE, "launch", "--config_file", str(CONFIGS / config), str(script), *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment,
                            cwd=ROOT, start_new_session=True, preexec_fn=default_signals)


def signal_after_step(process: subprocess.Popen, step: int, signum: int, timeout: float = 300,
                      whole_group: bool = True) -> str:
    """Send ``signum`` to the whole process group once a progress line for ``step`` is printed (a terminal's
    Ctrl-C, or a scheduler's preemption), or to the launcher alone (``whole_group`` false); returns everything the
    job printed."""
    lines, deadline = [], time.monotonic() + timeout
    for line in process.stdout:
        lines.append(line)
        if line.startswith("epoch ") and f" step {step} " in line:
            if whole_group:
                os.killpg(process.pid, signum)
            else:
                os.kill(process.pid, signum)
            break
        assert time.monotonic() < deadline, "".join(lines[-20:])
    lines.extend(process.stdout)
    process.wait(timeout=120)
    return "".join(lines)


def checkpoint_model(run_dir: Path) -> dict:
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    return load_file(run_dir / "checkpoints" / latest / "model.safetensors")


def one_error_line(result: subprocess.CompletedProcess) -> str:
    """The only ``error:`` line of a failed run, with no traceback beside it."""
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, describe(result)
    assert "Traceback" not in result.stderr, describe(result)
    return errors[0]


def describe(result: subprocess.CompletedProcess) -> str:
    return f"exit {result.returncode}\n--- stdout ---\n{result.stdout[-4000:]}\n--- stderr ---\n{result.stderr[-4000:]}"


def reset_accelerate_state() -> None:
    """Forget Accelerate's process-wide state, so that the next ``Accelerator`` is built as in a fresh process."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def train_in_process(args: list[str]) -> int:
    """``yolo11-train args`` in this process, between fresh Accelerate states; its exit code."""
    from yolo11 import train

    reset_accelerate_state()
    try:
        return train.main(args)
    finally:
        reset_accelerate_state()
