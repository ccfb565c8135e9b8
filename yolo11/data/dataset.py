"""Map-style dataset over a Hub-schema ``datasets.Dataset``: decode in the worker, augment from a pure key.

The sampler yields ``(epoch, index)`` keys. A sample's randomness comes from
``numpy.random.default_rng([seed, epoch, index])`` alone, so a sample does not depend on which worker or rank
builds it, and a resumed epoch replays exactly. The epoch in the key also switches mosaic off for the last
``close_mosaic`` epochs.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import datasets
import numpy as np
import torch

from yolo11.data.image_io import decode_bgr, load_bgr
from yolo11.data.sampling import epoch_permutation
from yolo11.data.transforms import (
    AugmentParams,
    LetterBox,
    RandomFlip,
    RandomHSV,
    RandomPerspective,
    long_side_shape,
    mixup,
    mosaic_perspective,
    resize_long_side,
)

LOGGER = logging.getLogger("yolo11.data")
# The one RAM rule of --cache-images: every process of the machine caches its copy, and all copies must fit in this
# share of the RAM available (the run plan decides and refuses by it; a dataset built outside a run checks it too).
CACHE_RAM_SHARE = 0.5
ASPECT_TOLERANCE = 0.01  # a relative difference of aspect ratio still read as one aspect (rounded sizes)
MAX_DECODE_FALLBACKS = 16


class EpochKeySampler(torch.utils.data.Sampler):
    """Yields ``(epoch, index)``; the order is a pure function of ``(seed, epoch)`` (or the fixed ``order``).

    Accelerate calls ``set_epoch`` on it through ``BatchSamplerShard`` (``batch_sampler.batch_sampler.sampler``).
    """

    def __init__(self, num_samples: int, shuffle: bool, seed: int = 0, order: np.ndarray | None = None):
        self.num_samples, self.shuffle, self.seed, self.epoch = num_samples, shuffle, seed, 0
        self.order = np.arange(num_samples) if order is None else np.asarray(order)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[tuple[int, int]]:
        order = epoch_permutation(self.seed, self.epoch, self.order) if self.shuffle else self.order
        return iter([(self.epoch, int(i)) for i in order])


def decode_image(image: dict) -> np.ndarray:
    """BGR uint8 ``(H, W, 3)`` from the schema's ``{"bytes", "path"}``, EXIF orientation applied (``image_io``);
    raises ``ValueError`` naming the file if undecodable."""
    if not image or not (image.get("bytes") or image.get("path")):
        raise ValueError("no image (the row's image is empty)")
    if image.get("bytes"):
        decoded = decode_bgr(image["bytes"])
        if decoded is None:
            raise ValueError(f"cannot decode image {image.get('path') or '(stored bytes without a path)'}")
        return decoded
    try:
        return load_bgr(image.get("path") or "")
    except FileNotFoundError as err:
        raise ValueError(str(err)) from None


class ImageCache:
    """Every image decoded and long-side resized once, in one flat ``uint8`` buffer (Ultralytics' ``cache=ram``).

    Built in the main process before the loader starts its workers: forked workers read the same physical pages
    (numpy buffers are not touched by reference counting, so copy-on-write never copies them). Decoding and
    resizing are most of a mosaic sample's CPU time (benchmarks/RESULTS.md).
    The buffer is sized from the schema's width and height and filled in place by decoding threads. An image
    that fails to decode, or whose decoded size disagrees with the schema, is left out (size 0) and goes through
    the normal decode path.
    """

    def __init__(self, images: datasets.Dataset, sizes_hw: np.ndarray, imgsz: int, threads: int | None = None):
        nbytes = self.resized_bytes(sizes_hw, imgsz)
        offsets = np.concatenate([[0], np.cumsum(nbytes)[:-1]]).astype(np.int64)
        self.shapes = np.zeros((len(images), 5), np.int64)  # offset, resized h, w, decoded h, w
        self.buffer = np.empty(int(nbytes.sum()), np.uint8)

        def load(i: int) -> None:
            try:
                decoded = decode_image(images[i]["image"])
            except ValueError:
                return
            resized = resize_long_side(decoded, imgsz)
            if resized.size != nbytes[i]:
                return
            self.buffer[offsets[i]:offsets[i] + resized.size] = resized.reshape(-1)
            self.shapes[i] = (offsets[i], *resized.shape[:2], *decoded.shape[:2])

        with ThreadPoolExecutor(threads or min(os.cpu_count() or 1, 16)) as pool:  # cv2 releases the GIL
            list(pool.map(load, range(len(images))))
        self.buffer.setflags(write=False)  # a transform writing into a cached image would change later epochs

    @staticmethod
    def resized_bytes(sizes_hw: np.ndarray, imgsz: int) -> np.ndarray:
        """Bytes of each image of ``(N, 2)`` (height, width) once ``resize_long_side`` has resized it."""
        return np.array([math.prod(long_side_shape(int(h), int(w), imgsz)) * 3 for h, w in sizes_hw], np.int64)

    def get(self, index: int) -> tuple[np.ndarray, tuple[int, int]] | None:
        """``(resized BGR image, decoded (h, w))`` as a read-only view, or ``None`` when it was not cached."""
        offset, h, w, h0, w0 = self.shapes[index]
        if h == 0:
            return None
        return self.buffer[offset:offset + h * w * 3].reshape(h, w, 3), (int(h0), int(w0))


class DetectionDataset(torch.utils.data.Dataset):
    """Samples ``{"image": uint8 (H, W, 3) BGR, "boxes": float32 (N, 4) xyxy px, "labels": int64 (N,),
    "image_id", "orig_size": (h, w), "ratio_pad": (gain_h, gain_w, pad_top, pad_left)}``.

    Training (``augment``): mosaic (probability ``params.mosaic``, off in the last ``close_mosaic`` epochs) or
    letterbox, then random perspective, mixup, HSV and flips, as Ultralytics' ``v8_transforms``. Validation:
    long side to ``imgsz`` then letterbox to ``imgsz`` square, or to the sample's rect batch shape.

    ``hsv_on_device``: the HSV gains are drawn but not applied; the sample carries them as ``"hsv_gains"``
    (float64 ``(3,)``) for ``yolo11.data.device_hsv.BatchHSV`` on the training device. HSV is pixel-wise,
    so applying it after the flips gives the same image.
    """

    def __init__(self, dataset: datasets.Dataset, imgsz: int, augment: bool, params: AugmentParams,
                 epochs: int = 1, close_mosaic: int = 0, seed: int = 0, shapes: np.ndarray | None = None,
                 cache_images: bool = False, hsv_on_device: bool = False):
        self.images = dataset.select_columns(["image"])  # Arrow, memory-mapped: cheap to share with workers
        columns = dataset.select_columns(["image_id", "width", "height", "objects"]).to_dict()
        self.image_ids = np.asarray(columns["image_id"], np.int64)
        self.orig_sizes = np.stack([columns["height"], columns["width"]], 1).astype(np.int64)
        # boxes of all images in one flat array (no per-object Python objects to copy into every worker)
        counts = [len(o["bbox"]) for o in columns["objects"]]
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        flat = [b for o in columns["objects"] for b in o["bbox"]]
        xywh = np.asarray(flat, np.float32).reshape(-1, 4)
        self.boxes = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], 1)
        self.labels = np.asarray([c for o in columns["objects"] for c in o["category"]], np.int64)
        self.imgsz, self.augment, self.params = imgsz, augment, params
        self.epochs, self.close_mosaic, self.seed = epochs, close_mosaic, seed
        self.shapes = shapes  # (N, 2) letterbox (h, w) per sample for rect validation batches
        self.hsv_on_device = hsv_on_device
        self.decode_failures = 0  # per process: each worker counts its own
        self.reported_failures: set[int] = set()  # indices already logged by this process
        self.cache = self._build_cache() if cache_images else None

    def _build_cache(self) -> ImageCache:
        needed = int(ImageCache.resized_bytes(self.orig_sizes, self.imgsz).sum())
        processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # every training process of this machine caches
        available = _available_memory()
        if available is not None and needed * processes > CACHE_RAM_SHARE * available:
            raise MemoryError(f"--cache-images needs about {needed / 2**30:.1f} GiB for {len(self)} images at "
                              f"{self.imgsz} px in each of {processes} process(es), but only "
                              f"{available / 2**30:.1f} GiB of RAM is available: train without it, or at a "
                              "smaller --imgsz")
        LOGGER.info("caching %d images (%.1f GiB) in RAM", len(self), needed / 2**30)
        return ImageCache(self.images, self.orig_sizes, self.imgsz)

    def __len__(self) -> int:
        return len(self.image_ids)

    def mosaic_enabled(self, epoch: int) -> bool:
        """Mosaic and mixup are on except in the last ``close_mosaic`` epochs (Ultralytics' ``close_mosaic``)."""
        return self.augment and epoch < self.epochs - self.close_mosaic

    def _load(self, index: int) -> tuple[np.ndarray, dict, int]:
        """Decoded, long-side-resized image and its target; an undecodable image falls back to the next index.

        Conversion decodes every file once, so this only happens to a file changed since, or to a Hub dataset's
        image; each is logged once per process (not every epoch) and the run goes on.
        """
        cached = self.cache.get(index) if self.cache is not None else None
        if cached is not None and self._frame_error(index, cached[1]) is None:
            resized, _ = cached
            return resized, self._target(index, resized.shape[:2]), index
        for attempt in range(MAX_DECODE_FALLBACKS):
            i = (index + attempt) % len(self)
            try:
                image = decode_image(self.images[i]["image"])
                error = self._frame_error(i, image.shape[:2])
                if error is not None:
                    raise ValueError(error)
                break
            except ValueError as err:
                self.decode_failures += 1
                if i not in self.reported_failures:
                    self.reported_failures.add(i)
                    LOGGER.warning("%s (image_id %d): whenever it is drawn, trained as the next decodable sample, "
                                   "validated as a blank image (its objects missed)",
                                   err, self.image_ids[i])
        else:
            raise RuntimeError(f"{MAX_DECODE_FALLBACKS} consecutive images from index {index} failed to decode")
        resized = resize_long_side(image, self.imgsz)
        return resized, self._target(i, resized.shape[:2]), i

    def _frame_error(self, index: int, decoded_hw: tuple[int, int]) -> str | None:
        """Why the boxes of ``index`` cannot be placed on its decoded image: a Hub dataset's width and height (the
        frame of its boxes) of another aspect than the image's: another image, or one its EXIF orientation turns.
        One of the same aspect (resized since it was labelled) is scaled, as COCO's converter does."""
        h0, w0 = (int(v) for v in self.orig_sizes[index])
        h, w = decoded_hw
        if (h, w) == (h0, w0) or abs(h * w0 - w * h0) <= ASPECT_TOLERANCE * h0 * w:
            return None
        path = (self.images[index]["image"] or {}).get("path") or "(stored bytes)"
        return (f"image {path} is {w}x{h} (EXIF orientation applied) where its row says {w0}x{h0}, of another aspect: "
                "its boxes cannot be placed on it")

    def _target(self, index: int, resized_hw: tuple[int, int]) -> dict:
        # boxes are in the frame of the row's width and height: scaled from it (an image resized since labelling)
        sl = slice(self.offsets[index], self.offsets[index + 1])
        h0, w0 = self.orig_sizes[index]
        gains = np.array([resized_hw[1] / w0, resized_hw[0] / h0] * 2, np.float32)
        return {"boxes": self.boxes[sl] * gains, "labels": self.labels[sl]}

    def _train_sample(self, epoch: int, index: int, rng: np.random.Generator) -> tuple[np.ndarray, dict, int]:
        """Mosaic + perspective (or letterbox + perspective): the part MixUp applies to both of its images."""
        s = self.imgsz
        if self.mosaic_enabled(epoch) and self.params.mosaic and rng.random() < self.params.mosaic:
            picks = [index, *rng.integers(0, len(self), 3)]
            loaded = [self._load(int(i)) for i in picks]
            image, target = mosaic_perspective([x[0] for x in loaded], [x[1] for x in loaded], s, self.params, rng)
            return image, target, loaded[0][2]
        image, target, used = self._load(index)
        image, target = LetterBox((s, s))(image, target)
        image, target = RandomPerspective(self.params)(image, target, rng)
        return image, target, used

    def __getitem__(self, key: tuple[int, int] | int) -> dict:
        epoch, index = key if isinstance(key, tuple) else (0, int(key))
        rng = np.random.default_rng([self.seed, epoch, index])
        if self.augment:
            image, target, used = self._train_sample(epoch, index, rng)
            if self.mosaic_enabled(epoch) and self.params.mixup and rng.random() < self.params.mixup:
                other, other_target, _ = self._train_sample(epoch, int(rng.integers(len(self))), rng)
                image, target = mixup(image, target, other, other_target, rng)
            hsv_gains = RandomHSV(self.params.hsv_h, self.params.hsv_s, self.params.hsv_v).draw(rng)
            if hsv_gains is not None and not self.hsv_on_device:
                image = RandomHSV.apply(image, hsv_gains)
            image, target = RandomFlip(self.params.flipud, horizontal=False)(image, target, rng)
            image, target = RandomFlip(self.params.fliplr, horizontal=True)(image, target, rng)
            ratio_pad = (0.0, 0.0, 0.0, 0.0)
        else:
            hsv_gains = None
            image, target, used = self._load(index)
            if used != index:  # scored once per image: an unreadable one blank (its objects count as missed), not
                # the next image predicted twice under two ids
                image = np.full((*long_side_shape(*(int(v) for v in self.orig_sizes[index]), self.imgsz), 3), 114,
                                np.uint8)
                target, used = self._target(index, image.shape[:2]), index
            gain_h, gain_w = image.shape[0] / self.orig_sizes[used, 0], image.shape[1] / self.orig_sizes[used, 1]
            shape = tuple(self.shapes[index]) if self.shapes is not None else (self.imgsz, self.imgsz)
            image, target = LetterBox(shape, scaleup=False)(image, target)
            lb_h, lb_w, top, left = target.pop("letterbox")
            ratio_pad = (gain_h * lb_h, gain_w * lb_w, top, left)
        sample = {"image": image, "boxes": target["boxes"], "labels": target["labels"],
                  "image_id": int(self.image_ids[used]), "orig_size": tuple(self.orig_sizes[used]),
                  "ratio_pad": ratio_pad}
        if self.hsv_on_device and hsv_gains is not None:
            sample["hsv_gains"] = hsv_gains
        return sample


def cache_bytes(dataset: datasets.Dataset, imgsz: int) -> int:
    """Bytes that ``--cache-images`` holds for ``dataset`` at ``imgsz`` (one process's copy)."""
    sizes = np.stack([dataset["height"], dataset["width"]], 1) if len(dataset) else np.zeros((0, 2), np.int64)
    return int(ImageCache.resized_bytes(sizes, imgsz).sum())


def available_memory() -> int | None:
    """Bytes of RAM available now (Linux's MemAvailable), or ``None`` where it cannot be read."""
    return _available_memory()


def _available_memory() -> int | None:
    """Bytes of RAM available now (Linux's MemAvailable), or ``None`` where it cannot be read."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
