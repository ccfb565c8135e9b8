"""The predict-and-score loop that training's validation (``engine/evaluate.py``) and ``yolo11-val`` both run."""

from __future__ import annotations

import collections
import contextlib
import functools
import sys
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass

import torch
from accelerate import Accelerator
from torch import nn
from tqdm import tqdm

from yolo11.data import model_input
from yolo11.evaluation.coco import CocoEvaluator, gather_predictions
from yolo11.postprocess import Postprocessor, to_original_pixels

# NMS candidates that a validation's deferred suppressions may hold at once (~28 bytes each: ~110 MB)
DEFERRED_CANDIDATES = 1 << 22


class ValidationStopped(Exception):
    """A stop request cut the validation short (on every process alike); no metrics."""


@dataclass
class EvaluationResult:
    metrics: dict  # COCO stats, per-class AP, precision/recall; identical on every process
    predictions: list[tuple[int, torch.Tensor]]  # every process's (image_id, (n, 6) original pixels), each image once
    losses: torch.Tensor | None  # (3,) box, cls, dfl averaged over all processes' batches; None without a criterion
    samples: list[dict]  # up to `num_samples` images of this process with predictions and targets (CPU)
    score_seconds: float = 0.0  # of the evaluator's ``compute``: the part of a validation that is not the model's
    data_seconds: float = 0.0  # waiting for the loader's batches (set by the training run's ``Validator``)


@torch.no_grad()
def predict_and_score(
    accelerator: Accelerator,
    model: nn.Module,
    loader,
    postprocessor: Postprocessor,
    evaluator: CocoEvaluator,
    *,
    criterion: nn.Module | None = None,
    channels_last: bool = False,
    num_samples: int = 0,
    batches: int | None = None,
    plot_data: bool = True,
    all_stats: bool = True,
    step: Callable | None = None,
    stop: Callable[[], bool] | None = None,
    scoring: Executor | None = None,
) -> EvaluationResult | Future[EvaluationResult]:
    """Run ``model`` in eval mode over ``loader`` (this process's batches on its device: a prepared loader, or
    a pass of the training run's validation stream) and score all processes' predictions, mapped to original
    pixels, with ``evaluator``.

    Args:
        postprocessor: built with the model's ``strides`` and ``reg_max``.
        criterion: when given, also the mean validation loss terms.
        channels_last: the model input's memory format.
        num_samples: images of this process kept for plots and trackers (network input, predictions in input
            pixels).
        batches: this process's batch count, for the progress bar of a ``loader`` without a length.
        plot_data: the metrics include the PR curve and the confusion matrix (see ``CocoEvaluator``).
        all_stats: all 12 COCO stats; False: the headline ones (see ``CocoEvaluator.compute``).
        step: ``step(images, boxes, labels) -> (float32 maps, loss parts or None)`` for a batch (training's
            ``GraphedValStep``); default: an eager ``ValStep`` of ``model`` under ``accelerator.autocast()`` and
            ``criterion``.
        stop: this process's stop request, read before each batch: the loop ends at once and, when any
            process asked, every process raises ``ValidationStopped`` (one all-reduce after the loop: processes
            may hold different batch counts, so none runs per batch).
        scoring: one process only: the evaluator's ``compute`` is submitted there and the result's ``Future``
            returned once the predictions are in (a training run scores an epoch while the next one trains).

    ``gather_predictions`` drops the samples that ``even_batches`` duplicated on the last batch, so the metrics
    equal a single-process evaluation whatever the number of processes.
    """
    was_training = model.training
    model.eval()
    try:
        return _predict_and_score(accelerator, model, loader, postprocessor, evaluator, criterion, channels_last,
                                  num_samples, batches, plot_data, all_stats, step, stop, scoring)
    finally:
        model.train(was_training)


def _predict_and_score(accelerator, model, loader, postprocessor, evaluator, criterion, channels_last, num_samples,
                       batches, plot_data, all_stats, step, stop, scoring):
    if scoring is not None and accelerator.num_processes > 1:  # compute's broadcast is a collective: this thread's
        raise ValueError("scoring on another thread needs one process")
    if scoring is not None and num_samples:  # the thread records detections that this loop never holds
        raise ValueError("scoring on another thread keeps no sample images")
    if step is None:
        step = ValStep(model, accelerator.autocast, criterion)
    loss_sum = torch.zeros(3, device=accelerator.device)
    batches_run = 0
    per_image: list[tuple[int, torch.Tensor]] = []
    samples: list[dict] = []
    # a bar on a terminal only (the main process's): logs get the result lines of the caller
    bar = tqdm(loader, desc="validation", unit="batch", file=sys.stdout, leave=False, dynamic_ncols=True,
               total=batches, disable=not (accelerator.is_main_process and sys.stdout.isatty()))
    # On CUDA a batch's post-processing (NMS, the host copy: host syncs, by nature) runs on a side stream while the
    # next batch's forward runs on the compute stream: its syncs wait for its own kernels, not for that forward.
    side = _side_stream(accelerator.device) if accelerator.device.type == "cuda" else None
    pending = None  # (batch, maps, event or None): the previous batch, its forward run, not yet post-processed
    # with a scoring thread, each batch's suppression runs there too, after its candidates are gathered here: the
    # thread's work waits for the model's passes no longer (training's validation: beside the next epoch)
    deferred: collections.deque[tuple[Future, int]] = collections.deque()
    held = 0  # candidates the deferred suppressions hold, bounded by DEFERRED_CANDIDATES

    def record(detections, ratio_pad, orig_sizes, image_ids) -> None:
        original = to_original_pixels(detections, ratio_pad, orig_sizes)
        # one copy to the host per batch, not one blocking copy per image; each image's rows then in a storage
        # of their own (a pickled view, as gather_object sends them, would carry the whole batch)
        on_host = torch.cat(original).cpu().split([len(det) for det in original]) if original else []
        per_image.extend((int(i), det.clone()) for i, det in zip(image_ids, on_host, strict=True))

    def record_later(later, ready, *letterbox) -> None:  # on the scoring thread
        stream = _side_stream(accelerator.device, "scoring") if side is not None else None
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            if ready is not None:
                stream.wait_event(ready)
            record(later(), *letterbox)
        if stream is not None:
            stream.synchronize()  # done with tensors of the other streams before they are freed

    def finish(batch, feats, ready) -> None:
        nonlocal held
        with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
            if ready is not None:
                side.wait_event(ready)
            later, candidates = postprocessor.in_two_parts(feats)  # input pixels
            letterbox = (batch["ratio_pad"], batch["orig_sizes"], batch["image_ids"])
            if scoring is None:
                detections = later()
                record(detections, *letterbox)
                if len(samples) < num_samples:
                    samples.extend(_samples(batch, detections, num_samples - len(samples)))
            else:
                gathered = None
                if side is not None:
                    gathered = torch.cuda.Event()
                    gathered.record()
                deferred.append((scoring.submit(record_later, later, gathered, *letterbox), candidates))
                held += candidates
                while held > DEFERRED_CANDIDATES and len(deferred) > 1:  # memory bounded: wait for the oldest
                    done, count = deferred.popleft()
                    done.result()
                    held -= count
        if side is not None:
            side.synchronize()  # its work on tensors of the compute stream done before they are freed

    for batch in bar:
        if stop is not None and stop():
            break
        images = model_input(batch["images"], channels_last)
        feats, parts = step(images, batch["boxes"], batch["labels"])
        if parts is not None:
            loss_sum += parts
            batches_run += 1
        ready = None
        if side is not None:
            # a copy of the maps: a graphed step's are its static outputs, which the next replay overwrites
            feats = _copied(feats)
            ready = torch.cuda.Event()
            ready.record()
        if pending is not None:  # one order on every device (on the CPU nothing overlaps: it is just later)
            finish(*pending)
        pending = (batch, feats, ready)
    if pending is not None:
        finish(*pending)
    bar.close()
    if stop is not None and _anyone(accelerator, stop()):
        raise ValidationStopped("validation stopped by a signal")
    losses = None
    if criterion is not None:  # the mean over all processes' batches, whatever each one's count
        totals = accelerator.reduce(torch.cat([loss_sum, loss_sum.new_tensor([batches_run])]), reduction="sum")
        losses = totals[:3] / totals[3].clamp(min=1)

    def score() -> EvaluationResult:
        for done, _ in deferred:  # run before this on the one scoring thread: raises their errors here
            done.result()
        predictions = gather_predictions(accelerator, per_image)
        started = time.perf_counter()
        metrics = evaluator.compute(predictions, accelerator, plot_data=plot_data, all_stats=all_stats)
        return EvaluationResult(metrics, predictions, losses, samples, time.perf_counter() - started)

    return score() if scoring is None else scoring.submit(score)


def float_maps(feats):
    """The maps in float32: YOLO11's list, or both lists of YOLO26's ``End2EndMaps`` (kept a NamedTuple, which
    the loss and the post-processor read by branch)."""
    if hasattr(feats, "one2one"):
        return type(feats)(*([f.float() for f in branch] for branch in feats))
    return [f.float() for f in feats]


@dataclass
class ValStep:
    """Validation's work on one batch that has static shapes: the eval forward in mixed precision, the maps in
    float32 and, with a ``criterion``, the loss parts. Returns ``(maps, parts)`` (``parts`` None without one)."""

    model: nn.Module
    autocast: Callable
    criterion: nn.Module | None = None

    @torch.no_grad()
    def __call__(self, images: torch.Tensor, boxes: torch.Tensor | None = None,
                 labels: torch.Tensor | None = None) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        with self.autocast():
            feats = self.model(images)
        feats = float_maps(feats)
        parts = None if self.criterion is None else self.criterion(feats, boxes, labels)[1]
        return feats, parts


@functools.cache
def _side_stream(device: torch.device, role: str = "post-processing") -> torch.cuda.Stream:
    """One stream per device and role for the process (post-processing beside the forwards, the scoring
    thread's suppressions): the caching allocator keeps each stream's freed memory for that stream, so a new
    one per validation would strand what the last one held."""
    return torch.cuda.Stream(device)


def _copied(feats):
    """A copy of a model's maps: YOLO11's list, YOLO26's ``End2EndMaps``, or an exported graph's one tensor."""
    if isinstance(feats, torch.Tensor):
        return feats.clone()
    if hasattr(feats, "one2one"):
        return type(feats)(*([f.clone() for f in branch] for branch in feats))
    return [f.clone() for f in feats]


def _anyone(accelerator: Accelerator, flag: bool) -> bool:
    if accelerator.num_processes == 1:
        return flag
    return bool(accelerator.reduce(torch.tensor([float(flag)], device=accelerator.device), reduction="sum").item())


def _samples(batch: dict, detections: list[torch.Tensor], limit: int) -> list[dict]:
    out = []
    for i in range(min(limit, batch["images"].shape[0])):
        keep = batch["labels"][i] >= 0
        out.append({
            "image": batch["images"][i].cpu(),  # uint8 (3, H, W), network input
            "predictions": detections[i].cpu(),  # (n, 6) input pixels
            "boxes": batch["boxes"][i][keep].cpu(),
            "labels": batch["labels"][i][keep].cpu(),
        })
    return out
