"""``EpochStream``: one process's training batches for every remaining epoch, as one uninterrupted sequence;
``RepeatingBatches``: the same for the validation batches of a training run.

A DataLoader iterated once over this batch sampler never ends an epoch: its workers are already building the
first batches of epoch e+1 while the trainer finishes epoch e, validates and checkpoints (Ultralytics'
``InfiniteDataLoader`` does the same). Iterated per epoch, the workers would sit idle at every boundary and the
next epoch would start by waiting for a full batch from a single worker, a large share of a small dataset's run.

The trainer takes ``batches_per_epoch`` batches for each epoch. The order of epoch e is a pure function of
``(seed, e)`` and global batch k is ``order[k * G:(k + 1) * G]`` (G: the global batch) whatever the number of
processes; process r takes its contiguous share of it. So a run resumed on another process count skips exactly
the global batches already trained, and 2 processes x 4 images see what 1 process accumulating 2 x 4 sees.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch


def epoch_permutation(seed: int, epoch: int, order: np.ndarray) -> np.ndarray:
    """``order`` shuffled for ``epoch``: the one definition of an epoch's sample order (``EpochKeySampler``, the
    training stream and the first-batch preview must agree on it)."""
    return np.random.default_rng([seed, epoch]).permutation(order)


class EpochStream(torch.utils.data.Sampler):
    """Batches of ``(epoch, index)`` keys for this process, epoch after epoch, from ``start_at``'s position.

    ``batch_size`` is per process. The last global batch of an epoch may be short: it is shared evenly, each
    process topping its share up from the start of the epoch's order so that every process takes the same
    number of steps (DDP needs it); on one process it stays short, as ``drop_last=False`` would leave it.
    ``full_batches`` tops the last global batch up to full size instead (from the start of the epoch's order,
    a few images seen twice): a compiled model then sees one batch shape, not a second one to compile at the
    end of the first epoch.
    """

    def __init__(self, num_samples: int, batch_size: int, epochs: int, *, seed: int = 0, shuffle: bool = True,
                 num_processes: int = 1, process_index: int = 0, full_batches: bool = False):
        if num_samples < 1 or batch_size < 1:
            raise ValueError(f"EpochStream needs samples and a batch size, got {num_samples} and {batch_size}")
        self.num_samples, self.batch_size, self.epochs = num_samples, batch_size, epochs
        self.seed, self.shuffle = seed, shuffle
        self.num_processes, self.process_index = num_processes, process_index
        self.full_batches = full_batches
        self.start_epoch, self.start_batch = 0, 0

    @property
    def batches_per_epoch(self) -> int:
        return math.ceil(self.num_samples / (self.batch_size * self.num_processes))

    def start_at(self, epoch: int, batches_done: int = 0) -> None:
        """Begin the next iteration at ``epoch`` after its first ``batches_done`` batches (a resumed run)."""
        self.start_epoch, self.start_batch = epoch, batches_done

    def epoch_order(self, epoch: int) -> np.ndarray:
        order = np.arange(self.num_samples)
        return epoch_permutation(self.seed, epoch, order) if self.shuffle else order

    def epoch_batches(self, epoch: int) -> list[list[tuple[int, int]]]:
        """This process's batches of ``epoch``."""
        order, size, processes = self.epoch_order(epoch), self.batch_size, self.num_processes
        batches = []
        for start in range(0, self.num_samples, size * processes):
            chunk = order[start:start + size * processes]
            full = len(chunk) == size * processes or self.full_batches
            share = size if full else math.ceil(len(chunk) / processes)
            if (processes > 1 or self.full_batches) and len(chunk) < share * processes:
                chunk = np.concatenate([chunk, np.resize(order, share * processes - len(chunk))])
            mine = chunk[self.process_index * share:(self.process_index + 1) * share]
            batches.append([(epoch, int(i)) for i in mine])
        return batches

    def __len__(self) -> int:
        return max(self.epochs - self.start_epoch, 0) * self.batches_per_epoch - self.start_batch

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        for epoch in range(self.start_epoch, self.epochs):
            skip = self.start_batch if epoch == self.start_epoch else 0
            yield from self.epoch_batches(epoch)[skip:]


class RepeatingBatches(torch.utils.data.Sampler):
    """This process's share of ``batches`` (whole batches, round-robin: process r takes batches r, r + P, ...),
    over and over without end.

    The validation loader of a training run, iterated once: its workers build the next validation's batches
    while the model trains, instead of starting at each validation (about 0.5 s of a small run's epoch on a GPU).
    Take ``batches_per_pass`` batches per validation. Processes may hold one batch more than others: validation
    runs no collective per batch.
    """

    def __init__(self, batches: list[list], num_processes: int = 1, process_index: int = 0):
        self.batches = batches[process_index::num_processes]

    @property
    def batches_per_pass(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list]:
        while self.batches:
            yield from self.batches
