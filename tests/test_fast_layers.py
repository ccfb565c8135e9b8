"""The fast training layers (``yolo11.models.fast_layers``): each function equals the op it replaces, and the swap
changes no output, gradient or state-dict key of a detector."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import yolo11
from yolo11.models.blocks import C2PSA, SPPF, C3k2, Conv
from yolo11.models.fast_layers import (
    DenseSplitC2PSA,
    DenseSplitC3k2,
    MatmulConv,
    RepeatUpsample2x,
    SeparablePoolSPPF,
    dense_copy,
    repeat_nearest_2x,
    separable_max_pool2d,
    use_fast_training_layers,
)

FAST_VARIANTS = {C3k2: DenseSplitC3k2, C2PSA: DenseSplitC2PSA, SPPF: SeparablePoolSPPF}


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


@pytest.mark.parametrize(("in_channels", "kernel_size", "stride"), [(3, 3, 2), (3, 1, 1), (5, 3, 1), (2, 5, 2)])
@pytest.mark.parametrize("fused", [False, True], ids=["conv", "fused-conv"])
def test_matmul_conv_is_the_same_conv(in_channels, kernel_size, stride, fused):
    torch.manual_seed(0)
    conv = Conv(in_channels, 16, kernel_size, stride).double()
    if fused:  # the conv then has a bias
        nn.init.normal_(conv.bn.running_mean)
        conv.fuse()
    x = torch.rand(2, in_channels, 31, 48, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    expected = conv.conv(x)
    upstream = torch.randn_like(expected)
    grad_expected, = torch.autograd.grad(expected, conv.conv.weight, upstream)
    product = MatmulConv(conv).conv_as_matmul(x)
    grad_product, = torch.autograd.grad(product, conv.conv.weight, upstream)
    assert product.shape == expected.shape
    assert product.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(product, expected, atol=1e-12)
    assert torch.allclose(grad_product, grad_expected, atol=1e-10)


def test_matmul_conv_refuses_grouped_convs():
    with pytest.raises(ValueError, match="groups 1"):
        MatmulConv(Conv(4, 4, 3, groups=2))


def module_types(model: nn.Module) -> dict[str, type]:
    return {name: type(module) for name, module in model.named_modules()}


@pytest.mark.parametrize("name", ["yolo11n", "yolo11s", "yolo11m", "yolo26n"])
def test_swap_replaces_every_known_block_and_keeps_the_state_dict(name):
    with torch.device("meta"):
        plain = yolo11.create_model(name, num_classes=3)
    fast = use_fast_training_layers(copy.deepcopy(plain))
    before, after = module_types(plain), module_types(fast)
    assert after.keys() == before.keys()  # the same module tree, so the same state-dict keys
    assert list(fast.state_dict()) == list(plain.state_dict())
    assert [(n, p.shape) for n, p in fast.named_parameters()] == [(n, p.shape) for n, p in plain.named_parameters()]
    for path, kind in before.items():
        if kind in FAST_VARIANTS:
            assert after[path] is FAST_VARIANTS[kind], path
        elif path == "backbone.layers.0":  # the stem, 3 input channels
            assert after[path] is MatmulConv
        elif path == "neck.upsample":
            assert after[path] is RepeatUpsample2x
        else:
            assert after[path] is kind, path
    counts = {kind: list(after.values()).count(kind) for kind in (*FAST_VARIANTS.values(), MatmulConv)}
    assert counts == {DenseSplitC3k2: 8, DenseSplitC2PSA: 1, SeparablePoolSPPF: 1, MatmulConv: 1}
    assert module_types(use_fast_training_layers(fast)) == after  # a second call changes nothing


def test_swap_leaves_a_timm_backbone_alone():
    with torch.device("meta"):
        plain = yolo11.create_model("yolo11n", num_classes=3, backbone="resnet18")
    fast = use_fast_training_layers(copy.deepcopy(plain))
    assert module_types(fast.backbone) == module_types(plain.backbone)
    assert isinstance(fast.neck.upsample, RepeatUpsample2x)
    assert all(type(m) is not C3k2 for m in fast.neck.modules())
    assert list(fast.state_dict()) == list(plain.state_dict())


def outputs_and_grads(model: nn.Module, images: torch.Tensor, upstream: list[torch.Tensor]):
    model.zero_grad(set_to_none=True)
    outputs = model(images)
    if hasattr(outputs, "one2one"):  # YOLO26: both branches' maps
        outputs = [*outputs.one2many, *outputs.one2one]
    sum((o * u).sum() for o, u in zip(outputs, upstream, strict=True)).backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    return [o.detach() for o in outputs], grads


@pytest.mark.parametrize(("name", "channels_last"),
                         [("yolo11n", False), ("yolo11n", True), ("yolo11s", False), ("yolo26n", True)])
def test_fast_layers_keep_training_outputs_and_gradients(name, channels_last):
    """Training mode (BatchNorm on batch statistics): the same maps, parameter gradients and running statistics.
    In float64: in float32 the stem's rounding differences (1e-7), amplified by the batch-statistics BatchNorms,
    reach 1e-5 at the maps and 1e-4 in the gradients. Random inputs: no window of SPPF's pools holds two equal
    maxima."""
    torch.manual_seed(0)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    plain = yolo11.create_model(name, num_classes=5).double().to(memory_format=memory_format).train()
    fast = use_fast_training_layers(copy.deepcopy(plain))
    images = torch.rand(2, 3, 96, 128, dtype=torch.float64).contiguous(memory_format=memory_format)
    branches = 2 if plain.end2end else 1  # YOLO26's one-to-many and one-to-one maps
    upstream = [torch.randn(2, 4 * plain.reg_max + 5, 96 // s, 128 // s, dtype=torch.float64)
                for _ in range(branches) for s in plain.strides]
    expected, grads_expected = outputs_and_grads(plain, images, upstream)
    outputs, grads = outputs_and_grads(fast, images, upstream)
    for a, b in zip(outputs, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    assert grads.keys() == grads_expected.keys()
    for key, grad in grads.items():  # relative to the tensor's largest entry: a few entries nearly cancel
        error = (grad - grads_expected[key]).abs().max().item()
        assert error <= 1e-9 * grads_expected[key].abs().max().item() + 1e-12, (key, error)
    state, state_expected = fast.state_dict(), plain.state_dict()
    for key, value in state.items():
        torch.testing.assert_close(value, state_expected[key], rtol=1e-9, atol=1e-12)


def test_fast_layers_keep_eval_and_fused_outputs():
    torch.manual_seed(0)
    plain = yolo11.create_model("yolo11n", num_classes=5).double().train()
    with torch.no_grad():
        plain(torch.rand(4, 3, 64, 64, dtype=torch.float64))  # running statistics away from their initial values
    fast = use_fast_training_layers(copy.deepcopy(plain)).eval()
    plain.eval()
    images = torch.rand(2, 3, 96, 128, dtype=torch.float64)
    with torch.no_grad():
        expected, outputs = ([*model(images), *model.fuse()(images)] for model in (plain, fast))
    for a, b in zip(outputs, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    assert isinstance(fast.backbone.layers[0], MatmulConv) and fast.backbone.layers[0].conv.bias is not None
