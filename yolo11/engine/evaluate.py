"""Validation on every rank: loss, NMS, COCO metrics from pycocotools on the main process."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from accelerate import Accelerator
from accelerate.utils import broadcast
from torch import nn

from yolo11.data import DetectionSource, LoaderConfig, build_dataloader, model_input
from yolo11.engine.compile import CompiledLoss
from yolo11.engine.config import TrainConfig
from yolo11.engine.plan import RunPlan
from yolo11.evaluation import CocoEvaluator, gather_predictions
from yolo11.postprocess import Postprocessor, scale_boxes


@dataclass
class ValidationOutput:
    metrics: dict  # COCO stats, per-class AP, precision/recall; identical on every rank
    losses: torch.Tensor  # (3,) box, cls, dfl averaged over all ranks' batches
    samples: list[dict]  # up to `num_samples` images of the main process with predictions and targets (CPU)


@torch.no_grad()
def evaluate(
    *,
    accelerator: Accelerator,
    model: nn.Module,
    criterion: nn.Module,
    postprocessor: Postprocessor,
    loader,
    evaluator: CocoEvaluator,
    channels_last: bool = False,
    num_samples: int = 0,
) -> ValidationOutput:
    """Run ``model`` over the prepared validation ``loader``; predictions are rescaled to original pixels.

    ``gather_predictions`` drops the samples that ``even_batches`` duplicated on the last batch, so the metrics
    equal a single-process evaluation whatever the number of processes.
    """
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros(3, device=accelerator.device)
    batches = 0
    per_image: list[tuple[int, torch.Tensor]] = []
    samples: list[dict] = []
    for batch in loader:
        images = model_input(batch["images"], channels_last)
        with accelerator.autocast():
            feats = model(images)
        feats = [f.float() for f in feats]
        _, parts = criterion(feats, batch["boxes"], batch["labels"])
        loss_sum += parts
        batches += 1
        input_dets = postprocessor(feats)
        for image_id, det, pad, size in zip(batch["image_ids"], input_dets, batch["ratio_pad"], batch["orig_sizes"],
                                            strict=True):
            original = torch.cat((scale_boxes(det[:, :4], pad, size), det[:, 4:]), dim=1)
            per_image.append((int(image_id), original.cpu()))
        if len(samples) < num_samples:
            samples.extend(_samples(batch, input_dets, num_samples - len(samples)))
    predictions = gather_predictions(accelerator, per_image)
    metrics = evaluator.compute(predictions, accelerator)
    losses = accelerator.reduce(loss_sum / max(batches, 1), reduction="mean")
    model.train(was_training)
    return ValidationOutput(metrics, losses, samples)


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


class Validator:
    """The validation loader, post-processor and evaluator of a training run, built once."""

    def __init__(self, accelerator: Accelerator, loader, postprocessor: Postprocessor, evaluator: CocoEvaluator,
                 channels_last: bool, num_samples: int):
        self.accelerator = accelerator
        self.loader = loader
        self.postprocessor = postprocessor
        self.evaluator = evaluator
        self.channels_last = channels_last
        self.num_samples = num_samples

    @classmethod
    def build(cls, config: TrainConfig, plan: RunPlan, source: DetectionSource, accelerator: Accelerator) -> Validator:
        run, data = config.run, config.data
        loader_config = LoaderConfig(imgsz=data.imgsz, batch_size=plan.val_batch_size, workers=data.workers,
                                     augment=False, shuffle=False, seed=run.seed, max_boxes=data.max_boxes,
                                     rect=run.val_rect, cache_images=data.cache_images and run.val_interval > 0)
        loader = build_dataloader(source, "val", loader_config)
        postprocessor = Postprocessor(conf=run.val_conf, iou=run.val_iou, max_det=run.max_det)
        evaluator = CocoEvaluator(source.dataset, source.class_names)
        return cls(accelerator, accelerator.prepare(loader), postprocessor, evaluator, plan.channels_last,
                   run.val_images)

    def run(self, model: nn.Module, criterion: nn.Module) -> ValidationOutput:
        """Validate ``model`` (the EMA's or the trained one, wrapped or not) with ``criterion`` for the losses.

        Both run eagerly: rect batches come in many shapes, and each would be another compiled graph (CUDA
        graphs too, under ``reduce-overhead``), for a pass that runs once per epoch without gradients.

        With several processes, every process first takes the main process's buffers: each one's BatchNorm
        running statistics (and so its EMA's) follow its own batches, DDP re-syncs them only at the next forward,
        and the checkpoint holds the main process's. Without this, a 2-process CPU run logged mAP50-95 0.0504
        for weights that score 0.0536 (which it logs now, as ``yolo11-val`` does)."""
        model = self.accelerator.unwrap_model(model, keep_torch_compile=False)
        if self.accelerator.num_processes > 1:
            broadcast(list(model.buffers()), from_process=0)
        criterion = criterion.loss if isinstance(criterion, CompiledLoss) else criterion
        return evaluate(accelerator=self.accelerator, model=model, criterion=criterion,
                        postprocessor=self.postprocessor, loader=self.loader, evaluator=self.evaluator,
                        channels_last=self.channels_last, num_samples=self.num_samples)
