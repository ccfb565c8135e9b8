"""The user CLIs: export (ONNX vs PyTorch), predict (vs Ultralytics), val (vs Ultralytics mAP, 2 processes)."""

from __future__ import annotations

import csv
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.engine_helpers import launch

from yolo11 import create_model, predictor
from yolo11.data.sources.synthetic import SHAPES
from yolo11.geometry import letterbox_params, scale_boxes
from yolo11.tools import export, predict, val
from yolo11.weights import load_weights, save_weights

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
REFERENCE = DATA / "reference"
CHECKPOINT = REFERENCE / "yolo11n_coco128.pt"
needs_data = pytest.mark.skipif(not CHECKPOINT.is_file(), reason="shared/data/reference absent")


def test_export_onnx_matches_pytorch_with_dynamic_batch(tmp_path):
    onnxruntime = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    model = create_model("yolo11n", num_classes=3).eval()
    weights = save_weights(model, tmp_path / "tiny.safetensors")
    assert export.main([str(weights), "--imgsz", "64", "--dynamic", "--output", str(tmp_path / "tiny.onnx")]) == 0
    session = onnxruntime.InferenceSession(str(tmp_path / "tiny.onnx"), providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        images = torch.rand(batch, 3, 64, 64, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            expected = export.DecodedDetector(model).eval()(images).numpy()  # unfused model: fusion is checked too
        (got,) = session.run(["output0"], {"images": images.numpy()})
        assert got.shape == (batch, 4 + 3, 64 + 16 + 4)  # anchors at strides 8, 16, 32 of a 64 px input
        assert np.abs(got[:, 4:] - expected[:, 4:]).max() <= 1e-4  # class scores
        assert np.abs(got[:, :4] - expected[:, :4]).max() <= 1e-4 * 64  # boxes, pixels: relative to the image


def test_export_safetensors_from_the_command_line_as_from_python(tmp_path, capsys):
    """`yolo11 export w.safetensors format=safetensors` was an invalid choice, where YOLO(...).export and the docs
    take it; the default output is beside the weights, never over them."""
    from safetensors import safe_open

    torch.manual_seed(0)
    model = create_model("yolo11n", num_classes=2)
    weights = save_weights(model, tmp_path / "w.safetensors")
    assert export.main([str(weights), "format=safetensors", "--half"]) == 0
    written = tmp_path / "w_export.safetensors"
    assert f"-> {written}: yolo11n weights in float16" in capsys.readouterr().out
    with safe_open(written, "pt") as f:
        assert f.get_tensor("backbone.layers.0.conv.weight").dtype == torch.float16
    torch.testing.assert_close(load_weights(written).state_dict()["backbone.layers.0.conv.weight"],
                               model.state_dict()["backbone.layers.0.conv.weight"], rtol=1e-3, atol=1e-4)
    assert export.main([str(weights), "--format", "safetensors", "--output", str(weights)]) == 2
    assert "is the weights file read" in capsys.readouterr().err


def test_export_rounds_sizes_up_as_ultralytics(tmp_path, capsys):
    weights = save_weights(create_model("yolo11n", num_classes=2), tmp_path / "w.safetensors")
    assert export.main([str(weights), "--imgsz", "40", "--output", str(tmp_path / "w.onnx")]) == 0
    captured = capsys.readouterr()
    assert "--imgsz 40 must be a multiple of the largest stride 32, updating to 64" in captured.err
    assert "images (1, 3, 64, 64)" in captured.out


@needs_data
def test_letterbox_equals_ultralytics_input():
    reference = np.load(REFERENCE / "yolo11n_coco128_outputs.npz")
    meta = json.loads((REFERENCE / "yolo11n_coco128_meta.json").read_text())
    for i, stem in enumerate(meta["images_for_outputs"]):
        path = DATA / "coco128" / "images" / "train2017" / f"{stem}.jpg"
        image, _ = predictor.letterbox(predictor.read_rgb(path), 640)
        ours = image.transpose(2, 0, 1).astype(np.float32) / 255.0
        assert np.abs(ours - reference["input"][i]).max() <= 1 / 255 + 1e-6  # at most one grey level (resize)
        assert np.mean(ours != reference["input"][i]) < 0.01


@needs_data
def test_predict_cli_outputs_match_ultralytics_detections(tmp_path):
    reference = np.load(REFERENCE / "yolo11n_coco128_outputs.npz")
    meta = json.loads((REFERENCE / "yolo11n_coco128_meta.json").read_text())
    files = [DATA / "coco128" / "images" / "train2017" / f"{stem}.jpg" for stem in meta["images_for_outputs"]]
    out = tmp_path / "predict"
    # the reference outputs are of 640 x 640 inputs
    assert predict.main([str(CHECKPOINT), *map(str, files), "--output", str(out), "--save-txt", "--save-conf",
                         "--no-rect"]) == 0
    records = json.loads((out / "predictions.json").read_text())
    assert [Path(r["file"]).stem for r in records] == meta["images_for_outputs"]
    for i, (record, path) in enumerate(zip(records, files, strict=True)):
        expected = torch.from_numpy(reference[f"det_pred_{i}"]).double()
        size = (record["height"], record["width"])
        gain = min(640 / size[0], 640 / size[1])
        pad = torch.tensor(letterbox_params(size, (640, 640)), dtype=torch.float64)
        assert pad[0] == pytest.approx(gain)
        expected_boxes = scale_boxes(expected[:, :4], pad, torch.tensor(size))
        got = torch.tensor([d["box"] + [d["score"], d["class"]] for d in record["detections"]],
                           dtype=torch.float64).reshape(-1, 6)
        assert got.shape == expected.shape
        assert torch.allclose(got[:, :4], expected_boxes, atol=0.05)  # JSON rounds to 0.01 px
        assert torch.allclose(got[:, 4], expected[:, 4], atol=1e-4)
        assert torch.equal(got[:, 5], expected[:, 5])
        assert (out / path.name).is_file()  # drawn, in the input's format
        label = out / "labels" / f"{path.stem}.txt"
        lines = label.read_text().splitlines() if record["detections"] else []
        assert len(lines) == len(record["detections"]) and label.is_file() == bool(record["detections"])
        for line, det in zip(lines, record["detections"], strict=True):
            cls, xc, _, w, _, _ = line.split()
            assert int(cls) == det["class"]
            assert float(xc) * record["width"] == pytest.approx((det["box"][0] + det["box"][2]) / 2, abs=0.01)
            assert float(w) * record["width"] == pytest.approx(det["box"][2] - det["box"][0], abs=0.01)
    assert records[0]["detections"] and records[0]["detections"][0]["name"] in {"person", "bowl", "dog", "broccoli",
                                                                                  "cup", "orange", "dining table"}


@needs_data
def test_predict_cli_equals_ultralytics_predict(tmp_path):
    """Default (rect) prediction against ``YOLO(...).predict`` of Ultralytics on the same images, landscape and
    portrait: each image padded only to a multiple of 32, and boxes mapped back with per-axis gains."""
    reference = json.loads((ROOT / "tests" / "data" / "ultralytics_predict_rect.json").read_text())
    stems = list(reference["images"])
    files = [DATA / "coco128" / "images" / "train2017" / f"{stem}.jpg" for stem in stems]
    out = tmp_path / "predict"
    # batch 4: images of different shapes share a chunk and go through the model in separate groups
    assert predict.main([str(CHECKPOINT), *map(str, files), "--output", str(out), "--no-draw", "--batch", "4",
                         "--conf", str(reference["conf"])]) == 0
    records = json.loads((out / "predictions.json").read_text())
    assert sum(len(r["detections"]) for r in records) >= 20
    for stem, record in zip(stems, records, strict=True):
        expected = reference["images"][stem]
        assert [record["height"], record["width"]] == expected["orig_shape"]
        got = np.array([d["box"] + [d["score"], d["class"]] for d in record["detections"]]).reshape(-1, 6)
        want = np.array(expected["detections"]).reshape(-1, 6)
        assert got.shape == want.shape, stem
        np.testing.assert_allclose(got[:, :4], want[:, :4], atol=0.011, err_msg=stem)  # ours rounds to 0.01 px
        np.testing.assert_allclose(got[:, 4], want[:, 4], atol=1e-4, err_msg=stem)
        np.testing.assert_array_equal(got[:, 5], want[:, 5], err_msg=stem)


def test_rect_letterbox_pads_to_a_multiple_of_32():
    image = np.full((427, 640, 3), 7, np.uint8)  # long side already 640: no resize, 21 rows of padding
    boxed, (gain_h, gain_w, top, left) = predictor.letterbox(image, 640, rect=True)
    assert boxed.shape == (448, 640, 3) and (gain_h, gain_w, top, left) == (1.0, 1.0, 10, 0)
    assert (boxed[10:437] == 7).all() and (boxed[:10] == 114).all() and (boxed[437:] == 114).all()
    boxed, (gain_h, gain_w, top, left) = predictor.letterbox(np.zeros((500, 333, 3), np.uint8), 640, rect=True)
    # 333 * 1.28 = 426.24 -> 426 columns, padded by 22 to 448; each axis keeps its own gain
    assert boxed.shape == (640, 448, 3) and (top, left) == (0, 11)
    assert gain_h == 1.28 and gain_w == pytest.approx(426 / 333, abs=0)
    assert predictor.letterbox(np.zeros((500, 333, 3), np.uint8), 640)[0].shape == (640, 640, 3)


def subset_yaml(tmp_path: Path, count: int) -> Path:
    """A data YAML of the first ``count`` coco128 images (symlinked)."""
    images, labels = tmp_path / "subset" / "images" / "val", tmp_path / "subset" / "labels" / "val"
    images.mkdir(parents=True)
    labels.mkdir(parents=True)
    for image in sorted((DATA / "coco128" / "images" / "train2017").glob("*.jpg"))[:count]:
        (images / image.name).symlink_to(image)
        label = DATA / "coco128" / "labels" / "train2017" / f"{image.stem}.txt"
        if label.is_file():
            (labels / label.name).symlink_to(label)
    names = (DATA / "coco128.yaml").read_text().split("names:", 1)[1]
    path = tmp_path / "subset.yaml"
    path.write_text(f"path: {tmp_path / 'subset'}\ntrain: images/val\nval: images/val\nnames:{names}")
    return path


@needs_data
@pytest.mark.slow
def test_val_cli_on_coco128_matches_pycocotools_on_ultralytics_predictions(tmp_path):
    expected = json.loads((REFERENCE / "yolo11n_coco128_meta.json").read_text())[
        "pycocotools_on_ultralytics_predictions"]
    out = tmp_path / "metrics.json"
    assert val.main([str(CHECKPOINT), "--data", str(DATA / "coco128.yaml"), "--cache-dir", str(tmp_path / "cache"),
                     "--workers", "0", "--json", str(out), "--plots-dir", str(tmp_path / "plots"),
                     "--project", str(tmp_path / "val")]) == 0
    metrics = json.loads(out.read_text())
    # Same predictions up to float rounding (the reference json holds boxes to 3 decimals): a difference in the
    # rect batches' letterbox shapes of a few images moves mAP50 by 2e-4.
    assert metrics["map50_95"] == pytest.approx(expected["map50_95"], abs=1e-5)
    assert metrics["map50"] == pytest.approx(expected["map50"], abs=1e-5)
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "BoxF1_curve.png", "BoxPR_curve.png", "BoxP_curve.png", "BoxR_curve.png", "confusion_matrix.png",
        "confusion_matrix_normalized.png"]


@needs_data
@pytest.mark.slow
def test_val_two_processes_equal_one_process(tmp_path):
    data = subset_yaml(tmp_path, 7)  # 7 images, 2 per process: the last batch is padded by even_batches
    common = [str(CHECKPOINT), "--data", str(data), "--imgsz", "320", "--workers", "0",
              "--cache-dir", str(tmp_path / "cache"), "--project", str(tmp_path / "val")]
    # Both runs in subprocesses with one thread each: the same float reductions, so the predictions are bitwise equal
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ACCELERATE_USE_CPU", None)
    single = subprocess.run([sys.executable, "-m", "yolo11.tools.val", *common, "--batch", "2", "--json",
                             str(tmp_path / "single.json")], env=env, capture_output=True, text=True, timeout=300,
                            cwd=ROOT)
    assert single.returncode == 0, single.stderr[-3000:]
    config = tmp_path / "2proc.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_machines: 1\n"
                      "num_processes: 2\nmachine_rank: 0\nmixed_precision: 'no'\nuse_cpu: false\n"
                      "main_process_port: 29519\n")
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config), "-m",
               "yolo11.tools.val", *common, "--batch", "4", "--json", str(tmp_path / "ddp.json")]
    result = subprocess.run(command, env={**env, "ACCELERATE_USE_CPU": "1"}, capture_output=True, text=True,
                            timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "on 2 process(es)" in result.stdout and "7 images" in result.stdout
    single = json.loads((tmp_path / "single.json").read_text())
    assert json.loads((tmp_path / "ddp.json").read_text()) == single
    assert single["map50"] > 0.0  # the checkpoint finds something on these images


@needs_data
@pytest.mark.slow
@pytest.mark.parametrize("processes", [1, 2])
def test_validation_during_training_equals_the_val_tool(tmp_path, processes):
    """The metrics that training logs for its last epoch are those of ``yolo11-val`` on the saved last weights
    (one process, at training's per-process validation batch): rectangular batches of the same size and shapes,
    the same predictions. With 2 processes, each validates with the main process's BatchNorm statistics."""
    data = subset_yaml(tmp_path, 12)  # landscape, portrait and square images: rect shapes differ from square
    common = ["--data", str(data), "--imgsz", "320", "--workers", "0", "--cache-dir", str(tmp_path / "cache")]
    config = tmp_path / "launch.yaml"  # fp32, as the val tool runs here
    config.write_text(f"compute_environment: LOCAL_MACHINE\ndistributed_type: {'MULTI_GPU' if processes > 1 else 'NO'}"
                      f"\nnum_machines: 1\nnum_processes: {processes}\nmachine_rank: 0\nmixed_precision: 'no'\n"
                      "use_cpu: true\nmain_process_port: 29523\n")
    result = launch(["--weights", str(CHECKPOINT), *common, "--epochs", "1", "--batch-size", "4", "--plots", "false",
                     "--output-dir", str(tmp_path / "runs"), "--name", "a"], config=str(config),
                    cpu_ddp=processes > 1)
    assert result.returncode == 0, result.stderr[-3000:]
    with (tmp_path / "runs" / "a" / "results.csv").open() as stream:
        logged = list(csv.DictReader(stream))[-1]
    metrics = {}
    for rect in ("--rect", "--no-rect"):
        out = tmp_path / f"{rect}.json"
        assert val.main([str(tmp_path / "runs" / "a" / "weights" / "last.safetensors"), *common,
                         "--batch", str(8 // processes), rect, "--json", str(out),
                         "--project", str(tmp_path / "val")]) == 0  # validation batch: 2 x 4
        metrics[rect] = json.loads(out.read_text())
    assert metrics["--rect"]["map50"] > 0.0
    # last.safetensors holds float16 weights (as Ultralytics' last.pt), training validated the float32 EMA: equal to
    # the rounding of the weights (a 1-epoch model's mAP moves by ~2% with it; the rect/square gap below is larger)
    assert float(logged["metrics/mAP50-95(B)"]) == pytest.approx(metrics["--rect"]["map50_95"], rel=0.05)
    assert float(logged["metrics/mAP50(B)"]) == pytest.approx(metrics["--rect"]["map50"], rel=0.05)
    assert metrics["--no-rect"]["map50_95"] != pytest.approx(metrics["--rect"]["map50_95"], rel=1e-3)


@needs_data
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::DeprecationWarning")
def test_export_with_nms_is_ultralytics_nms_layout_and_reads_back(tmp_path):
    """``--nms`` as Ultralytics' ``nms=True`` export: ``output0`` (B, max_det, 6) rows of each anchor's best class
    after class-wise NMS, zero rows after them; equal to our single-label NMS of the same model, and read by our
    runtime as rows (its metadata says nms, as Ultralytics' runtime reads it)."""
    onnxruntime = pytest.importorskip("onnxruntime")
    from yolo11.postprocess import non_max_suppression
    from yolo11.tools.onnx_model import OnnxModel
    from yolo11.weights import load_weights

    images = torch.from_numpy(np.load(REFERENCE / "yolo11n_coco128_outputs.npz")["input"]).float()
    assert export.main([str(CHECKPOINT), "--imgsz", "640", "--nms", "--batch", str(len(images)),
                        "--output", str(tmp_path / "nms.onnx")]) == 0
    session = onnxruntime.InferenceSession(str(tmp_path / "nms.onnx"), providers=["CPUExecutionProvider"])
    (rows,) = session.run(None, {"images": images.numpy()})
    assert rows.shape == (len(images), 300, 6)
    model = load_weights(CHECKPOINT).eval()
    with torch.no_grad():
        expected = non_max_suppression(export.DecodedDetector(model)(images), conf=0.25, iou=0.7, multi_label=False)
    assert sum(len(e) for e in expected) > 0
    for got, det in zip(rows, expected, strict=True):
        kept = got[got[:, 4] > 0]
        assert kept.shape == tuple(det.shape) and not got[len(kept):].any()  # zero rows after the kept ones
        assert np.abs(kept[:, :4] - det[:, :4].numpy()).max(initial=0) <= 1e-4 * 640
        assert np.abs(kept[:, 4:] - det[:, 4:].numpy()).max(initial=0) <= 1e-4
    graph = OnnxModel(tmp_path / "nms.onnx")
    assert graph.metadata.nms and graph.select_head(None) and graph.select_head(True)
    with pytest.raises(ValueError, match="ends in NMS .*nms=false asks for the NMS-free head"):
        graph.select_head(False)


def test_export_check_compares_the_nms_graph_rows(tmp_path, capsys, monkeypatch):
    """``--check`` with ``--nms`` compares the graph's rows with ``NmsDetector`` run by PyTorch (it was skipped
    without a word); a graph whose rows differ is reported as such (infinite), not as equal."""
    pytest.importorskip("onnxruntime")
    from yolo11.tools import onnx_export

    model = create_model("yolo11n", num_classes=3)
    with torch.no_grad():  # every anchor above --conf: many rows for NMS to keep and the check to compare
        for branch in model.head.cv3:
            branch[-1].bias.fill_(5.0)
    weights = save_weights(model, tmp_path / "w.safetensors")
    assert export.main([str(weights), "--imgsz", "64", "--nms", "--check", "--output", str(tmp_path / "n.onnx")]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("onnxruntime vs PyTorch (the rows after NMS, on random images): max |difference| boxes")
    boxes, scores = (float(v.split()[0]) for v in line.split("boxes ")[1].split(", scores "))
    assert boxes < 1e-2 and scores < 1e-4
    loaded = load_weights(weights).eval()
    rows = onnx_export.NmsDetector(loaded, 0.25, 0.7, 300)(torch.rand(1, 3, 64, 64))
    assert (rows[..., 4] > 0).sum() > 10  # the comparison had rows to compare
    real = onnx_export.NmsDetector
    monkeypatch.setattr(onnx_export, "NmsDetector", lambda model, conf, iou, max_det, **kw: real(
        model, conf, 0.1, max_det, **kw))  # PyTorch's side suppressing far more: other rows
    assert onnx_export.check_onnx(loaded, tmp_path / "n.onnx", 64, batch=1, nms=(0.25, 0.7, 300)) == (
        float("inf"), float("inf"))


@pytest.mark.parametrize("detected_classes", [(), (0,)], ids=["nothing", "one-class-only"])
def test_val_on_weights_that_miss_classes_exits_0_with_zeros_and_writes_its_json(tmp_path, capsys, monkeypatch,
                                                                                 detected_classes):
    """An early checkpoint detects nothing, or nothing of some classes that have ground truth."""
    monkeypatch.chdir(tmp_path)  # the tool's run folder, runs/val/exp, lands here rather than in the checkout
    data = "synthetic:num_images=4,num_val=6,imgsz=64"
    model = create_model("yolo11n", num_classes=6)
    with torch.no_grad():  # class logits far below --conf everywhere, except for the detected classes
        for branch in model.head.cv3:
            branch[-1].weight.zero_()
            branch[-1].bias.fill_(-30.0)
            branch[-1].bias[list(detected_classes)] = 5.0
    weights = save_weights(model, tmp_path / "early.safetensors")
    metrics_file, predictions_file = tmp_path / "metrics.json", tmp_path / "predictions.json"
    assert val.main([str(weights), "--data", data, "--imgsz", "64", "--workers", "0", "--cache-dir",
                     str(tmp_path / "cache"), "--json", str(metrics_file),
                     "--predictions-json", str(predictions_file)]) == 0
    metrics = json.loads(metrics_file.read_text())
    predictions = json.loads(predictions_file.read_text())
    assert {p["category_id"] - 1 for p in predictions} == set(detected_classes)
    if not detected_classes:
        assert metrics["map50_95"] == metrics["map50"] == metrics["precision"] == metrics["recall"] == 0
    class_rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[2:]
                  if line.split() and line.split()[0] in SHAPES}
    assert class_rows  # one row per class with ground truth
    for name, row in class_rows.items():
        if SHAPES.index(name) not in detected_classes:
            assert float(row[-2]) == float(row[-1]) == 0, row  # mAP50, mAP50-95 of a class never detected


@pytest.mark.parametrize("tool", ["val", "predict", "export", "convert"])
def test_tools_report_a_missing_weights_file_in_one_line(tmp_path, tool):
    missing = str(tmp_path / "nope.safetensors")
    argv = {"val": [missing, "--data", "synthetic"], "predict": [missing, str(tmp_path)],
            "export": [missing], "convert": [str(tmp_path / "nope.pt"), str(tmp_path / "out")]}[tool]
    result = subprocess.run([sys.executable, "-m", f"yolo11.tools.{tool}", *argv], capture_output=True, text=True,
                            timeout=120, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and "nope" in last and "Traceback" not in result.stderr


@pytest.mark.parametrize("tool", ["predict", "export"])
def test_an_output_path_that_cannot_be_written_is_one_line(tmp_path, tool):
    """``--output`` naming an existing file (predict's output folder) or a path through one (export's file): one
    ``error: cannot write ...`` line and exit 2, not a traceback."""
    weights = tmp_path / "w.safetensors"
    save_weights(create_model("yolo11n", num_classes=3), weights)
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    image = ROOT / "yolo11" / "assets" / "coco8" / "images" / "val"
    argv = {"predict": [str(weights), str(image), "--output", str(blocker), "--imgsz", "64"],
            "export": [str(weights), "--output", str(blocker / "model.onnx"), "--imgsz", "64"]}[tool]
    result = subprocess.run([sys.executable, "-m", f"yolo11.tools.{tool}", *argv], capture_output=True, text=True,
                            timeout=300, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cannot write") and "a_file" in last and "Traceback" not in result.stderr
    assert blocker.read_text() == "not a folder"


def test_a_full_disk_is_one_line():
    from yolo11.tools import cli

    def full(argv):
        raise OSError(errno.ENOSPC, "No space left on device", "/data/out/model.onnx")

    def bug(argv):
        raise OSError(errno.EIO, "Input/output error")

    assert cli(full)([]) == 2
    with pytest.raises(OSError):  # not the user's: a traceback, as any other bug
        cli(bug)([])


def test_val_tells_weights_and_data_that_name_the_classes_differently():
    """``yolo11 val`` warns (the scores stay the weights' class ids): the data's classes listed in another order
    would otherwise be scored under swapped names; weights without names of their own say nothing."""
    from yolo11.tools.val import names_differ

    assert names_differ(["cat", "dog"], ["dog", "cat"]) == "class 0: 'cat' in the weights, 'dog' in the data"
    assert names_differ(["cat", "dog"], ["cat", "puppy"]) == "class 1: 'dog' in the weights, 'puppy' in the data"
    assert names_differ(["cat", "dog"], ["cat", "dog"]) == ""
    assert names_differ(["0", "1"], ["cat", "dog"]) == names_differ(["class_0", "class_1"], ["a", "b"]) == ""
    assert names_differ(None, ["cat"]) == ""


def test_val_raises_the_default_max_det_to_the_most_objects_of_an_image(tmp_path, capsys, monkeypatch):
    """An image of 320 labelled objects: ``--max-det`` left at 300 is raised to 320 (Ultralytics 8.4.190's
    ``_check_max_det``), one line says so; a value the user chose is kept, and the line says recall is capped."""
    import cv2
    import numpy as np

    from yolo11.tools import val as val_tool

    monkeypatch.chdir(tmp_path)
    for split in ("train", "val"):
        (tmp_path / "images" / split).mkdir(parents=True)
        (tmp_path / "labels" / split).mkdir(parents=True)
        cv2.imwrite(str(tmp_path / "images" / split / "a.png"), np.full((64, 64, 3), 90, np.uint8))
        rows = [f"0 {(k % 20 + 0.5) / 20:.4f} {(k // 20 + 0.5) / 20:.4f} 0.02 0.02" for k in range(320)]
        (tmp_path / "labels" / split / "a.txt").write_text("\n".join(rows) + "\n")
    (tmp_path / "data.yaml").write_text(f"path: {tmp_path}\ntrain: images/train\nval: images/val\nnames: [x]\n")
    weights = save_weights(create_model("yolo11n", num_classes=1), tmp_path / "w.safetensors")
    seen = []
    real = val_tool.evaluate_weights
    monkeypatch.setattr(val_tool, "evaluate_weights", lambda *a, **k: seen.append(k["max_det"]) or real(*a, **k))
    flags = [str(weights), "--data", str(tmp_path / "data.yaml"), "--imgsz", "64", "--workers", "0", "--cache-dir",
             str(tmp_path / "cache")]
    assert val.main(flags) == 0
    assert val.main([*flags, "--max-det", "100"]) == 0
    assert seen == [320, 100]
    err = capsys.readouterr().err
    assert ("images of the data hold up to 320 objects (val 320), more than --max-det 300: --max-det raised to 320, "
            "as Ultralytics does") in err
    assert "more than --max-det 100: kept as chosen; recall is capped at 100 detections an image" in err


def test_val_save_txt_writes_no_file_for_an_image_without_detections(tmp_path):
    """``yolo11 val --save-txt`` as Ultralytics' val: label files for the images with detections only, in the
    lines ``yolo11 predict --save-txt`` writes."""
    from yolo11.data import load_source
    from yolo11.predictor import yolo_txt_lines

    source = load_source("synthetic:num_images=2,num_val=2,imgsz=64", split="val", cache_dir=tmp_path / "cache")
    ids = [int(i) for i in source.dataset["image_id"]]
    rows = torch.tensor([[4.0, 8.0, 20.0, 30.0, 0.75, 1.0]])
    assert val.write_labels(tmp_path, [(ids[0], rows), (ids[1], torch.zeros(0, 6))], source.dataset, True) == 1
    (written,) = (tmp_path / "labels").iterdir()
    size = (source.dataset[0]["height"], source.dataset[0]["width"])
    assert written.read_text().splitlines() == yolo_txt_lines([[4.0, 8.0, 20.0, 30.0]], [0.75], [1], size, True)
