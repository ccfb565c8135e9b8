"""YOLO26 beside YOLO11: Ultralytics 8.4.190's architecture layer for layer, its raw maps (both branches) in
float64, the NMS-free top-k output, and ``.pt`` import; live comparisons skip when Ultralytics is not importable,
one recorded comparison (tests/helpers/make_ultralytics_yolo26_reference.py) runs without it."""

from __future__ import annotations

import copy
import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from helpers import make_ultralytics_yolo26_reference as reference

import yolo11
from yolo11.geometry import flatten_levels, ltrb_to_xyxy, make_anchors
from yolo11.models import End2EndMaps, YOLO26Detector
from yolo11.models.fast_layers import use_fast_training_layers
from yolo11.models.flops import count_gflops
from yolo11.postprocess import Postprocessor, decode, end2end_detections, end2end_topk
from yolo11.weights.ultralytics import ultralytics_key

SCALE_NAMES = ["yolo26n", "yolo26s", "yolo26m", "yolo26l", "yolo26x"]
# The model summaries in Ultralytics 8.4.190's yolo26.yaml (80 classes), checked live below.
ULTRALYTICS_PARAMS = dict(zip(SCALE_NAMES, [2_572_280, 10_009_784, 21_896_248, 26_299_704, 58_993_368], strict=True))

needs_ultralytics = pytest.mark.skipif(importlib.util.find_spec("ultralytics") is None,
                                       reason="ultralytics 8.4.190 is not importable (PYTHONPATH=/work/ultra)")
RECORDED = Path(__file__).parent / "data" / "ultralytics_yolo26_cases.npz"


def ultralytics_model(name: str, num_classes: int):
    """A fresh Ultralytics ``DetectionModel`` built from its own ``yolo26?.yaml``, float64."""
    from ultralytics.nn.tasks import DetectionModel

    return DetectionModel(f"{name}.yaml", nc=num_classes, verbose=False).double()


def randomise_batchnorm(model: torch.nn.Module, seed: int) -> None:
    """Non-trivial running statistics and affine parameters, so eval-mode BN is exercised (fresh ones are 0/1)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                for tensor, low, high in ((module.running_mean, -0.5, 0.5), (module.running_var, 0.5, 2.0),
                                          (module.weight, 0.5, 1.5), (module.bias, -0.3, 0.3)):
                    tensor.copy_(torch.rand(tensor.shape, generator=generator, dtype=torch.float64) * (high - low)
                                 + low)


def ours_from(theirs: torch.nn.Module, name: str, num_classes: int) -> YOLO26Detector:
    """Our model with every tensor of Ultralytics' ``theirs``, through the import's key mapping."""
    model = yolo11.create_model(name, num_classes=num_classes).double()
    state = theirs.state_dict()
    model.load_state_dict({key: state[ultralytics_key(key)] for key in model.state_dict()}, strict=True)
    return model


def split(maps: list[torch.Tensor], num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Our per-level maps as Ultralytics' ``boxes (B, 4, A)`` and ``scores (B, C, A)``."""
    flat = flatten_levels(maps)
    return flat[:, :-num_classes], flat[:, -num_classes:]


@pytest.mark.parametrize("name", SCALE_NAMES)
def test_parameter_count_matches_ultralytics_summary(name):
    with torch.device("meta"):
        model = yolo11.create_model(name)
    params = [p for p in model.parameters()]
    assert sum(p.numel() for p in params) == ULTRALYTICS_PARAMS[name]
    assert all(p.requires_grad for p in params)  # no DFL conv: every parameter trains, as the summary's gradients
    assert isinstance(model, YOLO26Detector) and model.reg_max == 1 and model.end2end


@needs_ultralytics
@pytest.mark.parametrize("name", ["yolo26n", "yolo26l"])  # plain C3k2 at depth 0.5; C3k everywhere at depth 1.0
def test_state_dict_layout_equals_ultralytics(name):
    """Every Ultralytics tensor has a counterpart of the same shape and dtype, and nothing else (layer for layer)."""
    theirs = {k: (v.shape, v.dtype) for k, v in ultralytics_model(name, 80).float().state_dict().items()}
    with torch.device("meta"):
        ours = {ultralytics_key(k): (v.shape, v.dtype) for k, v in yolo11.create_model(name).state_dict().items()}
    assert ours == theirs
    assert sum(v[0].numel() for k, v in theirs.items() if "running" not in k and "num_batches" not in k) \
        == ULTRALYTICS_PARAMS[name]


@needs_ultralytics
@pytest.mark.parametrize("name", ["yolo26n"])  # the other scales' layers: the eval test and the layout test
def test_train_mode_maps_and_gradients_equal_ultralytics_float64(name):
    torch.manual_seed(0)
    theirs = ultralytics_model(name, num_classes=5)
    ours = ours_from(theirs, name, 5)
    images = torch.rand(2, 3, 64, 96, dtype=torch.float64)
    expected = theirs.train()(images)
    maps = ours.train()(images)
    assert isinstance(maps, End2EndMaps)
    for branch in ("one2many", "one2one"):
        boxes, scores = split(getattr(maps, branch), 5)
        torch.testing.assert_close(boxes, expected[branch]["boxes"], rtol=0, atol=1e-10)
        torch.testing.assert_close(scores, expected[branch]["scores"], rtol=0, atol=1e-10)
    # the same scalar of both branches on both sides: the one-to-one branch reaches only its own head in both
    generator = torch.Generator().manual_seed(5)
    ours_loss, theirs_loss = 0, 0
    for branch in ("one2many", "one2one"):
        theirs_parts = (expected[branch]["boxes"], expected[branch]["scores"])
        for ours_part, theirs_part in zip(split(getattr(maps, branch), 5), theirs_parts, strict=True):
            weight = torch.rand(ours_part.shape, generator=generator, dtype=torch.float64)
            ours_loss, theirs_loss = ours_loss + (weight * ours_part).sum(), theirs_loss + (weight * theirs_part).sum()
    ours_loss.backward()
    theirs_loss.backward()
    grads = dict(theirs.named_parameters())
    for key, param in ours.named_parameters():
        torch.testing.assert_close(param.grad, grads[ultralytics_key(key)].grad, rtol=1e-9, atol=1e-9)


@needs_ultralytics
@pytest.mark.parametrize("name", ["yolo26n", "yolo26m"])  # plain C3k2 in layers 2/4 (n); C3k there (m)
def test_eval_maps_and_inference_outputs_equal_ultralytics_float64(name):
    torch.manual_seed(1)
    theirs = ultralytics_model(name, num_classes=7)
    randomise_batchnorm(theirs, seed=2)
    ours = ours_from(theirs, name, 7).eval()
    theirs.eval()
    images = torch.rand(2, 3, 96, 64, dtype=torch.float64)
    with torch.no_grad():
        maps = ours(images)
        theirs.end2end = False  # Ultralytics 8.4.190's default (nms=None): one-to-many head, decoded for NMS
        decoded, raw = theirs(images)
        theirs.end2end = True  # nms=False: the one-to-one head, top-k without NMS
        topk, _ = theirs(images)
    for branch in ("one2many", "one2one"):
        boxes, scores = split(getattr(maps, branch), 7)
        torch.testing.assert_close(boxes, raw[branch]["boxes"], rtol=0, atol=1e-10)
        torch.testing.assert_close(scores, raw[branch]["scores"], rtol=0, atol=1e-10)
    torch.testing.assert_close(decode(maps.one2many, reg_max=1), decoded, rtol=0, atol=1e-10)
    ours_topk = end2end_topk(maps.one2one)
    assert ours_topk.shape == topk.shape == (2, 96 + 24 + 6, 6)  # k = min(300, anchors)
    torch.testing.assert_close(ours_topk, topk, rtol=0, atol=1e-10)


@needs_ultralytics
@pytest.mark.parametrize("agnostic", [False, True])
def test_end2end_topk_equals_ultralytics_postprocess_with_ties(agnostic):
    """300 of 8400 anchors at 640 px, float32, with many tied scores: the same rows in the same order."""
    from ultralytics.nn.modules.head import Detect

    head = Detect(nc=80, reg_max=1, end2end=True, ch=(16, 16, 16))
    head.agnostic_nms = agnostic
    generator = torch.Generator().manual_seed(3)
    feats = [torch.randn(2, 84, 640 // s, 640 // s, generator=generator) for s in (8, 16, 32)]
    for f in feats:  # coarse logits: equal scores across anchors and classes
        f[:, 4:] = (f[:, 4:] * 2).round()
    ours = end2end_topk(feats, agnostic=agnostic)
    boxes = flatten_levels(feats)[:, :4]
    points, stride = make_anchors([f.shape[2:] for f in feats], (8, 16, 32))
    xyxy = ltrb_to_xyxy(boxes.transpose(1, 2), points) * stride
    preds = torch.cat((xyxy, flatten_levels(feats)[:, 4:].sigmoid().transpose(1, 2)), -1)  # (B, A, 4 + C)
    theirs = head.postprocess(preds)
    assert ours.shape == theirs.shape == (2, 300, 6)
    assert torch.equal(ours, theirs)


@needs_ultralytics
def test_end2end_detections_equal_ultralytics_nms_function():
    from ultralytics.utils.nms import non_max_suppression as ultralytics_nms

    generator = torch.Generator().manual_seed(4)
    topk = torch.rand(3, 300, 6, generator=generator)
    topk[..., 4] = topk[..., 4].sort(dim=1, descending=True)[0]
    for conf, max_det in ((0.001, 300), (0.25, 300), (0.5, 20)):
        ours = end2end_detections(topk, conf, max_det)
        theirs = ultralytics_nms(topk.clone(), conf, 0.7, max_det=max_det, end2end=True)
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))


def test_postprocessor_end2end_applies_conf_and_max_det():
    torch.manual_seed(0)
    model = yolo11.create_model("yolo26n", num_classes=3).eval()
    with torch.no_grad():
        maps = model(torch.rand(1, 3, 64, 64))
    post = Postprocessor(conf=0.0, max_det=10, reg_max=1, end2end=True)
    (det,) = post(maps.one2one)
    assert det.shape == (10, 6) and torch.all(det[:-1, 4] >= det[1:, 4])
    (nms_det,) = Postprocessor(conf=0.0, reg_max=1)(maps.one2many)  # the one-to-many head with NMS also runs
    assert nms_det.shape[1] == 6 and len(nms_det) > 0


def test_forward_returns_both_branches_in_every_mode_and_detaches_one2one_in_training():
    model = yolo11.create_model("yolo26n", num_classes=2)
    images = torch.rand(1, 3, 64, 64)
    for mode in (True, False):
        maps = model.train(mode)(images)
        assert isinstance(maps, End2EndMaps)
        assert [m.shape for m in maps.one2many] == [m.shape for m in maps.one2one] == \
            [(1, 4 + 2, 64 // s, 64 // s) for s in model.strides]
    model.train()
    sum(m.sum() for m in model(images).one2one).backward()
    assert all(p.grad is None for p in model.backbone.parameters())  # the one-to-one loss trains only its head
    assert all(p.grad is not None for p in model.head.one2one_cv2.parameters())


def test_fresh_one2one_branch_starts_as_a_copy_and_yolo11_is_unchanged():
    model = yolo11.create_model("yolo26n", num_classes=4)
    head = model.head.state_dict()
    for key, value in head.items():
        if key.startswith("one2one_"):
            assert torch.equal(value, head[key.removeprefix("one2one_")])
    assert model.head.cv3[0][-1].bias[0].item() == pytest.approx(math.log(5 / 4 / 80**2))  # Ultralytics' init
    assert model.head.one2one_cv2[2][-1].bias[0].item() == 2.0
    assert isinstance(yolo11.create_model("yolo11n").eval()(torch.rand(1, 3, 64, 64)), list)


@pytest.mark.parametrize("name", ["yolo26n", "yolo26m"])
def test_backbone_through_timm(name):
    backbone = timm.create_model(f"{name}_backbone", features_only=True)
    assert backbone.feature_info.reduction() == [8, 16, 32]
    model = yolo11.create_model(name)
    assert backbone.feature_info.channels() == [info["num_chs"] for info in model.backbone.feature_info]
    # timm flattens ``layers.N`` into ``layers_N``; nothing else differs
    backbone.load_state_dict({k.replace("layers.", "layers_", 1): v for k, v in model.backbone.state_dict().items()})
    images = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip(backbone.eval()(images), model.backbone.eval()(images), strict=True):
            assert torch.equal(a, b)


def test_fused_model_keeps_outputs():
    torch.manual_seed(0)
    model = yolo11.create_model("yolo26n", num_classes=3).double().eval()
    randomise_batchnorm(model, seed=0)
    images = torch.rand(1, 3, 64, 64, dtype=torch.float64)
    with torch.no_grad():
        before = model(images)
        after = model.fuse()(images)
    for a, b in zip((*before.one2many, *before.one2one), (*after.one2many, *after.one2one), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="yolo26q"):
        yolo11.create_model("yolo26q")


@needs_ultralytics
def test_checkpoint_written_by_ultralytics_loads_with_equal_outputs(tmp_path):
    """A ``.pt`` as Ultralytics writes one (``save_model``'s dict with the fp16 EMA, then ``strip_optimizer``, as at
    the end of training) goes through our restricted unpickler and gate into a YOLO26Detector with equal maps."""
    from ultralytics.utils.torch_utils import strip_optimizer

    from yolo11.weights import load_ultralytics

    torch.manual_seed(6)
    theirs = ultralytics_model("yolo26n", num_classes=3).float()
    randomise_batchnorm(theirs, seed=7)
    theirs.names = {0: "ant", 1: "bee", 2: "cat"}
    path = tmp_path / "last.pt"
    torch.save({"epoch": 0, "best_fitness": None, "model": None, "ema": copy.deepcopy(theirs).half(), "updates": 1,
                "optimizer": None, "train_args": {"model": "yolo26n.yaml"}, "date": "2026-12-04", "version": "8.4.190"},
               path)
    assert strip_optimizer(path)["model"] is not None  # ema -> model, fp16, requires_grad off, optimizer dropped
    model = load_ultralytics(path)
    assert isinstance(model, YOLO26Detector)
    assert model.config == {"name": "yolo26n", "num_classes": 3, "backbone": None, "names": ["ant", "bee", "cat"]}
    reference = copy.deepcopy(theirs).half().double().eval()  # the weights the file holds, compared in float64
    model = model.double().eval()
    images = torch.rand(1, 3, 64, 64, dtype=torch.float64)
    with torch.no_grad():
        maps = model(images)
        reference.end2end = True
        topk, raw = reference(images)
    for branch in ("one2many", "one2one"):
        boxes, scores = split(getattr(maps, branch), 3)
        torch.testing.assert_close(boxes, raw[branch]["boxes"], rtol=0, atol=1e-10)
        torch.testing.assert_close(scores, raw[branch]["scores"], rtol=0, atol=1e-10)
    torch.testing.assert_close(end2end_topk(maps.one2one), topk, rtol=0, atol=1e-10)


def test_yolo26_key_mapping_infers_family_and_scale():
    from yolo11.weights.ultralytics import infer_model_args, map_key

    for name in ("yolo26n", "yolo26x"):
        with torch.device("meta"):
            ours = yolo11.create_model(name, num_classes=7).state_dict()
        theirs = {ultralytics_key(k): v for k, v in ours.items()}
        assert {map_key(k) for k in theirs} == set(ours)
        assert map_key("model.23.one2one_cv3.1.2.bias") == "head.one2one_cv3.1.2.bias"
        assert infer_model_args(theirs) == {"name": name, "num_classes": 7}
        no_one2one = {k: v for k, v in theirs.items() if "one2one" not in k}
        with pytest.raises(ValueError, match="reg_max 1 and no one-to-one branch"):
            infer_model_args(no_one2one)


@pytest.mark.parametrize("name, published", zip(SCALE_NAMES, [6.1, 22.8, 75.4, 93.8, 209.5], strict=True))
def test_gflops_at_640_match_ultralytics_summary(name, published):
    """Both branches run, as in Ultralytics' count; thop's convention gives the yolo26.yaml figures."""
    with torch.device("meta"):
        model = yolo11.create_model(name).eval()
    assert round(count_gflops(model, 640, 640, ultralytics=True), 1) == published


def test_fast_training_layers_keep_outputs_and_gradients():
    """The compile-friendly swaps (residual SPPF, attention C3k2 included) change no value of either branch."""
    torch.manual_seed(0)
    plain = yolo11.create_model("yolo26n", num_classes=5).double().train()
    fast = use_fast_training_layers(copy.deepcopy(plain))
    assert type(fast.backbone.layers[9]).__name__ == "SeparablePoolSPPF"
    images = torch.rand(2, 3, 64, 64, dtype=torch.float64)
    expected, maps = plain(images), fast(images)
    for a, b in zip((*expected.one2many, *expected.one2one), (*maps.one2many, *maps.one2one), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    upstream = [torch.randn(m.shape, dtype=torch.float64) for m in (*maps.one2many, *maps.one2one)]
    sum((u * m).sum() for u, m in zip(upstream, (*expected.one2many, *expected.one2one), strict=True)).backward()
    sum((u * m).sum() for u, m in zip(upstream, (*maps.one2many, *maps.one2one), strict=True)).backward()
    for (key, a), b in zip(plain.named_parameters(), fast.parameters(), strict=True):
        # relative to the tensor's largest entry, as tests/test_fast_layers.py: a few entries nearly cancel
        error = (a.grad - b.grad).abs().max().item()
        assert error <= 1e-9 * a.grad.abs().max().item() + 1e-12, (key, error)


@needs_ultralytics
def test_pt_written_by_us_loads_in_ultralytics_with_equal_outputs(tmp_path):
    """``save_ultralytics`` (``yolo11-export --format pt``) builds Ultralytics' own yolo26n: YOLO(path) gives our
    maps."""
    from ultralytics import YOLO

    from yolo11.weights.ultralytics_writer import save_ultralytics

    torch.manual_seed(8)
    model = yolo11.create_model("yolo26n", num_classes=3, names=["ant", "bee", "cat"]).eval()
    randomise_batchnorm(model, seed=9)
    loaded = YOLO(str(save_ultralytics(model, tmp_path / "ours.pt"))).model.double().eval()
    assert loaded.names == {0: "ant", 1: "bee", 2: "cat"}
    images = torch.rand(1, 3, 64, 64, dtype=torch.float64)
    with torch.no_grad():
        maps = model.double()(images)
        _, raw = loaded(images)
    for branch in ("one2many", "one2one"):
        boxes, scores = split(getattr(maps, branch), 3)
        torch.testing.assert_close(boxes, raw[branch]["boxes"], rtol=0, atol=1e-10)
        torch.testing.assert_close(scores, raw[branch]["scores"], rtol=0, atol=1e-10)


def test_seeded_yolo26n_equals_recorded_ultralytics_outputs():
    """Without Ultralytics: the same seeded weights (a function of each Ultralytics key) give its recorded float64
    maps of both branches (eval and train), decoded and end-to-end outputs, and parameter gradients."""
    recorded = np.load(RECORDED)
    model = yolo11.create_model("yolo26n", num_classes=reference.NUM_CLASSES).double()
    state = {key: value if key.endswith("num_batches_tracked")
             else reference.seeded_tensor(ultralytics_key(key), tuple(value.shape))
             for key, value in model.state_dict().items()}
    model.load_state_dict(state)
    images = reference.seeded_images()

    def check(maps: End2EndMaps, mode: str) -> None:
        for branch in ("one2many", "one2one"):
            boxes, scores = split(getattr(maps, branch), reference.NUM_CLASSES)
            for part, value in (("boxes", boxes), ("scores", scores)):
                expected = torch.from_numpy(recorded[f"model/{mode}/{branch}/{part}"])
                torch.testing.assert_close(value, expected, rtol=0, atol=1e-10)

    with torch.no_grad():
        maps = model.eval()(images)
    check(maps, "eval")
    torch.testing.assert_close(decode(maps.one2many, reg_max=1), torch.from_numpy(recorded["model/decoded"]),
                               rtol=0, atol=1e-10)
    torch.testing.assert_close(end2end_topk(maps.one2one), torch.from_numpy(recorded["model/topk"]), rtol=0,
                               atol=1e-10)
    maps = model.train()(images)
    check(maps, "train")
    generator = torch.Generator().manual_seed(1)
    total = 0
    for branch in ("one2many", "one2one"):
        for value in split(getattr(maps, branch), reference.NUM_CLASSES):
            total = total + (torch.rand(value.shape, generator=generator, dtype=torch.float64) * value).sum()
    total.backward()
    params = {ultralytics_key(key): param for key, param in model.named_parameters()}
    for key in reference.GRAD_KEYS:
        torch.testing.assert_close(params[key].grad, torch.from_numpy(recorded[f"model/grad/{key}"]), rtol=1e-9,
                                   atol=1e-10)


def test_yolo26_pt_imports_through_load_ultralytics_and_load_weights(tmp_path):
    """A YOLO26 ``.pt`` (Ultralytics' checkpoint structure, written without Ultralytics) loads through
    ``load_ultralytics`` and ``load_weights`` (which every tool uses) with its tensors."""
    from helpers.ultralytics_checkpoint import write_ultralytics_checkpoint

    from yolo11.weights import load_ultralytics, load_weights

    torch.manual_seed(0)
    model = yolo11.create_model("yolo26n", num_classes=2, names=["ant", "bee"]).eval()
    path = write_ultralytics_checkpoint(model, ["ant", "bee"], tmp_path / "yolo26n.pt")
    loaded = load_ultralytics(path).eval()
    assert isinstance(loaded, YOLO26Detector) and loaded.names == ["ant", "bee"]
    images = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        for a, b in zip((*model(images).one2one,), (*loaded(images).one2one,), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)  # the file holds fp16, as Ultralytics'
    again = load_weights(path)
    assert isinstance(again, YOLO26Detector)
    expected = loaded.state_dict()
    assert all(torch.equal(t, expected[k]) for k, t in again.state_dict().items())
