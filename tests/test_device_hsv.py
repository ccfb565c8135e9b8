"""HSV on the training device: BatchHSV against RandomHSV (cv2), and loaders that leave HSV to the device."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from yolo11.data import AugmentParams, BatchHSV, LoaderConfig, augment_preset, build_dataloader, load_source
from yolo11.data.transforms import RandomHSV

COCO_IMAGE = Path(__file__).resolve().parents[2] / "shared" / "data" / "coco128" / "images" / "train2017" / \
    "000000000009.jpg"


def rgb_batch(bgr_images: list[np.ndarray]) -> torch.Tensor:
    return torch.from_numpy(np.stack([np.ascontiguousarray(im[:, :, ::-1].transpose(2, 0, 1)) for im in bgr_images]))


# OpenCV's 8-bit HSV -> BGR truncates in its main vector loop, but cv2 5.1 on an AVX-512 CPU rounds in the
# narrower block that takes the rest of a row (a 300-px row: columns 256-287 differed from cv2 4.12 by 1, nothing
# else): OpenCV's own output then depends on the row width. Test rows are multiples of 64 px, as the 640-px
# training images are, so that the comparison is with the main loop that BatchHSV reproduces.
def smooth_image(rng: np.random.Generator, height: int = 120, width: int = 192) -> np.ndarray:
    """A photo-like BGR image: colour gradients, flat areas, greys, whites and blacks, mild noise."""
    y, x = np.mgrid[0:height, 0:width] / max(height, width)
    image = np.stack([x, y, 1 - x * y], -1) * 255 + rng.normal(0, 6, (height, width, 3))
    image[:10] = 128  # grey: saturation 0
    image[10:20] = 255
    image[20:30] = 0
    image[30:40, :, 1] = image[30:40, :, 2]  # two equal maxima: OpenCV's hue branch order matters
    return np.clip(image, 0, 255).astype(np.uint8)


def compare_with_cv2(bgr_images: list[np.ndarray], seeds: list[int]) -> tuple[int, float]:
    """(largest difference, share of identical bytes) of BatchHSV against RandomHSV for the same gains."""
    hsv = RandomHSV()
    expected = [hsv(im, {}, np.random.default_rng(s))[0] for im, s in zip(bgr_images, seeds, strict=True)]
    gains = torch.from_numpy(np.stack([hsv.draw(np.random.default_rng(s)) for s in seeds]))
    ours = BatchHSV()(rgb_batch(bgr_images), gains)
    diff = (ours.to(torch.int16) - rgb_batch(expected).to(torch.int16)).abs()
    return int(diff.max()), float((diff == 0).float().mean())


def test_batch_hsv_matches_cv2_on_photo_like_images() -> None:
    rng = np.random.default_rng(0)
    images = [smooth_image(rng) for _ in range(6)]
    largest, identical = compare_with_cv2(images, seeds=list(range(6)))
    assert largest <= 1 and identical > 0.995, (largest, identical)


def test_batch_hsv_matches_cv2_on_noise() -> None:
    """Every (R, G, B) combination class: uniform noise. Within 1 everywhere; differences stay rare."""
    rng = np.random.default_rng(1)
    images = [rng.integers(0, 256, (64, 128, 3), dtype=np.uint8) for _ in range(4)]
    largest, identical = compare_with_cv2(images, seeds=[11, 12, 13, 14])
    assert largest <= 1 and identical > 0.95, (largest, identical)


@pytest.mark.skipif(not COCO_IMAGE.is_file(), reason=f"coco128 not found at {COCO_IMAGE}")
def test_batch_hsv_matches_cv2_on_a_coco_image() -> None:
    image = cv2.imread(str(COCO_IMAGE))
    largest, identical = compare_with_cv2([image, image], seeds=[3, 4])
    assert largest <= 1 and identical > 0.999, (largest, identical)


def test_batch_hsv_keeps_greys_grey_and_the_memory_format() -> None:
    rng = np.random.default_rng(2)
    images = rgb_batch([smooth_image(rng), smooth_image(rng)]).contiguous(memory_format=torch.channels_last)
    gains = torch.tensor([[0.01, 0.5, -0.3], [-0.015, -0.6, 0.35]], dtype=torch.float64)
    out = BatchHSV()(images, gains)
    assert out.dtype == torch.uint8 and out.shape == images.shape
    assert out.is_contiguous(memory_format=torch.channels_last)
    grey = out[:, :, :10]
    assert (grey[:, 0] == grey[:, 1]).all() and (grey[:, 1] == grey[:, 2]).all()
    # per-image gains: the two images changed differently, and each one changed
    assert not torch.equal(out[0], images[0]) and not torch.equal(out[1], images[1])
    swapped = BatchHSV()(images, gains.flip(0))
    assert not torch.equal(swapped[0], out[0])


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory):
    return load_source("synthetic:num_images=16,num_val=4,imgsz=96", "train", cache_dir=tmp_path_factory.mktemp("c"))


def test_loader_with_hsv_on_device_gives_the_same_batches_once_applied(source) -> None:
    """Same boxes and, after BatchHSV, the same pixels (within cv2's rounding) as HSV in the workers; mosaic,
    mixup and flips included."""
    kwargs = dict(imgsz=64, batch_size=8, workers=0, epochs=2, seed=3, hyp=augment_preset("yolo", mixup=0.5))
    on_cpu = list(build_dataloader(source, "train", LoaderConfig(**kwargs)))
    deferred = list(build_dataloader(source, "train", LoaderConfig(hsv_on_device=True, **kwargs)))
    for cpu_batch, device_batch in zip(on_cpu, deferred, strict=True):
        assert "hsv_gains" not in cpu_batch
        gains = device_batch["hsv_gains"]
        assert gains.shape == (8, 3) and gains.dtype == torch.float64
        assert len(set(gains[:, 1].tolist())) == 8  # one draw per image
        for key in ("boxes", "labels"):
            torch.testing.assert_close(device_batch[key], cpu_batch[key], rtol=0, atol=0)
        assert device_batch["image_ids"] == cpu_batch["image_ids"]
        applied = BatchHSV()(device_batch["images"], gains)
        diff = (applied.to(torch.int16) - cpu_batch["images"].to(torch.int16)).abs()
        assert int(diff.max()) <= 1 and float((diff == 0).float().mean()) > 0.99


def test_no_gains_without_hsv(source) -> None:
    hyp = AugmentParams(hsv_h=0.0, hsv_s=0.0, hsv_v=0.0)
    batch = next(iter(build_dataloader(source, "train", LoaderConfig(imgsz=64, batch_size=4, workers=0, hyp=hyp,
                                       hsv_on_device=True))))
    assert "hsv_gains" not in batch  # nothing to apply: the device must not run a lossy colour round trip
    val_config = LoaderConfig(imgsz=64, batch_size=4, workers=0, hsv_on_device=True)
    val = next(iter(build_dataloader(source, "val", val_config)))
    assert "hsv_gains" not in val


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_batch_hsv_on_cuda_equals_cpu() -> None:
    rng = np.random.default_rng(4)
    images = rgb_batch([smooth_image(rng, 256, 320) for _ in range(4)]).contiguous(memory_format=torch.channels_last)
    gains = torch.from_numpy(np.stack([RandomHSV().draw(np.random.default_rng(s)) for s in range(4)]))
    on_cpu = BatchHSV()(images, gains)
    on_cuda = BatchHSV().cuda()(images.cuda(), gains.cuda()).cpu()
    assert int((on_cuda.to(torch.int16) - on_cpu.to(torch.int16)).abs().max()) <= 1
    compiled = torch.compile(BatchHSV().cuda())(images.cuda(), gains.cuda()).cpu()
    assert int((compiled.to(torch.int16) - on_cpu.to(torch.int16)).abs().max()) <= 1
