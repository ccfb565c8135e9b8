"""The collate of the loader workers: samples -> the batch dict of the contract (docs/ARCHITECTURE.md, Targets),
written once into reusable shared memory when batches are pinned for a GPU."""

from __future__ import annotations

import math

import cv2
import numpy as np
import torch

from yolo11.data.transforms import PAD_VALUE


class BatchRing:
    """Shared-memory image buffers that a loader worker reuses from batch to batch.

    A worker normally builds each batch in fresh memory, which PyTorch then copies into fresh shared memory to
    send it: two first-touch page-fault passes and one extra copy of the whole batch (more than a cached
    mosaic sample costs to make). A ring slot is shared memory from the
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


# Only the images travel from a worker through shared memory; the rest goes inside the batch's pickle. Each
# tensor sent as a tensor is moved to shared memory and its file descriptor fetched over a socket from the
# worker, which answers only once its busy Python thread yields (~5 ms per tensor): the six small tensors of a
# batch cost more than its images.
def _pack(batch: dict) -> dict:
    return {k: v.numpy() if isinstance(v, torch.Tensor) and k != "images" else v for k, v in batch.items()}


def _unpack(fields: dict) -> dict:
    return {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in fields.items()}


class InlineBatch(dict):
    """A worker's batch dict that arrives in the main process as a plain dict, with only its images sent through
    shared memory (``_pack``)."""

    def __reduce__(self):
        return _unpack, (_pack(self),)


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

    def __reduce__(self):  # as InlineBatch
        return _rebuild_reusable, (_pack(self.batch), self.flag, self.reused)


def _rebuild_reusable(fields: dict, flag: torch.Tensor, reused: bool) -> ReusableBatch:
    return ReusableBatch(_unpack(fields), flag, reused)


class DetectionCollate:
    """Stack samples into the batch dict; runs in the workers, so it is one copy per image and no Python loops
    over pixels.

    The images are written as RGB rows (``(B, H, W, 3)`` in memory, BGR -> RGB in the same copy) and returned as
    the ``(B, 3, H, W)`` view of that memory: channels_last strides, the layout the model runs in on a GPU, so
    the copy is a plain row copy here and no transpose is needed on the device. ``max_boxes`` pads every batch
    to the same box count (static shapes); images with more boxes keep the first ``max_boxes``. ``ring_slots``
    > 0 (loaders that pin memory) builds the images in a ``BatchRing`` of that many slots per worker and returns
    a ``ReusableBatch``; other batches made in a worker are an ``InlineBatch``. Samples that carry
    ``hsv_gains`` (HSV left to the device) give a float64 ``(B, 3)`` ``hsv_gains`` entry.
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
        in_worker = torch.utils.data.get_worker_info() is not None
        if self.ring_slots and in_worker:
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
        if slot:
            return ReusableBatch(batch, slot[1], slot[2])
        return InlineBatch(batch) if in_worker else batch


# Devices whose convolutions run faster channels_last: CUDA (cuDNN's NHWC kernels) and the CPU (oneDNN; yolo11n
# 15-20% faster training and 26-32% faster inference on 2 cores, benchmarks/RESULTS.md). MPS is left as it was.
CHANNELS_LAST_DEVICES = ("cuda", "cpu")
# Of those, the devices where inference (validation, prediction) runs channels_last too. Not CUDA: cuDNN builds
# its NHWC plans again at each new input shape, ~1.3 s a shape for yolo11n (bf16, H100) against ~0.14 s NCHW, for
# the same speed after (benchmarks/RESULTS.md), and rect validation batches and prediction's image sizes bring many
# shapes; training's one shape repays its build (steps 1.6-2x faster channels_last).
INFERENCE_CHANNELS_LAST_DEVICES = ("cpu",)


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
        # cv2 writes into `target` in place (rows of a larger buffer are fine): one SIMD pass, about half the time
        # of numpy's strided copy
        cv2.cvtColor(image, cv2.COLOR_BGR2RGB, dst=target)
    else:  # a flipped view: numpy handles the negative strides
        np.copyto(target, image[..., ::-1])
