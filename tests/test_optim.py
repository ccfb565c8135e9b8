"""Optimizer groups, Ultralytics' 'auto' rule, warmup and schedule, the run plan, EMA."""

import io
import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

import yolo11
from yolo11.engine.build import build_schedule
from yolo11.engine.config import parse_command_line, parse_config
from yolo11.engine.ema import ModelEMA
from yolo11.engine.loop import Accumulation
from yolo11.engine.musgd import MuSGD
from yolo11.engine.optim import (
    OptimizerChoice,
    WarmupSchedule,
    auto_optimizer_note,
    build_optimizer,
    lr_lambda,
    lr_scale_for_batch,
    parameter_groups,
)
from yolo11.engine.plan import plan_run


def tiny_net():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Conv2d(4, 2, 1, bias=True), nn.LayerNorm(2))


def test_parameter_groups_split_weights_norms_biases():
    net = tiny_net()
    groups = parameter_groups(net)
    assert list(groups) == ["weight", "bn", "bias"]  # Ultralytics 8.4's order and names
    assert {id(p) for p in groups["weight"]} == {id(net[0].weight), id(net[2].weight)}
    assert {id(p) for p in groups["bn"]} == {id(net[1].weight), id(net[3].weight)}
    assert len(groups["bias"]) == 4  # conv, bn, conv, layernorm
    optimizer = build_optimizer(net, OptimizerChoice("SGD", 0.01, 0.9), weight_decay=5e-4)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [5e-4, 0.0, 0.0]
    assert [g["param_group"] for g in optimizer.param_groups] == ["weight", "bn", "bias"]
    assert optimizer.param_groups[0]["nesterov"] is True


@pytest.mark.parametrize("argv, expected", [
    (["lr0=0.02"], "optimizer=auto: lr0=0.02 ignored; AdamW(lr=0.000119, momentum=0.9) chosen for 200 iterations "
                   "(set optimizer=SGD or AdamW to use lr0)"),
    (["--lr0", "0.01", "--momentum", "0.937"], "optimizer=auto: lr0=0.01 and momentum=0.937 ignored; "
                                               "AdamW(lr=0.000119, momentum=0.9) chosen for 200 iterations (set "
                                               "optimizer=SGD or AdamW to use them)"),
    (["--epochs", "100"], None),  # lr0 and momentum not given: nothing was ignored
    (["--lr0", "0.02", "--optimizer", "SGD"], None),  # used as given
])
def test_auto_optimizer_says_when_it_ignores_a_given_lr0_or_momentum(argv, expected):
    """Ultralytics' note when optimizer=auto overrides lr0/momentum, printed only when the user set one of them
    (typed, even at the default value), with the plan's choice and its iteration count."""
    config, typed = parse_command_line(["--epochs", "100", *argv])
    plan = plan_run(config, num_processes=1, num_train_images=128, num_classes=80)
    assert auto_optimizer_note(config.optim, plan.optimizer, typed) == expected
    if config.optim.optimizer == "auto":
        assert plan.optimizer.auto_iterations == 200
        assert auto_optimizer_note(config.optim, plan.optimizer, None).startswith(
            "optimizer=auto: lr0=")  # typed unknown (None): every flag counts as set, as Ultralytics always says it


def test_lr_scaling_rules():
    assert lr_scale_for_batch("linear", 256, 64) == 1.0
    assert lr_scale_for_batch("sqrt", 256, 64) == pytest.approx(0.5)
    assert lr_scale_for_batch("none", 256, 64) == pytest.approx(0.25)


def test_schedules_start_at_one_and_end_at_lrf():
    for name in ("linear", "cosine"):
        fn = lr_lambda(name, epochs=10, lrf=0.01)
        assert fn(0) == pytest.approx(1.0) and fn(10) == pytest.approx(0.01)
        assert fn(3) > fn(6)
    assert lr_lambda("linear", 10, 0.01)(5) == pytest.approx(0.5 * 0.99 + 0.01)


def test_warmup_interpolates_lr_bias_lr_and_momentum():
    net = tiny_net()
    optimizer = build_optimizer(net, OptimizerChoice("SGD", 0.01, 0.9), 5e-4)
    schedule = WarmupSchedule(optimizer, lr_lambda("linear", 10, 0.01), warmup_iters=100, warmup_bias_lr=0.1,
                              warmup_momentum=0.8, momentum=0.937)
    schedule.step(epoch=0, iteration=0)
    assert schedule.lrs() == pytest.approx([0.0, 0.0, 0.1])  # weight, bn, bias
    assert optimizer.param_groups[1]["momentum"] == pytest.approx(0.8)
    schedule.step(epoch=0, iteration=50)
    assert schedule.lrs() == pytest.approx([0.005, 0.005, 0.055])
    assert optimizer.param_groups[1]["momentum"] == pytest.approx(0.8685)
    schedule.step(epoch=2, iteration=500)
    assert schedule.lrs() == pytest.approx([0.01 * (0.8 * 0.99 + 0.01)] * 3)
    assert optimizer.param_groups[0]["momentum"] == pytest.approx(0.937)
    unwarmed = WarmupSchedule(optimizer, lr_lambda("linear", 10, 0.01), warmup_iters=-1, warmup_bias_lr=0.1,
                              warmup_momentum=0.8, momentum=0.5)
    unwarmed.step(epoch=0, iteration=0)
    assert unwarmed.lrs() == pytest.approx([0.01] * 3)
    assert optimizer.param_groups[0]["momentum"] == pytest.approx(0.937)  # no warmup: momentum as it was


def test_ema_matches_closed_form():
    net = tiny_net()
    ema = ModelEMA(net, decay=0.9, tau=2.0)
    start = {k: v.clone() for k, v in ema.module.state_dict().items()}
    with torch.no_grad():
        for p in net.parameters():
            p.add_(1.0)
        net[1].num_batches_tracked += 5
    ema.update(net)
    d = 0.9 * (1 - math.exp(-1 / 2.0))
    for key, value in ema.module.state_dict().items():
        source = net.state_dict()[key]
        if value.dtype.is_floating_point:
            torch.testing.assert_close(value, d * start[key] + (1 - d) * source)
        else:
            assert torch.equal(value, source)
    assert not any(p.requires_grad for p in ema.module.parameters())
    restored = ModelEMA(tiny_net())
    restored.load_state_dict(ema.state_dict())
    assert restored.updates == 1
    torch.testing.assert_close(restored.module.state_dict(), ema.module.state_dict())


def test_lr_momentum_and_accumulation_per_batch_equal_ultralytics():
    """Every batch of a 4-epoch coco128 run at batch 16 (8 batches per epoch, warmup 24 batches, accumulation
    ramping 1 -> 4): the values Ultralytics 8.4.190's trainer used, recorded in tests/data."""
    reference = json.loads((Path(__file__).parent / "data" / "ultralytics_schedule_coco128.json").read_text())
    config = parse_config(["--batch-size", str(reference["batch"]), "--epochs", str(reference["epochs"]),
                           "--optimizer", reference["optimizer"]])
    plan = plan_run(config, 1, reference["num_images"], 80)
    model = yolo11.create_model("yolo11n", num_classes=80)
    optimizer = build_optimizer(model, plan.optimizer, plan.weight_decay)
    schedule = build_schedule(config, plan, optimizer)  # as train_accelerate.py builds it
    accumulation = Accumulation(plan.accumulation_steps, plan.warmup_iters)
    assert [g["param_group"] for g in optimizer.param_groups] == reference["param_groups"]
    for ni, lrs, momentum, accumulate in zip(reference["ni"], reference["lr"], reference["momentum"],
                                             reference["accumulate"], strict=True):
        schedule.step(ni // plan.batches_per_epoch, ni)
        assert schedule.lrs() == pytest.approx(lrs, rel=1e-9, abs=1e-12), ni
        assert optimizer.param_groups[0]["momentum"] == pytest.approx(momentum, rel=1e-9), ni
        assert accumulation.steps_at(ni) == accumulate, ni


def test_musgd_steps_equal_ultralytics():
    """Three MuSGD steps (a Muon group of conv, 1x1 conv, wide and tall matrices with weight decay, and an SGD
    group) from the same parameters and gradients as a run of Ultralytics 8.4.190's MuSGD recorded in tests/data.
    Muon's orthogonalisation runs in bfloat16, hence the tolerance."""
    reference = json.loads((Path(__file__).parent / "data" / "ultralytics_musgd_steps.json").read_text())
    shapes = {name: tuple(shape) for name, shape in reference["shapes"].items()}

    def tensors(values: dict) -> dict:
        return {name: torch.tensor(values[name]).reshape(shape) for name, shape in shapes.items()}

    params = {name: t.requires_grad_(True) for name, t in tensors(reference["params0"]).items()}
    muon = [params[name] for name in ("conv", "pointwise", "linear", "tall")]
    optimizer = MuSGD([{"params": muon, "lr": 0.01, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4,
                        "use_muon": True},
                       {"params": [params["bias"]], "lr": 0.03, "momentum": 0.9, "nesterov": True}], muon=0.2, sgd=1.0)
    start = {name: p.detach().clone() for name, p in params.items()}
    for grads, expected in zip(reference["grads"], reference["after"], strict=True):
        for name, grad in tensors(grads).items():
            params[name].grad = grad
        optimizer.step()
        for name, want in tensors(expected).items():
            torch.testing.assert_close(params[name].detach(), want, rtol=0, atol=2e-5, msg=name)
    moved = (params["conv"].detach() - start["conv"]).abs().max()
    assert moved > 1e-3  # the steps are large against the tolerance


def test_musgd_groups_follow_ultralytics():
    model = yolo11.create_model("yolo11n", num_classes=80)
    optimizer = build_optimizer(model, OptimizerChoice("MuSGD", 0.01, 0.9), weight_decay=5e-4)
    groups = optimizer.param_groups
    names = [g["param_group"] for g in groups]
    assert names == ["weight", "weight", "bn", "bn", "bias", "bias", "muon", "muon"]
    assert [g["lr"] for g in groups] == pytest.approx([0.03, 0.01] * 4)  # the class branch first, at 3x
    assert [g["use_muon"] for g in groups] == [False] * 6 + [True] * 2
    assert [g["weight_decay"] for g in groups] == [5e-4, 5e-4, 0.0, 0.0, 0.0, 0.0, 5e-4, 5e-4]
    class_branch = {id(p) for p in model.head.cv3.parameters()}
    assert groups[6]["params"] and all(id(p) in class_branch for p in groups[6]["params"])
    conv_weights = [p for n, p in model.named_parameters() if p.requires_grad and p.ndim == 4]
    assert len(groups[6]["params"]) + len(groups[7]["params"]) == len(conv_weights)
    assert all(g["initial_lr"] == g["lr"] for g in groups)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device")])])
def test_checkpointed_optimizer_state_comes_to_the_cpu_and_loads_back(device):
    """The state-dict hook of training optimizers: momentum buffers on the CPU (one copy per dtype), the live
    state untouched, and a fresh optimizer loaded from it continues identically."""
    from yolo11.engine.build import _optimizer_state_to_host

    def make():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)).to(device)
        return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(model, optimizer):
        model(torch.ones(5, 4, device=device)).square().sum().backward()
        optimizer.step()
        optimizer.zero_grad()

    model, optimizer = make()
    optimizer.register_state_dict_post_hook(_optimizer_state_to_host)
    step(model, optimizer)
    saved = optimizer.state_dict()
    live = [s["momentum_buffer"] for s in optimizer.state.values()]
    assert all(s["momentum_buffer"].device.type == "cpu" for s in saved["state"].values())
    assert all(b.device.type == device for b in live)  # the optimizer's own buffers stay where they were
    for buffer, kept in zip(live, saved["state"].values(), strict=True):
        torch.testing.assert_close(kept["momentum_buffer"], buffer.cpu(), rtol=0, atol=0)
    resumed_model, resumed = make()
    resumed_model.load_state_dict(model.state_dict())
    file = io.BytesIO()  # through a file, as a checkpoint goes: the CPU path shares its tensors with the live state
    torch.save(saved, file)
    file.seek(0)
    resumed.load_state_dict(torch.load(file, weights_only=True))
    for m, o in ((model, optimizer), (resumed_model, resumed)):
        step(m, o)
    for a, b in zip(model.parameters(), resumed_model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)

