"""ONNX and .pt exports that Ultralytics' runtime loads: static shapes, ``output0`` and Ultralytics' metadata by
default, ``--dynamic`` and ``--half``, and an Ultralytics 8.4.190 round trip (predict and val) of both formats."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import yolo11
from yolo11 import create_model
from yolo11.tools import export
from yolo11.weights import load_weights, save_weights

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
CHECKPOINT = DATA / "reference" / "yolo11n_coco128.pt"
NAMES = ["ant", "bee", "cat"]


def ultralytics_path() -> Path | None:
    """The folder ultralytics is imported from (PYTHONPATH=/work/ultra, as the parity tests find it), or None."""
    spec = importlib.util.find_spec("ultralytics")
    return Path(spec.origin).parents[1] if spec is not None and spec.origin else None


needs_ultralytics = pytest.mark.skipif(ultralytics_path() is None,
                                       reason="ultralytics 8.4.190 is not importable (PYTHONPATH=/work/ultra)")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[torch.nn.Module, Path]:
    torch.manual_seed(0)
    model = create_model("yolo11n", num_classes=3, names=NAMES).eval()
    return model, save_weights(model, tmp_path_factory.mktemp("w") / "tiny.safetensors")


def test_default_onnx_is_static_with_output0_and_ultralytics_metadata(tiny, tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    model, weights = tiny
    assert export.main([str(weights), "--imgsz", "64", "--output", str(tmp_path / "t.onnx")]) == 0
    session = onnxruntime.InferenceSession(str(tmp_path / "t.onnx"), providers=["CPUExecutionProvider"])
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, inp.shape) == ("images", [1, 3, 64, 64])
    assert (out.name, out.shape) == ("output0", [1, 4 + 3, 64 + 16 + 4])  # Ultralytics' (1, 84, 8400) at 640
    props = {p.key: p.value for p in onnx.load(str(tmp_path / "t.onnx")).metadata_props}
    # what Ultralytics' AutoBackend parses (int() or ast.literal_eval), with the values it expects
    assert int(props["stride"]) == 32 and int(props["batch"]) == 1 and int(props["channels"]) == 3
    assert ast.literal_eval(props["imgsz"]) == [64, 64] and ast.literal_eval(props["names"]) == dict(enumerate(NAMES))
    assert ast.literal_eval(props["args"]) == {"batch": 1, "half": False, "dynamic": False, "nms": False,
                                               "opset": 17}
    assert props["task"] == "detect" and ast.literal_eval(props["end2end"]) is False and "dynamic" not in props
    image = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        expected = export.DecodedDetector(model)(image).numpy()
    (got,) = session.run(["output0"], {"images": image.numpy()})
    assert np.abs(got - expected)[:, 4:].max() <= 1e-4 and np.abs(got - expected)[:, :4].max() <= 1e-4 * 64


@pytest.mark.slow
def test_dynamic_onnx_takes_any_batch_and_size_and_half_stays_close(tiny, tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    model, weights = tiny
    assert export.main([str(weights), "--imgsz", "64", "--dynamic", "--output", str(tmp_path / "d.onnx")]) == 0
    assert export.main([str(weights), "--imgsz", "64", "--batch", "2", "--half",
                        "--output", str(tmp_path / "h.onnx")]) == 0
    dynamic = onnxruntime.InferenceSession(str(tmp_path / "d.onnx"), providers=["CPUExecutionProvider"])
    assert dynamic.get_outputs()[0].shape == ["batch", 7, "anchors"]
    half = onnxruntime.InferenceSession(str(tmp_path / "h.onnx"), providers=["CPUExecutionProvider"])
    assert half.get_inputs()[0].type == "tensor(float)" and half.get_inputs()[0].shape == [2, 3, 64, 64]
    assert (tmp_path / "h.onnx").stat().st_size < 0.6 * (tmp_path / "d.onnx").stat().st_size  # float16 weights
    for shape, session in (((2, 3, 64, 96), dynamic), ((1, 3, 128, 64), dynamic), ((2, 3, 64, 64), half)):
        images = torch.rand(*shape, generator=torch.Generator().manual_seed(shape[0]))
        with torch.no_grad():
            expected = export.DecodedDetector(model)(images).numpy()
        (got,) = session.run(["output0"], {"images": images.numpy()})
        tolerance = 1e-4 if session is dynamic else 2e-2  # float16 arithmetic: 3 significant digits
        assert got.shape == expected.shape
        assert np.abs(got[:, 4:] - expected[:, 4:]).max() <= tolerance
        assert np.abs(got[:, :4] - expected[:, :4]).max() <= tolerance * 64


def test_pt_export_needs_ultralytics_and_a_native_model(tiny, tmp_path, capsys, monkeypatch):
    _, weights = tiny
    monkeypatch.setitem(sys.modules, "ultralytics", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "ultralytics.nn.tasks", None)
    assert export.main([str(weights), "--format", "pt", "--output", str(tmp_path / "t.pt")]) == 2
    assert "needs the ultralytics package" in capsys.readouterr().err and not (tmp_path / "t.pt").exists()
    assert export.main([str(weights), "--format", "pt", "--dynamic"]) == 2
    assert "ONNX options" in capsys.readouterr().err


@needs_ultralytics
def test_pt_export_reads_back_through_our_restricted_loader(tiny, tmp_path):
    model, weights = tiny
    assert export.main([str(weights), "--format", "pt", "--imgsz", "64", "--output", str(tmp_path / "t.pt")]) == 0
    loaded = load_weights(tmp_path / "t.pt")  # the restricted unpickler: only tensors, containers, module names
    assert loaded.names == NAMES
    loaded_state = loaded.state_dict()
    for key, tensor in model.state_dict().items():
        assert torch.equal(loaded_state[key], tensor), key
    raw = (tmp_path / "t.pt").read_bytes()
    assert b"yolo11." not in raw  # no class of ours is pickled: Ultralytics' and torch's only


@needs_ultralytics
@pytest.mark.slow
@pytest.mark.skipif(not CHECKPOINT.is_file(), reason="shared/data/reference absent")
def test_ultralytics_runtime_predicts_and_validates_our_pt_and_onnx_as_the_original(tmp_path):
    """An Ultralytics-trained checkpoint, imported and exported again by us, loaded by Ultralytics 8.4.190's
    ``YOLO(...)``: our .pt and .onnx give the original .pt's validation metrics and our Detector's boxes."""
    pytest.importorskip("onnxruntime")
    imgsz = 320
    assert export.main([str(CHECKPOINT), "--imgsz", str(imgsz), "--output", str(tmp_path / "ours.onnx")]) == 0
    assert export.main([str(CHECKPOINT), "--format", "pt", "--imgsz", str(imgsz),
                        "--output", str(tmp_path / "ours.pt")]) == 0
    assert export.main([str(CHECKPOINT), "--imgsz", str(imgsz), "--nms", "--conf", "0.05",
                        "--output", str(tmp_path / "nms.onnx")]) == 0
    shutil.copytree(DATA / "coco8", tmp_path / "coco8")  # Ultralytics writes label caches beside the labels
    data = tmp_path / "coco8.yaml"
    data.write_text((DATA / "coco8.yaml").read_text().replace("path: coco8", f"path: {tmp_path / 'coco8'}"))
    image = tmp_path / "coco8" / "images" / "val" / "000000000042.jpg"
    env = os.environ | {"YOLO_OFFLINE": "1", "YOLO_CONFIG_DIR": str(tmp_path / "cfg"),
                        "PYTHONPATH": os.pathsep.join([str(ultralytics_path()), str(ROOT)])}
    models = [str(CHECKPOINT), str(tmp_path / "ours.pt"), str(tmp_path / "ours.onnx"), str(tmp_path / "nms.onnx")]
    script = ROOT / "tests" / "helpers" / "ultralytics_runtime.py"
    done = subprocess.run([sys.executable, str(script), str(data), str(image), str(imgsz), str(tmp_path / "runs"),
                           *models], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    original, pt, onnx, nms = (report[m] for m in models)
    assert original["map50_95"] > 0 and original["names"] == pt["names"] == onnx["names"]
    for ours in (pt, onnx):
        assert ours["map50"] == pytest.approx(original["map50"], abs=1e-3)
        assert ours["map50_95"] == pytest.approx(original["map50_95"], abs=1e-3)
    # predict: Ultralytics' boxes on our .pt (rect letterbox) and static .onnx (square) equal our Detector's
    # and the --nms graph's rows (Ultralytics' nms=True layout: its NMS and conf 0.05 inside), read as they are
    for ours, rect in ((pt, True), (onnx, False), (nms, False)):
        detector = yolo11.Detector.from_pretrained(CHECKPOINT, imgsz=imgsz, conf=0.05, rect=rect, device="cpu")
        (result,) = detector.predict(str(image))
        assert len(result) > 0 and ours["classes"] == result.class_ids.tolist()
        np.testing.assert_allclose(ours["boxes"], result.boxes, atol=0.05)
        np.testing.assert_allclose(ours["scores"], result.scores, atol=1e-3)
