"""YOLO26 through the trainer (issue 31): names, loss and its epoch schedule, MuSGD groups, weights, validation on
the one-to-many head, and ``accelerate launch`` runs on CPU (a run, its reload, a bitwise resume)."""

from __future__ import annotations

import csv
import types

import pytest
import torch
from helpers.engine_helpers import checkpoint_model, describe, launch
from safetensors.torch import load_file

import yolo11
from yolo11.models import YOLO26Detector

# the brief's run: 32 images of 64 px, 2 epochs of 2 batches
RUN_FLAGS = ["--model", "yolo26n", "--data", "synthetic:imgsz=64,num_images=32", "--imgsz", "64", "--epochs", "2",
             "--batch-size", "16", "--workers", "0"]


pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


def read_results(run_dir):
    with open(run_dir / "results.csv") as fh:
        return list(csv.DictReader(fh))


def test_the_torch_free_names_agree_with_the_model_families(tmp_path):
    """``gate.SCALE_NAMES`` / ``FAMILY_REG_MAX`` (what ``--model`` and the config gate accept, without torch) are
    ``yolo11.models``' own names and DFL bins."""
    from yolo11.architecture import FAMILIES
    from yolo11.engine.config import MODEL_NAMES, ModelConfig, parse_config
    from yolo11.gate import FAMILY_REG_MAX, SCALE_NAMES

    assert SCALE_NAMES == MODEL_NAMES == yolo11.models.MODEL_NAMES
    assert FAMILY_REG_MAX == {name: family.reg_max for name, family in FAMILIES.items()}
    for name, family in FAMILIES.items():  # the table's head names and bins are what the models build
        model = yolo11.create_model(f"{name}n", num_classes=2)
        assert (type(model.head).__name__, model.reg_max, model.strides) == (family.head, family.reg_max, (8, 16, 32))
    assert parse_config(["--model", "yolo26x", "--data", "coco8"]).model.model == "yolo26x"
    ultralytics_style = parse_config(["data=coco8.yaml", "model=yolo26s.yaml"]).model  # Ultralytics' key=value
    assert (ultralytics_style.model, ultralytics_style.weights) == ("yolo26s", None)
    weights = tmp_path / "yolo26m.pt"
    weights.touch()  # the config checks that weights exist, not what they hold
    ultralytics_style = parse_config(["data=coco8.yaml", f"model={weights}"]).model
    assert (ultralytics_style.model, ultralytics_style.weights) == ("yolo26m", str(weights))
    with pytest.raises(ValueError, match="--model is the architecture, one of yolo11n.*yolo26x, got 'yolo27n'"):
        ModelConfig(model="yolo27n")


def test_criterion_is_end2end_for_yolo26_on_the_device_and_detection_loss_for_yolo11():
    from yolo11.engine.build import build_criterion, set_loss_epoch
    from yolo11.engine.compile import CompiledLoss
    from yolo11.loss import DetectionLoss, End2EndLoss, one2many_weight

    eleven = build_criterion(yolo11.create_model("yolo11n", num_classes=3), torch.device("cpu"))
    assert type(eleven) is DetectionLoss and eleven.reg_max == 16
    twenty_six = build_criterion(yolo11.create_model("yolo26n", num_classes=3), torch.device("meta"))
    assert type(twenty_six) is End2EndLoss and twenty_six.branch_weights.device.type == "meta"  # moved
    loss = End2EndLoss(3)
    set_loss_epoch(CompiledLoss(loss), 5, 10)  # reaches through the compile wrapper (nothing compiles until called)
    w = one2many_weight(5, 10)
    assert loss.branch_weights.tolist() == pytest.approx([w, 1 - w]) and w != one2many_weight(0, 10)
    set_loss_epoch(eleven, 5, 10)  # DetectionLoss has no schedule: nothing to do, no error


def _fake_run(criterion, epochs: int, epoch: int = 0, batches_in_epoch: int = 0):
    from yolo11.engine.checkpoint import TrainState

    state = TrainState()
    state.epoch, state.batches_in_epoch = epoch, batches_in_epoch
    loader = type("Loader", (), {"set_epoch": lambda self, *a: None, "__iter__": lambda self: iter(range(100))})()
    accelerator = types.SimpleNamespace(process_index=0, print=lambda *a: None)
    step = types.SimpleNamespace(criterion=criterion, accelerator=accelerator,
                                 stop=types.SimpleNamespace(agreed_now=lambda: False))
    return types.SimpleNamespace(config=types.SimpleNamespace(run=types.SimpleNamespace(epochs=epochs,
                                                                                        max_steps=None)),
                                 state=state, step=step, train_loader=loader,
                                 plan=types.SimpleNamespace(batches_per_epoch=2),
                                 stop=types.SimpleNamespace(enter=lambda *a: None), clock=RunClock())


from yolo11.engine.run_clock import RunClock  # noqa: E402 - beside the fake run that holds one


@pytest.mark.parametrize("resume_at", [None, (2, 1)])
def test_fit_sets_the_loss_epoch_before_every_epoch_and_on_resume(monkeypatch, resume_at):
    """The trainer's ``fit`` gives ``End2EndLoss`` each epoch's branch weights before the epoch's batches (the
    weights at epoch 0 differ from later ones), a run resumed mid-epoch 3 included."""
    from yolo11.engine import trainer
    from yolo11.loss import End2EndLoss, one2many_weight

    criterion, seen = End2EndLoss(3), []

    def one_epoch(step, loader, state, epoch, max_steps):
        seen.append((epoch, step.criterion.branch_weights.tolist()))
        return types.SimpleNamespace(images=0, seconds=0.0, interrupted=False, reached_max_steps=False)

    monkeypatch.setattr(trainer, "train_one_epoch", one_epoch)
    monkeypatch.setattr(trainer, "end_epoch", lambda run, epoch, result: (False, False))
    epoch, batches = resume_at or (0, 0)
    assert trainer.fit(_fake_run(criterion, 4, epoch, batches)) == (0, 0)
    expected = [(e, [pytest.approx(one2many_weight(e, 4)), pytest.approx(1 - one2many_weight(e, 4))])
                for e in range(epoch, 4)]
    assert seen == expected
    assert len({tuple(w) for _, w in seen}) == len(seen)  # every epoch its own weights: the check can fail


def test_musgd_gives_both_class_branches_three_times_the_lr():
    from yolo11.engine.optim import musgd_groups

    model = yolo11.create_model("yolo26n", num_classes=3)
    groups = musgd_groups(model, 0.01, 5e-4)
    boosted = {id(p) for g in groups if g["lr"] == pytest.approx(0.03) for p in g["params"]}
    for branch in (model.head.cv3, model.head.one2one_cv3):
        assert {id(p) for p in branch.parameters()} <= boosted
    rest = [p for name, p in model.named_parameters() if not name.startswith(("head.cv3.", "head.one2one_cv3."))]
    assert not {id(p) for p in rest} & boosted
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
    yolo11_groups = musgd_groups(yolo11.create_model("yolo11n", num_classes=3), 0.01, 5e-4)  # unchanged: cv3 only
    head = yolo11.create_model("yolo11n", num_classes=3).head
    assert sum(len(g["params"]) for g in yolo11_groups if g["lr"] == pytest.approx(0.03)) == \
        len(list(head.cv3.parameters()))


def test_weights_of_yolo26_build_the_training_model(tmp_path):
    """``--weights`` of a YOLO26 ``.pt`` (Ultralytics' structure), of our ``.safetensors`` and of a
    ``save_pretrained`` folder build a YOLO26Detector with every tensor; the gate checks reg_max per family."""
    from helpers.ultralytics_checkpoint import write_ultralytics_checkpoint

    from yolo11.engine.build import build_model
    from yolo11.engine.config import ModelConfig
    from yolo11.gate import FileRefusedError, check_model_config
    from yolo11.weights import load_weights, save_pretrained, save_weights

    torch.manual_seed(0)
    names = ["ant", "bee"]
    model = yolo11.create_model("yolo26n", num_classes=2, names=names)
    files = [write_ultralytics_checkpoint(model, names, tmp_path / "a.pt"),
             save_weights(model, tmp_path / "a.safetensors"), save_pretrained(model, tmp_path / "hub")]
    for file in files:
        built = build_model(ModelConfig(weights=str(file)), names)
        assert isinstance(built, YOLO26Detector) and built.config["name"] == "yolo26n"
        built_state = built.state_dict()  # once: a state_dict per key made this loop quadratic
        for key, tensor in model.state_dict().items():
            atol = 1e-3 if file.suffix == ".pt" else 0  # the .pt holds fp16, as Ultralytics'
            torch.testing.assert_close(built_state[key], tensor, rtol=atol, atol=atol, msg=key)
        assert isinstance(load_weights(file), YOLO26Detector)  # the tools' loader takes YOLO26 too
    with pytest.raises(ValueError, match="--model yolo11n contradicts --weights"):
        build_model(ModelConfig(model="yolo11n", weights=str(files[1])), names)
    config = {"name": "yolo26n", "num_classes": 2, "reg_max": 16}
    with pytest.raises(FileRefusedError, match="config reg_max is 16; yolo26n has 1"):
        check_model_config(config, "x.json")
    assert check_model_config({**config, "reg_max": 1}, "x.json")["name"] == "yolo26n"
    assert check_model_config({**config, "name": "yolo11n"}, "x.json")["name"] == "yolo11n"


class _Branch(torch.nn.Module):
    """One branch of a YOLO26 model as a YOLO11-like model (a list of maps), for the reference evaluation."""

    def __init__(self, model: YOLO26Detector, branch: str):
        super().__init__()
        self.model, self.branch = model, branch
        self.num_classes, self.strides, self.reg_max = model.num_classes, model.strides, model.reg_max

    def forward(self, images):
        return getattr(self.model(images), self.branch)


def test_validation_scores_the_one_to_many_head_with_nms(tmp_path):
    """Training's validation (and ``yolo11-val``'s runner) decode YOLO26's one-to-many maps with NMS, as
    Ultralytics' default (``nms: None``), and take the validation losses from ``End2EndLoss``."""
    from accelerate import Accelerator

    from yolo11.data import load_source
    from yolo11.engine import evaluate
    from yolo11.engine.build import build_criterion
    from yolo11.engine.config import parse_config
    from yolo11.engine.plan import plan_run
    from yolo11.tools import val

    spec = "synthetic:num_images=4,num_val=6,imgsz=64"
    source = load_source(spec, split="val", cache_dir=tmp_path)
    torch.manual_seed(0)
    model = yolo11.create_model("yolo26n", num_classes=6)
    with torch.no_grad():  # a fresh one-to-one branch is a copy of the one-to-many: make the two tell apart
        for param in model.head.one2one_cv2.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    accelerator = Accelerator()
    model = model.to(accelerator.device)  # on a GPU machine validation runs there (the trainer prepares it so)
    config = parse_config(["--data", spec, "--imgsz", "64", "--batch-size", "2", "--workers", "0", "--model",
                           "yolo26n"])
    plan = plan_run(config, 1, len(source.dataset), 6, accelerator.device.type)
    criterion = build_criterion(model, accelerator.device)
    training = evaluate.Validator.build(config, plan, source, accelerator, model).run(model, criterion)
    assert model.training and training.losses.shape == (3,) and torch.isfinite(training.losses).all()
    options = dict(imgsz=64, batch=4, workers=0, conf=0.001, iou=0.7, max_det=300)
    tool, tool_predictions, _ = val.evaluate_weights(accelerator, model, source, **options)
    many, many_predictions, _ = val.evaluate_weights(accelerator, _Branch(model, "one2many"), source, **options)
    one, one_predictions, _ = val.evaluate_weights(accelerator, _Branch(model, "one2one"), source, **options)
    assert sum(len(det) for _, det in many_predictions) > 0
    for (_, a), (_, b), (_, c) in zip(training.predictions, tool_predictions, many_predictions, strict=True):
        assert torch.equal(a, c) and torch.equal(b, c)
    assert training.metrics == tool == many
    # the one-to-one maps through the same NMS give other detections: the comparison above can fail
    assert any(not torch.equal(a, b) for (_, a), (_, b) in zip(many_predictions, one_predictions, strict=True))
    # --val-nms false (Ultralytics' nms=False): the one-to-one head's top-k, no NMS
    top_k_config = parse_config(["--data", spec, "--imgsz", "64", "--batch-size", "2", "--workers", "0", "--model",
                                 "yolo26n", "--val-nms", "false"])
    top_k = evaluate.Validator.build(top_k_config, plan, source, accelerator, model)
    assert top_k.postprocessor.end2end and not evaluate.Validator.build(config, plan, source, accelerator,
                                                                        model).postprocessor.end2end
    without_nms = top_k.run(model, criterion)
    assert sum(len(det) for _, det in without_nms.predictions) > 0
    assert any(not torch.equal(a, b) for (_, a), (_, b) in zip(without_nms.predictions, one_predictions, strict=True))
    torch.testing.assert_close(without_nms.losses, training.losses)  # the loss does not depend on the head choice
    assert parse_config(["data=coco8.yaml", "nms=False"]).run.val_nms is False  # Ultralytics' key
    with pytest.raises(ValueError, match="--val-nms false selects YOLO26's one-to-one head; yolo11n has none"):
        evaluate.Validator.build(top_k_config, plan, source, accelerator, yolo11.create_model("yolo11n", num_classes=6))


@pytest.mark.slow
def test_yolo26n_trains_end_to_end_and_its_weights_reload_as_yolo26(tmp_path):
    """The brief's command exits 0; best/last weights reload as YOLO26 (trainer and yolo11-val), validation ran
    every epoch, the losses are logged under Ultralytics' YOLO26 names."""
    from yolo11.weights import load_weights

    result = launch([*RUN_FLAGS, "--output-dir", str(tmp_path), "--name", "run"])
    assert result.returncode == 0, describe(result)
    assert "yolo26n: 2,506,140 parameters" in result.stdout  # 6 synthetic classes
    rows = read_results(tmp_path / "run")
    assert len(rows) == 2 and all(row["metrics/mAP50-95(B)"] != "" for row in rows)
    # the third loss term is an L1 term, named as Ultralytics names YOLO26's (YOLO11: dfl_loss)
    assert {"train/l1_loss", "val/l1_loss"} <= rows[0].keys() and "train/dfl_loss" not in rows[0]
    assert "losses box cls l1: train" in result.stdout and " dfl" not in result.stdout
    assert (tmp_path / "run" / "results.png").is_file()
    for name in ("best", "last"):
        model = load_weights(tmp_path / "run" / "weights" / f"{name}.safetensors")
        assert isinstance(model, YOLO26Detector) and model.num_classes == 6


@pytest.mark.slow
def test_yolo26n_resume_mid_epoch_is_bitwise_identical(tmp_path):
    """2 epochs straight == stop inside epoch 2 (--max-steps) + --resume auto: weights and results bitwise. The
    resumed epoch's loss weights (0.1 / 0.9) differ from the first epoch's (0.8 / 0.2): a resume that left them
    at the start's would train other weights."""
    common = [*RUN_FLAGS, "--nominal-batch", "16", "--plots", "false", "--output-dir", str(tmp_path)]
    straight = launch([*common, "--name", "straight"])
    assert straight.returncode == 0, describe(straight)
    first = launch([*common, "--name", "resumed", "--max-steps", "3"])  # 2 steps per epoch: stops in epoch 2
    assert first.returncode == 0, describe(first)
    second = launch([*common, "--name", "resumed", "--resume", "auto"])
    assert second.returncode == 0, describe(second)
    assert "resumed from" in second.stdout and "at epoch 2, batch 1" in second.stdout
    a = load_file(tmp_path / "straight" / "weights" / "last.safetensors")
    b = load_file(tmp_path / "resumed" / "weights" / "last.safetensors")
    assert a.keys() == b.keys() and any(k.startswith("head.one2one_cv3.") for k in a)
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert checkpoint_model(tmp_path / "straight").keys() == checkpoint_model(tmp_path / "resumed").keys()
    rows_a, rows_b = read_results(tmp_path / "straight"), read_results(tmp_path / "resumed")
    assert len(rows_a) == len(rows_b) == 2
    for row_a, row_b in zip(rows_a, rows_b, strict=True):
        for column in row_a:
            if column.startswith(("train/", "val/", "metrics/", "lr/")):
                assert row_a[column] == row_b[column], (row_a["epoch"], column)


@pytest.mark.parametrize("graphed", [
    pytest.param(False, id="cpu-eager"),
    pytest.param(True, id="cuda-graphed", marks=[pytest.mark.gpu, pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA device")])])
def test_a_replayed_micro_step_reads_the_epoch_weights_set_after_capture(graphed):
    """The CUDA-graphed micro-step captured with epoch 0's branch weights gives, after ``set_loss_epoch``, the
    loss of the new weights (the graph reads ``End2EndLoss.branch_weights``, not constants), equal to the eager
    step's. On the CPU the same sequence runs eagerly (the check of the test itself)."""
    import contextlib

    from yolo11.data import BatchHSV
    from yolo11.engine.build import build_criterion, set_loss_epoch
    from yolo11.engine.cuda_graphs import GraphedMicroStep, MicroStep

    device = torch.device("cuda" if graphed else "cpu")
    torch.manual_seed(0)
    model = yolo11.create_model("yolo26n", num_classes=5).to(device)
    criterion = build_criterion(model, device)
    step = MicroStep(model, criterion, BatchHSV().to(device), contextlib.nullcontext, lambda loss: loss.backward(),
                     loss_factor=1.0, channels_last=False)
    run = GraphedMicroStep(step, device) if graphed else step
    g = torch.Generator().manual_seed(1)
    xy = torch.rand(2, 3, 2, generator=g) * 40
    batch = {"images": torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8, generator=g).to(device),
             "boxes": torch.cat([xy, xy + 12 + torch.rand(2, 3, 2, generator=g) * 8], -1).to(device),
             "labels": torch.randint(0, 5, (2, 3), generator=g).to(device)}

    def call():
        if graphed:
            return run(batch)[0].clone()
        return run(batch["images"], None, batch["boxes"], batch["labels"])[0]

    def eager_loss():
        with torch.no_grad():
            return criterion(model(batch["images"]), batch["boxes"], batch["labels"])[0]

    set_loss_epoch(criterion, 0, 10)
    first = [call() for _ in range(3)]  # graphed: eager warm-up, capture + replay, replay
    if graphed:
        assert run.captures == 1
    at_start = eager_loss()
    set_loss_epoch(criterion, 5, 10)
    later = call()
    expected = eager_loss()
    torch.testing.assert_close(first[-1], at_start, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(later, expected, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(expected, at_start, rtol=1e-3)  # the weights matter: the check can fail
