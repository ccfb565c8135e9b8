"""The loading gate (``yolo11/weights/gate.py``): hostile or broken files are refused in one line naming the file,
before anything in them runs or is allocated."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from yolo11.weights import load_weights
from yolo11.weights.gate import FileRefusedError

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
