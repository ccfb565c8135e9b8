"""``yolo11.engine.evaluate``: training's validation, the ``yolo11-val`` runner on the model being trained with the
validation losses, over one pass of a validation stream built once for the run."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator

from yolo11 import create_model
from yolo11.data import load_source
from yolo11.engine import evaluate
from yolo11.engine.config import parse_config
from yolo11.engine.plan import plan_run
from yolo11.loss import DetectionLoss

SPEC = "synthetic:num_images=4,num_val=6,imgsz=64"
pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


def test_training_validation_and_the_val_tool_share_one_runner(tmp_path, monkeypatch):
    """``Validator.run`` (training) and ``evaluate_weights`` (``yolo11-val``) both go through ``predict_and_score``
    and give the same predictions and metrics; only training's adds the validation losses and samples."""
    import yolo11.evaluation
    from yolo11.evaluation import runner
    from yolo11.tools import val

    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs.get("criterion") is not None)
        return runner.predict_and_score(*args, **kwargs)

    monkeypatch.setattr(evaluate, "predict_and_score", spy)
    monkeypatch.setattr(yolo11.evaluation, "predict_and_score", spy)  # val imports it when it runs
    source = load_source(SPEC, split="val", cache_dir=tmp_path)
    torch.manual_seed(0)
    model = create_model("yolo11n", num_classes=6)
    accelerator = Accelerator()
    config = parse_config(["--data", SPEC, "--imgsz", "64", "--batch-size", "2", "--workers", "0",
                           "--val-images", "2"])
    criterion = DetectionLoss(6, strides=model.strides, reg_max=model.reg_max)
    plan = plan_run(config, 1, len(source.dataset), 6, accelerator.device.type)
    training = evaluate.Validator.build(config, plan, source, accelerator, model).run(model, criterion)
    assert model.training  # the trainer's model goes back to train mode
    metrics, predictions, _ = val.evaluate_weights(accelerator, model, source, imgsz=64, batch=4, workers=0,
                                                   conf=0.001, iou=0.7, max_det=300)
    assert calls == [True, False]
    assert [i for i, _ in training.predictions] == [i for i, _ in predictions] and len(predictions) == 6
    assert sum(len(det) for _, det in predictions) > 0
    for (_, ours), (_, theirs) in zip(training.predictions, predictions, strict=True):
        assert torch.equal(ours, theirs)
    assert training.metrics == metrics
    assert training.losses.shape == (3,) and torch.isfinite(training.losses).all()
    assert len(training.samples) == 2 and training.samples[0]["image"].dtype == torch.uint8


def validator_for(tmp_path, model, *flags: str) -> evaluate.Validator:
    source = load_source(SPEC, split="val", cache_dir=tmp_path)
    config = parse_config(["--data", SPEC, "--imgsz", "64", "--batch-size", "2", "--workers", "0", *flags])
    plan = plan_run(config, 1, len(source.dataset), 6, "cpu")
    return evaluate.Validator.build(config, plan, source, Accelerator(cpu=True), model)


def test_each_validation_takes_one_pass_of_the_stream(tmp_path):
    """The stream is started once and each validation takes one pass of it: the same model scores the same twice;
    after ``close`` a fresh pass starts. ``images``/``all_stats`` false: no samples, the headline stats only."""
    torch.manual_seed(0)
    model = create_model("yolo11n", num_classes=6)
    criterion = DetectionLoss(6, strides=model.strides, reg_max=model.reg_max)
    validator = validator_for(tmp_path, model, "--val-images", "3")
    first = validator.run(model, criterion)
    second = validator.run(model, criterion, plots=False, images=False, all_stats=False)
    assert [i for i, _ in first.predictions] == [i for i, _ in second.predictions] and len(first.predictions) == 6
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(first.predictions, second.predictions, strict=True))
    assert len(first.samples) == 3 and second.samples == []
    assert {"map_small", "ar100"} <= set(first.metrics) and "map_small" not in second.metrics
    assert first.metrics["map50_95"] == second.metrics["map50_95"]
    validator.close()
    again = validator.run(model, criterion)
    assert again.metrics == first.metrics and torch.equal(again.losses, first.losses)


@pytest.mark.parametrize("budget", [1 << 22, 1], ids=["all-deferred", "one-at-a-time"])
def test_suppression_on_the_scoring_thread_equals_suppression_at_once(tmp_path, monkeypatch, budget):
    """``score_later``: each batch's candidates are gathered in the pass and suppressed on the scoring thread
    (``DEFERRED_CANDIDATES`` bounds what waits there: 1 makes the pass wait for every batch but the last). The
    predictions, metrics and losses equal the pass that suppresses at once; an error of a deferred suppression is
    raised by the result, not lost."""
    from yolo11.evaluation import runner
    from yolo11.postprocess import Postprocessor

    monkeypatch.setattr(runner, "DEFERRED_CANDIDATES", budget)
    torch.manual_seed(0)
    model = create_model("yolo11n", num_classes=6)
    criterion = DetectionLoss(6, strides=model.strides, reg_max=model.reg_max)
    validator = validator_for(tmp_path, model, "--val-images", "0")
    at_once = validator.run(model, criterion, plots=False, images=False, all_stats=False)
    later = validator.run(model, criterion, plots=False, images=False, all_stats=False, score_later=True)
    assert isinstance(later, evaluate.PendingValidation)
    later = later.result()
    assert sum(len(det) for _, det in at_once.predictions) > 0 and len(at_once.predictions) == 6
    assert [i for i, _ in later.predictions] == [i for i, _ in at_once.predictions]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(later.predictions, at_once.predictions, strict=True))
    assert later.metrics == at_once.metrics and torch.equal(later.losses, at_once.losses)

    def failing(self, feats):
        def suppress():
            raise RuntimeError("suppression failed")
        return suppress, 1

    monkeypatch.setattr(Postprocessor, "in_two_parts", failing)
    monkeypatch.setattr(runner, "DEFERRED_CANDIDATES", 1 << 22)  # (with less, the pass itself waits and raises)
    pending = validator.run(model, criterion, plots=False, images=False, all_stats=False, score_later=True)
    with pytest.raises(RuntimeError, match="suppression failed"):
        pending.result()
    validator.close()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_suppression_on_the_scoring_thread_equals_suppression_at_once_on_cuda(tmp_path):
    """The same on CUDA, as training's validation runs it (its plan: CUDA graphs, NCHW validation copy): the
    candidates gathered on the post-processing stream, suppressed on the scoring thread's own stream."""
    source = load_source(SPEC, split="val", cache_dir=tmp_path)
    config = parse_config(["--data", SPEC, "--imgsz", "64", "--batch-size", "2", "--workers", "0",
                           "--val-images", "0"])
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = create_model("yolo11n", num_classes=6).to(accelerator.device)
    criterion = DetectionLoss(6, strides=model.strides, reg_max=model.reg_max)
    plan = plan_run(config, 1, len(source.dataset), 6, "cuda", mixed_precision=accelerator.mixed_precision)
    validator = evaluate.Validator.build(config, plan, source, accelerator, model)
    for _ in range(2):  # the second pass replays the graphs the first captured
        at_once = validator.run(model, criterion, plots=False, images=False, all_stats=False)
        later = validator.run(model, criterion, plots=False, images=False, all_stats=False,
                              score_later=True).result()
        assert sum(len(det) for _, det in at_once.predictions) > 0 and len(at_once.predictions) == 6
        assert [i for i, _ in later.predictions] == [i for i, _ in at_once.predictions]
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(later.predictions, at_once.predictions,
                                                               strict=True))
        assert later.metrics == at_once.metrics and torch.equal(later.losses, at_once.losses)
    validator.close()


def test_val_nms_false_needs_a_one_to_one_head(tmp_path):
    with pytest.raises(ValueError, match="--val-nms false selects YOLO26's one-to-one head; yolo11n has none"):
        validator_for(tmp_path, create_model("yolo11n", num_classes=6), "--val-nms", "false")


def test_validation_in_another_layout_runs_a_copy_refreshed_from_the_trained_model(tmp_path):
    """On CUDA training runs channels_last and validation NCHW (``plan.val_channels_last``): validation runs a copy
    of the model in its layout, made once and given the model's current tensors at every validation. Its results
    equal validating the model itself in that layout, before and after the model's weights change."""
    import dataclasses

    from accelerate import Accelerator

    from yolo11 import create_model
    from yolo11.data import load_source
    from yolo11.engine import evaluate
    from yolo11.engine.config import parse_config
    from yolo11.engine.plan import plan_run
    from yolo11.loss import DetectionLoss

    spec = "synthetic:num_images=4,num_val=6,imgsz=64"
    source = load_source(spec, split="val", cache_dir=tmp_path)
    torch.manual_seed(0)
    trained = create_model("yolo11n", num_classes=6).to(memory_format=torch.channels_last)
    accelerator = Accelerator(cpu=True)
    config = parse_config(["--data", spec, "--imgsz", "64", "--batch-size", "2", "--workers", "0"])
    criterion = DetectionLoss(6, strides=trained.strides, reg_max=trained.reg_max)
    plan = plan_run(config, 1, len(source.dataset), 6, "cpu")
    assert plan.channels_last and plan.val_channels_last  # the CPU validates channels_last: no copy there
    plan = dataclasses.replace(plan, val_channels_last=False)  # CUDA's choice
    validator = evaluate.Validator.build(config, plan, source, accelerator, trained)
    reference = evaluate.Validator.build(config, dataclasses.replace(plan, channels_last=False), source, accelerator,
                                         trained)
    for _ in range(2):
        got = validator.run(trained, criterion)
        plain = deepcopy_to_nchw(trained)
        expected = reference.run(plain, criterion)
        (copy, ), = [(kept[1], ) for kept in validator._copies.values()]
        assert copy is not trained and copy.head.cv2[0][0].conv.weight.is_contiguous()
        assert trained.head.cv2[0][0].conv.weight.is_contiguous(memory_format=torch.channels_last)
        for (i, ours), (j, theirs) in zip(got.predictions, expected.predictions, strict=True):
            assert i == j and torch.equal(ours, theirs)
        assert got.metrics == expected.metrics and torch.equal(got.losses, expected.losses)
        # every state tensor refreshed: the float32 ones in either layout and the int64 BatchNorm counters
        assert all(torch.equal(ours, theirs) for ours, theirs in zip(copy.state_dict().values(),
                                                                     trained.state_dict().values(), strict=True))
        with torch.no_grad():  # a training step's worth of change: the next validation must see it
            for parameter in trained.parameters():
                parameter.mul_(1.01)
            for buffer in trained.buffers():
                buffer.add_(1 if buffer.dtype == torch.int64 else 0.01)
    assert len(validator._copies) == 1  # one copy for the run


def deepcopy_to_nchw(model):
    import copy

    return copy.deepcopy(model).to(memory_format=torch.contiguous_format)
