"""Backbones: the native YOLO11 one through timm's registry, and timm models in its place."""

from __future__ import annotations

import pytest
import timm
import torch

import yolo11.models  # registers the yolo11*_backbone models in timm
from yolo11.models.timm_backbone import BackboneError, select_levels

# One model per family, small variants where the family has them (2 CI cores).
TIMM_BACKBONES = ["resnet18", "convnext_atto", "efficientnet_b0", "cspdarknet53", "mobilenetv3_large_100"]


# Outputs of Ultralytics layers 4, 6 and 10 (C3k2 512, C3k2 512, C2PSA 1024 in the YAML, scaled).
@pytest.mark.parametrize("scale, channels", [("n", [128, 128, 256]), ("s", [256, 256, 512]), ("m", [512, 512, 512])])
def test_native_backbone_in_timm_features_only(scale, channels):
    assert f"yolo11{scale}_backbone" in timm.list_models("yolo11*")
    model = timm.create_model(f"yolo11{scale}_backbone", features_only=True)
    assert model.feature_info.channels() == channels
    assert model.feature_info.reduction() == [8, 16, 32]
    features = model(torch.rand(1, 3, 64, 96))
    assert [tuple(f.shape) for f in features] == [(1, c, 64 // r, 96 // r) for c, r in zip(channels, (8, 16, 32))]


def test_timm_features_equal_the_detector_backbone():
    """The timm wrapper runs the same layers: same weights give the same P3/P4/P5."""
    torch.manual_seed(0)
    detector = yolo11.create_model("yolo11n").eval()
    features_net = timm.create_model("yolo11n_backbone", features_only=True).eval()
    # timm flattens ``layers.N`` into ``layers_N``; nothing else differs.
    state = {k.replace("layers.", "layers_", 1): v for k, v in detector.backbone.state_dict().items()}
    features_net.load_state_dict(state, strict=True)
    images = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        for ours, theirs in zip(detector.backbone(images), features_net(images), strict=True):
            torch.testing.assert_close(ours, theirs)


@pytest.mark.slow
@pytest.mark.parametrize("backbone", TIMM_BACKBONES)
def test_timm_backbone_forward_backward(backbone):
    torch.manual_seed(0)
    model = yolo11.create_model("yolo11n", num_classes=3, backbone=backbone).train()
    assert model.config["backbone"] == backbone
    images = torch.rand(2, 3, 64, 64)
    features = model.backbone(images)
    # feature_info's widths and strides are the real ones, and the neck was sized from them.
    assert [f.shape[1] for f in features] == list(model.backbone.out_channels)
    assert [64 // f.shape[-1] for f in features] == [8, 16, 32]
    maps = model(images)
    assert [tuple(m.shape) for m in maps] == [(2, 67, 8, 8), (2, 67, 4, 4), (2, 67, 2, 2)]
    sum(m.pow(2).mean() for m in maps).backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in (p.grad for p in model.backbone.parameters()))


# Backbones that fail a detector's varied input sizes unless the wrapper adapts: Swin takes only 224 px unless built
# with dynamic_img_size, MambaOut and Swin give NHWC features, Inception's unpadded convolutions give P3 of 19x15
# at 160x128 where the neck needs 20x16.
@pytest.mark.slow
@pytest.mark.parametrize("backbone", ["swin_tiny_patch4_window7_224", "mambaout_femto", "inception_v3"])
def test_timm_backbones_of_other_layouts_take_any_size(backbone):
    torch.manual_seed(0)
    model = yolo11.create_model("yolo11n", num_classes=2, backbone=backbone).train()
    for height, width in ((96, 160), (192, 128)):
        maps = model(torch.rand(1, 3, height, width))
        assert [tuple(m.shape) for m in maps] == [(1, 66, height // r, width // r) for r in (8, 16, 32)]
    sum(m.pow(2).mean() for m in maps).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.backbone.parameters() if p.grad is not None)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.backbone.parameters())


# CoaT asserts its 224 px input and has no dynamic_img_size: it could train on square 224 px batches only; HaloNet's
# bare assert (sides a multiple of its block) has no message: the refusal names timm's line instead.
@pytest.mark.parametrize("backbone, reason", [("coat_lite_tiny", r"Input height \(160\) doesn't match model \(224\)"),
                                              ("halonet26t", r"AssertionError: halo_attn\.py:\d+: _assert\(H % ")])
def test_a_backbone_of_one_input_size_is_refused_by_name(backbone, reason):
    with pytest.raises(BackboneError, match=rf"'{backbone}' fails on a 160x128 input \(.*{reason}.*takes any size"):
        yolo11.create_model("yolo11n", backbone=backbone)


def test_timm_backbone_sees_the_input_its_weights_were_pretrained_on():
    """ImageNet's mean and std for a pretrained-style model, whatever the weights loaded (a saved run rebuilds
    without them); none in the state dict, so weights files keep their keys."""
    torch.manual_seed(0)
    backbone = yolo11.create_model("yolo11n", num_classes=2, backbone="resnet18").backbone.eval()
    images = torch.rand(1, 3, 64, 96)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    with torch.no_grad():
        for ours, direct in zip(backbone(images), backbone.body((images - mean) / std), strict=True):
            torch.testing.assert_close(ours, direct)
    assert "mean" not in backbone.state_dict() and "inv_std" not in backbone.state_dict()


def test_select_levels_picks_the_deepest_level_per_reduction():
    assert select_levels([2, 4, 8, 16, 32]) == (2, 3, 4)
    assert select_levels([4, 8, 8, 16, 32, 32]) == (2, 3, 5)
    with pytest.raises(ValueError, match=r"offers feature reductions \[16, 16, 16\]"):
        select_levels([16, 16, 16])


def test_backbone_without_stride_8_is_refused():
    # A plain ViT has every level at reduction 16.
    message = r"'vit_tiny_patch16_224' offers feature reductions \[16, .*needs levels at \[8, 16, 32\]"
    with pytest.raises(ValueError, match=message):
        yolo11.create_model("yolo11n", backbone="vit_tiny_patch16_224")


def test_unknown_backbone_name_is_refused_with_similar_names():
    with pytest.raises(BackboneError, match="timm has no model 'convnext_tinyy'; similar names: .*convnext_tiny"):
        yolo11.create_model("yolo11n", backbone="convnext_tinyy")


def test_pretrained_offline_gives_a_clear_error(monkeypatch, tmp_path):
    import huggingface_hub.constants as hub_constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path))  # empty cache: nothing to fall back on
    with pytest.raises(BackboneError, match="could not download pretrained weights for timm backbone 'resnet18'"):
        yolo11.create_model("yolo11n", backbone="resnet18", pretrained=True)


def test_a_hub_model_offline_gives_a_clear_error(monkeypatch, tmp_path):
    """An ``hf-hub:`` name reads its configuration from the Hub even without --pretrained: named, with what to do
    (it was huggingface_hub's message alone)."""
    import huggingface_hub.constants as hub_constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path))
    message = r"could not download the configuration for timm backbone 'hf-hub:timm/resnet18.a1_in1k': .*name a model"
    with pytest.raises(BackboneError, match=message):
        yolo11.create_model("yolo11n", backbone="hf-hub:timm/resnet18.a1_in1k")


def test_pretrained_with_an_unanswering_hub_fails_at_once_from_the_cache(monkeypatch, tmp_path):
    """No HF_HUB_OFFLINE, but the Hub does not answer its probe: the weights come from the cache only, at once,
    instead of huggingface_hub's minute of retries; the flag is left as it was."""
    import time

    import huggingface_hub.constants as hub_constants

    from yolo11 import netprobe

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(netprobe, "hub_reachable", lambda timeout=None: False)
    started = time.monotonic()
    with pytest.raises(BackboneError, match=r"resnet18.*\(the Hub did not answer within 5 s\)"):
        yolo11.create_model("yolo11n", backbone="resnet18", pretrained=True)
    assert time.monotonic() - started < 20 and hub_constants.HF_HUB_OFFLINE is False


def test_timm_registration_follows_either_import_order() -> None:
    """``import yolo11.models`` before timm: the backbones are registered when timm loads; a run with the native
    backbone loads neither timm nor torchvision (their import costs ~2.7 s of a run's start on 2 cores)."""
    import subprocess
    import sys

    code = ("import sys, yolo11.engine.trainer, yolo11.models\n"
            "assert 'timm' not in sys.modules and 'torchvision' not in sys.modules, 'loaded at start-up'\n"
            "import timm\n"
            "backbone = timm.create_model('yolo26n_backbone', features_only=True)\n"
            "assert backbone.feature_info.reduction() == [8, 16, 32]\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.slow
def test_a_dynamic_onnx_export_of_a_resizing_backbone_follows_the_input_size(tmp_path):
    """Inception's features are resized to ceil(side / stride): the sizes were Python numbers, written into the
    graph as the export's, so a --dynamic export gave the export size's anchor count at every other size."""
    ort = pytest.importorskip("onnxruntime")
    from yolo11.tools.onnx_export import DecodedDetector, export_onnx

    torch.manual_seed(0)
    model = yolo11.create_model("yolo11n", num_classes=2, backbone="inception_v3").eval()
    assert model.backbone.resize
    path = export_onnx(model, tmp_path / "m.onnx", 128, 13, dynamic=True)
    session = ort.InferenceSession(str(path))
    for height, width in ((128, 128), (96, 224)):
        images = torch.rand(1, 3, height, width)
        with torch.no_grad():
            expected = DecodedDetector(model).eval()(images)
        got = session.run(None, {session.get_inputs()[0].name: images.numpy()})[0]
        assert got.shape == tuple(expected.shape)
        torch.testing.assert_close(torch.from_numpy(got), expected, atol=1e-3, rtol=1e-3)
