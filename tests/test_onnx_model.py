"""ONNX exports read by ``yolo11 val`` and ``yolo11 predict`` through onnxruntime (``yolo11/tools/onnx_model.py``):
the same boxes as the PyTorch model, names and input size from the metadata, static graphs at their own size,
as Ultralytics' ``yolo predict model=best.onnx`` runs them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from yolo11 import create_model
from yolo11.data.sources.synthetic import SHAPES
from yolo11.predictor import Detector
from yolo11.tools import export, predict, val
from yolo11.tools.onnx_model import OnnxModel, is_onnx, read_metadata
from yolo11.weights import save_weights

pytest.importorskip("onnxruntime")
IMGSZ, NAMES = 64, list(SHAPES)  # the synthetic data's classes: val runs on it


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, Path]:
    """A yolo11n of the synthetic data's classes whose detections depend on the image (BatchNorm statistics of
    one batch of noise, small box distributions), its weights and its default ONNX export at 64 px."""
    torch.manual_seed(0)
    model = create_model("yolo11n", num_classes=len(NAMES), names=NAMES)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.momentum = None
                module.reset_running_stats()
        model.train()(torch.randint(0, 255, (4, 3, IMGSZ, IMGSZ), dtype=torch.uint8))
        for box, cls in zip(model.head.cv2, model.head.cv3, strict=True):
            box[2].weight.mul_(0.02)
            box[2].bias.copy_((-0.7 * torch.arange(16.0)).repeat(4))
            cls[2].weight.mul_(0.05)  # class scores far from saturation: no near-ties between classes
    folder = tmp_path_factory.mktemp("onnx")
    weights = save_weights(model.eval(), folder / "tiny.safetensors")
    assert export.main([str(weights), "--imgsz", str(IMGSZ), "--output", str(folder / "tiny.onnx")]) == 0
    return weights, folder / "tiny.onnx"


def images(count: int = 4) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        image = rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)
        for _ in range(3):
            x, y = int(rng.integers(0, 48)), int(rng.integers(0, 36))
            cv2.rectangle(image, (x, y), (x + 16, y + 12), [int(v) for v in rng.integers(0, 255, 3)], -1)
        out.append(image)
    return out


def test_onnx_predictions_equal_the_pytorch_model(exported):
    """The export at 64 px predicted by onnxruntime and the weights by PyTorch: the same detections, boxes within
    float tolerance (1e-4 of the image size), names from the ONNX metadata. Before, our own .onnx was read as
    safetensors: "safetensors header claims 8031177557570357256 bytes"."""
    weights, onnx_path = exported
    settings = dict(imgsz=IMGSZ, conf=0.2, device="cpu", rect=False)
    ours = Detector.from_pretrained(weights, **settings).predict(images())
    onnx = Detector.from_pretrained(onnx_path, **settings)
    assert isinstance(onnx.model, OnnxModel) and onnx.class_names == NAMES
    theirs = onnx.predict(images())
    assert sum(len(r) for r in ours) >= 4  # boxes to compare
    for a, b in zip(ours, theirs, strict=True):
        assert len(a) == len(b) and a.names == b.names
        np.testing.assert_allclose(b.boxes, a.boxes, atol=1e-4 * IMGSZ)
        np.testing.assert_allclose(b.scores, a.scores, atol=1e-4)  # as the export tests: float32 rounding
        np.testing.assert_array_equal(b.class_ids, a.class_ids)


def test_an_opset_13_export_predicts_the_same(exported, tmp_path):
    """Opset 13 (runtimes that read no later one; Ultralytics users ask for opset=12/13): the same detections.
    12 is refused by name: torch writes C2PSA's unflatten from 13."""
    weights, _ = exported
    output = tmp_path / "13.onnx"
    assert export.main([str(weights), "--imgsz", str(IMGSZ), "--opset", "13", "--output", str(output)]) == 0
    settings = dict(imgsz=IMGSZ, conf=0.2, device="cpu", rect=False)
    ours = Detector.from_pretrained(weights, **settings).predict(images())
    theirs = Detector.from_pretrained(output, **settings).predict(images())
    assert sum(len(r) for r in ours) >= 4
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(b.boxes, a.boxes, atol=1e-4 * IMGSZ)
        np.testing.assert_array_equal(b.class_ids, a.class_ids)
    with pytest.raises(SystemExit):
        export.main([str(weights), "--opset", "12", "--output", str(tmp_path / "12.onnx")])


def test_metadata_static_size_and_detection_by_content(exported, tmp_path, capsys):
    """Ultralytics' runtime reuses a static export's imgsz (its predictor's ``setup_model``) and letterboxes to the
    square; so does ours, with a note when another size was asked. A renamed export is still ONNX (its bytes)."""
    weights, onnx_path = exported
    metadata = read_metadata(onnx_path)
    assert (metadata.names, metadata.imgsz, metadata.batch, metadata.name) == (NAMES, (64, 64), 1, "yolo11n")
    model = OnnxModel(onnx_path, "cpu")
    assert (model.num_classes, model.static_size, model.static_batch, model.end2end) == (6, (64, 64), 1, False)
    assert model.input_settings(128, True)[:2] == (64, False) and "static 64x64" in model.input_settings(128, True)[2]
    batch = torch.randint(0, 255, (3, 3, 64, 64), dtype=torch.uint8)  # 3 images through a batch-1 graph
    assert model(batch).shape == (3, 4 + 6, 64 + 16 + 4)
    with pytest.raises(ValueError, match="takes 64x64 inputs"):
        model(torch.zeros(1, 3, 96, 64, dtype=torch.uint8))
    renamed = shutil.copy(onnx_path, tmp_path / "model.bin")
    assert is_onnx(renamed) and not is_onnx(weights)
    with pytest.raises(ValueError, match="nms=false asks for the other head"):
        model.select_head(False)


def test_predict_and_val_cli_read_an_onnx_export(exported, tmp_path, capsys):
    """``yolo11 predict best.onnx`` and ``yolo11 val best.onnx`` run (they refused the file before); val's metrics
    equal those of the weights (square batches: a static graph takes nothing else)."""
    weights, onnx_path = exported
    image = tmp_path / "a.jpg"
    cv2.imwrite(str(image), images(1)[0])
    assert predict.main([str(onnx_path), str(image), "--output", str(tmp_path / "p"), "--conf", "0.2"]) == 0
    out = capsys.readouterr()
    assert "imgsz 64 from" in out.err and "metadata" in out.err  # the size came from the export
    assert json.loads((tmp_path / "p" / "predictions.json").read_text())[0]["detections"]
    for ref in (weights, onnx_path):
        assert val.main([str(ref), "--data", "synthetic:num_images=4,num_val=6,imgsz=64", "--imgsz", "64",
                         "--workers", "0", "--no-rect", "--cache-dir", str(tmp_path / "cache"), "--project",
                         str(tmp_path / "val"), "--no-plots"]) == 0
    # each image's best detection (at val's conf 0.001 many near-equal scores overlap, and a 1e-5 difference may
    # flip an NMS decision further down the list)
    best = []
    for folder in ("exp", "exp2"):
        results = json.loads((tmp_path / "val" / folder / "predictions.json").read_text())
        best.append({r["image_id"]: r for r in sorted(results, key=lambda r: r["score"])})  # the last one wins
    assert best[0].keys() == best[1].keys() and len(best[0]) == 6
    for image_id, a in best[0].items():
        b = best[1][image_id]
        assert a["category_id"] == b["category_id"] and abs(a["score"] - b["score"]) <= 1e-4
        assert np.allclose(a["bbox"], b["bbox"], atol=1e-4 * IMGSZ)
    metrics = [json.loads((tmp_path / "val" / folder / "metrics.json").read_text()) for folder in ("exp", "exp2")]
    assert metrics[0]["map50"] == pytest.approx(metrics[1]["map50"], abs=1e-3)


def test_the_python_api_predicts_and_validates_with_an_onnx_export(exported, capsys, tmp_path, monkeypatch):
    """``YOLO("best.onnx")`` as Ultralytics users write it: predict() gives the weights' detections, val() scores
    through it, and what needs the torch model (info, export, train) is refused by name."""
    from yolo11 import YOLO
    from yolo11.api import UsageError

    weights, onnx_path = exported
    model, reference = YOLO(onnx_path), YOLO(weights)
    assert model.exported and model.names == reference.names == dict(enumerate(NAMES))
    settings = dict(imgsz=IMGSZ, conf=0.2, device="cpu", rect=False)
    ours, theirs = reference.predict(images(), **settings), model.predict(images(), **settings)
    assert sum(len(r) for r in ours) >= 4
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(b.boxes, a.boxes, atol=1e-4 * IMGSZ)
        np.testing.assert_array_equal(b.class_ids, a.class_ids)
    # as Ultralytics users write it, no size or rect given: the static graph's own square size, as the CLI runs it
    plain = model.predict(images(), conf=0.2, device="cpu")
    for a, b in zip(theirs, plain, strict=True):
        np.testing.assert_allclose(b.boxes, a.boxes, atol=1e-4 * IMGSZ)
    model.predict(images()[0], imgsz=2 * IMGSZ, device="cpu")
    assert f"static {IMGSZ}x{IMGSZ} input: running at imgsz {IMGSZ}, not {2 * IMGSZ}" in capsys.readouterr().err
    data = f"synthetic:num_images=8,num_val=8,imgsz={IMGSZ}"
    monkeypatch.chdir(tmp_path)  # val writes runs/val/exp, as `yolo11 val` does
    scored = model.val(data=data, imgsz=IMGSZ, workers=0, rect=False)
    expected = reference.val(data=data, imgsz=IMGSZ, workers=0, rect=False)
    assert scored.box.map50 == pytest.approx(expected.box.map50, abs=1e-3)  # as the CLI test above
    for call, action in ((model.info, "info"), (lambda: model.train(data=data, epochs=1), "train"),
                         (lambda: model.export(format="onnx"), "export")):
        with pytest.raises(UsageError, match=rf"{action}: .*tiny\.onnx is an ONNX export"):
            call()
