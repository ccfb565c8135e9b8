"""The assembled detector: Ultralytics' parameter counts and GFLOPs, output shapes, head init, fusion, config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import yolo11
from yolo11.models.blocks import Conv
from yolo11.models.flops import count_gflops

SCALE_NAMES = ["yolo11n", "yolo11s", "yolo11m", "yolo11l", "yolo11x"]
# Ultralytics' model summaries with 80 classes (FIELD-NOTES): parameters and GFLOPs at 640.
ULTRALYTICS_PARAMS = dict(zip(SCALE_NAMES, [2_624_080, 9_458_752, 20_114_688, 25_372_160, 56_966_176], strict=True))
ULTRALYTICS_GFLOPS = dict(zip(SCALE_NAMES, [6.6, 21.7, 68.5, 87.6, 196.0], strict=True))


def meta_model(name: str, num_classes: int = 80) -> yolo11.YOLO11Detector:
    """Shapes only: building l/x for real and running them at 640 would cost seconds on 2 cores."""
    with torch.device("meta"):
        return yolo11.create_model(name, num_classes=num_classes)


@pytest.mark.parametrize("name", SCALE_NAMES)
def test_parameter_count_matches_ultralytics(name):
    model = meta_model(name)
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert params == ULTRALYTICS_PARAMS[name]
    assert trainable == params - 16  # the DFL conv (16 weights) is frozen


@pytest.mark.parametrize("name", SCALE_NAMES)
def test_gflops_at_640_match_ultralytics(name):
    model = meta_model(name).eval()
    plain = count_gflops(model, 640, 640)
    assert abs(plain - ULTRALYTICS_GFLOPS[name]) / ULTRALYTICS_GFLOPS[name] < 0.01
    # thop's convention (BN and biases counted, matmuls not) reproduces the published one-decimal figure.
    assert round(count_gflops(model, 640, 640, ultralytics=True), 1) == ULTRALYTICS_GFLOPS[name]


@pytest.mark.parametrize("name", SCALE_NAMES)
@pytest.mark.parametrize("size", [(320, 320), (640, 640), (480, 640)])
def test_output_shapes_every_scale(name, size):
    model = meta_model(name, num_classes=7)
    images = torch.empty(2, 3, *size, device="meta")
    maps = model(images)
    assert [tuple(m.shape) for m in maps] == [(2, 64 + 7, size[0] // s, size[1] // s) for s in model.strides]


@pytest.mark.parametrize("name", SCALE_NAMES)
def test_real_forward_small_input(name):
    model = yolo11.create_model(name, num_classes=3).eval()
    with torch.no_grad():
        maps = model(torch.rand(1, 3, 64, 96))
    assert [tuple(m.shape) for m in maps] == [(1, 67, 8, 12), (1, 67, 4, 6), (1, 67, 2, 3)]
    assert all(torch.isfinite(m).all() for m in maps)


@pytest.mark.parametrize("size", [(320, 320), (640, 640), (480, 640)])
def test_yolo11n_real_forward_sizes(size):
    model = yolo11.create_model("yolo11n", num_classes=80).eval()
    with torch.no_grad():
        maps = model(torch.rand(1, 3, *size))
    assert [tuple(m.shape[-2:]) for m in maps] == [(size[0] // s, size[1] // s) for s in (8, 16, 32)]


def test_forward_returns_raw_maps_in_train_and_eval():
    model = yolo11.create_model("yolo11n", num_classes=2)
    images = torch.rand(2, 3, 64, 64)
    train_maps = model.train()(images)
    eval_maps = model.eval()(images)
    assert isinstance(train_maps, list) and isinstance(eval_maps, list)
    assert [m.shape for m in train_maps] == [m.shape for m in eval_maps]


@pytest.mark.parametrize("num_classes", [1, 5, 80])
def test_head_bias_init_equals_ultralytics(num_classes):
    """Biases of a fresh yolo11n.yaml Detect in Ultralytics 8.4.190 (tests/helpers/make_ultralytics_reference.py)."""
    recorded = json.loads((Path(__file__).parent / "data" / "ultralytics_head_bias.json").read_text())
    expected = recorded["classes"][str(num_classes)]
    head = yolo11.create_model("yolo11n", num_classes=num_classes).head
    for level, (box, cls) in enumerate(zip(head.cv2, head.cv3, strict=True)):
        assert box[-1].bias.tolist() == expected["box"][level]
        torch.testing.assert_close(cls[-1].bias, torch.tensor(expected["cls"][level]), rtol=1e-7, atol=0)


def test_batchnorm_settings_and_frozen_dfl():
    model = yolo11.create_model("yolo11n")
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert norms and all(m.eps == 1e-3 and m.momentum == 0.03 for m in norms)
    assert not model.head.dfl.conv.weight.requires_grad
    assert model.head.dfl.conv.weight.flatten().tolist() == list(range(16))


def test_gradients_reach_every_trainable_parameter():
    model = yolo11.create_model("yolo11n", num_classes=2).train()
    sum(m.float().pow(2).mean() for m in model(torch.rand(2, 3, 64, 64))).backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert missing == []
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def _randomise_batchnorm(model: nn.Module, seed: int = 0) -> None:
    """Non-trivial BN statistics, so folding them is actually exercised."""
    generator = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=generator) + 0.5)
            m.weight.data.copy_(torch.rand(n, generator=generator) + 0.5)
            m.bias.data.copy_(torch.randn(n, generator=generator) * 0.1)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_fuse_keeps_outputs(dtype, tolerance):
    torch.manual_seed(0)
    model = yolo11.create_model("yolo11n", num_classes=4)
    _randomise_batchnorm(model)
    model = model.to(dtype).eval()
    images = torch.rand(2, 3, 96, 64, dtype=dtype)
    with torch.no_grad():
        before = model(images)
        fused = model.fuse()
        after = fused(images)
    assert fused is model
    assert not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    convs = [m for m in model.modules() if isinstance(m, Conv)]
    assert all(isinstance(m.bn, nn.Identity) and m.conv.bias is not None for m in convs)
    for a, b in zip(before, after, strict=True):
        assert (a - b).abs().max().item() <= tolerance


def test_config_rebuilds_the_same_architecture():
    model = yolo11.create_model("yolo11s", num_classes=12)
    assert model.config == {"name": "yolo11s", "num_classes": 12, "backbone": None, "names": None}
    assert (model.num_classes, model.reg_max, model.strides) == (12, 16, (8, 16, 32))
    with torch.device("meta"):
        rebuilt = yolo11.create_model(**model.config)
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {k: v.shape for k, v in model.state_dict().items()}


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "yolo11q"}, "unknown YOLO11 scale"),
    ({"num_classes": 0}, "num_classes"),
    ({"pretrained": True}, "timm backbone"),
])
def test_create_model_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        yolo11.create_model(**kwargs)


def test_uint8_images_are_scaled_inside_the_model():
    model = yolo11.create_model("yolo11n", num_classes=3).eval()
    images = torch.randint(0, 256, (2, 3, 64, 96), dtype=torch.uint8)
    with torch.no_grad():
        for from_uint8, from_float in zip(model(images), model(images.float() / 255), strict=True):
            assert torch.equal(from_uint8, from_float)



def test_the_nchw_depthwise_path_equals_the_channels_last_conv_forward_and_backward():
    """On CUDA, depthwise ``Conv``s run NCHW inside a channels_last model (cuDNN compiles its NHWC depthwise kernels
    at run time); ``_depthwise_nchw`` must be the same convolution: outputs and gradients equal, NCHW output."""
    from yolo11.models.blocks import Conv, _depthwise_nchw

    torch.manual_seed(0)
    block = Conv(16, 16, 3, stride=2, groups=16).to(memory_format=torch.channels_last)
    x = torch.randn(2, 16, 20, 24).contiguous(memory_format=torch.channels_last).requires_grad_(True)
    ours = _depthwise_nchw(block.conv, x)
    assert ours.is_contiguous() and not ours.is_contiguous(memory_format=torch.channels_last)
    theirs = block.conv(x)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
    (grad_x, grad_w), = [torch.autograd.grad(out.square().sum(), (x, block.conv.weight)) for out in (ours,)]
    (ref_x, ref_w), = [torch.autograd.grad(out.square().sum(), (x, block.conv.weight)) for out in (theirs,)]
    torch.testing.assert_close(grad_x, ref_x, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad_w, ref_w, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_channels_last_model_on_cuda_runs_its_depthwise_convs_nchw_with_the_same_outputs(monkeypatch):
    """yolo11n channels_last on CUDA (its 7 depthwise convs NCHW inside) against the same weights NCHW: the same maps
    and gradients in float32 (cuDNN's algorithms differ by layout: float rounding only)."""
    import copy

    torch.manual_seed(0)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # full float32 in both layouts
    nchw = yolo11.create_model("yolo11n", num_classes=6).cuda().train()
    last = copy.deepcopy(nchw).to(memory_format=torch.channels_last)
    images = torch.randint(0, 256, (2, 3, 128, 160), dtype=torch.uint8, device="cuda")
    outs = [model(images.contiguous(memory_format=fmt)) for model, fmt in
            ((nchw, torch.contiguous_format), (last, torch.channels_last))]
    for a, b in zip(*outs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)
    for out in outs:
        sum(o.square().mean() for o in out).backward()
    for (name, a), b in zip(nchw.named_parameters(), last.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-4, msg=name)
