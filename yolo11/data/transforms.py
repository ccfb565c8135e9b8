"""Ultralytics' detection augmentations (``ultralytics/data/augment.py`` semantics and defaults), in cv2 and uint8.

Conventions: ``image`` is ``uint8 (H, W, 3)`` **BGR** as cv2 decodes it (HSV and the colour constants assume it;
the collate turns it to RGB CHW). A target is a dict with ``boxes`` ``float32 (N, 4)`` xyxy in pixels of ``image``
and ``labels`` ``int64 (N,)``. Every transform is ``(image, target, rng) -> (image, target)``: the random
generator is an explicit argument because the loader derives it from ``(seed, epoch, index)`` (resume-exact and
independent of worker count), never from a global RNG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from yolo11.data.augment_params import PRESETS, AugmentParams, augment_preset  # noqa: F401 (this module's API)
from yolo11.geometry import letterbox_params, resized_size

PAD_VALUE = 114  # grey used by Ultralytics for letterbox, mosaic and affine borders
Target = dict  # {"boxes": float32 (N, 4) xyxy px, "labels": int64 (N,)}


def long_side_shape(h0: int, w0: int, imgsz: int) -> tuple[int, int]:
    """``(h, w)`` of an ``h0 x w0`` image once ``resize_long_side`` has brought its long side to ``imgsz``."""
    r = imgsz / max(h0, w0)
    if r == 1:
        return h0, w0
    return min(math.ceil(h0 * r), imgsz), min(math.ceil(w0 * r), imgsz)


def resize_long_side(image: np.ndarray, imgsz: int) -> np.ndarray:
    """Ultralytics ``load_image``: long side to ``imgsz``, aspect kept (the same array when already there)."""
    h, w = long_side_shape(*image.shape[:2], imgsz)
    if (h, w) == image.shape[:2]:
        return image
    return cv2.resize(image, (w, h), interpolation=cv2.INTER_LINEAR)


def scale_target(target: Target, gain_w: float, gain_h: float, pad_left: float = 0.0, pad_top: float = 0.0) -> Target:
    boxes = target["boxes"] * np.array([gain_w, gain_h, gain_w, gain_h], np.float32)
    boxes += np.array([pad_left, pad_top, pad_left, pad_top], np.float32)
    return {**target, "boxes": boxes}


@dataclass(frozen=True)
class LetterBox:
    """Resize keeping aspect ratio and pad to ``shape`` (centred, grey 114); ``scaleup=False`` never enlarges.

    The geometry is ``yolo11.geometry.letterbox_params``' (which ``scale_boxes`` inverts). The applied
    ``(gain_h, gain_w, pad_top, pad_left)`` is written to ``target["letterbox"]``. Boxes are shifted
    by the integer padding that the image gets (Ultralytics shifts labels by the unrounded half-padding, up to
    half a pixel off its own image; we keep boxes and pixels consistent).
    """

    shape: tuple[int, int]  # (height, width)
    scaleup: bool = True

    def __call__(self, image: np.ndarray, target: Target, rng: np.random.Generator | None = None):
        size = image.shape[:2]
        new_h, new_w = resized_size(size, self.shape, self.scaleup)
        gain_h, gain_w, top, left = letterbox_params(size, self.shape, self.scaleup)
        if (new_h, new_w) != size:
            image = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
        bottom, right = self.shape[0] - new_h - top, self.shape[1] - new_w - left
        if top or bottom or left or right:
            image = cv2.copyMakeBorder(image, top, bottom, left, right, cv2.BORDER_CONSTANT,
                                       value=(PAD_VALUE,) * 3)
        target = scale_target(target, gain_w, gain_h, left, top)
        target["letterbox"] = (gain_h, gain_w, float(top), float(left))
        return image, target


def mosaic4(images: list[np.ndarray], targets: list[Target], imgsz: int, rng: np.random.Generator):
    """Four images (already resized to long side ``imgsz``) on a ``2 imgsz`` grey canvas around a random centre.

    The centre is uniform in ``[imgsz / 2, 3 imgsz / 2]`` (Ultralytics' border ``-imgsz // 2``). Boxes are clipped
    to the canvas and zero-area ones removed; the caller then crops back to ``imgsz`` with ``RandomPerspective``
    and ``border = -imgsz // 2`` (``mosaic_perspective`` does both and builds only what the warp reads).
    """
    centre = mosaic_centre(imgsz, rng)
    canvas, target = _mosaic_layout(images, targets, imgsz, centre)
    return canvas, target, -imgsz // 2


def mosaic_centre(imgsz: int, rng: np.random.Generator) -> tuple[int, int]:
    """``(yc, xc)`` of ``mosaic4``'s random centre (two draws from ``rng``)."""
    border = -imgsz // 2
    yc, xc = (int(rng.uniform(-border, 2 * imgsz + border)) for _ in range(2))
    return yc, xc


def _mosaic_layout(images: list[np.ndarray], targets: list[Target], imgsz: int, centre: tuple[int, int],
                   window: tuple[int, int, int, int] | None = None) -> tuple[np.ndarray, Target]:
    """The mosaic canvas around ``centre`` and its target (boxes in canvas pixels). ``window`` ``(x0, y0, x1,
    y1)`` builds only that part of the ``2 imgsz`` canvas; the boxes are the whole canvas's either way."""
    s = imgsz
    yc, xc = centre
    x0, y0, x1, y1 = window or (0, 0, 2 * s, 2 * s)
    canvas = np.full((y1 - y0, x1 - x0, images[0].shape[2]), PAD_VALUE, np.uint8)
    boxes, labels = [], []
    for i, (image, target) in enumerate(zip(images, targets, strict=True)):
        h, w = image.shape[:2]
        if i == 0:  # top left
            x1a, y1a, x2a, y2a = max(xc - w, 0), max(yc - h, 0), xc, yc
            x1b, y1b = w - (x2a - x1a), h - (y2a - y1a)
        elif i == 1:  # top right
            x1a, y1a, x2a, y2a = xc, max(yc - h, 0), min(xc + w, 2 * s), yc
            x1b, y1b = 0, h - (y2a - y1a)
        elif i == 2:  # bottom left
            x1a, y1a, x2a, y2a = max(xc - w, 0), yc, xc, min(2 * s, yc + h)
            x1b, y1b = w - (x2a - x1a), 0
        else:  # bottom right
            x1a, y1a, x2a, y2a = xc, yc, min(xc + w, 2 * s), min(2 * s, yc + h)
            x1b, y1b = 0, 0
        # canvas[y1a:y2a, x1a:x2a] = image[y1b:, x1b:], restricted to the window
        cx1, cy1, cx2, cy2 = max(x1a, x0), max(y1a, y0), min(x2a, x1), min(y2a, y1)
        if cx2 > cx1 and cy2 > cy1:
            canvas[cy1 - y0:cy2 - y0, cx1 - x0:cx2 - x0] = image[y1b + cy1 - y1a:y1b + cy2 - y1a,
                                                                 x1b + cx1 - x1a:x1b + cx2 - x1a]
        boxes.append(target["boxes"] + np.array([x1a - x1b, y1a - y1b] * 2, np.float32))
        labels.append(target["labels"])
    boxes_all = np.clip(np.concatenate(boxes), 0, 2 * s)
    labels_all = np.concatenate(labels)
    keep = (boxes_all[:, 2] > boxes_all[:, 0]) & (boxes_all[:, 3] > boxes_all[:, 1])
    return canvas, {"boxes": boxes_all[keep], "labels": labels_all[keep]}


def mosaic_perspective(images: list[np.ndarray], targets: list[Target], imgsz: int, params: AugmentParams,
                       rng: np.random.Generator) -> tuple[np.ndarray, Target]:
    """``mosaic4`` then ``RandomPerspective(params, -imgsz // 2)``, with the same random draws, building only the
    part of the canvas that the warp reads. The boxes are the same; so is the image, bit for bit, with scale and
    translation (Ultralytics' recipe; tested). With rotation, shear or perspective, OpenCV's fixed-point source
    coordinates of the shifted matrix round differently on a few pixels in 10,000, by 1 grey level.

    The warp's output covers a window of the ``2 imgsz`` canvas of about ``(imgsz / scale)^2`` pixels: on
    average a third of the canvas at Ultralytics' scale 0.5, so most of the canvas fill and tile copies are
    skipped (timings: ``benchmarks/RESULTS.md``).
    """
    centre = mosaic_centre(imgsz, rng)
    perspective = RandomPerspective(params, -imgsz // 2)
    canvas_size = (2 * imgsz, 2 * imgsz)
    matrix, scale = perspective.draw(canvas_size, rng)
    window = perspective.source_window(matrix, canvas_size)
    canvas, target = _mosaic_layout(images, targets, imgsz, centre, window)
    return perspective.apply(canvas, target, matrix, scale, canvas_size, origin=window[:2])


def box_candidates(before: np.ndarray, after: np.ndarray, wh_thr: float = 2, ar_thr: float = 100,
                   area_thr: float = 0.1, eps: float = 1e-16) -> np.ndarray:
    """Ultralytics' filter after an affine warp: keep boxes wider/taller than ``wh_thr`` px, with aspect ratio
    below ``ar_thr`` and keeping more than ``area_thr`` of their (scaled) area. Boxes are ``(N, 4)`` xyxy."""
    w1, h1 = before[:, 2] - before[:, 0], before[:, 3] - before[:, 1]
    w2, h2 = after[:, 2] - after[:, 0], after[:, 3] - after[:, 1]
    aspect = np.maximum(w2 / (h2 + eps), h2 / (w2 + eps))
    return (w2 > wh_thr) & (h2 > wh_thr) & (w2 * h2 / (w1 * h1 + eps) > area_thr) & (aspect < ar_thr)


def affine_matrix(params: AugmentParams, in_size: tuple[int, int], out_size: tuple[int, int],
                  rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """Ultralytics' ``M = T @ S @ R @ P @ C`` for an input ``(h, w)`` and output ``(h, w)``; returns (M, scale)."""
    center = np.eye(3)
    center[0, 2], center[1, 2] = -in_size[1] / 2, -in_size[0] / 2
    persp = np.eye(3)
    persp[2, 0], persp[2, 1] = rng.uniform(-params.perspective, params.perspective, 2)
    rot = np.eye(3)
    angle = rng.uniform(-params.degrees, params.degrees)
    scale = rng.uniform(1 - params.scale, 1 + params.scale)
    rot[:2] = cv2.getRotationMatrix2D(angle=angle, center=(0, 0), scale=scale)
    shear = np.eye(3)
    shear[0, 1], shear[1, 0] = np.tan(rng.uniform(-params.shear, params.shear, 2) * math.pi / 180)
    translate = np.eye(3)
    translate[0, 2] = rng.uniform(0.5 - params.translate, 0.5 + params.translate) * out_size[1]
    translate[1, 2] = rng.uniform(0.5 - params.translate, 0.5 + params.translate) * out_size[0]
    return translate @ shear @ rot @ persp @ center, scale


@dataclass(frozen=True)
class RandomPerspective:
    """Random affine (rotation, scale, shear, translation, optional perspective) with a border crop.

    ``border`` (negative after mosaic) shrinks the output: ``out = in + 2 * border`` per side, so a ``2 imgsz``
    mosaic comes out at ``imgsz``. Boxes: the 4 corners are warped, their extent clipped to the output, and
    ``box_candidates`` drops boxes that became too small or too thin.
    """

    params: AugmentParams
    border: int = 0

    def __call__(self, image: np.ndarray, target: Target, rng: np.random.Generator):
        matrix, scale = self.draw(image.shape[:2], rng)
        return self.apply(image, target, matrix, scale, image.shape[:2])

    def out_size(self, in_size: tuple[int, int]) -> tuple[int, int]:
        return in_size[0] + 2 * self.border, in_size[1] + 2 * self.border

    def draw(self, in_size: tuple[int, int], rng: np.random.Generator) -> tuple[np.ndarray, float]:
        """The ``(3, 3)`` matrix (input to output pixels) and scale for an input of ``in_size`` ``(h, w)``."""
        return affine_matrix(self.params, in_size, self.out_size(in_size), rng)

    def source_window(self, matrix: np.ndarray, in_size: tuple[int, int], margin: int = 2
                      ) -> tuple[int, int, int, int]:
        """``(x0, y0, x1, y1)``: the part of the input that the warp reads (the output's corners mapped back,
        plus ``margin`` pixels for the bilinear neighbours), clipped to the input."""
        out_h, out_w = self.out_size(in_size)
        corners = np.array([[0, 0, 1], [out_w, 0, 1], [0, out_h, 1], [out_w, out_h, 1]], np.float64)
        mapped = corners @ np.linalg.inv(matrix).T
        if not (mapped[:, 2] > 0).all():  # a perspective that folds the output through infinity: all of it
            return 0, 0, in_size[1], in_size[0]
        xy = mapped[:, :2] / mapped[:, 2:]
        x0, y0 = (max(int(v), 0) for v in np.floor(xy.min(0)) - margin)
        x1, y1 = (min(int(v), size) for v, size in zip(np.ceil(xy.max(0)) + margin + 1, in_size[::-1]))
        if x1 <= x0 or y1 <= y0:  # the output sees none of the input: warp the (grey) whole of it
            return 0, 0, in_size[1], in_size[0]
        return x0, y0, x1, y1

    def apply(self, image: np.ndarray, target: Target, matrix: np.ndarray, scale: float, in_size: tuple[int, int],
              origin: tuple[int, int] = (0, 0)) -> tuple[np.ndarray, Target]:
        """Warp with a drawn ``matrix``. ``image`` may be the window of a larger input of ``in_size`` whose top
        left corner is at ``origin`` ``(x, y)`` of that input; the target's boxes are in the input's pixels."""
        out_size = self.out_size(in_size)
        if self.border or (matrix != np.eye(3)).any():
            warp = matrix
            if origin != (0, 0):
                shift = np.eye(3)
                shift[0, 2], shift[1, 2] = origin
                warp = matrix @ shift
            if self.params.perspective:
                image = cv2.warpPerspective(image, warp, dsize=(out_size[1], out_size[0]),
                                            borderValue=(PAD_VALUE,) * 3)
            else:
                image = cv2.warpAffine(image, warp[:2], dsize=(out_size[1], out_size[0]),
                                       borderValue=(PAD_VALUE,) * 3)
        boxes = target["boxes"]
        if not len(boxes):
            return image, target
        corners = np.ones((len(boxes) * 4, 3))
        corners[:, :2] = boxes[:, [0, 1, 2, 3, 0, 3, 2, 1]].reshape(-1, 2)  # x1y1, x2y2, x1y2, x2y1
        corners = corners @ matrix.T
        xy = corners[:, :2] / corners[:, 2:3] if self.params.perspective else corners[:, :2]
        xy = xy.reshape(len(boxes), 8)
        warped = np.stack([xy[:, 0::2].min(1), xy[:, 1::2].min(1), xy[:, 0::2].max(1), xy[:, 1::2].max(1)], 1)
        warped = np.clip(warped, 0, [out_size[1], out_size[0]] * 2).astype(np.float32)
        keep = box_candidates(boxes * scale, warped)
        return image, {**target, "boxes": warped[keep], "labels": target["labels"][keep]}


@dataclass(frozen=True)
class RandomHSV:
    """Hue, saturation and value gains in ``[1 - g, 1 + g]``, applied with ``cv2.LUT`` (BGR input, new output:
    the input may be a read-only view of the RAM image cache).

    ``draw`` and ``apply`` split the call for loaders that leave the pixels to the training device
    (``yolo11.data.device_hsv.BatchHSV``): the gains still come from the sample's generator.
    """

    hgain: float = 0.015
    sgain: float = 0.7
    vgain: float = 0.4

    def __call__(self, image: np.ndarray, target: Target, rng: np.random.Generator):
        gains = self.draw(rng)
        return (image if gains is None else self.apply(image, gains)), target

    def draw(self, rng: np.random.Generator) -> np.ndarray | None:
        """``(3,)`` hue, saturation, value gains, or ``None`` (no draw) when every gain is 0."""
        if not (self.hgain or self.sgain or self.vgain):
            return None
        return rng.uniform(-1, 1, 3) * [self.hgain, self.sgain, self.vgain]

    @staticmethod
    def apply(image: np.ndarray, gains: np.ndarray) -> np.ndarray:
        x = np.arange(0, 256, dtype=gains.dtype)
        # Ultralytics >= 8.3.79: additive hue shift (OpenCV hue is 0..179), and saturation 0 stays 0 so that
        # pure greys and whites keep no colour
        lut_hue = ((x + gains[0] * 180) % 180).astype(np.uint8)
        lut_sat = np.clip(x * (gains[1] + 1), 0, 255).astype(np.uint8)
        lut_sat[0] = 0
        lut_val = np.clip(x * (gains[2] + 1), 0, 255).astype(np.uint8)
        # One 3-channel LUT pass instead of split + three LUTs + merge: the same bytes in fewer passes over the image
        lut = np.stack((lut_hue, lut_sat, lut_val), -1).reshape(1, 256, 3)
        hsv = cv2.LUT(cv2.cvtColor(image, cv2.COLOR_BGR2HSV), lut)
        return cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)


@dataclass(frozen=True)
class RandomFlip:
    """Flip with probability ``p``; ``horizontal`` mirrors x, else y. Returns a view (the collate copies once)."""

    p: float = 0.5
    horizontal: bool = True

    def __call__(self, image: np.ndarray, target: Target, rng: np.random.Generator):
        if not self.p or rng.random() >= self.p:
            return image, target
        h, w = image.shape[:2]
        boxes = target["boxes"].copy()
        if self.horizontal:
            image = image[:, ::-1]
            boxes[:, [0, 2]] = w - target["boxes"][:, [2, 0]]
        else:
            image = image[::-1]
            boxes[:, [1, 3]] = h - target["boxes"][:, [3, 1]]
        return image, {**target, "boxes": boxes}


def mixup(image: np.ndarray, target: Target, other: np.ndarray, other_target: Target, rng: np.random.Generator):
    """Ultralytics' MixUp: blend with ratio ~ Beta(32, 32) and keep both images' boxes (same-size images)."""
    ratio = rng.beta(32.0, 32.0)
    blended = (image.astype(np.float32) * ratio + other.astype(np.float32) * (1 - ratio)).astype(np.uint8)
    return blended, {"boxes": np.concatenate([target["boxes"], other_target["boxes"]]),
                     "labels": np.concatenate([target["labels"], other_target["labels"]])}
