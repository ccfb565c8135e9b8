"""The capture contract (``yolo11.engine.capture_contract``) on the CPU: every model family's training micro-step
and validation step run under ``CaptureChecker`` after their warm-up call, as ``GraphedMicroStep`` and
``GraphedValStep`` capture them on a GPU; a violation planted in the loss, the assigner, the head or the HSV code
fails the same check."""

from __future__ import annotations

import contextlib

import pytest
import torch

import yolo11
from yolo11.data import BatchHSV
from yolo11.engine.build import build_criterion
from yolo11.engine.capture_contract import CaptureChecker, CaptureViolation
from yolo11.engine.cuda_graphs import MicroStep, box_bucket, pad_targets
from yolo11.evaluation.runner import ValStep
from yolo11.loss.assigner import TaskAlignedAssigner
from yolo11.loss.detection_loss import DetectionLoss
from yolo11.models.head import Detect

IMGSZ, BATCH, CLASSES = 64, 2, 3


def _batch(seed: int, rows: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(BATCH, rows, 2, generator=g) * IMGSZ * 0.6
    wh = torch.rand(BATCH, rows, 2, generator=g) * IMGSZ * 0.3 + 4
    labels = torch.randint(0, CLASSES, (BATCH, rows), generator=g)
    labels[1, rows // 2:] = -1  # padding rows, as the collate writes them
    return {"images": torch.randint(0, 256, (BATCH, 3, IMGSZ, IMGSZ), dtype=torch.uint8, generator=g),
            "hsv_gains": torch.rand(BATCH, 3, generator=g, dtype=torch.float64) * 2 - 1,
            "boxes": torch.cat([xy, xy + wh], 2), "labels": labels}


def _micro_step(model_name: str, scaled: bool = False) -> MicroStep:
    """``scaled``: fp16's backward, Accelerate's ``scaler.scale(loss).backward()`` (the scale a tensor the graph
    reads in place)."""
    torch.manual_seed(0)
    model = yolo11.create_model(model_name, num_classes=CLASSES).to(memory_format=torch.channels_last).train()
    scaler = torch.amp.GradScaler("cpu")
    backward = (lambda loss: scaler.scale(loss).backward()) if scaled else (lambda loss: loss.backward())
    return MicroStep(model, build_criterion(model, torch.device("cpu")), BatchHSV(), contextlib.nullcontext,
                     backward, loss_factor=1.0, channels_last=True)


def run_checked_micro_step(model_name: str, scaled: bool = False) -> None:
    """Warm-up call, then a checked one on a second batch of the same bucket, as a graph capture would run."""
    step = _micro_step(model_name, scaled)
    for seed, checked in ((0, False), (1, True)):
        batch = _batch(seed, rows=5)
        boxes, labels = pad_targets(batch["boxes"], batch["labels"], box_bucket(5))
        with CaptureChecker() if checked else contextlib.nullcontext():
            step(batch["images"], batch["hsv_gains"], boxes, labels)


def run_checked_val_step(model_name: str) -> None:
    micro = _micro_step(model_name)
    step = ValStep(micro.model.eval(), contextlib.nullcontext, micro.criterion)
    for seed, checked in ((0, False), (1, True)):
        batch = _batch(seed, rows=5)
        boxes, labels = pad_targets(batch["boxes"], batch["labels"], box_bucket(5))
        images = batch["images"].float().div(255).contiguous(memory_format=torch.channels_last)
        with CaptureChecker() if checked else contextlib.nullcontext():
            step(images, boxes, labels)


@pytest.mark.parametrize("scaled", [False, True], ids=["unscaled", "fp16-scaled"])
@pytest.mark.parametrize("model_name", ["yolo11n", "yolo26n"])
def test_training_micro_step_keeps_the_capture_contract(model_name: str, scaled: bool) -> None:
    run_checked_micro_step(model_name, scaled)


@pytest.mark.parametrize("model_name", ["yolo11n", "yolo26n"])
def test_validation_step_keeps_the_capture_contract(model_name: str) -> None:
    run_checked_val_step(model_name)


def _wrap(owner, name: str, before):
    """``owner.name`` that runs ``before(*args)`` first: a planted violation."""
    original = getattr(owner, name)

    def planted(*args, **kwargs):
        before(*args)
        return original(*args, **kwargs)

    return planted


PLANTED = {  # where, what, the message's kind
    "loss": (DetectionLoss, "forward", lambda self, feats, boxes, labels: boxes.new_tensor([8.0, 16.0, 32.0]),
             "host numbers"),
    "assigner": (TaskAlignedAssigner, "select_topk", lambda self, align, valid: bool(align.max() > 0), "host sync"),
    "head": (Detect, "_maps", lambda features, boxes, classes: features[0].nonzero(), "data-dependent shape"),
    "hsv": (BatchHSV, "forward", lambda self, images, gains: gains[gains > 0], "boolean-mask"),
    "tolist": (TaskAlignedAssigner, "forward", lambda self, *args: args[0].tolist(), "host sync"),
}


@pytest.mark.parametrize("where", list(PLANTED))
@pytest.mark.parametrize("model_name", ["yolo11n", "yolo26n"])
def test_planted_violation_fails_the_capture_check(where: str, model_name: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    owner, name, before, kind = PLANTED[where]
    planted = _wrap(owner, name, before)
    static = isinstance(owner.__dict__[name], staticmethod)
    monkeypatch.setattr(owner, name, staticmethod(planted) if static else planted)
    with pytest.raises(CaptureViolation, match=kind) as caught:
        run_checked_micro_step(model_name)
    assert "yolo11/" in str(caught.value)  # names the line of our code that reached it


def test_planted_violation_in_the_validation_forward_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Detect, "forward", _wrap(Detect, "forward", lambda self, f: f[0].sum().item()))
    with pytest.raises(CaptureViolation, match="host sync"):
        run_checked_val_step("yolo11n")
