"""Feeding batches to the training device: host-to-device copies on a side CUDA stream, and the loader's wait."""

from __future__ import annotations

import functools
import time

import torch
from accelerate.utils import send_to_device


class DeviceFeed:
    """Moves each batch of a loader prepared without device placement (``prepare_training``) to ``device``; on
    CUDA the copy runs on a side stream. Batches already there (DeepSpeed places them itself) pass through.

    On the compute stream, the copy of a batch (157 MB for 128 images at 640 px) would sit between two training
    steps, with the GPU doing nothing else. On a side stream it overlaps the previous step, which the GPU is
    still running when the host gets here (the host runs at most one step ahead: ``NonFiniteGuard``). The
    compute stream waits for the copy only; ``record_stream`` keeps the caching allocator from reusing the
    batch's memory before the compute stream is done with it.
    """

    def __init__(self, loader, device: torch.device):
        self.loader, self.device = loader, device

    def __iter__(self):
        if self.device.type != "cuda":
            for batch in self.loader:
                yield send_to_device(batch, self.device)
            return
        copy_stream = _copy_stream(self.device)
        for batch in self.loader:
            compute = torch.cuda.current_stream(self.device)
            with torch.cuda.stream(copy_stream):
                batch = send_to_device(batch, self.device, non_blocking=True)
            compute.wait_stream(copy_stream)
            for value in batch.values():
                if isinstance(value, torch.Tensor):
                    value.record_stream(compute)
            yield batch


@functools.cache
def _copy_stream(device: torch.device) -> torch.cuda.Stream:
    """One copy stream per device for the process, shared by every epoch's and every validation's feed: the
    caching allocator keeps memory freed by a stream's copies for that stream, so a stream per feed (two an epoch,
    taken round-robin from a pool of 32) would allocate afresh for each new one and strand what it held."""
    return torch.cuda.Stream(device)


class TimedIterable:
    """Iterates ``iterable`` and adds up the host time spent waiting in ``next``: the loader's share of a step."""

    def __init__(self, iterable):
        self.iterable = iterable
        self.seconds = 0.0

    def __iter__(self):
        iterator = iter(self.iterable)
        while True:
            started = time.perf_counter()
            try:
                item = next(iterator)
            except StopIteration:
                return
            self.seconds += time.perf_counter() - started
            yield item
