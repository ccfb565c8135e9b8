"""Transforms move boxes exactly as they move pixels: each box is drawn as a mask, warped alongside, and compared."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from yolo11.data.transforms import (
    PAD_VALUE,
    AugmentParams,
    LetterBox,
    RandomFlip,
    RandomHSV,
    RandomPerspective,
    augment_preset,
    box_candidates,
    mosaic4,
    mosaic_perspective,
    resize_long_side,
)


def random_target(rng: np.random.Generator, height: int, width: int, count: int = 3, min_size: float = 0.2) -> dict:
    """Boxes of ``min_size`` to ``min_size + 0.2`` of the image side, integer corners (so the masks are exact).

    Interpolation and OpenCV's pixel-centre convention move a warped mask edge by up to about half a pixel, so a
    box must stay some 40 px wide after a warp for IoU 0.95 to be a test of the box arithmetic, not of rounding.
    """
    lo_w, lo_h = int(width * min_size), int(height * min_size)
    x2 = (x1 := rng.integers(0, width - lo_w - width // 5, count)) + rng.integers(lo_w, lo_w + width // 5, count)
    y2 = (y1 := rng.integers(0, height - lo_h - height // 5, count)) + rng.integers(lo_h, lo_h + height // 5, count)
    return {"boxes": np.stack([x1, y1, x2, y2], 1).astype(np.float32), "labels": np.arange(count, dtype=np.int64)}


def box_mask(box: np.ndarray, height: int, width: int) -> np.ndarray:
    """3-channel uint8 image, 255 inside the box and 0 outside (0 is far from the 114 padding grey)."""
    mask = np.zeros((height, width, 3), np.uint8)
    x1, y1, x2, y2 = box.astype(int)
    mask[y1:y2, x1:x2] = 255
    return mask


def mask_extent(image: np.ndarray) -> np.ndarray | None:
    ys, xs = np.nonzero(image[..., 0] > 184)  # above the midpoint of padding grey and white
    return None if not len(xs) else np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], np.float64)


def iou(a: np.ndarray, b: np.ndarray) -> float:
    w = max(min(a[2], b[2]) - max(a[0], b[0]), 0)
    h = max(min(a[3], b[3]) - max(a[1], b[1]), 0)
    inter = w * h
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def check_boxes_follow_pixels(transform, images: list[np.ndarray], targets: list[dict], seed: int) -> int:
    """Apply ``transform(images, targets, rng)`` to the real data, then again once per box to an image set where
    only that box is drawn; the transformed box must match the transformed mask's extent (IoU >= 0.95).

    Returns how many boxes survived (so callers can check the test did look at boxes)."""
    _, out = transform(images, targets, np.random.default_rng(seed))
    survivors = 0
    for k, target in enumerate(targets):
        for j, box in enumerate(target["boxes"]):
            masks = [np.zeros_like(im) for im in images]
            masks[k] = box_mask(box, *images[k].shape[:2])
            # one labelled box per run, the same random stream: the transform's randomness ignores pixels
            single = [{"boxes": t["boxes"][:0], "labels": t["labels"][:0]} for t in targets]
            single[k] = {"boxes": box[None], "labels": np.array([1000 * k + j])}
            warped, warped_target = transform(masks, single, np.random.default_rng(seed))
            extent = mask_extent(warped)
            if not len(warped_target["boxes"]):
                continue  # dropped by the transform (out of view or too small): nothing to compare
            assert extent is not None, "a kept box must still show its pixels"
            assert iou(warped_target["boxes"][0], extent) >= 0.95, (warped_target["boxes"][0], extent)
            survivors += 1
    return survivors


@pytest.mark.parametrize("size, shape, scaleup", [((120, 200), (256, 256), True), ((300, 180), (160, 160), True),
                                                  ((100, 150), (320, 320), False), ((240, 320), (256, 320), True)])
def test_letterbox_moves_boxes_with_pixels(size: tuple[int, int], shape: tuple[int, int], scaleup: bool) -> None:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (*size, 3), dtype=np.uint8)
    target = random_target(rng, *size)
    letterbox = LetterBox(shape, scaleup=scaleup)

    def transform(images, targets, rng):
        return letterbox(images[0], targets[0])

    assert check_boxes_follow_pixels(transform, [image], [target], seed=0) == 3
    out, out_target = letterbox(image, target)
    assert out.shape[:2] == shape
    gain_h, gain_w, top, left = out_target["letterbox"]
    if not scaleup:
        assert gain_h <= 1 and gain_w <= 1
    # the ratio_pad contract: original = (input - pad) / gain
    restored = (out_target["boxes"] - [left, top, left, top]) / [gain_w, gain_h, gain_w, gain_h]
    np.testing.assert_allclose(restored, target["boxes"], atol=1e-3)


@pytest.mark.parametrize("horizontal", [True, False])
def test_flip_moves_boxes_with_pixels(horizontal: bool) -> None:
    rng = np.random.default_rng(1)
    image = rng.integers(0, 255, (90, 130, 3), dtype=np.uint8)
    target = random_target(rng, 90, 130)
    flip = RandomFlip(p=1.0, horizontal=horizontal)

    def transform(images, targets, rng):
        return flip(images[0], targets[0], rng)

    assert check_boxes_follow_pixels(transform, [image], [target], seed=0) == 3
    flipped, _ = flip(image, target, rng)
    np.testing.assert_array_equal(flipped, image[:, ::-1] if horizontal else image[::-1])
    unflipped, same = RandomFlip(p=0.0)(image, target, rng)
    assert unflipped is image and same is target


@pytest.mark.parametrize("seed", range(4))
def test_translate_scale_moves_boxes_with_pixels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 255, (400, 400, 3), dtype=np.uint8)
    target = random_target(rng, 400, 400, count=3, min_size=0.3)
    perspective = RandomPerspective(AugmentParams(translate=0.1, scale=0.5))

    def transform(images, targets, rng):
        return perspective(images[0], targets[0], rng)

    assert check_boxes_follow_pixels(transform, [image], [target], seed=seed) >= 1


def mosaic_inputs(rng: np.random.Generator, imgsz: int, sides: tuple[int, int], count: int, min_size: float):
    """Four random images of sides in ``sides``, resized to long side ``imgsz``, with their random targets."""
    images, targets = [], []
    for _ in range(4):
        h, w = rng.integers(*sides, 2)
        image = resize_long_side(rng.integers(0, 255, (h, w, 3), dtype=np.uint8), imgsz)
        images.append(image)
        targets.append(random_target(rng, *image.shape[:2], count=count, min_size=min_size))
    return images, targets


@pytest.mark.parametrize("seed", range(4))
def test_mosaic_then_perspective_moves_boxes_with_pixels(seed: int) -> None:
    imgsz = 320
    images, targets = mosaic_inputs(np.random.default_rng(100 + seed), imgsz, (200, 500), count=2, min_size=0.3)

    def transform(images, targets, rng):
        canvas, target, border = mosaic4(images, targets, imgsz, rng)
        assert canvas.shape[:2] == (2 * imgsz, 2 * imgsz) and border == -imgsz // 2
        out, out_target = RandomPerspective(AugmentParams(), border)(canvas, target, rng)
        assert out.shape[:2] == (imgsz, imgsz)
        return out, out_target

    assert check_boxes_follow_pixels(transform, images, targets, seed=seed) >= 1


@pytest.mark.parametrize(("params", "exact"), [
    (AugmentParams(), True),
    (AugmentParams(scale=0.9, translate=0.2), True),  # zoomed far out: the warp reads (almost) the whole canvas
    (AugmentParams(degrees=30.0, shear=10.0, scale=0.3), False),
    (AugmentParams(perspective=0.0005, degrees=10.0), False),
], ids=["default", "zoom-out", "rotate-shear", "perspective"])
def test_mosaic_perspective_builds_only_the_read_window_with_the_same_result(params: AugmentParams,
                                                                             exact: bool) -> None:
    """The windowed canvas gives mosaic4 + RandomPerspective's boxes exactly (same draws) and its image bit for
    bit with scale and translation (Ultralytics' recipe). With rotation, shear or perspective, OpenCV's
    fixed-point source coordinates of the shifted matrix round differently on a few pixels in 10,000: by 1."""
    imgsz = 160
    for seed in range(12):
        images, targets = mosaic_inputs(np.random.default_rng(seed), imgsz, (60, 300), count=3, min_size=0.1)
        expected_rng = np.random.default_rng(seed)
        canvas, target, border = mosaic4(images, targets, imgsz, expected_rng)
        expected, expected_target = RandomPerspective(params, border)(canvas, target, expected_rng)
        ours_rng = np.random.default_rng(seed)
        ours, ours_target = mosaic_perspective(images, targets, imgsz, params, ours_rng)
        if exact:
            np.testing.assert_array_equal(ours, expected)
        else:
            diff = np.abs(ours.astype(np.int16) - expected)
            assert diff.max() <= 1 and (diff > 0).mean() < 1e-3
        np.testing.assert_array_equal(ours_target["boxes"], expected_target["boxes"])
        np.testing.assert_array_equal(ours_target["labels"], expected_target["labels"])
        assert ours_rng.random() == expected_rng.random()  # the same number of draws


def test_mosaic_centre_stays_in_the_middle_half() -> None:
    imgsz = 64
    images = [np.full((imgsz, imgsz, 3), 10 * (k + 1), np.uint8) for k in range(4)]
    targets = [{"boxes": np.zeros((0, 4), np.float32), "labels": np.zeros(0, np.int64)} for _ in range(4)]
    for seed in range(20):
        canvas, _, _ = mosaic4(images, targets, imgsz, np.random.default_rng(seed))
        # the top-left image ends at the centre (xc, yc), which lies in [imgsz / 2, 3 imgsz / 2]
        ys, xs = np.nonzero(canvas[..., 0] == 10)
        xc, yc = xs.max() + 1, ys.max() + 1
        assert imgsz // 2 <= xc <= 3 * imgsz // 2 and imgsz // 2 <= yc <= 3 * imgsz // 2
        assert (canvas[:yc - imgsz, :] == PAD_VALUE).all() if yc > imgsz else True


def test_box_candidates_rules() -> None:
    before = np.array([[0, 0, 100, 100]] * 4, np.float32)
    after = np.array([[0, 0, 50, 50],  # a quarter of the area: kept
                      [0, 0, 30, 30],  # 9 % of the area: below area_thr 0.1
                      [0, 0, 1.5, 80],  # narrower than wh_thr 2 px
                      [10, 10, 60, 60]], np.float32)
    np.testing.assert_array_equal(box_candidates(before, after), [True, False, False, True])


def test_hsv_is_a_colour_change_only() -> None:
    rng = np.random.default_rng(3)
    image = rng.integers(0, 255, (32, 48, 3), dtype=np.uint8)
    image[:4] = 128  # grey rows: saturation 0 must stay grey whatever the hue shift
    out, _ = RandomHSV()(image.copy(), {}, np.random.default_rng(7))
    again, _ = RandomHSV()(image.copy(), {}, np.random.default_rng(7))
    np.testing.assert_array_equal(out, again)
    assert out.shape == image.shape and out.dtype == np.uint8 and not np.array_equal(out, image)
    assert (out[:4, :, 0] == out[:4, :, 1]).all() and (out[:4, :, 1] == out[:4, :, 2]).all()
    same, _ = RandomHSV(0, 0, 0)(image, {}, rng)
    assert same is image


def test_presets() -> None:
    assert augment_preset("yolo") == AugmentParams()
    none = augment_preset("none")
    assert none.mosaic == none.fliplr == none.scale == none.hsv_v == 0
    assert augment_preset("yolo", mixup=0.2).mixup == 0.2
    with pytest.raises(ValueError, match="unknown augmentation preset 'strong'"):
        augment_preset("strong")


def test_hsv_single_lut_pass_equals_per_channel_luts() -> None:
    """The 3-channel LUT must give exactly Ultralytics' split / LUT per channel / merge result."""
    image = np.random.default_rng(3).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    image[:4] = 255  # whites and greys: saturation 0 must stay 0
    image[4:8] = 128
    for seed in range(5):
        out, _ = RandomHSV()(image, {}, np.random.default_rng(seed))
        gains = np.random.default_rng(seed).uniform(-1, 1, 3) * [0.015, 0.7, 0.4]
        x = np.arange(256, dtype=np.float64)
        luts = [((x + gains[0] * 180) % 180).astype(np.uint8), np.clip(x * (gains[1] + 1), 0, 255).astype(np.uint8),
                np.clip(x * (gains[2] + 1), 0, 255).astype(np.uint8)]
        luts[1][0] = 0
        channels = cv2.split(cv2.cvtColor(image, cv2.COLOR_BGR2HSV))
        expected = cv2.cvtColor(cv2.merge([cv2.LUT(c, lut) for c, lut in zip(channels, luts)]), cv2.COLOR_HSV2BGR)
        np.testing.assert_array_equal(out, expected)
        assert not np.array_equal(out, image)
