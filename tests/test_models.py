"""The assembled detector: Ultralytics' parameter counts and GFLOPs, output shapes, head init, fusion, config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import yolo11
from yolo11.engine.compile import MODEL_INDUCTOR_OPTIONS, compile_model
from yolo11.models.blocks import C2PSA, SPPF, C3k2, Conv, dense_copy, repeat_nearest_2x, separable_max_pool2d
from yolo11.models.flops import count_gflops
from yolo11.models.neck import YOLO11Neck

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
    """Biases of a fresh yolo11n.yaml Detect in Ultralytics 8.4.190 (tests/make_ultralytics_reference.py)."""
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
    assert model.config == {"name": "yolo11s", "num_classes": 12, "backbone": None}
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


def window_maxima(x: torch.Tensor, pooled: torch.Tensor, kernel_size: int) -> torch.Tensor:
    """``bool`` like ``x``: positions equal to the maximum of some stride-1 window that contains them."""
    pad = kernel_size // 2
    height, width = x.shape[-2:]
    padded = nn.functional.pad(x, (pad,) * 4, value=float("-inf"))
    hit = torch.zeros_like(padded, dtype=torch.bool)
    for dy in range(kernel_size):
        for dx in range(kernel_size):
            hit[..., dy:dy + height, dx:dx + width] |= padded[..., dy:dy + height, dx:dx + width] == pooled
    return hit[..., pad:pad + height, pad:pad + width]


@pytest.mark.parametrize("ties", [False, True])
def test_separable_max_pool_matches_max_pool(ties):
    x = torch.randn(2, 4, 11, 13, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 3
    if ties:
        x = x.round()  # many equal maxima in each window
    x.requires_grad_()
    upstream = torch.rand(2, 4, 11, 13, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) + 0.1
    for kernel_size in (3, 5):
        reference = nn.MaxPool2d(kernel_size, 1, kernel_size // 2)(x)
        separable = separable_max_pool2d(x, kernel_size)
        assert torch.equal(separable, reference)
        grad_reference, = torch.autograd.grad(reference, x, upstream)
        grad_separable, = torch.autograd.grad(separable, x, upstream)
        if ties:  # shared between equal maxima instead of given to one: the same total, on window maxima only
            assert torch.allclose(grad_separable.sum(), grad_reference.sum())
            maxima = window_maxima(x.detach(), reference.detach(), kernel_size)
            assert not (grad_separable != 0)[~maxima].any()
            assert (grad_separable >= 0).all()
            assert not torch.equal(grad_separable, grad_reference)  # the rounding did make ties
        else:
            assert torch.allclose(grad_separable, grad_reference, rtol=1e-12, atol=0)  # summed in another order


def compiled_with_graph(module: nn.Module, *inputs):
    """``torch.compile(module)(*inputs)`` with a backend that keeps dynamo's graph: (output, the graph's node
    targets as strings)."""
    graphs = []

    def capture(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    torch._dynamo.reset()
    output = torch.compile(module, backend=capture, fullgraph=True)(*inputs)
    return output, [str(node.target) for node in graphs[0].graph.nodes]


def test_sppf_under_compile_pools_separably_with_the_same_output():
    torch.manual_seed(0)
    block = SPPF(16, 16).train()
    x = torch.randn(2, 16, 12, 12)
    expected = block(x)
    compiled, targets = compiled_with_graph(block, x)
    assert torch.allclose(compiled, expected, atol=1e-6)
    assert sum("maximum" in t for t in targets) == 3 * 2 * 4  # 3 pools, rows and columns, 4 maxima each
    assert not any("max_pool" in t for t in targets)
    _, targets = compiled_with_graph(block.eval(), x)
    assert not any("maximum" in t for t in targets)  # inference: nn.MaxPool2d


def test_neck_under_compile_upsamples_by_repeating_with_the_same_output():
    torch.manual_seed(0)
    neck = YOLO11Neck((8, 16, 32), (8, 16, 32), 1, c3k=False).train()
    features = [torch.randn(2, c, s, s) for c, s in ((8, 16), (16, 8), (32, 4))]
    expected = neck(features)
    compiled, targets = compiled_with_graph(neck, features)
    for a, b in zip(compiled, expected, strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    assert sum("expand" in t for t in targets) == 2
    assert not any("interpolate" in t or "upsample" in t for t in targets)


@pytest.mark.parametrize("channels_last", [False, True])
def test_dense_copy_keeps_values_and_memory_format(channels_last):
    x = torch.randn(2, 8, 5, 6)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    half = x.chunk(2, 1)[1]
    assert not half.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    dense = dense_copy(half)
    assert torch.equal(dense, half)
    assert dense.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


@pytest.mark.parametrize("block", [C3k2(16, 16, 2), C3k2(16, 16, 1, c3k=True), C2PSA(128, 128)],
                         ids=["C3k2", "C3k2-c3k", "C2PSA"])
def test_split_blocks_under_compile_copy_their_half_with_the_same_output(block):
    torch.manual_seed(0)
    x = torch.randn(2, block.cv1.conv.in_channels, 8, 8).contiguous(memory_format=torch.channels_last)
    expected = block.train()(x)
    compiled, targets = compiled_with_graph(block, x)
    assert torch.allclose(compiled, expected, atol=1e-5)
    assert sum(t == "contiguous" for t in targets) == 1
    _, targets = compiled_with_graph(block.eval(), x)
    assert not any(t == "contiguous" for t in targets)  # inference: the view as it is


@pytest.mark.parametrize(("in_channels", "kernel_size", "stride"), [(3, 3, 2), (3, 1, 1), (5, 3, 1), (2, 5, 2)])
def test_conv_as_matmul_is_the_same_conv(in_channels, kernel_size, stride):
    torch.manual_seed(0)
    conv = Conv(in_channels, 16, kernel_size, stride).double()
    x = torch.rand(2, in_channels, 31, 48, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    expected = conv.conv(x)
    upstream = torch.randn_like(expected)
    grad_expected, = torch.autograd.grad(expected, conv.conv.weight, upstream)
    product = conv._conv_as_matmul(x)
    grad_product, = torch.autograd.grad(product, conv.conv.weight, upstream)
    assert product.shape == expected.shape
    assert product.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(product, expected, atol=1e-12)
    assert torch.allclose(grad_product, grad_expected, atol=1e-10)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_compiled_training_step_matches_eager_on_cuda():
    """The trainer's compiled model (``compile_model``: stem conv as patches x weight, separable SPPF pools,
    repeated upsampling, the model's inductor options) gives eager's outputs and parameter gradients."""
    torch.manual_seed(0)
    model = yolo11.create_model("yolo11n", num_classes=80).cuda().to(memory_format=torch.channels_last).train()
    images = torch.randint(0, 256, (4, 3, 128, 160), dtype=torch.uint8, device="cuda")
    images = images.contiguous(memory_format=torch.channels_last)
    upstream = [torch.randn(4, 144, h, w, device="cuda") for h, w in ((16, 20), (8, 10), (4, 5))]
    trained = [p for p in model.parameters() if p.requires_grad]  # not the fixed DFL projection

    def outputs_and_grads(forward):
        model.zero_grad(set_to_none=True)
        outputs = forward(images)
        sum((o * u).sum() for o, u in zip(outputs, upstream, strict=True)).backward()
        return [o.detach() for o in outputs], torch.cat([p.grad.flatten() for p in trained])

    with torch.backends.cudnn.flags(allow_tf32=False):
        expected, grads_expected = outputs_and_grads(model)
        compiled, grads_compiled = outputs_and_grads(compile_model(model))
    for a, b in zip(compiled, expected, strict=True):
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-3), (a - b).abs().max()
    error = (grads_compiled - grads_expected).norm() / grads_expected.norm()
    assert error < 1e-3, error


def test_compile_model_adds_the_model_options_to_the_mode(monkeypatch):
    seen = {}
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: seen.update(kwargs) or model)
    model = nn.Linear(2, 2)
    assert compile_model(model, "reduce-overhead") is model
    assert seen["options"] == {"triton.cudagraphs": True, **MODEL_INDUCTOR_OPTIONS}
    compile_model(model, None, realize_reads_threshold=7)
    assert seen["options"] == {**MODEL_INDUCTOR_OPTIONS, "realize_reads_threshold": 7}


@pytest.mark.parametrize("channels_last", [False, True])
def test_repeat_nearest_2x_is_nearest_upsampling(channels_last):
    x = torch.randn(2, 5, 3, 4, dtype=torch.float64)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_()
    upstream = torch.randn(2, 5, 6, 8, dtype=torch.float64)
    expected = nn.Upsample(scale_factor=2, mode="nearest")(x)
    repeated = repeat_nearest_2x(x)
    assert torch.equal(repeated, expected)
    assert repeated.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    grad_expected, = torch.autograd.grad(expected, x, upstream)
    grad_repeated, = torch.autograd.grad(repeated, x, upstream)
    assert torch.allclose(grad_repeated, grad_expected, rtol=1e-12, atol=1e-12)
