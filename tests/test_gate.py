"""The loading gate (``yolo11/gate/``): hostile or broken files are refused in one line naming the file,
before anything in them runs or is allocated."""

from __future__ import annotations

import json
import re
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.torch_pickles import FOUR_FLOATS, Storage, Tensor, claim_record_size, torch_zip
from PIL import Image

from yolo11.gate import FileRefusedError
from yolo11.models.detector import create_model
from yolo11.weights import load_weights

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
MARKER = "SCRIPTED-SETSTATE-RAN"


class _ScriptedSideEffect(torch.nn.Module):
    """A module whose scripted ``__setstate__`` prints a marker: loading the archive with ``torch.load`` runs it."""

    def __init__(self) -> None:
        super().__init__()
        self.value = 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    @torch.jit.export
    def __getstate__(self) -> tuple[int, bool]:
        return self.value, self.training

    @torch.jit.export
    def __setstate__(self, state: tuple[int, bool]) -> None:
        self.value, self.training = state[0], state[1]
        print("SCRIPTED-SETSTATE-RAN")


@pytest.fixture(scope="module")
def torchscript_pt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ts") / "yolo11n.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script is deprecated, still the attacker's tool
        torch.jit.script(_ScriptedSideEffect()).save(str(path))
    return path


def _one_error_line(capfd: pytest.CaptureFixture, path: Path) -> str:
    out, err = capfd.readouterr()
    assert MARKER not in out + err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: {path}: a TorchScript archive"), line
    return line


def test_torchscript_pt_is_refused_by_every_entry_point(torchscript_pt: Path, tmp_path: Path,
                                                        capfd: pytest.CaptureFixture) -> None:
    from yolo11 import Detector, hub, train
    from yolo11.tools import convert, export, predict, val

    image = tmp_path / "image.jpg"
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(image)
    capfd.readouterr()
    assert val.main([str(torchscript_pt), "--data", str(DATA / "coco8.yaml")]) == 2
    _one_error_line(capfd, torchscript_pt)
    assert predict.main([str(torchscript_pt), str(image), "--output", str(tmp_path / "pred")]) == 2
    _one_error_line(capfd, torchscript_pt)
    assert export.main([str(torchscript_pt), "--output", str(tmp_path / "m.onnx")]) == 2
    _one_error_line(capfd, torchscript_pt)
    assert convert.main([str(torchscript_pt), str(tmp_path / "converted")]) == 2
    _one_error_line(capfd, torchscript_pt)
    for load in (Detector.from_pretrained, hub.from_pretrained, load_weights):
        with pytest.raises(FileRefusedError, match="TorchScript"):
            load(torchscript_pt)
    assert train.main(["--weights", str(torchscript_pt), "--data", "synthetic:num_images=2,imgsz=64", "--imgsz",
                       "64", "--cache-dir", str(tmp_path / "cache"), "--output-dir", str(tmp_path / "runs")]) == 2
    _one_error_line(capfd, torchscript_pt)
    assert not (tmp_path / "converted").exists() and not (tmp_path / "m.onnx").exists()
    # The archive is live: torch.load would have run its code (what the gate keeps from happening).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.load(torchscript_pt, weights_only=False)
    assert MARKER in capfd.readouterr().out


# --- .pt archives that are not plain checkpoints -------------------------------------------------------------

@pytest.mark.parametrize("make, message", [
    (lambda p: torch_zip(p, b"\x80\x02}q\x00(X\x03\x00\x00\x00emaq\x01\xff garbage", {}),
     "data.pkl is not a readable checkpoint pickle"),
    (lambda p: torch_zip(p, {"ema": Tensor(Storage("../../etc/passwd", 4), (4,))}, {"data/0": FOUR_FLOATS}),
     "names storage '../../etc/passwd', not a plain record name"),
    (lambda p: torch_zip(p, {"ema": None}, {"data/../../x": FOUR_FLOATS}),
     "storage member 'archive/data/../../x' is not a plain record name"),
    (lambda p: torch_zip(p, {"ema": Tensor(Storage("0", 1000), (4,))}, {"data/0": FOUR_FLOATS}),
     "storage data/0 holds 16 bytes, data.pkl claims 4000"),
    (lambda p: torch_zip(p, {"ema": Tensor(Storage("1", 4), (4,))}, {"data/0": FOUR_FLOATS}),
     "names storage data/1, which the archive lacks"),
    (lambda p: torch_zip(p, {"ema": Tensor(Storage("0", 4), (400,))}, {"data/0": FOUR_FLOATS}),
     "data.pkl is not a readable checkpoint pickle"),  # a view beyond its storage
    (lambda p: torch_zip(p, {"ema": None}, {"extra/x.txt": b"hi"}), "a TorchScript archive"),
    (lambda p: torch_zip(p, {"ema": None}, {"notes.txt": b"hi"}), "unexpected member 'archive/notes.txt'"),
    (lambda p: claim_record_size(torch_zip(p, {"ema": Tensor(Storage("0", 1 << 30), (4,))}, {"data/0": FOUR_FLOATS}),
                                 "archive/data/0", 0xFFFFFFFF), "member 'archive/data/0' claims 4294967295 bytes"),
    (lambda p: p.write_bytes(torch_zip(p, {"ema": None}, {"data/0": FOUR_FLOATS * 64}).read_bytes()[:300]),
     "not a readable zip archive"),
])
def test_bad_pt_archive_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture, make, message) -> None:
    from yolo11.tools import convert

    path = tmp_path / "bad.pt"
    make(path)
    with pytest.raises(FileRefusedError, match=re.escape(message)):
        load_weights(path)
    assert convert.main([str(path), str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {path}: ") and message in line


def test_pt_with_nan_weights_is_refused(tmp_path: Path) -> None:
    from helpers.ultralytics_checkpoint import write_ultralytics_checkpoint

    model = create_model("yolo11n", num_classes=2)
    with torch.no_grad():
        model.head.cv2[0][0].conv.weight[0, 0, 0, 0] = float("inf")
    with pytest.raises(FileRefusedError, match=re.escape(f"1 tensors hold NaN or inf values (e.g. {CONV})")):
        load_weights(write_ultralytics_checkpoint(model, ["a", "b"], tmp_path / "inf.pt"))


def test_pt_with_int8_weights_is_refused_not_cast(tmp_path: Path) -> None:
    from helpers.ultralytics_checkpoint import write_ultralytics_checkpoint

    model = create_model("yolo11n", num_classes=2)
    state = model.state_dict()
    state["head.cv2.0.0.conv.weight"] = state["head.cv2.0.0.conv.weight"].to(torch.int8)
    model.state_dict = lambda: state  # what the writer stores
    with pytest.raises(FileRefusedError, match=r"stored as I8, the model expects F32 \(not cast\)"):
        load_weights(write_ultralytics_checkpoint(model, ["a", "b"], tmp_path / "int8.pt"))


# --- safetensors files and model configs ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_model() -> torch.nn.Module:
    return create_model("yolo11n", num_classes=2, names=["a", "b"])


def _write_weights(path: Path, state: dict, config: dict) -> Path:
    from safetensors.torch import save_file

    save_file(state, str(path), metadata={"format": "pt", "config": json.dumps(config)})
    return path


def _state(model: torch.nn.Module) -> dict:
    return {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}


CONV = "head.cv2.0.0.conv.weight"


@pytest.mark.parametrize("edit, message", [
    (lambda s, c: s.update({CONV: s[CONV][:, :8].contiguous()}), f"tensor '{CONV}' has shape [64, 8, 3, 3], the "
                                                                 "model expects [64, 64, 3, 3]"),
    (lambda s, c: s.pop(CONV), f"1 tensors missing (e.g. {CONV})"),
    (lambda s, c: s.update({"head.extra": torch.zeros(2)}), "1 unexpected tensors (e.g. head.extra)"),
    (lambda s, c: s.update({CONV: s[CONV].to(torch.int8)}), f"tensor '{CONV}' is stored as I8, the model expects "
                                                            "F32 (not cast)"),
    (lambda s, c: s[CONV].view(-1)[5].fill_(float("nan")), f"1 tensors hold NaN or inf values (e.g. {CONV})"),
    (lambda s, c: s[CONV].view(-1)[5].fill_(float("inf")), f"1 tensors hold NaN or inf values (e.g. {CONV})"),
    (lambda s, c: c.update(num_classes="2"), "config num_classes '2' is not an integer in 1..100000"),
    (lambda s, c: c.update(num_classes=1_000_000_000), "config num_classes 1000000000 is not an integer in "
                                                       "1..100000"),
    (lambda s, c: c.update(names=["a", "b", "c"]), "config has 3 names for num_classes 2"),
    (lambda s, c: c.update(name="yolo99"), "config name 'yolo99' is not one of"),
    (lambda s, c: c.update(surprise=1), "unknown model config keys ['surprise']"),
])
def test_bad_safetensors_weights_are_refused(tmp_path: Path, small_model, edit, message) -> None:
    state, config = _state(small_model), dict(small_model.config)
    edit(state, config)
    path = _write_weights(tmp_path / "w.safetensors", state, config)
    with pytest.raises(FileRefusedError, match=re.escape(f"{path}: {message}")):
        load_weights(path)


@pytest.mark.parametrize("tool", ["val", "predict", "export", "convert"])
def test_tools_refuse_non_finite_weights_in_one_line(tmp_path: Path, small_model, capsys, tool: str) -> None:
    from yolo11.tools import convert, export, predict, val

    state = _state(small_model)
    state[CONV].view(-1)[0] = float("nan")
    path = _write_weights(tmp_path / "nan.safetensors", state, small_model.config)
    image = tmp_path / "image.jpg"
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(image)
    argv = {"val": [str(path), "--data", str(DATA / "coco8.yaml")],
            "predict": [str(path), str(image), "--output", str(tmp_path / "out")],
            "export": [str(path), "--output", str(tmp_path / "out.onnx")],
            "convert": [str(path), str(tmp_path / "out")]}[tool]
    assert {"val": val, "predict": predict, "export": export, "convert": convert}[tool].main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"error: {path}: 1 tensors hold NaN or inf values (e.g. {CONV}); refused"
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.onnx").exists()


def _header_file(path: Path, length: int, body: bytes) -> Path:
    path.write_bytes(struct.pack("<Q", length) + body)
    return path


@pytest.mark.parametrize("make, message", [
    (lambda p: _header_file(p, 1 << 60, b"{}"), f"safetensors header claims {1 << 60} bytes, the file has 2"),
    (lambda p: _header_file(p, 2, b"[]"), "the safetensors header is not a JSON object"),
    (lambda p: _header_file(p, 3, b"{x}"), "the safetensors header is not JSON"),
    (lambda p: p.write_bytes(b"abc"), "3 bytes: too short for a safetensors file"),
    (lambda p: _header_file(p, 55, b'{"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}' + b"\0" * 8),
     "tensor 't' ends at byte 16 of a 8-byte data section (truncated file)"),
    (lambda p: _header_file(p, 55, b'{"t":{"dtype":"F32","shape":[5],"data_offsets":[0,16]}}' + b"\0" * 16),
     "tensor 't': 16 bytes for a F32 tensor of shape [5]"),
])
def test_malformed_safetensors_file_is_refused_before_reading(tmp_path: Path, make, message) -> None:
    path = tmp_path / "bad.safetensors"
    make(path)
    with pytest.raises(FileRefusedError, match=re.escape(f"{path}: {message}")):
        load_weights(path)


def test_truncated_weights_file_is_refused(tmp_path: Path, small_model) -> None:
    path = _write_weights(tmp_path / "w.safetensors", _state(small_model), small_model.config)
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(FileRefusedError, match="ends at byte .* \\(truncated file\\)"):
        load_weights(path)


@pytest.mark.parametrize("config, message", [
    ([1, 2], "the model config is a JSON list, expected an object"),
    ({"name": "yolo11n", "num_classes": "2"}, "config num_classes '2' is not an integer"),
    ({"name": "yolo11n", "num_classes": 2, "names": ["a"]}, "config has 1 names for num_classes 2"),
])
def test_bad_config_json_is_refused(tmp_path: Path, small_model, config, message) -> None:
    from yolo11.weights import save_pretrained

    folder = save_pretrained(small_model, tmp_path / "folder")
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(FileRefusedError, match=re.escape(f"{folder / 'config.json'}: {message}")):
        load_weights(folder)


def test_backbone_named_by_a_file_is_not_fetched(tmp_path: Path, small_model, monkeypatch) -> None:
    import timm

    def no_create(*args, **kwargs):
        raise AssertionError("timm.create_model was called for a backbone named by a file")

    monkeypatch.setattr(timm, "create_model", no_create)
    config = {**small_model.config, "backbone": "hf-hub:owner/repo"}
    path = _write_weights(tmp_path / "w.safetensors", _state(small_model), config)
    with pytest.raises(FileRefusedError, match=r"backbone 'hf-hub:owner/repo' is not a locally known timm model "
                                               r"name; a backbone named by a file is never fetched"):
        load_weights(path)
    # the user naming the same backbone lets it through the gate (to timm, here a stub)
    with pytest.raises(AssertionError, match="timm.create_model was called"):
        load_weights(path, backbone="hf-hub:owner/repo")


# --- YAML ----------------------------------------------------------------------------------------------------

PYTHON_TAG = "epochs: !!python/object/apply:os.system ['touch {flag}']\n"


def test_config_yaml_with_python_tag_is_refused(tmp_path: Path, capsys) -> None:
    from yolo11.engine.config import parse_config

    args = tmp_path / "args.yaml"
    args.write_text(PYTHON_TAG.format(flag=tmp_path / "pwned"))
    with pytest.raises(SystemExit) as stop:
        parse_config(["--config", str(args), "--data", "synthetic"])
    assert stop.value.code == 2 and not (tmp_path / "pwned").exists()
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{args}: line 1: could not determine a constructor for the tag" in line
    assert "Python tags are refused" in line


def test_key_value_argument_with_python_tag_is_refused(capsys) -> None:
    from yolo11.engine.config import parse_config

    with pytest.raises(SystemExit) as stop:
        parse_config(["--data", "synthetic", "epochs=!!python/object/apply:os.getcwd []"])
    assert stop.value.code == 2
    assert "not a plain YAML value" in capsys.readouterr().err.strip().splitlines()[-1]


def test_data_yaml_with_python_tag_is_refused(tmp_path: Path) -> None:
    from yolo11.data import DataSourceError, load_source

    data = tmp_path / "data.yaml"
    data.write_text(f"path: {tmp_path}\ntrain: images\nval: images\nnames: [a]\n" +
                    PYTHON_TAG.format(flag=tmp_path / "pwned"))
    with pytest.raises(DataSourceError) as refused:
        load_source(str(data), cache_dir=tmp_path / "cache")
    assert "\n" not in str(refused.value) and f"{data}: line 5:" in str(refused.value)
    assert not (tmp_path / "pwned").exists()
