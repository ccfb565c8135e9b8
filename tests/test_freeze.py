"""``--freeze`` (Ultralytics' ``freeze``): the layers it names by Ultralytics' numbers, the same tensors frozen as
Ultralytics freezes, and a fine-tuning run that leaves them as they were."""

from __future__ import annotations

import re

import pytest
import torch
from helpers.engine_helpers import TINY_FLAGS

import yolo11
from yolo11.engine.build import build_model, freeze_layers
from yolo11.engine.config import ModelConfig, frozen_layers, parse_config
from yolo11.weights import load_weights, save_weights
from yolo11.weights.ultralytics import ultralytics_key


@pytest.mark.parametrize("spec, layers", [("10", set(range(10))), ("[10]", {10}), ("0,23", {0, 23}),
                                          ("[0, 1, 2]", {0, 1, 2}), ("24", set(range(24)))])
def test_freeze_reads_a_count_or_a_list_as_ultralytics(spec, layers):
    assert frozen_layers(spec) == layers


@pytest.mark.parametrize("spec, message", [("abc", "a layer count (10) or a list"), ("[24]", "are 0-23"),
                                           ("-1", "are 0-23")])
def test_a_freeze_that_names_no_layers_is_refused(spec, message):
    with pytest.raises(ValueError, match=rf"--freeze {re.escape(spec)}: .*{re.escape(message)}"):
        ModelConfig(freeze=spec)


@pytest.mark.parametrize("value, flag", [("10", "10"), ("[0, 23]", "[0, 23]"), ("0", None), ("[]", None)])
def test_the_ultralytics_key_is_read_as_the_flag(value, flag):
    assert parse_config([f"freeze={value}"]).model.freeze == flag


@pytest.mark.parametrize("spec", ["10", "[0, 23]", "23", "3,5,19"])
def test_the_same_tensors_are_frozen_as_in_ultralytics(spec):
    """Ultralytics freezes every parameter whose name holds ``model.{i}.`` for the named layers, and the DFL."""
    model = yolo11.create_model("yolo11n")
    freeze_layers(model, frozen_layers(spec))
    ours = {ultralytics_key(name) for name, param in model.named_parameters() if not param.requires_grad}
    named = frozen_layers(spec)
    expected = {ultralytics_key(name) for name, _ in model.named_parameters()}
    expected = {key for key in expected if int(key.split(".")[1]) in named or ".dfl." in key}
    assert ours == expected and ours


def test_frozen_batchnorm_stays_in_eval_mode_and_keeps_its_keys():
    model = yolo11.create_model("yolo11n")
    keys = list(model.state_dict())
    freeze_layers(model, frozen_layers("2"))
    model.train()
    frozen_bn = [m for n, m in model.named_modules() if isinstance(m, torch.nn.BatchNorm2d)
                 and n.startswith(("backbone.layers.0.", "backbone.layers.1."))]
    others = [m for n, m in model.named_modules() if isinstance(m, torch.nn.BatchNorm2d)
              and n.startswith("backbone.layers.2.")]
    assert frozen_bn and not any(m.training for m in frozen_bn) and all(m.training for m in others)
    assert list(model.state_dict()) == keys
    copy = __import__("copy").deepcopy(model).train()  # the EMA's and validation's copies
    assert not any(m.training for n, m in copy.named_modules() if n.startswith("backbone.layers.0.") and
                   isinstance(m, torch.nn.BatchNorm2d))


def test_a_freeze_of_every_trainable_layer_is_refused():
    """Ultralytics refuses it; the run failed at its first backward ('does not require grad')."""
    with pytest.raises(ValueError, match="--freeze layers 0-23 are every layer with trainable tensors"):
        freeze_layers(yolo11.create_model("yolo11n"), frozen_layers("24"))


def test_a_timm_backbone_freezes_as_one_piece():
    model = yolo11.create_model("yolo11n", num_classes=2, backbone="resnet18")
    frozen = freeze_layers(model, frozen_layers("3"))
    assert frozen == sum(1 for _ in model.backbone.parameters())
    assert all(p.requires_grad for p in model.neck.parameters())


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", pytest.param("0", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device")])])
def test_a_run_leaves_the_frozen_layers_as_they_were(tmp_path, capsys, device):
    """On a GPU the step is graphed (CUDA graphs, the default there): the frozen tensors stay out of it too."""
    from helpers.engine_helpers import reset_accelerate_state

    from yolo11.engine.trainer import train

    torch.manual_seed(0)
    start = save_weights(yolo11.create_model("yolo11n", num_classes=3), tmp_path / "start.safetensors")
    config = parse_config([*TINY_FLAGS, "--batch-size", "4", "--epochs", "1", "--output-dir", str(tmp_path),
                           "--weights", str(start), "freeze=10", f"device={device}"])
    try:
        assert train(config) == 0
    finally:
        reset_accelerate_state()
    assert "--freeze 10: 99 tensors frozen (layers 0-9)" in capsys.readouterr().out
    before = load_weights(start).state_dict()
    after = load_weights(tmp_path / "exp" / "weights" / "last.safetensors").state_dict()
    parameters = {name for name, _ in yolo11.create_model("yolo11n", num_classes=3).named_parameters()}
    # the frozen layers' BatchNorm statistics too (Ultralytics keeps them in eval mode); every float tensor
    kept = [k for k in after if k.startswith(tuple(f"backbone.layers.{i}." for i in range(10)))
            and after[k].is_floating_point()]
    assert any(k.endswith("running_mean") for k in kept)
    moved = [k for k in parameters if k.startswith("neck.")]
    # last.safetensors holds float16: the frozen tensors are their float16 selves, the others have trained
    assert all(torch.equal(after[k].float(), before[k].half().float()) for k in kept)
    assert any(not torch.equal(after[k].float(), before[k].half().float()) for k in moved)


def test_build_model_freezes_after_the_weights_are_loaded(tmp_path):
    weights = save_weights(yolo11.create_model("yolo11n", num_classes=3), tmp_path / "w.safetensors")
    model = build_model(ModelConfig(weights=str(weights), freeze="[23]"), ["a", "b", "c"])
    assert all(not p.requires_grad for p in model.head.parameters())
    assert all(p.requires_grad for p in model.backbone.parameters())


@pytest.mark.parametrize("key, before, after", [("freeze", "10", None), ("single_cls", True, False)])
def test_a_resume_cannot_change_freeze_or_single_cls_even_when_changes_are_allowed(tmp_path, key, before, after):
    """With --allow-changes the resume went on to fail on the optimizer's groups ('54 vs 76') or the head's shape."""
    import json

    from yolo11.engine.checkpoint import CheckpointError, check_resume_config

    section = "model" if key == "freeze" else "data"
    checkpoint = tmp_path / "run" / "checkpoints" / "checkpoint-00000001"
    checkpoint.mkdir(parents=True)
    current = parse_config([]).to_dict()
    saved = {**current, section: {**current[section], key: before}}
    (checkpoint / "config.json").write_text(json.dumps(saved))
    current[section][key] = after
    with pytest.raises(CheckpointError, match=rf"--{key.replace('_', '-')}: .* in the checkpoint, .* now: it cannot "
                                              rf"change on resume .*--weights {re.escape(str(tmp_path / 'run'))}"):
        check_resume_config(checkpoint, current, allow_changes=True)
