"""train_accelerate.py with a failure injected, for tests/test_train_e2e.py (run through accelerate launch).

FAULT_RANK=r FAULT_STEP=n: the loss raises on rank r at its n-th call.
FAULT_RANK=r FAULT_STEP=n FAULT_KILL=1: rank r kills itself with SIGKILL instead (a crashed or OOM-killed rank).
FAULT_IN_SAVE=n: the n-th accelerator.save_state writes part of a checkpoint, then raises.
FAULT_DISK_FULL=n: the same, raising the OSError of a full disk.
"""

import errno
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import accelerate  # noqa: E402

from yolo11 import train as train_accelerate  # noqa: E402
from yolo11.loss import DetectionLoss  # noqa: E402


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


def inject_save_failure(nth: int, disk_full: bool = False) -> None:
    original, calls = accelerate.Accelerator.save_state, [0]

    def save_state(self, output_dir=None, **kwargs):
        calls[0] += 1
        if calls[0] == nth:
            Path(output_dir, "model.safetensors").write_bytes(b"partial")
            if disk_full:
                raise OSError(errno.ENOSPC, "No space left on device", str(Path(output_dir, "optimizer.bin")))
            raise RuntimeError("injected failure while saving")
        return original(self, output_dir, **kwargs)

    accelerate.Accelerator.save_state = save_state


if __name__ == "__main__":
    if "FAULT_RANK" in os.environ:
        inject_loss_failure(int(os.environ["FAULT_RANK"]), int(os.environ["FAULT_STEP"]))
    if "FAULT_IN_SAVE" in os.environ:
        inject_save_failure(int(os.environ["FAULT_IN_SAVE"]))
    if "FAULT_DISK_FULL" in os.environ:
        inject_save_failure(int(os.environ["FAULT_DISK_FULL"]), disk_full=True)
    sys.exit(train_accelerate.main())
