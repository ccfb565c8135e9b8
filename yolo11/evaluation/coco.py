"""COCO metrics from a dataset in the Hub detection schema: our vectorised torch evaluator (``fast``, the same
numbers as pycocotools, see ``yolo11.evaluation.fast_coco``), pycocotools itself or faster-coco-eval.

Ground truth conventions (they matter to pycocotools):

- annotation ids start at 1: pycocotools treats a ground-truth ``id`` of 0 as "unmatched", so a perfect
  prediction of the annotation with id 0 would count as a false positive;
- category id = class index + 1 (the COCO convention of ids from 1; the same as
  ``shared/data/reference/coco128_instances.json``);
- ``iscrowd`` 0 and ``area`` = w * h of the xywh box, so the small/medium/large split uses box areas.

Predictions are ``(n, 6)`` rows ``[x1, y1, x2, y2, score, class]`` in original image pixels.
"""

from __future__ import annotations

import contextlib
import io
from typing import Literal

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list

from yolo11.evaluation import matching
from yolo11.evaluation.fast_coco import HEADLINE_STATS, FastCocoEval

STAT_NAMES = ("map50_95", "map50", "map75", "map_small", "map_medium", "map_large",
              "ar1", "ar10", "ar100", "ar_small", "ar_medium", "ar_large")
Library = Literal["pycocotools", "faster_coco_eval"]
Backend = Literal["fast", "pycocotools", "faster_coco_eval"]
BACKENDS = ("fast", "pycocotools", "faster_coco_eval")


# The fast backend moves to the GPU from this many validation images. Below, its many small kernels cost more in
# launches than the CPU takes (5000 images x 300 detections: 3.88 s on an H200 against 4.92 s on 16 CPU threads,
# benchmarks/RESULTS.md; the numbers are the same on both).
GPU_EVALUATION_MIN_IMAGES = 1000
# Below that, scoring runs on one CPU thread: its ops take a few hundred microseconds each, and waking torch's
# intra-op threads (one per core) for them costs more than they save (128 images x 300 detections: 60 ms on one
# thread, 77 ms on two, on 2 cores; a GPU run's 16-core host took 145 ms for a trained model's 128 images on all
# its threads; benchmarks/RESULTS.md).
SCORING_THREADS = 1


def evaluation_device(device: torch.device, num_images: int) -> torch.device:
    """Where the fast backend scores ``num_images`` images when the model runs on ``device``."""
    use_gpu = device.type == "cuda" and num_images >= GPU_EVALUATION_MIN_IMAGES
    return device if use_gpu else torch.device("cpu")


def coco_ground_truth(dataset, class_names: list[str]) -> dict:
    """COCO ``instances`` dict of a ``datasets.Dataset`` in the Hub schema (images are not decoded)."""
    columns = dataset.select_columns(["image_id", "width", "height", "objects"])
    images, annotations = [], []
    for row in columns:
        image_id = int(row["image_id"])
        images.append({"id": image_id, "width": int(row["width"]), "height": int(row["height"])})
        for bbox, category in zip(row["objects"]["bbox"], row["objects"]["category"], strict=True):
            x, y, w, h = (float(v) for v in bbox)
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": int(category) + 1,
                                "bbox": [x, y, w, h], "area": w * h, "iscrowd": 0})
    categories = [{"id": i + 1, "name": name} for i, name in enumerate(class_names)]
    return {"images": images, "annotations": annotations, "categories": categories}


def _coco_api(backend: Library):
    if backend == "pycocotools":
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
        return COCO, COCOeval
    if backend == "faster_coco_eval":
        from faster_coco_eval import COCO, COCOeval_faster
        return COCO, COCOeval_faster
    raise ValueError(f"unknown COCO library {backend!r}: expected 'pycocotools' or 'faster_coco_eval'")


def coco_results(predictions: dict[int, torch.Tensor]) -> list[dict]:
    """COCO result dicts (xywh boxes, category = class + 1) of per-image ``(n, 6)`` predictions."""
    results = []
    for image_id, det in predictions.items():
        det = det.detach().double().cpu().numpy()
        xywh = np.concatenate((det[:, :2], det[:, 2:4] - det[:, :2]), axis=1)
        for box, score, cls in zip(xywh.tolist(), det[:, 4].tolist(), det[:, 5].tolist(), strict=True):
            results.append({"image_id": image_id, "category_id": int(cls) + 1, "bbox": box, "score": score})
    return results


def run_cocoeval(ground_truth: dict, results: list[dict], backend: Library = "pycocotools") -> tuple[np.ndarray,
                                                                                                      np.ndarray]:
    """COCOeval on bbox: the 12 ``stats`` and the ``precision`` array (T=10 IoUs, R=101 recalls, K, A=4, M=3).

    ``results`` may be empty: ``COCO.loadRes([])`` raises, so zeros come back instead.
    """
    num_classes = len(ground_truth["categories"])
    if not results:
        return np.zeros(12), -np.ones((10, 101, num_classes, 4, 3))
    coco_cls, eval_cls = _coco_api(backend)
    with contextlib.redirect_stdout(io.StringIO()):  # both libraries print progress lines
        gt = coco_cls()
        gt.dataset = {k: list(v) for k, v in ground_truth.items()}
        gt.createIndex()
        dt = gt.loadRes([dict(r) for r in results])  # loadRes mutates its dicts: give it copies
        evaluator = eval_cls(gt, dt, iouType="bbox")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return np.asarray(evaluator.stats[:12], dtype=float), np.asarray(evaluator.eval["precision"])


def _per_class_ap(precision: np.ndarray) -> tuple[list[float | None], list[float | None]]:
    """AP50-95 and AP50 per class (area all, 100 detections); None for classes without ground truth."""
    ap50_95, ap50 = [], []
    for k in range(precision.shape[2]):
        all_iou, at_50 = precision[:, :, k, 0, -1], precision[0, :, k, 0, -1]
        ap50_95.append(float(all_iou[all_iou > -1].mean()) if (all_iou > -1).any() else None)
        ap50.append(float(at_50[at_50 > -1].mean()) if (at_50 > -1).any() else None)
    return ap50_95, ap50


class CocoEvaluator:
    """Accumulates predictions per image and computes COCO metrics plus Ultralytics' P/R, PR curve and confusion
    matrix. ``backend``: ``fast`` (``FastCocoEval``, pycocotools' numbers), ``pycocotools`` or ``faster_coco_eval``.

    ``compute`` returns (JSON-serialisable):
      - the 12 COCO stats under ``STAT_NAMES`` (``map50_95``, ``map50``, ...);
      - ``per_class_ap50_95``, ``per_class_ap50``: lists of length nc (None where a class has no ground truth);
      - ``precision``, ``recall``, ``f1_confidence``: Ultralytics' ``metrics/precision(B)``/``recall(B)``
        (see ``yolo11.evaluation.matching``), and ``per_class_precision``/``per_class_recall`` at the same
        confidence (lists of length nc, None where a class has no ground truth);
      - ``pr_curve``: ``{"recall": (1000,), "precision": (K, 1000), "classes": (K,)}`` at IoU 0.5 for the K classes
        present; ``conf_curve``: ``{"confidence": (1000,), "precision": (K, 1000), "recall": (K, 1000), "classes"}``
        against the score threshold (the F1/P/R curves); ``confusion_matrix``: ``(nc + 1, nc + 1)`` counts, rows
        predicted, columns true, last = background. These three, the data of the plots, only when ``compute`` is
        asked for them (``plot_data``).
    """

    def __init__(self, dataset, class_names: list[str], backend: Backend = "fast",
                 device: str | torch.device = "cpu"):
        """``device`` is where the ``fast`` backend computes (a CUDA device takes seconds off each epoch)."""
        if backend not in BACKENDS:
            raise ValueError(f"unknown COCO backend {backend!r}: expected one of {BACKENDS}")
        if backend != "fast":
            _coco_api(backend)  # fail now when the library is not installed
        self.class_names = list(class_names)
        self.backend = backend
        self.ground_truth = coco_ground_truth(dataset, self.class_names)
        self._fast = FastCocoEval(self.ground_truth, device) if backend == "fast" else None
        self._image_ids, self._gt_boxes = _ground_truth_boxes(self.ground_truth)
        self._predictions: dict[int, torch.Tensor] = {}

    def reset(self) -> None:
        self._predictions = {}

    def update(self, predictions: list[torch.Tensor], image_ids: list[int]) -> None:
        """Add ``(n, 6)`` predictions in original pixels of the images ``image_ids`` (a later update replaces)."""
        for det, image_id in zip(predictions, image_ids, strict=True):
            self._predictions[int(image_id)] = det.detach().float().cpu()

    def compute(self, predictions: list[tuple[int, torch.Tensor]] | None = None,
                accelerator: Accelerator | None = None, plot_data: bool = True, all_stats: bool = True) -> dict:
        """Metrics of ``predictions`` ((image_id, (n, 6)) pairs, e.g. from ``gather_predictions``), or, when it is
        None, of what ``update`` collected since the last ``reset``. Images without predictions count as misses.
        ``plot_data``: also ``pr_curve`` and ``confusion_matrix`` (tens of ms on a small validation set with
        300 detections per image; training validates every epoch and plots once, as Ultralytics). ``all_stats``
        False: the fast backend computes the area-"all", 100-detection stats only (``HEADLINE_STATS``: mAP50-95,
        mAP50, mAP75, AR100, and the per-class APs), about a third of its work, and the dict has no other stats.

        With an ``accelerator``, only the main process computes and every rank gets the same dict back; the other
        ranks' own predictions are ignored, so gather them first.
        """
        if predictions is not None:  # one evaluator serves every epoch: start from nothing
            self.reset()
            self.update([det for _, det in predictions], [image_id for image_id, _ in predictions])
        if accelerator is None or accelerator.num_processes == 1:
            return self._scored(plot_data, all_stats)
        payload = [self._scored(plot_data, all_stats) if accelerator.is_main_process else None]
        broadcast_object_list(payload, from_process=0)
        return payload[0]

    def _scored(self, plot_data: bool, all_stats: bool) -> dict:
        """``_compute`` on ``SCORING_THREADS`` torch threads for a small set (restored after)."""
        threads = torch.get_num_threads()
        if len(self._image_ids) >= GPU_EVALUATION_MIN_IMAGES or threads <= SCORING_THREADS:
            return self._compute(plot_data, all_stats)
        torch.set_num_threads(SCORING_THREADS)
        try:
            return self._compute(plot_data, all_stats)
        finally:
            torch.set_num_threads(threads)

    def _compute(self, plot_data: bool, all_stats: bool = True) -> dict:
        known = set(self._image_ids)
        unknown = set(self._predictions) - known
        if unknown:  # pycocotools asserts on these; say which
            raise ValueError(f"predictions for image ids not in the ground truth: {sorted(unknown)[:10]}")
        if not any(len(det) for det in self._predictions.values()):  # run_cocoeval's convention, for every backend
            stats, precision = np.zeros(12), -np.ones((10, 101, len(self.class_names), 4, 3))
        elif self._fast is not None:
            stats, precision = self._fast.evaluate(self._predictions, headline=not all_stats)
        else:
            stats, precision = run_cocoeval(self.ground_truth, coco_results(self._predictions), self.backend)
            all_stats = True  # computed anyway
        kept = range(len(STAT_NAMES)) if all_stats else HEADLINE_STATS
        metrics: dict = {STAT_NAMES[i]: float(stats[i]) for i in kept}
        metrics["per_class_ap50_95"], metrics["per_class_ap50"] = _per_class_ap(precision)
        metrics.update(self._matching_metrics(plot_data))
        return metrics

    def _matching_metrics(self, plot_data: bool) -> dict:
        gt = self._gt_boxes
        rows = [self._predictions.get(image_id) for image_id in self._image_ids]
        counts = [0 if det is None else len(det) for det in rows]
        det = torch.cat([det.reshape(-1, 6) for det in rows if det is not None] + [torch.zeros(0, 6)]).double().numpy()
        pred = matching.Boxes(np.repeat(np.arange(len(rows)), counts), det[:, :4], det[:, 5].astype(int), det[:, 4])
        correct = matching.match_predictions(pred, gt)
        curves = matching.class_curves(correct, pred.scores, pred.classes, gt.classes, pr_curve=plot_data)
        precision, recall, confidence = matching.best_f1_precision_recall(curves)
        class_precision, class_recall = matching.per_class_precision_recall(curves, len(self.class_names))
        metrics = {"precision": precision, "recall": recall, "f1_confidence": confidence,
                   "per_class_precision": class_precision, "per_class_recall": class_recall}
        if plot_data:
            confusion = matching.confusion_matrix(pred, gt, len(self.class_names))
            metrics["pr_curve"] = {"recall": matching.CONFIDENCE_GRID.tolist(),
                                   "precision": curves.pr_precision.tolist(), "classes": curves.classes.tolist()}
            metrics["conf_curve"] = {"confidence": matching.CONFIDENCE_GRID.tolist(),
                                     "precision": curves.precision.tolist(), "recall": curves.recall.tolist(),
                                     "classes": curves.classes.tolist()}
            metrics["confusion_matrix"] = confusion.tolist()
        return metrics


def _ground_truth_boxes(ground_truth: dict) -> tuple[list[int], matching.Boxes]:
    """Image ids in ``images`` order and the boxes of all of them (image index into that list, xyxy float64)."""
    image_ids = [image["id"] for image in ground_truth["images"]]
    index = {image_id: i for i, image_id in enumerate(image_ids)}
    annotations = ground_truth["annotations"]
    # images in order, annotations in order within an image, as a per-image loop would see them
    order = sorted(range(len(annotations)), key=lambda j: index[annotations[j]["image_id"]])
    image = np.array([index[annotations[j]["image_id"]] for j in order], dtype=np.int64)
    xywh = np.array([annotations[j]["bbox"] for j in order], dtype=np.float64).reshape(-1, 4)
    classes = np.array([annotations[j]["category_id"] - 1 for j in order], dtype=np.int64)
    return image_ids, matching.Boxes(image, np.concatenate((xywh[:, :2], xywh[:, :2] + xywh[:, 2:]), 1), classes)


def gather_predictions(accelerator: Accelerator,
                       per_image: list[tuple[int, torch.Tensor]]) -> list[tuple[int, torch.Tensor]]:
    """All ranks' ``(image_id, (n, 6))`` pairs on every rank, each image once, tensors on the CPU.

    ``gather_for_metrics(..., use_gather_object=True)`` trims the samples that ``even_batches`` duplicated only when
    called on the last batch inside the loop; called once after the loop (one collective per evaluation instead of
    one per batch) it returns everything, and the duplicates, which repeat the first images of the dataset, are
    dropped here by image id. Image ids must therefore be unique in the dataset (they are in the Hub schema).
    """
    local = [(int(image_id), det.detach().cpu()) for image_id, det in per_image]
    gathered = accelerator.gather_for_metrics(local, use_gather_object=True) if accelerator.num_processes > 1 \
        else local
    unique: dict[int, torch.Tensor] = {}
    for image_id, det in gathered:
        unique.setdefault(image_id, det)
    return list(unique.items())
