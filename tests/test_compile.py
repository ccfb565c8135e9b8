"""``yolo11.engine.compile``: the model's compile (inductor options, the fast training layers) and the loss's."""

from __future__ import annotations

import copy

import pytest
import torch

import yolo11
from yolo11.engine.compile import MODEL_INDUCTOR_OPTIONS, CompiledLoss, compile_model, use_compile_cache
from yolo11.loss import DetectionLoss
from yolo11.models.blocks import SPPF
from yolo11.models.fast_layers import SeparablePoolSPPF


def test_compile_model_adds_the_model_options_to_the_mode(monkeypatch):
    seen = {}
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: seen.update(kwargs) or model)
    model = torch.nn.Linear(2, 2)
    assert compile_model(model, "reduce-overhead", fast_layers=False) is model
    assert seen["options"] == {"triton.cudagraphs": True, **MODEL_INDUCTOR_OPTIONS}
    compile_model(model, None, fast_layers=False, realize_reads_threshold=7)
    assert seen["options"] == {**MODEL_INDUCTOR_OPTIONS, "realize_reads_threshold": 7}


@pytest.mark.parametrize("fast_layers", [False, True])
def test_compile_model_swaps_in_the_fast_layers_only_when_asked(monkeypatch, fast_layers):
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: model)
    with torch.device("meta"):
        model = yolo11.create_model("yolo11n", num_classes=3)
    assert compile_model(model, fast_layers=fast_layers) is model
    assert type(model.backbone.layers[9]) is (SeparablePoolSPPF if fast_layers else SPPF)


def test_compiled_loss_is_one_graph_for_every_box_count():
    """Targets are padded to each batch's own box count M: the compiled loss must not recompile as M changes
    (dynamo's counting backend sees every graph it is handed)."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter = CompileCounter()
    loss_fn = DetectionLoss(3)
    compiled = CompiledLoss(loss_fn, backend=counter, fullgraph=True)
    gen = torch.Generator().manual_seed(0)
    feats = [torch.randn(2, 64 + 3, 64 // s, 64 // s, generator=gen) for s in (8, 16, 32)]
    for rows in (8, 13, 30, 2):
        xy = torch.rand(2, rows, 2, generator=gen) * 40
        boxes = torch.cat([xy, xy + 8 + torch.rand(2, rows, 2, generator=gen) * 16], -1)
        labels = torch.randint(0, 3, (2, rows), generator=gen)
        torch.testing.assert_close(compiled(feats, boxes, labels)[1], loss_fn(feats, boxes, labels)[1])
    assert counter.frame_count == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["yolo11n", "yolo26n"])
def test_compiled_fast_model_matches_the_eager_plain_model_on_cuda(name):
    """The trainer's compiled model on CUDA (``compile_model(..., fast_layers=True)``: the fast training layers and
    the model's inductor options) gives the eager plain model's outputs and parameter gradients (YOLO26: both
    branches)."""
    torch.manual_seed(0)
    plain = yolo11.create_model(name, num_classes=80).cuda().to(memory_format=torch.channels_last).train()
    compiled = compile_model(copy.deepcopy(plain), fast_layers=True)
    images = torch.randint(0, 256, (4, 3, 128, 160), dtype=torch.uint8, device="cuda")
    images = images.contiguous(memory_format=torch.channels_last)
    branches = 2 if plain.end2end else 1
    upstream = [torch.randn(4, 4 * plain.reg_max + 80, h, w, device="cuda")
                for _ in range(branches) for h, w in ((16, 20), (8, 10), (4, 5))]

    def outputs_and_grads(model):
        outputs = model(images)
        if hasattr(outputs, "one2one"):
            outputs = [*outputs.one2many, *outputs.one2one]
        sum((o * u).sum() for o, u in zip(outputs, upstream, strict=True)).backward()
        trained = [p for p in model.parameters() if p.requires_grad]  # not the fixed DFL projection
        return [o.detach() for o in outputs], torch.cat([p.grad.flatten() for p in trained])

    with torch.backends.cudnn.flags(allow_tf32=False):
        expected, grads_expected = outputs_and_grads(plain)
        outputs, grads = outputs_and_grads(compiled)
    for a, b in zip(outputs, expected, strict=True):
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-3), (a - b).abs().max()
    error = (grads - grads_expected).norm() / grads_expected.norm()
    assert error < 1e-3, error


def test_compile_cache_goes_to_the_chosen_folder_unless_the_user_set_one(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    assert use_compile_cache(str(tmp_path / "cache")) == str(tmp_path / "cache")
    assert (tmp_path / "cache").is_dir()
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    assert cache_dir() == str(tmp_path / "cache")  # where inductor will read and write its caches
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert use_compile_cache(str(tmp_path / "cache")) == str(tmp_path / "mine")
