"""``build_dataloader``: the train or val DataLoader of a source, from a typed ``LoaderConfig``."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader

from yolo11.data.collate import DetectionCollate
from yolo11.data.dataset import DetectionDataset, EpochKeySampler
from yolo11.data.sampling import EpochStream, RepeatingBatches
from yolo11.data.schema import DetectionSource
from yolo11.data.transforms import AugmentParams
from yolo11.data.workers import seed_worker, stop_workers_at_exit, usable_workers
from yolo11.geometry import MAX_STRIDE


@dataclass(frozen=True)
class LoaderConfig:
    """How to load one split. ``batch_size`` is per process; ``workers`` is capped by ``usable_workers``.

    ``augment`` and ``shuffle`` default (None) to ``split == "train"``. ``rect`` (val only) groups images of
    similar aspect ratio and letterboxes each batch to its own shape. ``epochs`` and ``close_mosaic`` place the
    epochs without mosaic; ``max_boxes`` pads every batch to that many box rows (static shapes).
    ``cache_images`` decodes every image once into RAM shared by the workers (``ImageCache``).
    ``hsv_on_device`` leaves the HSV pixels to the training device: batches then carry ``hsv_gains`` for
    ``BatchHSV``. ``full_batches`` (training stream): the last batch of an epoch topped up to full size.
    """

    imgsz: int = 640
    batch_size: int = 16
    workers: int = 8
    augment: bool | None = None
    shuffle: bool | None = None
    rect: bool = False
    epochs: int = 1
    close_mosaic: int = 10
    seed: int = 0
    hyp: AugmentParams = field(default_factory=AugmentParams)
    max_boxes: int | None = None
    cache_images: bool = False
    hsv_on_device: bool = False
    full_batches: bool = False
    pin_memory: bool | None = None  # batches in pinned memory (the run plan's choice; None: when CUDA is there)


class DetectionDataLoader(DataLoader):
    """A DataLoader whose ``set_epoch`` reaches its ``EpochKeySampler``, like Accelerate's prepared loaders: call it
    before each epoch, since the sampler yields ``(epoch, index)`` keys."""

    def _get_iterator(self):
        iterator = super()._get_iterator()
        stop_workers_at_exit(iterator)
        return iterator

    def set_epoch(self, epoch: int, batches_done: int = 0) -> None:
        """The epoch of the next iteration (``batches_done``: where an ``EpochStream`` resumes within it)."""
        if isinstance(self.batch_sampler, EpochStream):
            self.batch_sampler.start_at(epoch, batches_done)
        elif batches_done:
            raise ValueError("an epoch loader resumes mid-epoch through accelerator.skip_first_batches")
        else:
            self.batch_sampler.sampler.set_epoch(epoch)


def rect_batches(sizes_hw: np.ndarray, imgsz: int, batch_size: int, pad: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Ultralytics' rectangular validation batches: images sorted by aspect ratio, one letterbox shape per batch.

    ``sizes_hw`` is ``(N, 2)`` original (height, width). Returns the sample order and the ``(N, 2)`` (h, w)
    letterbox shape of each sample (indexed by dataset index), multiples of ``MAX_STRIDE``.

    The sort is numpy's default (not stable), as in Ultralytics: many images share an aspect ratio (640x427...), and
    the order among equals decides which batch, hence which letterbox shape, an image at a batch boundary gets. With
    a stable sort 6 of coco128's 128 images were letterboxed differently from Ultralytics' validation and their
    detections differed (mAP50-95 0.01232 instead of 0.01229 for the reference checkpoint).
    """
    aspect = sizes_hw[:, 0] / sizes_hw[:, 1]
    order = np.argsort(aspect)
    shapes = np.empty((len(order), 2), np.int64)
    for start in range(0, len(order), batch_size):
        members = order[start:start + batch_size]
        low, high = aspect[members].min(), aspect[members].max()
        relative = [high, 1.0] if high < 1 else [1.0, 1.0 / low] if low > 1 else [1.0, 1.0]
        shapes[members] = np.ceil(np.array(relative) * imgsz / MAX_STRIDE + pad).astype(np.int64) * MAX_STRIDE
    return order, shapes


def build_dataloader(source: DetectionSource, split: str = "train",
                     config: LoaderConfig | None = None) -> DetectionDataLoader:
    """The ``split`` ("train" or "val") DataLoader of ``source``, yielding the batch dict of the contract."""
    config = config or LoaderConfig()
    dataset, sampler = _dataset_and_sampler(source, split, config)
    return _loader(dataset, BatchSampler(sampler, config.batch_size, drop_last=False), config,
                   same_size=split == "train")


def first_batches(source: DetectionSource, config: LoaderConfig, count: int) -> Iterator[dict]:
    """The first ``count`` training batches of epoch 0 (as ``build_dataloader``'s train loader gives them), built
    in the calling thread without a DataLoader: a DataLoader's iterator draws its seed from torch's global RNG,
    which a background thread must leave to the training process's own order."""
    dataset, sampler = _dataset_and_sampler(source, "train", dataclasses.replace(config, workers=0))
    collate = DetectionCollate(config.max_boxes)
    for indices in itertools.islice(BatchSampler(sampler, config.batch_size, drop_last=False), count):
        yield collate([dataset[index] for index in indices])


def build_val_stream(source: DetectionSource, config: LoaderConfig, *, num_processes: int = 1,
                     process_index: int = 0) -> DetectionDataLoader:
    """The validation loader of a training run (``RepeatingBatches``): this process's share of the val batches,
    again and again. Iterate it once and take ``batch_sampler.batches_per_pass`` batches per validation."""
    dataset, sampler = _dataset_and_sampler(source, "val", config)
    batches = RepeatingBatches(list(BatchSampler(sampler, config.batch_size, drop_last=False)), num_processes,
                               process_index)
    # a worker builds whole batches: more workers than a pass has batches would only hold more passes in memory
    config = dataclasses.replace(config, workers=min(config.workers, max(batches.batches_per_pass, 1)))
    return _loader(dataset, batches, config, same_size=False, stream=True)


def _dataset_and_sampler(source: DetectionSource, split: str,
                         config: LoaderConfig) -> tuple[DetectionDataset, EpochKeySampler]:
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    train = split == "train"
    augment = train if config.augment is None else config.augment
    shuffle = train if config.shuffle is None else config.shuffle
    if config.rect and (augment or shuffle):
        raise ValueError("rect batches need augment=False and shuffle=False (their shapes follow a fixed order)")
    order = shapes = None
    if config.rect:
        sizes = np.stack([source.dataset["height"], source.dataset["width"]], 1)
        order, shapes = rect_batches(sizes, config.imgsz, config.batch_size)
    dataset = DetectionDataset(source.dataset, config.imgsz, augment, config.hyp, epochs=config.epochs,
                               close_mosaic=config.close_mosaic, seed=config.seed, shapes=shapes,
                               cache_images=config.cache_images, hsv_on_device=config.hsv_on_device)
    return dataset, EpochKeySampler(len(dataset), shuffle=shuffle, seed=config.seed, order=order)


def build_train_stream(source: DetectionSource, config: LoaderConfig, *, num_processes: int = 1,
                       process_index: int = 0) -> DetectionDataLoader:
    """The training loader of one process over every epoch at once (``EpochStream``): iterate it once, take
    ``batch_sampler.batches_per_epoch`` batches per epoch; ``set_epoch(e, batches_done)`` first to start (or
    resume) elsewhere than epoch 0. ``config.batch_size`` is per process."""
    dataset = DetectionDataset(source.dataset, config.imgsz, True, config.hyp, epochs=config.epochs,
                               close_mosaic=config.close_mosaic, seed=config.seed,
                               cache_images=config.cache_images, hsv_on_device=config.hsv_on_device)
    stream = EpochStream(len(dataset), config.batch_size, config.epochs, seed=config.seed,
                         shuffle=config.shuffle is not False, num_processes=num_processes,
                         process_index=process_index, full_batches=config.full_batches)
    return _loader(dataset, stream, config, same_size=True, stream=True)


def _loader(dataset: DetectionDataset, batch_sampler, config: LoaderConfig, same_size: bool,
            stream: bool = False) -> DetectionDataLoader:
    """``stream``: iterated once, so its workers need not persist; they stop with the iterator (a persistent
    loader would hold its iterator, and the batches built ahead, until the interpreter's exit)."""
    workers = usable_workers(config.workers)
    pin_memory = torch.cuda.is_available() if config.pin_memory is None else config.pin_memory
    # Training batches are all the same size: each worker reuses a few shared buffers (BatchRing), handed back
    # by the pin-memory thread. One more than the batches a worker may have queued (prefetch_factor, 2).
    ring_slots = 3 if same_size and pin_memory and workers > 0 else 0
    return DetectionDataLoader(
        dataset, batch_sampler=batch_sampler, num_workers=workers,
        collate_fn=DetectionCollate(config.max_boxes, ring_slots=ring_slots), pin_memory=pin_memory,
        persistent_workers=workers > 0 and not stream, worker_init_fn=seed_worker)
