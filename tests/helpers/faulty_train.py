"""train_accelerate.py with a failure injected, for the end-to-end tests (run through accelerate launch).

FAULT_RANK=r FAULT_STEP=n: the loss raises on rank r at its n-th call.
FAULT_RANK=r FAULT_STEP=n FAULT_KILL=1: rank r kills itself with SIGKILL instead (a crashed or OOM-killed rank).
FAULT_IN_SAVE=n: the n-th accelerator.save_state writes part of a checkpoint, then raises.
FAULT_DISK_FULL=n: the same, raising the OSError of a full disk (FAULT_DISK_FULL_RANK=r: on rank r only).
FAULT_WRITE=<name>:n: the n-th write of a file whose name contains <name> (results.csv, config.yaml, latest, through
    Path.write_text/write_bytes; last.safetensors, through safetensors' save_file) writes half the file, then fails
    as a full disk does: an OSError, or safetensors' own error with "os error 28" in its text.
FAULT_FIGURES=1: the figures at the end of the run fail as on a full disk.
"""

import errno
import os
import pathlib
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import accelerate  # noqa: E402

import yolo11.weights.safetensors_io as safetensors_io  # noqa: E402
from yolo11 import train as train_accelerate  # noqa: E402
from yolo11.engine.run_outputs import RunOutputs  # noqa: E402
from yolo11.loss import DetectionLoss  # noqa: E402

FULL = os.strerror(errno.ENOSPC)


def inject_loss_failure(rank: int, step: int) -> None:
    original, calls = DetectionLoss.forward, [0]

    def forward(self, *args, **kwargs):
        calls[0] += 1
        if int(os.environ.get("RANK", "0")) == rank and calls[0] == step:
            if os.environ.get("FAULT_KILL"):
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected failure on rank {rank}")
        return original(self, *args, **kwargs)

    DetectionLoss.forward = forward


def inject_save_failure(nth: int, disk_full: bool = False, rank: int | None = None) -> None:
    original, calls = accelerate.Accelerator.save_state, [0]

    def save_state(self, output_dir=None, **kwargs):
        calls[0] += 1
        if calls[0] == nth and rank in (None, self.process_index):
            own = "optimizer.bin" if self.is_main_process else f"random_states_{self.process_index}.pkl"
            Path(output_dir, own).write_bytes(b"partial")
            if disk_full:
                raise OSError(errno.ENOSPC, FULL, str(Path(output_dir, own)))
            raise RuntimeError("injected failure while saving")
        return original(self, output_dir, **kwargs)

    accelerate.Accelerator.save_state = save_state


def inject_write_failure(name: str, nth: int) -> None:
    """Half of the n-th write of a file named like ``name`` lands, then the disk is full."""
    calls = [0]

    def due(path) -> bool:
        if name not in Path(path).name:
            return False
        calls[0] += 1
        return calls[0] == nth

    def wrap_path_write(method):
        original = getattr(pathlib.Path, method)

        def write(self, data, *args, **kwargs):
            if due(self):
                original(self, data[:len(data) // 2], *args, **kwargs)
                raise OSError(errno.ENOSPC, FULL, str(self))
            return original(self, data, *args, **kwargs)

        setattr(pathlib.Path, method, write)

    wrap_path_write("write_text")
    wrap_path_write("write_bytes")
    original_write = safetensors_io.write_safetensors_file

    def write_safetensors_file(path, header, data):
        if due(path):
            Path(path).write_bytes(b"\0" * 100)
            raise OSError(errno.ENOSPC, FULL, str(path))
        return original_write(path, header, data)

    safetensors_io.write_safetensors_file = write_safetensors_file


def inject_figure_failure() -> None:
    def finish_figures(self, cancel=False):
        raise OSError(errno.ENOSPC, FULL, str(self.run_dir / "results.png"))

    RunOutputs.finish_figures = finish_figures


if __name__ == "__main__":
    if "FAULT_RANK" in os.environ:
        inject_loss_failure(int(os.environ["FAULT_RANK"]), int(os.environ["FAULT_STEP"]))
    if "FAULT_IN_SAVE" in os.environ:
        inject_save_failure(int(os.environ["FAULT_IN_SAVE"]))
    if "FAULT_DISK_FULL" in os.environ:
        rank = os.environ.get("FAULT_DISK_FULL_RANK")
        inject_save_failure(int(os.environ["FAULT_DISK_FULL"]), disk_full=True,
                            rank=None if rank is None else int(rank))
    if "FAULT_WRITE" in os.environ:
        name, nth = os.environ["FAULT_WRITE"].rsplit(":", 1)
        inject_write_failure(name, int(nth))
    if "FAULT_FIGURES" in os.environ:
        inject_figure_failure()
    sys.exit(train_accelerate.main())
