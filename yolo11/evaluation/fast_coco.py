"""COCO bbox evaluation in torch, vectorised over images: pycocotools' ``COCOeval`` numbers in seconds.

pycocotools evaluates each (image, category) pair in Python (~47 ms per image at 300 detections and 80 classes);
this module does the same arithmetic on padded tensors, on the CPU or a GPU, and returns the same 12 ``stats`` and
``precision`` array (T=10 IoU thresholds, R=101 recall points, K categories, A=4 area ranges, M=3 max detections).

What it reproduces from ``cocoeval.py`` (bbox, ``useCats=1``, default ``Params``):

- per (image, category): detections sorted by score (stable, as ``np.argsort(-s, kind='mergesort')``) and cut to
  the 100 best; ground truth is "ignored" for an area range when crowd or when its ``area`` is outside the range;
- IoU as ``maskUtils.iou`` on xywh boxes in float64 (no +1; a crowd box's union is the detection's area);
- greedy matching in score order at each IoU threshold: a detection takes the unmatched non-ignored ground truth of
  highest IoU >= ``min(t, 1 - 1e-10)`` (the last one in annotation order on ties, as pycocotools' scan keeps it),
  else the same among ignored ones (crowd boxes stay available); matching an ignored box ignores the detection,
  as does being unmatched with an area outside the range; a match to annotation id 0 counts as unmatched;
- accumulation per (category, area, max detections) over images in image-id order, detections sorted by score
  (stable), precision made monotone from the right and read at ``searchsorted(recall, recThrs, 'left')``.

Detections come as ``(n, 6)`` rows ``[x1, y1, x2, y2, score, class]`` (category id = class + 1), converted to xywh
in float64 as ``coco_results`` does; classes without a category are dropped, as ``COCOeval`` drops them.
"""

from __future__ import annotations

import numpy as np
import torch

# pycocotools' Params.setDetParams, value for value (tests check them against it).
IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)
RECALL_THRESHOLDS = np.linspace(0.0, 1.0, 101)
MAX_DETS = (1, 10, 100)
AREA_RANGES = ((0.0, 1e5**2), (0.0, 32.0**2), (32.0**2, 96.0**2), (96.0**2, 1e5**2))
AREA_LABELS = ("all", "small", "medium", "large")
# The stats that ``evaluate(..., headline=True)`` computes (area "all", 100 detections): mAP50-95, mAP50, mAP75,
# AR100 (indices into the 12 ``stats``); the others come back -1.
HEADLINE_STATS = (0, 1, 2, 8)
# Elements of one (groups, areas, thresholds, ground truths) matching state: bounds memory per chunk of groups.
CHUNK_ELEMENTS = 1 << 22


def _runs(sorted_keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Unique keys, their counts and each element's rank within its run of a sorted key tensor."""
    keys, counts = torch.unique_consecutive(sorted_keys, return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(sorted_keys.numel(), device=sorted_keys.device) - starts.repeat_interleave(counts)
    return keys, counts, rank


def box_iou_xywh(dt: torch.Tensor, gt: torch.Tensor, gt_crowd: torch.Tensor) -> torch.Tensor:
    """IoU ``(B, D, G)`` of ``(B, D, 4)`` and ``(B, G, 4)`` xywh float64 boxes with ``maskUtils.iou``'s arithmetic."""
    dx, dy, dw, dh = dt.unbind(-1)
    gx, gy, gw, gh = gt.unbind(-1)
    w = torch.minimum((dw + dx)[:, :, None], (gw + gx)[:, None, :]) - torch.maximum(dx[:, :, None], gx[:, None, :])
    h = torch.minimum((dh + dy)[:, :, None], (gh + gy)[:, None, :]) - torch.maximum(dy[:, :, None], gy[:, None, :])
    inter = w * h
    det_area, gt_area = (dw * dh)[:, :, None], (gw * gh)[:, None, :]
    union = torch.where(gt_crowd[:, None, :], det_area, det_area + gt_area - inter)
    return torch.where((w > 0) & (h > 0), inter / union, torch.zeros_like(inter))


def greedy_match(iou: torch.Tensor, gt_ignore: torch.Tensor, gt_crowd: torch.Tensor, gt_real: torch.Tensor,
                 thresholds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """pycocotools' matching of B (image, category) groups, all area ranges and thresholds (>= 0.5) at once.

    ``iou``: (B, D, G), detections in score order, -1 for padding; ``gt_ignore``: (B, A, G); ``gt_crowd``,
    ``gt_real`` (annotation id != 0): (B, G). Returns ``matched`` (to a real id) and ``on_ignored`` (matched to an
    ignored box), both (B, A, T, D).
    """
    num_groups, num_dets, num_gts = iou.shape
    shape = (num_groups, gt_ignore.shape[1], thresholds.numel())
    above = iou[:, None] >= thresholds.clamp(max=1 - 1e-10)[None, :, None, None]  # (B, T, D, G)
    # only detections with IoU >= the lowest threshold can match: loop over those alone, in score order
    candidate = above[:, 0].any(-1)
    order = torch.argsort((~candidate).to(torch.uint8), dim=1, stable=True)
    width = int(candidate.sum(1).max()) if num_groups else 0
    order = order[:, :width]
    above = above.gather(2, order[:, None, :, None].expand(-1, shape[2], -1, num_gts))
    iou = iou.gather(1, order[:, :, None].expand(-1, -1, num_gts))
    # one key ranks regular boxes above ignored ones: iou - 1 is exact for iou in [0.5, 1] (Sterbenz), so each
    # kind keeps its IoU order and ties
    key = torch.where(gt_ignore[:, :, None, :], iou[:, None] - 1, iou[:, None])  # (B, A, width, G)
    matched = torch.zeros(*shape, width, dtype=torch.bool, device=iou.device)
    on_ignored = torch.zeros_like(matched)
    available = torch.ones(*shape, num_gts, dtype=torch.bool, device=iou.device)
    reusable = gt_crowd[:, None, None, :]
    real = None if bool(gt_real.all()) else gt_real[:, None, None, :].expand(*shape, num_gts)
    slots = torch.arange(1, num_gts + 1, device=iou.device)
    for d in range(width):  # detections in score order: each one sees what the better ones took
        ranked = torch.where(above[:, None, :, d] & available, key[:, :, None, d], -2.0)
        best = ranked.amax(-1, keepdim=True)
        chosen = ((ranked == best) * slots).amax(-1, keepdim=True)  # the last box on ties, as pycocotools' scan
        found = best > -2.0
        available &= (slots != chosen) | ~found | reusable
        matched[..., d] = (found if real is None else found & real.gather(-1, chosen - 1))[..., 0]
        on_ignored[..., d] = (found & (best <= 0.0))[..., 0]
    full_matched = torch.zeros(*shape, num_dets, dtype=torch.bool, device=iou.device)
    full_ignored = torch.zeros_like(full_matched)
    index = order[:, None, None, :].expand(*shape, width)
    return full_matched.scatter_(-1, index, matched), full_ignored.scatter_(-1, index, on_ignored)


class FastCocoEval:
    """pycocotools' bbox ``COCOeval`` on a COCO ``instances`` dict, prepared once and run on many prediction sets.

    ``evaluate(predictions)`` returns ``(stats (12,), precision (T, R, K, A, M))`` as numpy float64 arrays, as
    ``COCOeval.stats`` and ``COCOeval.eval["precision"]``.
    """

    def __init__(self, ground_truth: dict, device: str | torch.device = "cpu", chunk_elements: int = CHUNK_ELEMENTS):
        self.device = torch.device(device)
        self.chunk_elements = chunk_elements
        self.image_ids = torch.tensor(sorted({image["id"] for image in ground_truth["images"]}), dtype=torch.int64,
                                      device=self.device)
        self.category_ids = torch.tensor(sorted({c["id"] for c in ground_truth["categories"]}), dtype=torch.int64,
                                         device=self.device)
        self.thresholds = torch.from_numpy(IOU_THRESHOLDS).to(self.device)
        self.recall_thresholds = torch.from_numpy(RECALL_THRESHOLDS).to(self.device)
        self.area_ranges = torch.tensor(AREA_RANGES, dtype=torch.float64, device=self.device)
        self._prepare_ground_truth(ground_truth["annotations"])

    @property
    def num_categories(self) -> int:
        return self.category_ids.numel()

    def _group_keys(self, image_ids: torch.Tensor, category_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Key image_index * K + category_index of each row and whether its category is evaluated."""
        image_index = torch.searchsorted(self.image_ids, image_ids).clamp(max=self.image_ids.numel() - 1)
        if not torch.equal(self.image_ids[image_index], image_ids):
            unknown = image_ids[self.image_ids[image_index] != image_ids].unique()[:10].tolist()
            raise ValueError(f"image ids not in the ground truth images: {unknown}")
        category_index = torch.searchsorted(self.category_ids, category_ids).clamp(max=self.num_categories - 1)
        known = self.category_ids[category_index] == category_ids
        return image_index * self.num_categories + category_index, known

    def _prepare_ground_truth(self, annotations: list[dict]) -> None:
        boxes = torch.tensor([ann["bbox"] for ann in annotations], dtype=torch.float64).reshape(-1, 4)
        area = torch.tensor([ann["area"] for ann in annotations], dtype=torch.float64)
        crowd = torch.tensor([bool(ann.get("iscrowd", 0)) for ann in annotations], dtype=torch.bool)
        real = torch.tensor([ann["id"] != 0 for ann in annotations], dtype=torch.bool)
        keys, known = self._group_keys(
            torch.tensor([ann["image_id"] for ann in annotations], dtype=torch.int64, device=self.device),
            torch.tensor([ann["category_id"] for ann in annotations], dtype=torch.int64, device=self.device))
        keys, known = keys.cpu(), known.cpu()
        keys, order = keys[known].sort(stable=True)  # annotation order within a group, as pycocotools' lists
        index = known.nonzero()[:, 0][order]
        device = self.device
        self.gt_boxes, self.gt_crowd, self.gt_real = boxes[index].to(device), crowd[index].to(device), \
            real[index].to(device)
        self.gt_keys = keys.to(device)
        area = area[index].to(device)
        low, high = self.area_ranges[:, 0], self.area_ranges[:, 1]
        self.gt_ignore = self.gt_crowd[:, None] | (area[:, None] < low) | (area[:, None] > high)  # (N, A)
        group_keys, group_counts, _ = _runs(keys)
        self.group_keys, self.group_counts = group_keys.to(device), group_counts.to(device)
        category = self.gt_keys % self.num_categories
        # (K, A) ground truths that count, pycocotools' npig
        self.num_positive = torch.zeros(self.num_categories, len(AREA_RANGES), dtype=torch.float64, device=device)
        self.num_positive.index_add_(0, category, (~self.gt_ignore).double())

    def evaluate(self, predictions: dict[int, torch.Tensor],
                 headline: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``predictions``: image id -> ``(n, 6)`` ``[x1, y1, x2, y2, score, class]`` in pixels. ``headline``:
        only area "all" at 100 detections (``HEADLINE_STATS``, per-class AP; about a third of the work, what a
        training epoch logs); the other precision and recall entries, and stats, are -1."""
        matched, ignored, key, score, rank = self._match(predictions, 1 if headline else len(AREA_RANGES))
        max_dets = MAX_DETS[-1:] if headline else MAX_DETS
        precision, recall = self._accumulate(matched, ignored, key, score, rank, max_dets)
        return summarize(precision, recall), precision

    def _detections(self, predictions: dict[int, torch.Tensor]):
        """Detections sorted by (group, score desc, input order), the best 100 of each group: xywh, area, key,
        score, rank in group."""
        rows = [det.reshape(-1, 6) for det in predictions.values()]
        det = torch.cat(rows).to(self.device, torch.float64) if rows else torch.zeros(0, 6, dtype=torch.float64,
                                                                                        device=self.device)
        image_ids = torch.tensor(list(predictions), dtype=torch.int64).repeat_interleave(
            torch.tensor([len(r) for r in rows], dtype=torch.int64)).to(self.device)
        key, known = self._group_keys(image_ids, det[:, 5].long() + 1)
        key, det = key[known], det[known]
        score = det[:, 4]
        by_score = torch.argsort(-score, stable=True)
        order = by_score[torch.argsort(key[by_score], stable=True)]
        det, key, score = det[order], key[order], score[order]
        _, _, rank = _runs(key)
        keep = rank < MAX_DETS[-1]
        det, key, score, rank = det[keep], key[keep], score[keep], rank[keep]
        xywh = torch.cat((det[:, :2], det[:, 2:4] - det[:, :2]), dim=1)  # coco_results' float64 subtraction
        return xywh, xywh[:, 2] * xywh[:, 3], key, score, rank

    def _match(self, predictions: dict[int, torch.Tensor], num_areas: int = len(AREA_RANGES)):
        """Per detection and (area, threshold): matched to a real ground truth, and ignored; both (N, A, T), for
        the first ``num_areas`` area ranges."""
        xywh, area, key, score, rank = self._detections(predictions)
        num_thresholds = self.thresholds.numel()
        ranges, gt_ignore_all = self.area_ranges[:num_areas], self.gt_ignore[:, :num_areas]
        outside = (area[:, None] < ranges[:, 0]) | (area[:, None] > ranges[:, 1])
        matched = torch.zeros(key.numel(), num_areas, num_thresholds, dtype=torch.bool, device=self.device)
        ignored = torch.zeros_like(matched)
        det_groups, det_counts, _ = _runs(key)
        # groups with both detections and ground truth need matching; the others' detections are all unmatched
        position = torch.searchsorted(self.group_keys, det_groups).clamp(max=max(self.group_keys.numel() - 1, 0))
        both = (self.group_keys[position] == det_groups) if self.group_keys.numel() else \
            torch.zeros_like(det_groups, dtype=torch.bool)
        det_starts = torch.cumsum(det_counts, 0) - det_counts
        gt_starts = torch.cumsum(self.group_counts, 0) - self.group_counts
        det_start, det_count = det_starts[both], det_counts[both]
        gt_start, gt_count = gt_starts[position[both]], self.group_counts[position[both]]
        single = gt_count == 1  # most groups: matched in closed form, without the loop over detections
        self._match_single(xywh, det_start[single], det_count[single], gt_start[single], gt_ignore_all, matched,
                           ignored)
        det_start, det_count, gt_start, gt_count = (t[~single] for t in (det_start, det_count, gt_start, gt_count))
        by_size = torch.argsort(det_count * (int(self.group_counts.max()) + 1 if gt_count.numel() else 1) + gt_count)
        det_start, det_count, gt_start, gt_count = (t[by_size] for t in (det_start, det_count, gt_start, gt_count))
        for begin, end in self._chunks(det_count.tolist(), gt_count.tolist(), num_areas * num_thresholds):
            rows = self._padded(det_start[begin:end], det_count[begin:end])
            gts = self._padded(gt_start[begin:end], gt_count[begin:end])
            det_valid, gt_valid = rows >= 0, gts >= 0
            iou = box_iou_xywh(xywh[rows.clamp(min=0)], self.gt_boxes[gts.clamp(min=0)],
                               self.gt_crowd[gts.clamp(min=0)])
            iou = iou.masked_fill(~(det_valid[:, :, None] & gt_valid[:, None, :]), -1.0)
            gt_ignore = gt_ignore_all[gts.clamp(min=0)].transpose(1, 2)  # (B, A, G)
            chunk_matched, chunk_ignored = greedy_match(iou, gt_ignore, self.gt_crowd[gts.clamp(min=0)] & gt_valid,
                                                        self.gt_real[gts.clamp(min=0)], self.thresholds)
            index = rows[det_valid]
            matched[index] = chunk_matched.permute(0, 3, 1, 2)[det_valid]
            ignored[index] = chunk_ignored.permute(0, 3, 1, 2)[det_valid]
        ignored |= ~matched & outside[:, :, None]
        return matched, ignored, key, score, rank

    def _match_single(self, xywh: torch.Tensor, det_start: torch.Tensor, det_count: torch.Tensor,
                      gt_start: torch.Tensor, gt_ignore: torch.Tensor, matched: torch.Tensor,
                      ignored: torch.Tensor) -> None:
        """``greedy_match`` for groups of one ground truth, written into ``matched`` and ``ignored`` (N, A, T).

        The first detection (in score order) with IoU >= threshold takes the box, or every such detection when it
        is a crowd box (reusable); taking an ignored box ignores the detection.
        """
        group_start = torch.repeat_interleave(torch.cumsum(det_count, 0) - det_count, det_count)  # within rows
        rows = torch.repeat_interleave(det_start, det_count) + torch.arange(group_start.numel(),
                                                                             device=self.device) - group_start
        gt = torch.repeat_interleave(gt_start, det_count)
        crowd = self.gt_crowd[gt]
        iou = box_iou_xywh(xywh[rows][:, None], self.gt_boxes[gt][:, None], crowd[:, None])[:, 0, 0]
        allowed = iou[:, None] >= self.thresholds.clamp(max=1 - 1e-10)  # (n, T)
        # rank of each allowed detection among its group's: cumsum minus the count before the group
        total = torch.cumsum(allowed, 0, dtype=torch.int32)
        before = torch.where(group_start[:, None] > 0, total[(group_start - 1).clamp(min=0)], 0)
        found = allowed & (crowd[:, None] | (total - before == 1))
        matched[rows] = (found & self.gt_real[gt][:, None])[:, None, :]
        ignored[rows] = found[:, None, :] & gt_ignore[gt][:, :, None]

    def _chunks(self, det_count: list[int], gt_count: list[int], per_pair: int):
        """Ranges of groups (sorted by size) whose padded matching state fits ``chunk_elements``."""
        begin, num = 0, len(det_count)
        while begin < num:
            end, widest = begin, 1
            while end < num:
                widest_next = max(widest, gt_count[end], det_count[end])
                if end > begin and (end + 1 - begin) * widest_next * per_pair > self.chunk_elements:
                    break
                widest, end = widest_next, end + 1
            yield begin, end
            begin = end

    def _padded(self, start: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        """(B, max count) row indices start + j, -1 beyond each count."""
        width = int(count.max()) if count.numel() else 0
        j = torch.arange(width, device=self.device)
        return torch.where(j < count[:, None], start[:, None] + j, -1)

    def _accumulate(self, matched: torch.Tensor, ignored: torch.Tensor, key: torch.Tensor, score: torch.Tensor,
                    rank: torch.Tensor, max_dets: tuple[int, ...] = MAX_DETS) -> tuple[np.ndarray, np.ndarray]:
        """pycocotools' ``accumulate``: precision (T, R, K, A, M) and recall (T, K, A, M), -1 where no ground truth
        and for the areas that ``matched`` leaves out (it holds the first ones) and the max detections not in
        ``max_dets``."""
        num_k, num_t, num_r = self.num_categories, self.thresholds.numel(), self.recall_thresholds.numel()
        num_a = matched.shape[1]
        precision = -torch.ones(num_t, num_r, num_k, len(AREA_RANGES), len(MAX_DETS), dtype=torch.float64,
                                device=self.device)
        recall = -torch.ones(num_t, num_k, len(AREA_RANGES), len(MAX_DETS), dtype=torch.float64, device=self.device)
        num_positive = self.num_positive[:, :num_a]
        category = key % num_k
        # rows are in (image, category, rank) order: stable sorts give (category, score desc, image, rank)
        by_score = torch.argsort(-score, stable=True)
        order = by_score[torch.argsort(category[by_score], stable=True)]
        true_pos, counted = matched & ~ignored, ~ignored
        present = num_positive > 0  # (K, A)
        column = torch.arange(num_a * num_t, device=self.device)
        for max_det in max_dets:
            m = MAX_DETS.index(max_det)
            index = order if max_det >= MAX_DETS[-1] else order[rank[order] < max_det]  # rank < 100 already
            cat = category[index]
            counts = torch.bincount(cat, minlength=num_k)
            segment_end = torch.cumsum(counts, 0)
            tp_flags = true_pos[index].flatten(1)  # (n, A * T)
            tp_sum = _SegmentCumsum(tp_flags, segment_end)
            counted_sum = _SegmentCumsum(counted[index].flatten(1), segment_end)
            # precision only rises at a true positive (elsewhere recall stays and precision falls), so the other
            # rows never hold a recall bucket's maximum
            row, col = tp_flags.nonzero(as_tuple=True)
            tp, num = tp_sum.at(row, col), counted_sum.at(row, col)  # num = tp + fp
            k, a = cat[row], col // num_t
            rc = tp / num_positive[k, a]
            pr = tp / (num + np.spacing(1))
            # q[r] = max precision over detections with recall >= recThrs[r] (= pr at searchsorted, made monotone
            # from the right)
            bucket = torch.searchsorted(self.recall_thresholds, rc.nan_to_num(0.0), right=True) - 1
            q = torch.zeros(num_k * num_a * num_t * num_r, dtype=torch.float64, device=self.device)
            q.scatter_reduce_(0, (k * (num_a * num_t) + col) * num_r + bucket, pr, reduce="amax")
            q = q.view(num_k, num_a, num_t, num_r).flip(-1).cummax(-1).values.flip(-1)
            precision[:, :, :, :num_a, m] = torch.where(present[:, :, None, None], q, -1.0).permute(2, 3, 0, 1)
            has_dets = counts > 0
            total = torch.zeros(num_k, num_a * num_t, dtype=torch.float64, device=self.device)
            ends = segment_end[has_dets] - 1
            total[has_dets] = tp_sum.at(ends[:, None], column)
            rc_total = total.view(num_k, num_a, num_t) / num_positive[:, :, None]
            recall[:, :, :num_a, m] = torch.where(present[:, :, None], rc_total, -1.0).permute(2, 0, 1)
        return precision.cpu().numpy(), recall.cpu().numpy()


class _SegmentCumsum:
    """Cumulative counts of flags (N, C) within contiguous row segments, read at chosen elements only."""

    def __init__(self, flags: torch.Tensor, segment_end: torch.Tensor):
        # int32 along the last dimension of the transpose: 6x faster on the CPU than float64 along dim 0
        self.total = torch.cumsum(flags.T.contiguous(), 1, dtype=torch.int32)  # (C, N)
        counts = torch.diff(segment_end, prepend=segment_end.new_zeros(1))
        self.segment_start = torch.repeat_interleave(segment_end - counts, counts)

    def at(self, row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
        """float64 counts at (row, col) since the start of the row's segment."""
        start = self.segment_start[row]
        before = torch.where(start > 0, self.total[col, (start - 1).clamp(min=0)], 0)
        return (self.total[col, row] - before).double()


def summarize(precision: np.ndarray, recall: np.ndarray) -> np.ndarray:
    """``COCOeval.summarize``'s 12 stats: means over entries > -1, -1 when there are none."""
    def mean(values: np.ndarray) -> float:
        values = values[values > -1]
        return float(np.mean(values)) if values.size else -1.0

    def ap(iou: float | None = None, area: str = "all", max_det: int = 100) -> float:
        s = precision if iou is None else precision[np.where(iou == IOU_THRESHOLDS)[0]]
        return mean(s[:, :, :, AREA_LABELS.index(area), MAX_DETS.index(max_det)])

    def ar(area: str = "all", max_det: int = 100) -> float:
        return mean(recall[:, :, AREA_LABELS.index(area), MAX_DETS.index(max_det)])

    return np.array([ap(), ap(iou=0.5), ap(iou=0.75), ap(area="small"), ap(area="medium"), ap(area="large"),
                     ar(max_det=1), ar(max_det=10), ar(), ar("small"), ar("medium"), ar("large")])
