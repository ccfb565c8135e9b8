"""``YOLO11_WEIGHT_TRACE=<folder>``: what each process holds after every optimizer step, for checking DDP.

Each process appends JSON lines to ``<folder>/rank<r>.jsonl``: first how its process group was made (backend,
timeout, device), then after every optimizer step the epoch, the step, SHA-256 digests of its trainable weights and
of its buffers (BatchNorm statistics), and the epoch's summed loss parts and batch count so far on this process. The
ranks of a DDP run hold the same weights digest at every step; the buffers agree only under SyncBatchNorm (DDP
gives every rank rank 0's buffers before each forward, which then updates them with its own batch). A resumed run
appends to the same files, starting with a new header. Each record copies the weights to the host: for tests.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
from accelerate import Accelerator

from yolo11.engine.process_group import group_timeout

TRACE_VARIABLE = "YOLO11_WEIGHT_TRACE"


class WeightTrace:
    def __init__(self, folder: Path, accelerator: Accelerator, model: torch.nn.Module):
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"rank{accelerator.process_index}.jsonl"
        self.buffers = [b for b in model.buffers() if b.is_floating_point()]  # not num_batches_tracked
        try:
            timeout = group_timeout()
        except AttributeError:  # torch moved its private options: recorded as unknown, the run goes on
            timeout = None
        self._write({"rank": accelerator.process_index, "processes": accelerator.num_processes,
                     "distributed_type": str(accelerator.distributed_type), "backend": accelerator.state.backend,
                     "timeout_s": timeout.total_seconds() if timeout is not None else None,
                     "device": str(accelerator.device),
                     "sync_batchnorm": any(isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules())})

    @classmethod
    def from_environment(cls, accelerator: Accelerator, model: torch.nn.Module) -> WeightTrace | None:
        folder = os.environ.get(TRACE_VARIABLE)
        return cls(Path(folder), accelerator, model) if folder else None

    def record(self, epoch: int, step: int, parameters: list[torch.Tensor], loss_sum: torch.Tensor,
               batches: int) -> None:
        """After optimizer step ``step``: ``parameters`` (the trainable ones), ``loss_sum`` (3,) and ``batches``
        the epoch's so far on this process."""
        self._write({"epoch": epoch, "step": step, "weights": _digest(parameters), "buffers": _digest(self.buffers),
                     "loss_sum": loss_sum.tolist(), "batches": batches})

    def _write(self, record: dict) -> None:
        with open(self.path, "a") as fh:
            fh.write(json.dumps(record) + "\n")


def _digest(tensors: list[torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for tensor in tensors:  # contiguous(): channels_last weights hashed in their logical order
        digest.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    return digest.hexdigest()
