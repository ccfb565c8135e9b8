"""Weights: Ultralytics checkpoint import (parity, safety), safetensors round trips, the convert CLI."""

from __future__ import annotations

import builtins
import io
import json
import os
import pickle
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import yolo11
from yolo11.architecture import SCALES
from yolo11.tools import convert
from yolo11.weights import (
    UnsafeCheckpointError,
    load_pretrained,
    load_ultralytics,
    load_weights,
    save_pretrained,
    save_weights,
    ultralytics_state_dict,
)
from yolo11.weights.ultralytics import infer_model_args, map_key, ultralytics_key

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "reference"
CHECKPOINT = REFERENCE / "yolo11n_coco128.pt"
OUTPUTS = REFERENCE / "yolo11n_coco128_outputs.npz"
needs_reference = pytest.mark.skipif(
    not (CHECKPOINT.exists() and OUTPUTS.exists()), reason=f"Ultralytics reference files not found in {REFERENCE}"
)


@pytest.fixture(scope="module")
def reference_model() -> yolo11.YOLO11Detector:
    return load_ultralytics(CHECKPOINT).eval()


@pytest.fixture(scope="module")
def reference_outputs() -> dict[str, np.ndarray]:
    return dict(np.load(OUTPUTS))


def _max_diffs(model: torch.nn.Module, outputs: dict[str, np.ndarray]) -> list[float]:
    with torch.no_grad():
        maps = model(torch.from_numpy(outputs["input"]))
    names = ["raw_p3", "raw_p4", "raw_p5"]
    return [(m - torch.from_numpy(outputs[n])).abs().max().item() for m, n in zip(maps, names, strict=True)]


@needs_reference
def test_import_reproduces_ultralytics_raw_maps(reference_model, reference_outputs):
    config = dict(reference_model.config)
    names = config.pop("names")
    assert config == {"name": "yolo11n", "num_classes": 80, "backbone": None}
    assert len(names) == 80 and names[:3] == ["person", "bicycle", "car"]  # the checkpoint's names
    assert max(_max_diffs(reference_model, reference_outputs)) <= 1e-4


@needs_reference
def test_fused_reference_model_matches(reference_outputs):
    model = load_ultralytics(CHECKPOINT).eval()
    with torch.no_grad():
        before = model(torch.from_numpy(reference_outputs["input"]))
        after = model.fuse()(torch.from_numpy(reference_outputs["input"]))
    # float32 noise of either model against Ultralytics is ~4e-5 at these magnitudes (|logit| ~ 20).
    assert max(_max_diffs(model, reference_outputs)) <= 1e-4
    # Folding BN into the convs reorders float32 sums through the whole network: about 1.5e-4 at most on a
    # 2-core x86 CPU with torch 2.14.1 (a wrong fold is off by O(1)).
    assert max((a - b).abs().max().item() for a, b in zip(before, after, strict=True)) <= 3e-4


@needs_reference
def test_half_precision_checkpoint_becomes_float32():
    state = ultralytics_state_dict(CHECKPOINT)
    weight = state["model.0.conv.weight"]
    assert weight.dtype == torch.float32
    assert torch.equal(weight.half().float(), weight)  # stored as fp16, widened exactly
    assert state["model.0.bn.num_batches_tracked"].dtype == torch.int64


@pytest.mark.parametrize("scale", list(SCALES))
def test_key_mapping_is_a_bijection_and_infers_the_scale(scale):
    with torch.device("meta"):
        model = yolo11.create_model(f"yolo11{scale}", num_classes=7)
    ours = model.state_dict()
    theirs = {ultralytics_key(k): v for k, v in ours.items()}
    assert len(theirs) == len(ours)
    assert all(map_key(k) in ours for k in theirs)
    assert {map_key(k) for k in theirs} == set(ours)
    assert infer_model_args(theirs) == {"name": f"yolo11{scale}", "num_classes": 7}


def test_other_architectures_are_refused():
    with torch.device("meta"):
        state = {ultralytics_key(k): v for k, v in yolo11.create_model("yolo11n").state_dict().items()}
    without_head = {k: v for k, v in state.items() if not k.startswith("model.23.")}
    with pytest.raises(ValueError, match="not a YOLO11 detection checkpoint: no model.23.cv3.0.2.weight"):
        infer_model_args(without_head)


def test_map_key_examples():
    assert map_key("model.4.m.0.cv1.conv.weight") == "backbone.layers.4.m.0.cv1.conv.weight"
    assert map_key("model.19.cv2.bn.running_var") == "neck.bottom_up_p4.cv2.bn.running_var"
    assert map_key("model.23.dfl.conv.weight") == "head.dfl.conv.weight"
    with pytest.raises(KeyError):
        map_key("model.12.foo")  # a Concat has no parameters


def _trained_like(name: str = "yolo11n", num_classes: int = 5) -> yolo11.YOLO11Detector:
    torch.manual_seed(0)
    model = yolo11.create_model(name, num_classes=num_classes)
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.add_(torch.randn_like(tensor) * 0.01)
    return model


def _assert_same_state(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert sa[key].dtype == sb[key].dtype and torch.equal(sa[key], sb[key]), key


def test_save_pretrained_round_trip(tmp_path):
    model = _trained_like()
    directory = save_pretrained(model, tmp_path / "folder")
    assert sorted(p.name for p in directory.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    loaded = load_pretrained(directory)
    assert loaded.config == model.config
    _assert_same_state(model, loaded)
    _assert_same_state(model, load_weights(directory))


def test_save_weights_single_file_round_trip(tmp_path):
    model = _trained_like("yolo11n", num_classes=3)
    file = save_weights(model, tmp_path / "weights" / "last.safetensors")
    loaded = load_weights(file)
    assert loaded.config == model.config
    _assert_same_state(model, loaded)


def test_timm_backbone_model_round_trip(tmp_path):
    model = yolo11.create_model("yolo11n", num_classes=2, backbone="resnet18")
    loaded = load_pretrained(save_pretrained(model, tmp_path))
    assert loaded.config["backbone"] == "resnet18"
    _assert_same_state(model, loaded)


def test_an_onnx_export_is_named_as_one(tmp_path):
    """An ``.onnx`` file given as weights (``yolo11-export best.onnx``, ``--weights best.onnx``, ``yolo11 info``)
    is refused as an ONNX export, naming the tools that run it; it was read as a safetensors file ("header claims
    8031177557570357256 bytes")."""
    onnx = tmp_path / "best.onnx"
    onnx.write_bytes(b"\x08\x08\x12\x0fyolo11-accelerate" + bytes(64))
    with pytest.raises(ValueError, match=r"best.onnx: an ONNX export.*yolo11 val.*yolo11 predict") as refused:
        load_weights(onnx)
    assert "safetensors" not in str(refused.value).split("need")[0]


def test_fused_model_is_not_saved(tmp_path):
    with pytest.raises(ValueError, match="fused"):
        save_pretrained(yolo11.create_model("yolo11n").fuse(), tmp_path)


@needs_reference
def test_convert_cli(tmp_path, capsys, reference_model):
    assert convert.main([str(CHECKPOINT), str(tmp_path / "out")]) == 0
    assert "yolo11n, 80 classes (person, bicycle, car, ...), 2,624,080 parameters" in capsys.readouterr().out
    _assert_same_state(reference_model, load_pretrained(tmp_path / "out"))
    _assert_same_state(reference_model, load_weights(CHECKPOINT))
    names = json.loads((tmp_path / "out" / "config.json").read_text())["names"]
    assert names[:2] == ["person", "bicycle"] and load_pretrained(tmp_path / "out").names == names


# --- malicious checkpoints: loading must refuse before anything runs -------------------------------------------


class _RunsOnLoad:
    """Unpickling this calls ``function(argument)``: the classic pickle exploit."""

    def __init__(self, function, argument):
        self.function, self.argument = function, argument

    def __reduce__(self):
        return self.function, (self.argument,)


def _torch_save(payload: object, path: Path) -> None:
    torch.save({"ema": payload, "model": None}, path)


def _pickle_in_torch_zip(payload: object, path: Path) -> None:
    """A hand-made torch zip archive whose data.pkl is a plain pickle."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({"ema": payload}, protocol=2))
        archive.writestr("archive/version", "3\n")
        archive.writestr("archive/byteorder", "little")


def _legacy_pickle(payload: object, path: Path) -> None:
    path.write_bytes(pickle.dumps({"ema": payload}, protocol=2))


@pytest.mark.parametrize("write", [_torch_save, _pickle_in_torch_zip])
def test_os_system_payload_is_refused(tmp_path, capsys, write):
    flag = tmp_path / "pwned"
    checkpoint = tmp_path / "evil.pt"
    write(_RunsOnLoad(os.system, f"touch {flag}"), checkpoint)
    # Writing the file ran nothing (test_the_payload_is_live shows that loading it unrestricted would).
    assert not flag.exists()
    with pytest.raises(UnsafeCheckpointError, match=r"os\.system"):
        load_ultralytics(checkpoint)
    assert not flag.exists()
    with pytest.raises(UnsafeCheckpointError):
        load_weights(checkpoint)
    assert convert.main([str(checkpoint), str(tmp_path / "out")]) == 2
    assert "os.system" in capsys.readouterr().err
    assert not flag.exists() and not (tmp_path / "out").exists()


def test_legacy_pickle_file_is_refused_unread(tmp_path, capsys):
    flag = tmp_path / "pwned"
    _legacy_pickle(_RunsOnLoad(os.system, f"touch {flag}"), tmp_path / "evil.pt")
    assert convert.main([str(tmp_path / "evil.pt"), str(tmp_path / "out")]) == 2
    assert "not a torch.save zip archive" in capsys.readouterr().err
    assert not flag.exists() and not (tmp_path / "out").exists()


def test_the_payload_is_live(tmp_path):
    """Guards the test above: the same file does run its command under an unrestricted torch.load."""
    flag = tmp_path / "ran"
    _torch_save(_RunsOnLoad(os.system, f"touch {flag}"), tmp_path / "evil.pt")
    torch.load(tmp_path / "evil.pt", weights_only=False)
    assert flag.exists()


@pytest.mark.parametrize("function, argument, name", [
    (builtins.eval, "1 + 1", "builtins.eval"),
    (subprocess.getoutput, "true", "subprocess.getoutput"),
    (io.open, "/dev/null", "io.open"),
])
def test_other_globals_are_refused(tmp_path, function, argument, name):
    _torch_save(_RunsOnLoad(function, argument), tmp_path / "evil.pt")
    with pytest.raises(UnsafeCheckpointError, match=name.replace(".", r"\.")):
        load_ultralytics(tmp_path / "evil.pt")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_host_copies_of_cuda_tensors_equal_per_tensor_copies():
    """One copy per dtype gives what ``.cpu()`` of each tensor gives, in the caller's order, each in its own
    storage (safetensors refuses shared ones) except names that alias one tensor."""
    from yolo11.models import create_model
    from yolo11.weights.safetensors_io import host_copies

    model = create_model("yolo11n", num_classes=3).cuda().half()
    state = dict(model.state_dict())
    state["alias"] = state["backbone.layers.0.conv.weight"]
    state["transposed"] = state["backbone.layers.0.conv.weight"].flatten(1).t()  # not contiguous
    copies = host_copies(state)
    assert list(copies) == list(state)
    for name, tensor in state.items():
        assert copies[name].device.type == "cpu" and copies[name].is_contiguous()
        torch.testing.assert_close(copies[name], tensor.cpu(), rtol=0, atol=0)
    assert copies["alias"] is copies["backbone.layers.0.conv.weight"]
    pointers = {copies[n].untyped_storage().data_ptr() for n in state if n != "alias"}
    assert len(pointers) == len(state) - 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_snapshot_from_the_gpu_is_the_state_at_its_call_though_its_copy_is_not_waited_for(tmp_path):
    """``weights_snapshot`` only queues its copy into pinned memory; the writer waits for it. The file holds the
    weights as they were at the call, not as the in-place updates queued after it left them, while the GPU was
    still busy with earlier work when the snapshot returned."""
    from safetensors.torch import load_file

    from yolo11.models import create_model
    from yolo11.weights.safetensors_io import weights_snapshot, write_weights

    model = create_model("yolo11n", num_classes=3).cuda()
    expected = {name: tensor.cpu().clone() for name, tensor in model.state_dict().items()}
    busy = torch.randn(4096, 4096, device="cuda")
    for _ in range(20):  # ~tens of ms queued ahead of the copy: it cannot be done when the snapshot returns
        busy = busy @ busy / 64
    snapshot = weights_snapshot(model)
    assert snapshot.ready and not all(event.query() for event in snapshot.ready)
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.add_(1.0)  # queued after the copy, in stream order
    written = load_file(write_weights(snapshot, tmp_path / "w.safetensors"))
    assert written.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(written[name], tensor), name
