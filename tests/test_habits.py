"""An Ultralytics user's habits on the command line and in the Python API: old keys (``half=True``), ``imgsz`` as a
list, ``classes=``, ``source=list.txt``, a run folder as ``model=``, ``info()``, ``metrics.box.map75`` and
``Results.save()`` without a name, each as Ultralytics 8.4.190 takes it."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from yolo11 import YOLO, create_model
from yolo11.api import Metrics, UsageError
from yolo11.engine.config import parse_config
from yolo11.models.summary import model_summary
from yolo11.predictor import Detector
from yolo11.tools import predict, val
from yolo11.tools.predict_sources import expand_sources
from yolo11.weights import save_weights


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    """A run folder as training leaves it, as far as the tools read it: ``weights/best.safetensors`` of a 3-class
    yolo11n whose class branch has large random weights: each class is the best of some anchors."""
    torch.manual_seed(0)
    model = create_model("yolo11n", num_classes=3)
    with torch.no_grad():
        for branch in model.head.cv3:
            branch[-1].weight.normal_(0.0, 1.0)
            branch[-1].bias.fill_(0.0)
    run = tmp_path_factory.mktemp("habits") / "exp"
    save_weights(model, run / "weights" / "best.safetensors")
    return run


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("images") / "noise.png"
    import cv2

    cv2.imwrite(str(path), np.random.default_rng(0).integers(0, 255, (48, 80, 3), dtype=np.uint8))
    return path


def test_train_reads_old_keys_and_a_size_list_as_ultralytics():
    """``half``/``int8`` became ``quantize``, ``end2end`` became ``nms`` (8.4.190's ``_handle_deprecation``): the
    trainer reads them so (``end2end=True`` is training validation's nms=false) instead of refusing them; a train
    ``imgsz=[h, w]`` is the larger side, as Ultralytics' ``check_imgsz`` for training."""
    config = parse_config(["data=synthetic", "half=true", "end2end=true", "label_smoothing=0.1"])
    assert config.run.val_nms is False
    assert parse_config(["data=synthetic", "half=false"]) == parse_config(["data=synthetic"])
    assert parse_config(["data=synthetic", "imgsz=[64,96]"]).data.imgsz == 96


def test_tools_take_old_keys_a_size_list_classes_and_a_run_folder(run_folder, image, capsys):
    """``yolo11 predict model=runs/train/exp source=... half=True imgsz=[64,96] classes=[0,2]``: the run folder's
    best weights, quantize ignored with a note, the larger side, the class ids; export keeps its own ``half``."""
    args = predict.parse_args([f"model={run_folder}", f"source={image}", "half=true", "imgsz=[64,96]",
                               "classes=[0,2]"])
    assert (args.weights, args.imgsz, args.classes) == (str(run_folder / "weights" / "best.safetensors"), 96, [0, 2])
    err = capsys.readouterr().err
    assert "half=True: Ultralytics' former name of quantize=16" in err and "imgsz=[64, 96]" in err
    assert val.parse_args([str(run_folder), "data=synthetic", "int8=true", "imgsz=[64]"]).imgsz == 64
    from yolo11.tools import export

    assert export.parse_args([str(run_folder), "half=true"]).half is True


def test_predict_classes_keeps_those_classes_up_to_max_det(run_folder):
    """``classes`` filters each box's class before ``max_det``, as Ultralytics' NMS: the filtered detections are
    the unfiltered ones of those classes, in order, cut at max_det."""
    model = create_model("yolo11n", num_classes=3)
    model.load_state_dict(YOLO(run_folder).model.state_dict())
    picture = np.random.default_rng(1).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    every = Detector(model, imgsz=64, conf=0.0, max_det=1000, device="cpu").predict(picture)[0]
    assert set(every.class_ids.tolist()) == {0, 1, 2}
    kept = Detector(model, imgsz=64, conf=0.0, max_det=5, device="cpu", classes=[1]).predict(picture)[0]
    assert kept.class_ids.tolist() == [1] * 5
    np.testing.assert_array_equal(kept.boxes, every.boxes[every.class_ids == 1][:5])
    with pytest.raises(ValueError, match="class ids of this model are 0-2"):
        Detector(model, imgsz=64, classes=[3], device="cpu")


def test_source_txt_lists_images_relative_to_itself(tmp_path, image):
    """``source=list.txt``: one source a line, an entry that does not exist as given read beside the file."""
    (tmp_path / "sub").mkdir()
    local = tmp_path / "sub" / "b.png"
    local.write_bytes(image.read_bytes())
    listing = tmp_path / "list.txt"
    listing.write_text(f"{image}\n\nsub/b.png\n")
    assert [(s.location, s.kind) for s in expand_sources([str(listing)])] == [(str(image), "image"),
                                                                              (str(local), "image")]


def test_predict_cli_reads_a_list_and_filters_classes(run_folder, image, tmp_path):
    listing = tmp_path / "list.txt"
    listing.write_text(f"{image}\n{image}\n")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = predict.main([f"model={run_folder}", f"source={listing}", "conf=0.0", "classes=2", "imgsz=64",
                             "--no-draw", "--output", str(tmp_path / "out")])
    records = json.loads((tmp_path / "out" / "predictions.json").read_text())
    assert code == 0 and len(records) == 2
    assert {d["class"] for r in records for d in r["detections"]} == {2}


def test_api_predict_habits(run_folder, image, tmp_path, monkeypatch, capsys):
    """``model.predict(half=True, imgsz=[64, 64], classes=[0])`` and ``imgsz=70`` (rounded up, as the CLI);
    ``r.save()`` names the file ``results_<image name>``."""
    model = YOLO(run_folder)
    (result,) = model.predict(str(image), half=True, imgsz=[64, 64], classes=[0], conf=0.0)
    assert len(result) and set(result.class_ids.tolist()) == {0}
    assert "half=True: Ultralytics' former name of quantize=16" in capsys.readouterr().err
    assert len(model.predict(str(image), imgsz=70, conf=0.0)[0])
    monkeypatch.chdir(tmp_path)
    assert result.save() == Path("results_noise.png") and (tmp_path / "results_noise.png").is_file()


@pytest.mark.parametrize("key, value, message", [
    ("imgsz", "abc", "imgsz='abc' is not an integer"), ("conf", "x", "conf='x' is not a number"),
    ("iou", None, "iou=None is not a number"), ("max_det", "a", "max_det='a' is not an integer"),
    ("max_det", 0, "max_det must be at least 1, got 0"),
])
def test_api_predict_values_of_the_wrong_type_are_usage_errors(run_folder, image, key, value, message):
    """They were TypeErrors from a comparison deep in the predictor ("'<=' not supported between ...")."""
    with pytest.raises(UsageError, match=re.escape(f"predict: {message}")):
        YOLO(run_folder).predict(str(image), **{key: value})


def test_info_gives_the_numbers_of_yolo11_info():
    """``YOLO(...).info()`` returns what ``yolo11 info`` prints (Ultralytics' parameters and GFLOPs), not a count
    of its own."""
    model = YOLO("yolo11n")
    summary = model_summary(model.model, 64)
    assert model.info(verbose=False, imgsz=64) == (summary.layers, summary.parameters, summary.gradients,
                                                    summary.gflops)


def test_metrics_box_has_map75():
    metrics = Metrics(0.3, 0.5, 0.6, 0.4, raw={"map75": 0.25})
    assert (metrics.box.map, metrics.box.map50, metrics.box.map75) == (0.3, 0.5, 0.25)


def test_detections_boxes_answer_ultralytics_results_boxes_views():
    """``r.boxes`` stays an (N, 4) NumPy array and also answers ``r.boxes.xyxy / .conf / .cls / .xywhn / .data`` as
    CPU tensors, per row too (``for box in r.boxes: box.xyxy[0], float(box.conf), int(box.cls)``), as Ultralytics'
    ``Results.boxes``; a copy keeps them, a column view says where they are instead of answering wrongly."""
    from yolo11.predictor import Detections

    xyxy = np.array([[10, 20, 30, 60], [0, 0, 50, 100]], np.float32)
    r = Detections(boxes=xyxy, scores=np.array([0.9, 0.4], np.float32), class_ids=np.array([3, 1]),
                   names={1: "a", 3: "b"}, image_size=(100, 200))
    assert isinstance(r.boxes, np.ndarray) and r.boxes.shape == (2, 4)
    np.testing.assert_array_equal(r.boxes, xyxy)
    assert torch.equal(r.boxes.xyxy, torch.from_numpy(xyxy)) and r.boxes.cls.tolist() == [3.0, 1.0]
    assert torch.allclose(r.boxes.conf, torch.tensor([0.9, 0.4]))
    assert torch.allclose(r.boxes.xywhn[1], torch.tensor([25 / 200, 50 / 100, 50 / 200, 100 / 100]))
    assert r.boxes.data.shape == (2, 6) and r.boxes.data[0, 5] == 3
    rows = [(box.xyxy[0].tolist(), round(float(box.conf), 2), int(box.cls)) for box in r.boxes]
    assert rows == [([10, 20, 30, 60], 0.9, 3), ([0, 0, 50, 100], 0.4, 1)]
    assert r.boxes[r.boxes.conf.numpy() > 0.5].cls.tolist() == [3.0]
    import copy

    assert copy.deepcopy(r.boxes).cls.tolist() == r.boxes.copy().cls.tolist() == [3.0, 1.0]
    for other in (r.boxes[:, :2], r.boxes.T, r.boxes * 2):
        with pytest.raises(AttributeError, match="r.boxes"):
            other.conf  # noqa: B018
    # Ultralytics' Results names for the image, its size and file; orig_img in BGR as there
    image = np.zeros((100, 200, 3), np.uint8)
    image[..., 0] = 255  # red in RGB
    r = Detections(boxes=xyxy, scores=np.array([0.9, 0.4], np.float32), class_ids=np.array([3, 1]),
                   names={1: "a", 3: "b"}, image_size=(100, 200), image=image, source="x.jpg")
    assert r.orig_shape == (100, 200) and r.path == "x.jpg"
    assert r.orig_img[0, 0].tolist() == [0, 0, 255] and r.image[0, 0].tolist() == [255, 0, 0]


def test_a_bare_boolean_key_is_true_as_ultralytics_cli_reads_it(tmp_path, monkeypatch):
    """``yolo11 train ... cos_lr exist_ok`` and ``yolo11 predict ... save_txt``: a boolean key without a value is
    true (Ultralytics' CLI); a flag's value (``--name val``: ``val`` is also a key) and an existing file stay."""
    import argparse

    from yolo11.engine.ultralytics_args import read_key_values

    config = parse_config(["data=coco8.yaml", "cos_lr", "--name", "val", "exist_ok"])
    assert config.optim.schedule == "cosine" and config.run.name == "val" and config.run.exist_ok
    parser = argparse.ArgumentParser(prog="yolo11 predict")
    parser.add_argument("sources", nargs="*")
    parser.add_argument("--save-txt", action="store_true")
    monkeypatch.chdir(tmp_path)
    Path("show").write_text("")  # a source that happens to bear a key's name
    argv, _ = read_key_values(parser, ["best.safetensors", "save_txt", "show"])
    assert argv == ["best.safetensors", "show", "--save-txt"]


@pytest.mark.parametrize("argv", [["best.safetensors", "data="], ["best.safetensors", "source= "]])
def test_a_tool_key_without_a_value_is_refused_by_name(argv, capsys):
    """`yolo11 val ... data=$DATA` with DATA unset: "" named the current folder, and the error spoke of a dataset
    split there (predict's `source=`: of a save_pretrained folder)."""
    import argparse

    from yolo11.engine.ultralytics_args import read_key_values

    parser = argparse.ArgumentParser(prog="yolo11 val")
    parser.add_argument("sources", nargs="*")
    parser.add_argument("--data")
    with pytest.raises(SystemExit) as exc:
        read_key_values(parser, argv, positionals={"source": "sources"})
    assert exc.value.code == 2
    assert f"error: {argv[1].partition('=')[0]}= has no value" in capsys.readouterr().err


def test_a_bare_legacy_key_is_read_as_its_current_one(run_folder, capsys):
    """``yolo11 val <weights> half``: the old key alone is ``half=True``, read as 8.4.190 reads it (quantize=16)."""
    val.parse_args([str(run_folder), "half", "imgsz=64"])
    assert "half=True: Ultralytics' former name of quantize=16" in capsys.readouterr().err


@pytest.mark.slow
def test_val_false_validates_the_last_epoch_only_and_leaves_best_weights(tmp_path):
    """Ultralytics' ``val=False`` skips the validations before the final epoch, which it still validates (and
    saves best.pt from): ``--val-interval -1``."""
    from helpers.engine_helpers import TINY_RUN_TRAINING, train_in_process

    from yolo11.evaluation.results import read_results

    assert train_in_process([*TINY_RUN_TRAINING, "val=False", "--output-dir", str(tmp_path), "--name", "run"]) == 0
    first, last = read_results(tmp_path / "run" / "results.csv")
    assert first["metrics/mAP50-95(B)"] == "" and last["metrics/mAP50-95(B)"] != ""
    assert (tmp_path / "run" / "weights" / "best.safetensors").is_file()


@pytest.mark.slow
def test_an_early_stop_by_patience_says_so(tmp_path, monkeypatch, capsys):
    """``--patience`` ended a run after its epoch line with nothing said (Ultralytics prints its EarlyStopping
    line); every epoch scoring the same, patience 1 stops after the second."""
    from helpers.engine_helpers import TINY_RUN_TRAINING, train_in_process

    from yolo11.engine import run_outputs

    monkeypatch.setattr(run_outputs, "fitness", lambda metrics: 0.5)
    assert train_in_process([*TINY_RUN_TRAINING, "--epochs", "4", "--patience", "1", "--output-dir", str(tmp_path),
                             "--name", "run"]) == 0
    out = capsys.readouterr().out
    assert "early stop: no improvement in the last 1 epochs (--patience); the best was epoch 1" in out
    assert "epoch 2/4 done" in out and "epoch 3/4" not in out
