"""The tools read the run from the weights (``yolo11/tools/run_record.py``): ``yolo11 val best.safetensors``
without ``data=`` validates on the data the run trained on, and val, predict and export run at the training size,
as Ultralytics' ``YOLO(best.pt)`` takes ``imgsz`` and ``data`` from the checkpoint's ``train_args``; our ``.pt``
export records them there for Ultralytics too. ``yolo11 val`` writes a run folder as Ultralytics' val does."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from yolo11 import create_model
from yolo11.data.sources.synthetic import SHAPES
from yolo11.engine.config import parse_config, save_config
from yolo11.tools import export, predict, val
from yolo11.tools.run_record import TrainedWith, run_folder, trained_with
from yolo11.weights import save_weights

DATA = "synthetic:num_images=4,num_val=6,imgsz=64"
needs_ultralytics = pytest.mark.skipif(importlib.util.find_spec("ultralytics") is None,
                                       reason="ultralytics 8.4.190 is not importable (PYTHONPATH)")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A run folder as the trainer leaves it: ``config.yaml`` (trained at 64 px on the synthetic data) and
    ``weights/best.safetensors``."""
    folder = tmp_path_factory.mktemp("runs") / "train" / "exp"
    save_config(parse_config([f"data={DATA}", "imgsz=64", "model=yolo11n", "val_split=val"]), folder / "config.yaml")
    save_weights(create_model("yolo11n", num_classes=len(SHAPES), names=list(SHAPES)),
                 folder / "weights" / "best.safetensors")
    return folder


def test_the_record_is_the_run_config_beside_weights(run, tmp_path):
    weights = run / "weights" / "best.safetensors"
    assert run_folder(weights) == run.resolve()
    record = trained_with(weights)
    assert (record.imgsz, record.data, record.split, record.nms) == (64, DATA, "val", True)
    assert record.origin == str(run.resolve() / "config.yaml")
    assert record.pick("imgsz", None, 640) == (64, True) and record.pick("imgsz", 320, 640) == (320, False)
    alone = save_weights(create_model("yolo11n", num_classes=2), tmp_path / "alone.safetensors")
    assert trained_with(alone) == TrainedWith() and trained_with("hf://owner/repo/x.pt") == TrainedWith()


def test_val_without_data_writes_runs_val_exp_as_ultralytics(run, tmp_path, capsys, monkeypatch):
    """``yolo11 val best.safetensors``: the data and imgsz of the run (said in one line), and a run folder
    ``runs/val/exp``, then ``exp2`` (Ultralytics: ``runs/detect/val``, ``val2``), holding the curves and confusion
    matrices (``plots=True``), ``predictions.json`` (``save_json``, on by default here) and, with ``save_txt``,
    ``labels/``; the last lines say where, and that mAP is pycocotools'. The old tool required ``--data``, and
    ignored ``plots=True save_json=True`` with a note."""
    monkeypatch.chdir(tmp_path)
    weights = run / "weights" / "best.safetensors"
    common = ["--workers", "0", "--cache-dir", str(tmp_path / "cache")]
    assert val.main([str(weights), *common, "plots=True", "save_json=True", "save_txt=True", "save_conf=True"]) == 0
    out, err = capsys.readouterr()
    assert f"data {DATA}, imgsz 64 from {run.resolve() / 'config.yaml'}" in err
    assert "Ultralytics keys not implemented" not in err  # plots, save_json, save_txt are read now
    folder = Path("runs/val/exp")
    assert sorted(p.name for p in folder.iterdir()) == [
        "BoxF1_curve.png", "BoxPR_curve.png", "BoxP_curve.png", "BoxR_curve.png", "confusion_matrix.png",
        "confusion_matrix_normalized.png", "labels", "metrics.json", "predictions.json"]
    predictions = json.loads((folder / "predictions.json").read_text())
    assert predictions and set(predictions[0]) == {"image_id", "category_id", "bbox", "score"}
    labels = sorted((folder / "labels").glob("*.txt"))
    assert len(labels) == 6 and all(len(line.split()) == 6 for line in labels[0].read_text().splitlines())
    lines = out.splitlines()
    assert lines[-2:] == ["Results saved to runs/val/exp", f"6 labels saved to {Path('runs/val/exp/labels')}"]
    assert any(line.startswith("mAP: COCO's, as pycocotools computes it") for line in lines)
    assert val.main([str(weights), *common, "plots=false", "save_json=false"]) == 0
    assert sorted(p.name for p in Path("runs/val/exp2").iterdir()) == ["metrics.json"]
    assert val.main([str(weights), *common, "name=mine", "project=elsewhere", "--no-plots"]) == 0
    assert Path("elsewhere/mine/predictions.json").is_file()
    assert capsys.readouterr().out.splitlines()[-1] == "Results saved to elsewhere/mine"


def test_given_values_win_and_missing_data_is_one_line(run, tmp_path, capsys):
    weights = run / "weights" / "best.safetensors"
    assert val.main([str(weights), f"data={DATA}", "imgsz=96", "--workers", "0", "--cache-dir",
                     str(tmp_path / "cache"), "--project", str(tmp_path / "v"), "--no-plots"]) == 0
    assert "from " not in capsys.readouterr().err  # nothing taken from the record: no line about it
    alone = save_weights(create_model("yolo11n", num_classes=6), tmp_path / "alone.safetensors")
    assert val.main([str(alone)]) == 2
    assert capsys.readouterr().err.startswith("error: --data (data=) is needed: ")


def test_predict_and_export_run_at_the_training_size(run, tmp_path, capsys):
    """A model trained at 64 px predicts and exports at 64 (it was 640) unless ``imgsz=`` says otherwise."""
    weights = run / "weights" / "best.safetensors"
    image = tmp_path / "a.jpg"
    cv2.imwrite(str(image), np.full((48, 64, 3), 90, np.uint8))
    assert predict.main([str(weights), str(image), "--output", str(tmp_path / "p"), "--device", "cpu"]) == 0
    out, err = capsys.readouterr()
    assert f"imgsz 64 from {run.resolve() / 'config.yaml'}" in err and f"{image}: 64x64 " in out
    assert predict.main([str(weights), str(image), "--output", str(tmp_path / "q"), "imgsz=96"]) == 0
    out, err = capsys.readouterr()
    assert f"{image}: 96x96 " in out and "config.yaml" not in err
    assert export.main([str(weights), "--output", str(tmp_path / "m.onnx")]) == 0
    assert "images (1, 3, 64, 64)" in capsys.readouterr().out


@needs_ultralytics
@pytest.mark.slow
def test_pt_export_records_imgsz_and_data_so_ultralytics_predicts_at_the_trained_size(run, tmp_path):
    """Ultralytics' ``YOLO(pt)`` keeps ``imgsz`` and ``data`` of ``train_args`` (``Model._reset_ckpt_args``) and
    its predict runs at that size: 64 here, where it would take 640 from its defaults."""
    from yolo11.weights.ultralytics import read_checkpoint

    weights = run / "weights" / "best.safetensors"
    assert export.main([str(weights), "--format", "pt", "--output", str(tmp_path / "best.pt")]) == 0
    train_args = read_checkpoint(tmp_path / "best.pt")["train_args"]
    assert (train_args["imgsz"], train_args["data"]) == (64, DATA)
    assert trained_with(tmp_path / "best.pt").imgsz == 64  # and our tools read it back
    image = tmp_path / "a.jpg"
    cv2.imwrite(str(image), np.full((48, 64, 3), 90, np.uint8))
    code = (f"from ultralytics import YOLO\nmodel = YOLO({str(tmp_path / 'best.pt')!r})\n"
            f"(result,) = model.predict({str(image)!r}, device='cpu', verbose=False)\n"
            "print('IMGSZ', model.predictor.args.imgsz, model.overrides.get('data'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "YOLO_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"IMGSZ 64 {DATA}" in done.stdout
