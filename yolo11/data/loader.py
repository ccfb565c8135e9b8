"""``build_dataloader``: a DataLoader yielding the batch dict of the contract (docs/ARCHITECTURE.md, Targets)."""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import random
import sys

import cv2
import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader

from yolo11.data.dataset import DetectionDataset, EpochKeySampler
from yolo11.data.schema import DetectionSource
from yolo11.data.transforms import PAD_VALUE, AugmentParams

STRIDE = 32  # the largest model stride: input sides are multiples of it


class BatchRing:
    """Shared-memory image buffers that a loader worker reuses from batch to batch.

    A worker normally builds each batch in fresh memory, which PyTorch then copies into fresh shared memory to
    send it: two first-touch page-fault passes and one extra copy of the whole batch (about 3 ms per 640 px
    image on the CI box, more than a cached mosaic sample costs to make). A ring slot is shared memory from the
    start and already faulted in, so the batch is written once and sent as a handle. The main process hands a
    slot back (``ReusableBatch.pin_memory``) only after copying it into pinned memory; a worker takes only slots
    handed back, and allocates a fresh buffer when none is free, so a batch is never overwritten while in use.
    """

    def __init__(self, max_slots: int):
        self.max_slots = max_slots
        self.slots: list[tuple[torch.Tensor, torch.Tensor]] = []  # (flat uint8 buffer, int32 busy flag), shared

    def take(self, nbytes: int) -> tuple[torch.Tensor, torch.Tensor, bool] | None:
        """``(buffer, flag, reused)`` of a free slot of at least ``nbytes``, or ``None``: allocate normally."""
        for buffer, flag in self.slots:
            if buffer.numel() >= nbytes and int(flag[0]) == 0:  # the flag is written by the main process
                flag[0] = 1
                return buffer, flag, True
        if len(self.slots) == self.max_slots:
            return None
        buffer = torch.empty(nbytes, dtype=torch.uint8).share_memory_()
        flag = torch.ones(1, dtype=torch.int32).share_memory_()
        self.slots.append((buffer, flag))
        return buffer, flag, False


class ReusableBatch:
    """A batch whose images live in a worker's ``BatchRing`` slot.

    The DataLoader's pin-memory thread calls ``pin_memory`` on custom batch types: it copies every tensor into
    pinned memory, hands the slot back to the worker and returns the plain batch dict, which is all that the
    training loop ever sees.
    """

    def __init__(self, batch: dict, flag: torch.Tensor, reused: bool):
        self.batch, self.flag, self.reused = batch, flag, reused

    def pin_memory(self) -> dict:
        pinned = {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in self.batch.items()}
        self.flag[0] = 0
        return pinned


class DetectionCollate:
    """Stack samples into the batch dict; runs in the workers, so it is one copy per image and no Python loops
    over pixels.

    The images are written as RGB rows (``(B, H, W, 3)`` in memory, BGR -> RGB in the same copy) and returned as
    the ``(B, 3, H, W)`` view of that memory: channels_last strides, the layout the model runs in on a GPU, so
    the copy is a plain row copy here and no transpose is needed on the device. ``max_boxes`` pads every batch
    to the same box count (static shapes); images with more boxes keep the first ``max_boxes``. ``ring_slots``
    > 0 (loaders that pin memory) builds the images in a ``BatchRing`` of that many slots per worker and returns
    a ``ReusableBatch``. Samples that carry ``hsv_gains`` (HSV left to the device) give a float64 ``(B, 3)``
    ``hsv_gains`` entry.
    """

    def __init__(self, max_boxes: int | None = None, ring_slots: int = 0):
        self.max_boxes = max_boxes
        self.ring_slots = ring_slots
        self._ring: BatchRing | None = None  # created in each worker process on its first batch

    def __call__(self, samples: list[dict]) -> dict | ReusableBatch:
        sizes = {s["image"].shape[:2] for s in samples}
        height, width = max(h for h, _ in sizes), max(w for _, w in sizes)
        shape = (len(samples), height, width, 3)
        nbytes = math.prod(shape)
        slot = None
        if self.ring_slots and torch.utils.data.get_worker_info() is not None:
            self._ring = self._ring or BatchRing(self.ring_slots)
            slot = self._ring.take(nbytes)
        rows = slot[0][:nbytes].view(shape) if slot else torch.empty(shape, dtype=torch.uint8)
        images = rows.numpy()
        if len(sizes) > 1:  # rect batches padded by Accelerate's even_batches with first-batch samples: pad
            images.fill(PAD_VALUE)
        for i, sample in enumerate(samples):
            copy_bgr_to_rgb(sample["image"], images[i])
        counts = [len(s["labels"]) for s in samples]
        num_rows = self.max_boxes if self.max_boxes is not None else max(counts, default=0)
        boxes = np.zeros((len(samples), num_rows, 4), np.float32)
        labels = np.full((len(samples), num_rows), -1, np.int64)
        for i, sample in enumerate(samples):
            n = min(counts[i], num_rows)
            boxes[i, :n] = sample["boxes"][:n]
            labels[i, :n] = sample["labels"][:n]
        batch = {"images": rows.permute(0, 3, 1, 2), "boxes": torch.from_numpy(boxes),
                 "labels": torch.from_numpy(labels), "image_ids": [s["image_id"] for s in samples],
                 "orig_sizes": torch.tensor([s["orig_size"] for s in samples], dtype=torch.int64),
                 "ratio_pad": torch.tensor([s["ratio_pad"] for s in samples], dtype=torch.float32)}
        if "hsv_gains" in samples[0]:
            batch["hsv_gains"] = torch.from_numpy(np.stack([s["hsv_gains"] for s in samples]).astype(np.float64))
        return ReusableBatch(batch, slot[1], slot[2]) if slot else batch


def model_input(images: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """The model's input from a uint8 batch (on its device): still uint8, which ``YOLO11Detector`` scales to
    ``[0, 1]`` itself, in the memory format the model runs in (the collate's batches are channels_last)."""
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    return images.contiguous(memory_format=memory_format)


def copy_bgr_to_rgb(image: np.ndarray, out: np.ndarray) -> None:
    """Write BGR ``image (h, w, 3)`` as RGB into the top-left corner of ``out (H, W, 3)``."""
    h, w = image.shape[:2]
    target = out[:h, :w]
    if image.flags.c_contiguous:
        # cv2 writes into `target` in place (rows of a larger buffer are fine): one SIMD pass, half the time of
        # numpy's strided copy (0.27 against 0.55 ms for a 640 px image on the CI box)
        cv2.cvtColor(image, cv2.COLOR_BGR2RGB, dst=target)
    else:  # a flipped view: numpy handles the negative strides
        np.copyto(target, image[..., ::-1])


def rect_batches(sizes_hw: np.ndarray, imgsz: int, batch_size: int, pad: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Ultralytics' rectangular validation batches: images sorted by aspect ratio, one letterbox shape per batch.

    ``sizes_hw`` is ``(N, 2)`` original (height, width). Returns the sample order and the ``(N, 2)`` (h, w)
    letterbox shape of each sample (indexed by dataset index), multiples of ``STRIDE``.

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
        shapes[members] = np.ceil(np.array(relative) * imgsz / STRIDE + pad).astype(np.int64) * STRIDE
    return order, shapes


WORKER_NICENESS = 10
# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory(trim_threshold: int = 1 << 30, mmap_threshold: int = 32 << 20) -> bool:
    """Let this process's glibc malloc keep freed memory for reuse instead of returning it to the system.

    A worker makes each sample's canvas and warped image (1-5 MB each) in fresh memory and frees a whole batch of
    them after the collate. By default glibc hands large blocks back (``mmap``/heap trimming), so the next batch
    page-faults all of it in again: 100-300 first-touch faults per 640 px mosaic sample. Keeping the memory (a
    batch's worth per worker) removed them and cut the CPU time of a cached mosaic sample with HSV left to the
    GPU from about 3.1 to 2.6 ms on the CI box (``benchmarks/RESULTS.md``, eighth session). Returns whether the
    settings took (glibc on Linux only; elsewhere nothing changes)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    return bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold)) and bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold))


def seed_worker(worker_id: int) -> None:
    """Seed the libraries' global RNGs per worker (our augmentation does not use them, user code might), keep
    OpenCV single-threaded inside each worker (the workers are the parallelism), and lower the worker's CPU
    priority: with as many workers as cores, the training process's Python thread, which launches every GPU
    kernel, must not queue behind them (an eager H200 run with 16 workers on 16 cores kept the GPU busy only
    39% of the time; the niceness's own effect has not been measured separately). The workers still get every
    cycle the main process does not use. Each worker also keeps the memory it frees (``keep_freed_memory``)."""
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)
    cv2.setNumThreads(0)
    if hasattr(os, "nice"):  # POSIX
        os.nice(WORKER_NICENESS)
    keep_freed_memory()


def usable_workers(requested: int) -> int:
    """``requested`` loader workers, capped at the CPU cores this process may use divided by the training processes
    on this machine (as Ultralytics caps them): more workers than cores only oversubscribe them."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return min(requested, max(cores // max(local_processes, 1), 1))


def build_dataloader(source: DetectionSource, split: str = "train", imgsz: int = 640, batch_size: int = 16,
                     workers: int = 8, augment: bool | None = None, epochs: int = 1, close_mosaic: int = 10,
                     seed: int = 0, hyp: AugmentParams | None = None, max_boxes: int | None = None,
                     rect: bool = False, shuffle: bool | None = None, cache_images: bool = False,
                     hsv_on_device: bool = False) -> DataLoader:
    """The train or val DataLoader of ``source``; ``batch_size`` is per process.

    ``workers`` is capped by ``usable_workers``. ``augment`` and ``shuffle`` default to ``split == "train"``. The
    batch sampler yields ``(epoch, index)`` keys: call ``loader.set_epoch(epoch)`` (or Accelerate's, after
    ``prepare``) before each epoch. ``rect`` (val only) groups images of similar aspect ratio and letterboxes each
    batch to its own shape. ``cache_images`` decodes every image once into RAM shared by the workers
    (``ImageCache``). ``hsv_on_device`` leaves the HSV pixels to the training device: batches then carry
    ``hsv_gains`` for ``BatchHSV``.
    """
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    workers = usable_workers(workers)
    train = split == "train"
    augment = train if augment is None else augment
    shuffle = train if shuffle is None else shuffle
    if rect and (augment or shuffle):
        raise ValueError("rect batches need augment=False and shuffle=False (their shapes follow a fixed order)")
    order = shapes = None
    if rect:
        sizes = np.stack([source.dataset["height"], source.dataset["width"]], 1)
        order, shapes = rect_batches(sizes, imgsz, batch_size)
    dataset = DetectionDataset(source.dataset, imgsz, augment, hyp or AugmentParams(), epochs=epochs,
                               close_mosaic=close_mosaic, seed=seed, shapes=shapes, cache_images=cache_images,
                               hsv_on_device=hsv_on_device)
    sampler = EpochKeySampler(len(dataset), shuffle=shuffle, seed=seed, order=order)
    pin_memory = torch.cuda.is_available()
    # Training batches are all the same size: each worker reuses a few shared buffers (BatchRing), handed back
    # by the pin-memory thread. One more than the batches a worker may have queued (prefetch_factor, 2).
    ring_slots = 3 if train and pin_memory and workers > 0 else 0
    loader = DataLoader(dataset, batch_sampler=BatchSampler(sampler, batch_size, drop_last=False),
                        num_workers=workers, collate_fn=DetectionCollate(max_boxes, ring_slots=ring_slots),
                        pin_memory=pin_memory, persistent_workers=workers > 0,
                        worker_init_fn=seed_worker)
    loader.set_epoch = sampler.set_epoch  # same call as Accelerate's DataLoaderShard.set_epoch
    return loader
