"""Inference post-processing: decode raw head maps, per-class NMS, letterbox -> original image coordinates.

Semantics follow Ultralytics 8.4 (``Detect`` inference output and ``utils.nms.non_max_suppression``), classes
separated as it does, by offsetting each class's boxes ``max_wh`` pixels apart for one ``torchvision.ops.nms`` call.
YOLO26's one-to-one maps are decoded without NMS (``end2end_topk``, Ultralytics' ``Detect.postprocess``); its
one-to-many maps go through ``decode`` (``reg_max=1``) and NMS like YOLO11's.
The geometry (anchors, box formats, ``scale_boxes``) is ``yolo11.geometry``'s.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from yolo11.architecture import STRIDES
from yolo11.geometry import (
    dfl_expectation,
    flatten_levels,
    ltrb_to_xyxy,
    make_anchors,
    scale_boxes,
    xywh_to_xyxy,
    xyxy_to_xywh,
)


@functools.cache
def _nms_kernel() -> Callable[[Tensor, Tensor, float], Tensor]:
    """torchvision's compiled NMS (``torch.ops.torchvision.nms``, what ``torchvision.ops.nms`` calls), loaded
    without importing the torchvision package: that import pulls in torch._dynamo, ~1.2 s of every run's start
    on a 2-core machine, for one function. Where the library cannot be found or loaded, the package's own."""
    spec = importlib.util.find_spec("torchvision")
    folders = spec.submodule_search_locations if spec is not None else None
    candidates = [(folder, name, suffix) for folder in folders or [] for name in ("_C_stable", "_C")  # 0.29, 0.26
                  for suffix in importlib.machinery.EXTENSION_SUFFIXES]
    for folder, name, suffix in candidates:
        library = os.path.join(folder, f"{name}{suffix}")
        if os.name != "nt" and os.path.isfile(library):  # Windows needs the package's DLL-path setup
            try:
                torch.ops.load_library(library)
                return torch.ops.torchvision.nms
            except (OSError, RuntimeError, AttributeError):
                break
    from torchvision.ops import nms

    return nms


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Indices of the boxes ``(N, 4)`` xyxy kept by greedy NMS, by decreasing score (``torchvision.ops.nms``)."""
    return _nms_kernel()(boxes, scores, iou_threshold)


# candidates thresholded and gathered in one go: a few tens of MB whatever the batch (a model early in training
# can score most of its (anchor, class) pairs above the validation's 0.001)
MAX_GROUP_CANDIDATES = 1 << 20
# (image, box, box) pairs whose IoUs ``batched_greedy_nms`` holds at once: ~200 MB of float32 temporaries at most
MAX_PAIR_ENTRIES = 1 << 24
# batched_greedy_nms's suppression rounds before its first check of whether the result has settled (each later
# check comes after twice as many: a long chain of suppressions costs a few host syncs, not one per few boxes)
FIRST_ROUNDS = 4


def batched_greedy_nms(boxes: Tensor, scores: Tensor, counts: Sequence[int], iou_threshold: float,
                       max_det: int) -> tuple[Tensor, list[int]]:
    """Greedy NMS of several images' candidates with a host sync per batch, not per image.

    On CUDA ``torchvision.ops.nms`` waits for the device at every call (its output size), ~0.3 ms each: 32 per
    validation batch, a quarter of a validation pass of a small run. Here each image's boxes are ordered by score
    (a stable sort, as torchvision's), their IoUs computed as torchvision computes them, and the greedy choice
    found as the fixed point of "a box is kept unless a kept box before it overlaps it by more than
    ``iou_threshold``": a box depends only on the boxes before it, so the fixed point is unique (the greedy
    result) and each round settles at least one more box: a few rounds for most images, checked after 4, 8, 16, ...

    Args:
        boxes: ``(N, 4)`` xyxy, the images' candidates one image after another (``counts`` each).
        scores: ``(N,)``.

    Returns:
        the kept rows' indices into ``boxes`` (each image's by decreasing score, at most ``max_det``) and how many
        each image kept.
    """
    images, width = len(counts), max(counts, default=0)
    if width == 0:
        return torch.zeros(0, dtype=torch.long, device=boxes.device), [0] * images
    device = boxes.device
    sizes = torch.tensor(counts, device=device)
    starts = sizes.cumsum(0) - sizes
    slot = torch.arange(width, device=device)
    valid = slot < sizes[:, None]  # (B, K)
    rows = (starts[:, None] + slot).where(valid, 0)
    padded = scores[rows].masked_fill(~valid, -torch.inf)  # padding sorts last: every candidate is above conf
    order = padded.sort(dim=1, descending=True, stable=True).indices
    rows = rows.gather(1, order)
    x1, y1, x2, y2 = boxes[rows].unbind(-1)  # (B, K) each, by decreasing score
    area = (x2 - x1) * (y2 - y1)
    # torchvision's IoU: the earlier (higher-scored) box i against a later box j, (area_i + area_j) - inter
    w = torch.minimum(x2[:, :, None], x2[:, None, :]).sub_(torch.maximum(x1[:, :, None], x1[:, None, :]))
    h = torch.minimum(y2[:, :, None], y2[:, None, :]).sub_(torch.maximum(y1[:, :, None], y1[:, None, :]))
    inter = w.clamp_(min=0).mul_(h.clamp_(min=0))
    del h
    union = (area[:, :, None] + area[:, None, :]).sub_(inter)
    suppresses = inter.div_(union) > iou_threshold  # (B, i, j): i would suppress j
    del inter, union
    suppresses &= torch.ones(width, width, dtype=torch.bool, device=device).triu_(1)  # only later boxes
    suppresses &= valid[:, :, None]
    keep, rounds, done = valid, FIRST_ROUNDS, 0
    while True:
        for _ in range(rounds):
            previous = keep
            keep = valid & ~(suppresses & previous[:, :, None]).any(dim=1)
        done += rounds
        kept = keep & (keep.cumsum(1) <= max_det)
        # one sync: whether the last round changed anything, and each image's count
        state = torch.cat(((keep != previous).any()[None], kept.sum(1))).tolist()
        if not state[0] or done >= width:  # after `width` rounds every box is settled
            return rows[kept], state[1:]
        rounds *= 2


def _decode_cells(feats: Sequence[Tensor], strides: Sequence[int], reg_max: int) -> tuple[Tensor, Tensor, Tensor]:
    """Raw maps -> xyxy boxes ``(B, A, 4)`` in grid cells, strides ``(A, 1)`` in pixels, logits ``(B, C, A)``."""
    raw = flatten_levels(feats)  # (B, 4 * reg_max + C, A)
    dist, logits = raw.split((4 * reg_max, raw.shape[1] - 4 * reg_max), dim=1)
    points, stride = make_anchors([f.shape[2:] for f in feats], strides, raw.dtype, raw.device)
    dist = dist.transpose(1, 2)
    # reg_max 1 (YOLO26): the channel is the distance itself (Ultralytics' dfl is an nn.Identity), no softmax
    distances = dist if reg_max == 1 else dfl_expectation(dist, reg_max)
    return ltrb_to_xyxy(distances, points), stride, logits


def decode(feats: Sequence[Tensor], strides: Sequence[int] = STRIDES, reg_max: int = 16) -> Tensor:
    """Raw maps -> boxes and class probabilities for every anchor (Ultralytics' inference output).

    Args:
        feats: per level ``(B, 4 * reg_max + C, H / s, W / s)``, box-distribution channels first (``reg_max`` 1:
            YOLO26's direct distances).

    Returns:
        ``(B, 4 + C, A)``: rows 0-3 are ``xywh`` in input pixels, rows 4.. the sigmoid class scores.
    """
    boxes, stride, logits = _decode_cells(feats, strides, reg_max)
    xywh = xyxy_to_xywh(boxes) * stride  # pixels; scaling after the conversion, as Ultralytics
    return torch.cat((xywh.transpose(1, 2), logits.sigmoid()), dim=1)


def end2end_topk(
    feats: Sequence[Tensor],
    strides: Sequence[int] = STRIDES,
    reg_max: int = 1,
    max_det: int = 300,
    agnostic: bool = False,
) -> Tensor:
    """YOLO26's NMS-free output from its one-to-one maps: the ``max_det`` best (anchor, class) pairs per image.

    As Ultralytics' ``Detect.postprocess``: the ``k = min(max_det, A)`` anchors with the highest best-class score,
    then the ``k`` highest scores among their ``k * C`` (anchor, class) pairs, so an anchor may appear once per
    class; ``agnostic`` keeps one (its best) class per anchor instead.

    Args:
        feats: ``End2EndMaps.one2one``, per level ``(B, 4 * reg_max + C, H / s, W / s)``.

    Returns:
        ``(B, k, 6)`` rows ``[x1, y1, x2, y2, score, class]`` in input pixels, by decreasing score; every row is
        kept (no confidence threshold: ``end2end_detections`` applies it).
    """
    boxes, stride, logits = _decode_cells(feats, strides, reg_max)
    boxes = boxes * stride  # xyxy pixels, scaled after decoding as Ultralytics' end-to-end path
    scores = logits.sigmoid().transpose(1, 2)  # (B, A, C)
    anchors, num_classes = scores.shape[1:]
    k = min(max_det, anchors)
    if agnostic:
        best, labels = scores.max(dim=-1)
        top, index = best.topk(k, dim=1)
        labels = labels.gather(1, index)
    else:
        candidates = scores.max(dim=-1)[0].topk(k, dim=1)[1]  # (B, k) anchors
        pairs = scores.gather(1, candidates[..., None].expand(-1, -1, num_classes)).flatten(1)  # (B, k * C)
        top, pair = pairs.topk(k, dim=1)
        labels, index = pair % num_classes, candidates.gather(1, pair // num_classes)
    picked = boxes.gather(1, index[..., None].expand(-1, -1, 4))
    return torch.cat((picked, top[..., None], labels[..., None].to(top.dtype)), dim=-1)


def end2end_detections(topk: Tensor, conf: float = 0.001, max_det: int = 300) -> list[Tensor]:
    """``end2end_topk``'s rows per image with a score strictly above ``conf``, at most ``max_det`` (Ultralytics'
    ``non_max_suppression`` with ``end2end=True``: no suppression)."""
    return [rows[rows[:, 4] > conf][:max_det] for rows in topk]


DEFAULT_MAX_DET = 300  # Ultralytics' max_det


def max_det_for_data(max_det: int, most: dict[str, int], flag: str = "--max-det") -> tuple[int, str | None]:
    """The detections kept per image where the data's images hold up to ``most`` objects (per split), as
    Ultralytics 8.4.190 (``DetectionValidator._check_max_det``): the default raised to the largest count, a value
    the user chose kept; either way a line saying so, else None. Fewer detections than objects cap recall."""
    observed = max(most.values(), default=0)
    if observed <= max_det:
        return max_det, None
    counts = ", ".join(f"{split} {count}" for split, count in most.items())
    line = f"images of the data hold up to {observed} objects ({counts}), more than {flag} {max_det}: "
    if max_det == DEFAULT_MAX_DET:
        return observed, line + f"{flag} raised to {observed}, as Ultralytics does (a smaller cap would cap recall)"
    return max_det, line + f"kept as chosen; recall is capped at {max_det} detections an image"


# How the NMS-free choice is spelled on our command lines and in Python (and in Ultralytics: nms=False).
NMS_FREE_FLAG = "--nms false / nms=False"


def select_head(name: str, has_one2one: bool, nms: bool | None, flag: str = NMS_FREE_FLAG) -> bool:
    """Whether to decode with the NMS-free one-to-one head, as Ultralytics 8.4.190's ``nms`` argument chooses for
    predict, val and export: ``None`` (its default) and ``True`` take the one-to-many head with NMS
    (``AutoBackend(end2end=args.nms is False)``), ``False`` the one-to-one head's top-k. ``False`` for a model
    without that head (YOLO11, ``name``) is a one-line ``ValueError`` naming ``flag`` (how the caller spells it)."""
    if nms is False and not has_one2one:
        raise ValueError(f"{flag} selects the NMS-free one-to-one head of YOLO26 models; {name} has none (it "
                         "detects with NMS): leave it out")
    return nms is False


def head_line(name: str, has_one2one: bool, end2end: bool, flag: str = NMS_FREE_FLAG) -> str:
    """The one line a tool prints to say which head made its detections (``flag``: how to choose the other)."""
    if end2end:
        return f"head: {name} one-to-one, top-k without NMS ({flag})"
    if has_one2one:
        return f"head: {name} one-to-many with NMS (Ultralytics' default; {flag}: the NMS-free one-to-one head)"
    return f"head: {name} with NMS"


def non_max_suppression(
    decoded: Tensor,
    conf: float = 0.001,
    iou: float = 0.7,
    max_det: int = 300,
    multi_label: bool = True,
    agnostic: bool = False,
    max_nms: int = 30000,
    max_wh: int = 7680,
) -> list[Tensor]:
    """Per-image, per-class NMS of ``decode``'s output.

    Args:
        decoded: ``(B, 4 + C, A)`` as returned by ``decode``.
        conf: keep scores strictly above this (val 0.001, predict 0.25).
        iou: suppress same-class boxes overlapping a higher-scored one by more than this IoU.
        max_det: detections kept per image, highest scores first.
        multi_label: one candidate per (box, class) above ``conf`` rather than the best class only (ignored for a
            single class, as Ultralytics).
        agnostic: suppress across classes.
        max_nms: at most this many highest-scored candidates enter NMS.
        max_wh: the offset between classes, in pixels, for class-aware NMS in one call (Ultralytics' 7680).

    Returns:
        per image ``(n, 6)`` rows ``[x1, y1, x2, y2, score, class]``, input pixels, by decreasing score.
    """
    output = []
    for group in candidate_groups(decoded, conf, multi_label):
        output += suppress(group, iou, max_det, agnostic, max_nms, max_wh)
    return output


@dataclass
class Candidates:
    """Consecutive images' NMS candidates, one image after another: each (anchor, class) pair above ``conf``
    (multi-label) or each anchor's best class above it, in row-major (anchor, class) order within an image."""

    boxes: Tensor  # (N, 4) xyxy, input pixels
    scores: Tensor  # (N,)
    classes: Tensor  # (N,) int64
    counts: list[int]  # per image

    def __len__(self) -> int:
        return len(self.scores)


def candidate_groups(decoded: Tensor, conf: float = 0.001, multi_label: bool = True) -> Iterator[Candidates]:
    """``decode``'s output thresholded into groups of consecutive images, each group's candidates at most
    ``MAX_GROUP_CANDIDATES`` (or one image over it): one host sync for the counts, one per group."""
    num_classes = decoded.shape[1] - 4
    multi_label = multi_label and num_classes > 1
    prediction = decoded.transpose(1, 2)  # (B, A, 4 + C)
    boxes = xywh_to_xyxy(prediction[..., :4])
    scores = prediction[..., 4:]
    if multi_label:
        mask, labels = scores > conf, None  # (B, A, C): one candidate per (anchor, class)
    else:
        scores, labels = scores.max(2)
        mask = scores > conf  # (B, A): each anchor's best class
    # the candidates of several images at once (a host sync per group, not per image); row-major order is each
    # image's own (anchor, class) order, so every image's slice is what a threshold of that image alone gives
    counts = mask.flatten(1).sum(1).tolist()
    for first, last in _image_groups(counts, MAX_GROUP_CANDIDATES):
        where = torch.nonzero(mask[first:last], as_tuple=True)
        image, anchor = where[0] + first, where[1]
        cls = where[2] if multi_label else labels[image, anchor]
        score = scores[image, anchor, cls] if multi_label else scores[image, anchor]
        yield Candidates(boxes[image, anchor], score, cls, counts[first:last])


def suppress(candidates: Candidates, iou: float = 0.7, max_det: int = 300, agnostic: bool = False,
             max_nms: int = 30000, max_wh: int = 7680) -> list[Tensor]:
    """``non_max_suppression`` of one group of ``candidate_groups``: ``(n, 6)`` rows per image."""
    boxes, score, cls, group = candidates.boxes, candidates.scores, candidates.classes, candidates.counts
    # one NMS over classes moved max_wh apart, as Ultralytics (the same float rounding of its IoUs):
    # torchvision's batched_nms runs one NMS per class, with a host sync each, above 5000 candidates on CUDA
    shifted = boxes if agnostic else boxes + cls.to(boxes.dtype)[:, None] * max_wh
    # on CUDA, runs of images whose IoU matrices, padded to the run's largest, fit at once: one image with many
    # candidates is a run of its own instead of setting the width of every other image's; on the CPU every
    # image goes through torchvision, and the group is one run
    runs = _image_groups(group, MAX_PAIR_ENTRIES, _padded_pairs) if boxes.is_cuda else [(0, len(group))]
    keep, sizes, offset = [], [], 0
    for start, stop in runs:
        run = group[start:stop]
        nms_of_run = batched_greedy_nms if _batchable(boxes, run, max_nms) else functools.partial(
            _one_image_at_a_time, max_nms=max_nms)
        rows, kept = nms_of_run(shifted[offset:], score[offset:], run, iou, max_det)
        keep.append(rows + offset)
        sizes += kept
        offset += sum(run)
    keep = torch.cat(keep)
    rows = torch.cat((boxes[keep], score[keep, None], cls[keep, None].to(score.dtype)), dim=1)
    return list(rows.split(sizes))


def _batchable(candidates: Tensor, counts: list[int], max_nms: int) -> bool:
    """Whether ``batched_greedy_nms`` takes these images: on CUDA (on the CPU torchvision's NMS costs no sync and
    does less work), none over ``max_nms`` candidates (their top-``max_nms`` cut is ``_one_image_at_a_time``'s) and
    each image's IoU matrix within ``MAX_PAIR_ENTRIES`` (a larger one pays for torchvision's sync with its work);
    more than one image (for one, torchvision's single sync beats the rounds' checks)."""
    largest = max(counts, default=0)
    return candidates.is_cuda and len(counts) > 1 and largest <= max_nms and largest * largest <= MAX_PAIR_ENTRIES


def _one_image_at_a_time(boxes: Tensor, scores: Tensor, counts: list[int], iou: float, max_det: int,
                         max_nms: int) -> tuple[Tensor, list[int]]:
    """torchvision's NMS on each image's candidates (laid one image after another): the kept indices into
    ``boxes`` and how many each image kept."""
    kept, start = [], 0
    for count in counts:  # one NMS per image: their output sizes differ
        image_boxes, image_scores = boxes[start:start + count], scores[start:start + count]
        if count > max_nms:
            top = image_scores.argsort(descending=True)[:max_nms]  # Ultralytics' order among tied scores
            keep = top[nms(image_boxes[top], image_scores[top], iou)]
        else:
            keep = nms(image_boxes, image_scores, iou)
        kept.append(keep[:max_det] + start)
        start += count
    return torch.cat(kept), [len(k) for k in kept]


def _total(images: int, total: int, largest: int) -> int:
    return total


def _padded_pairs(images: int, total: int, largest: int) -> int:
    return images * largest * largest  # batched_greedy_nms pads every image to the largest


def _image_groups(counts: list[int], budget: int,
                  cost: Callable[[int, int, int], int] = _total) -> list[tuple[int, int]]:
    """Consecutive images ``[first, last)`` whose ``cost(images, total candidates, largest count)`` (by default
    their total) is at most ``budget``; an image over it alone is a group of its own."""
    groups, first, total, largest = [], 0, 0, 0
    for index, count in enumerate(counts):
        if index > first and cost(index + 1 - first, total + count, max(largest, count)) > budget:
            groups.append((first, index))
            first, total, largest = index, 0, 0
        total, largest = total + count, max(largest, count)
    if counts:
        groups.append((first, len(counts)))
    return groups


def to_original_pixels(detections: Sequence[Tensor], ratio_pad: Tensor, orig_sizes: Tensor) -> list[Tensor]:
    """``non_max_suppression``'s detections per image mapped from input pixels to original-image pixels.

    Args:
        ratio_pad: ``(B, 4)`` letterbox parameters per image, see ``yolo11.geometry.scale_boxes``.
        orig_sizes: ``(B, 2)`` original ``(height, width)``.
    """
    if len(detections) != len(ratio_pad) or len(detections) != len(orig_sizes):
        raise ValueError(f"{len(detections)} images of detections for {len(ratio_pad)} letterbox parameters and "
                         f"{len(orig_sizes)} sizes")
    if not detections:
        return []
    counts = [len(det) for det in detections]
    rows = torch.cat(list(detections))
    # each row with its own image's letterbox: the same element-wise arithmetic as one image at a time, in a few
    # kernels for the whole batch instead of a few per image
    image = torch.repeat_interleave(torch.arange(len(counts), device=rows.device),
                                    torch.tensor(counts, device=rows.device))
    pad = torch.as_tensor(ratio_pad, device=rows.device)[image]
    size = torch.as_tensor(orig_sizes, device=rows.device)[image]
    boxes = scale_boxes(rows[:, :4], pad, size)
    return list(torch.cat((boxes, rows[:, 4:]), dim=1).split(counts))


class Postprocessor:
    """Raw maps -> detections per image, in original-image pixels when letterbox parameters are given."""

    def __init__(
        self,
        conf: float = 0.001,
        iou: float = 0.7,
        max_det: int = 300,
        multi_label: bool = True,
        agnostic: bool = False,
        strides: Sequence[int] = STRIDES,
        reg_max: int = 16,
        max_nms: int = 30000,
        end2end: bool = False,
        topk: int | None = None,
    ) -> None:
        """``end2end``: the maps given are YOLO26's one-to-one maps, decoded by ``end2end_topk`` without NMS
        (``iou``, ``multi_label`` and ``max_nms`` unused); otherwise decoded with NMS. Given a YOLO26 model's
        ``End2EndMaps``, it takes ``one2one`` when ``end2end``, else ``one2many`` (Ultralytics' default,
        ``nms: None``). ``topk``: the candidates ``end2end_topk`` keeps before the ``conf``/``max_det`` filter
        (default ``max_det``, as Ultralytics' val; its predict keeps ``max(max_det, 300)``)."""
        self.conf, self.iou, self.max_det = conf, iou, max_det
        self.multi_label, self.agnostic, self.max_nms = multi_label, agnostic, max_nms
        self.strides, self.reg_max, self.end2end = tuple(strides), reg_max, end2end
        self.topk = max_det if topk is None else topk

    @torch.no_grad()
    def __call__(
        self, feats: Sequence[Tensor], ratio_pad: Tensor | None = None, orig_sizes: Tensor | None = None
    ) -> list[Tensor]:
        """Detections ``(n, 6)`` ``[x1, y1, x2, y2, score, class]`` per image.

        Args:
            feats: raw maps of the model, see ``decode``; or one tensor, the output of an exported graph
                (``yolo11.tools.onnx_model``): ``decode``'s ``(B, 4 + C, A)``, with ``end2end`` ``end2end_topk``'s
                rows ``(B, k, 6)``.
            ratio_pad: ``(B, 4)`` letterbox parameters per image; with ``orig_sizes (B, 2)`` boxes are mapped to
                original pixels, otherwise they stay in input pixels.
        """
        detections = self.in_two_parts(feats)[0]()
        if ratio_pad is None or orig_sizes is None:
            return detections
        return to_original_pixels(detections, ratio_pad, orig_sizes)

    @torch.no_grad()
    def in_two_parts(self, feats: Sequence[Tensor] | Tensor) -> tuple[Callable[[], list[Tensor]], int]:
        """``self(feats)``'s detections in input pixels, in two parts: the part that reads ``feats`` runs now (the
        decoding, then the NMS candidates' gathering or the end-to-end top-k), and the function returned runs the
        rest (the suppression, with its host syncs) from what it holds: another thread may call it while the
        caller goes on (a graphed model overwrites its maps at its next replay). Also returns how many candidates
        the function holds. Where the candidates come in more than one group (a model early in training floods
        them, see ``candidate_groups``), it all runs now, and the function holds only the detections."""
        decoded = feats.float() if isinstance(feats, Tensor) else None  # already decoded by the graph
        if decoded is None and hasattr(feats, "one2one"):  # a YOLO26 model's End2EndMaps: the branch to decode
            feats = feats.one2one if self.end2end else feats.one2many
        if decoded is None:
            feats = [f.float() for f in feats]
        if self.end2end:
            topk = end2end_topk(feats, self.strides, self.reg_max, self.topk, self.agnostic) if decoded is None \
                else decoded
            return functools.partial(end2end_detections, topk, self.conf, self.max_det), topk.shape[0] * topk.shape[1]
        decoded = decode(feats, self.strides, self.reg_max) if decoded is None else decoded
        groups = candidate_groups(decoded, self.conf, self.multi_label)
        first, second = next(groups, None), next(groups, None)
        suppress_group = functools.partial(suppress, iou=self.iou, max_det=self.max_det, agnostic=self.agnostic,
                                           max_nms=self.max_nms)
        if first is None:  # no image
            return list, 0
        if second is None:
            return functools.partial(suppress_group, first), len(first)
        # one group gathered at a time (the rest of the generator lazily), as non_max_suppression bounds them
        detections = [det for group in itertools.chain((first, second), groups) for det in suppress_group(group)]
        return lambda: detections, 0
