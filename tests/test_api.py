"""``yolo11.YOLO`` (yolo11/api.py): Ultralytics' Python API on our trainer, tools and ``Detector``; trained once
in this process (as from a notebook or script, no launcher), and once under ``accelerate launch`` (slow)."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers.engine_helpers import ROOT, describe, launch, reset_accelerate_state

from yolo11 import YOLO
from yolo11.api import Metrics, TrainingError, UsageError
from yolo11.cli_calls import train_tokens
from yolo11.data.sources.synthetic import SHAPES
from yolo11.engine.config import TrainConfig, parse_config
from yolo11.engine.ultralytics_args import ULTRALYTICS_DEFAULTS
from yolo11.evaluation.results import read_results

TINY_DATA = "synthetic:num_images=8,imgsz=64"
TINY = {"data": TINY_DATA, "imgsz": 64, "epochs": 1, "batch": 4, "workers": 0, "plots": False}
COCO8_IMAGES = ROOT / "yolo11" / "assets" / "coco8" / "images" / "val"


def test_importing_yolo_loads_no_torch():
    code = ("import sys\nfrom yolo11 import YOLO\nprint(sorted({m.split('.')[0] for m in sys.modules} & {'torch', "
            "'accelerate', 'datasets', 'timm', 'cv2'}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]"


@pytest.mark.parametrize("value", [True, False, None, 3, 0.01, 1e-5, "yes", "null", "01", "a b", "x: y", "it's",
                                   [640, 480], Path("runs/a b")])
def test_keywords_become_key_values_that_read_back_as_the_same_value(value):
    """train()'s keywords go through the trainer's ``key=value`` reading (YAML values): each written so that it
    reads back as the value given (a string that YAML would read as a bool, null or number stays a string)."""
    (token,) = train_tokens({"key": value})
    key, _, text = token.partition("=")
    assert key == "key" and yaml.safe_load(text) == (str(value) if isinstance(value, Path) else value)


def test_architectures_are_built_on_first_use_and_weights_paths_checked(tmp_path):
    """``yolo11n``/``yolo26s.yaml``: the architecture (80 classes named by their ids), built when ``.model`` is
    first used; a missing path or a run folder without weights fails at once."""
    for ref, name in (("yolo11n", "yolo11n"), ("yolo26s.yaml", "yolo26s")):
        model = YOLO(ref)
        assert (model.architecture, model.ckpt_path, model._model) == (name, None, None)
    model = YOLO("yolo26n")
    assert model.model.config["name"] == "yolo26n" and model.model is model.model
    assert len(model.names) == 80 and model.names[79] == "79" and model.task == "detect"
    with pytest.raises(FileNotFoundError, match="no such weights file or folder: missing.safetensors"):
        YOLO("missing.safetensors")
    with pytest.raises(FileNotFoundError, match=r"yolov8n.yaml: not an architecture built here \(yolo11n, "):
        YOLO("yolov8n.yaml")
    (tmp_path / "run" / "weights").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="without weights/best.safetensors or last.safetensors"):
        YOLO(tmp_path / "run")
    (tmp_path / "run" / "weights" / "best.safetensors").touch()  # Ultralytics' habit names best.pt: said where ours is
    with pytest.raises(FileNotFoundError, match=r"no such weights file: .*best\.pt; this trainer writes .*best\."
                                                r"safetensors beside it"):
        YOLO(tmp_path / "run" / "weights" / "best.pt")


def test_predict_saves_where_yolo11_predict_does(tmp_path, monkeypatch):
    """``predict(save=True)`` writes runs/predict/exp, then exp2, and ``name=`` a folder under runs/predict, as
    ``yolo11 predict`` does (it wrote runs/predict, then runs/predict2 beside it, and ``name="x"`` runs/x)."""
    monkeypatch.chdir(tmp_path)
    model = YOLO("yolo11n")
    image = str(COCO8_IMAGES / "000000000036.jpg")
    for _ in range(2):
        model.predict(image, imgsz=64, save=True)
    found = model.predict(image, imgsz=64, conf=0.0, save_txt=True, name="x")  # conf 0: something to write
    model.predict(image, imgsz=64, save=True, project="elsewhere", name="y")
    assert sorted(path.name for path in (tmp_path / "runs").iterdir()) == ["predict"]
    assert sorted(path.name for path in (tmp_path / "runs" / "predict").iterdir()) == ["exp", "exp2", "x"]
    assert (tmp_path / "runs" / "predict" / "exp2" / "000000000036.jpg").is_file()
    assert len(found[0]) and (tmp_path / "runs" / "predict" / "x" / "labels" / "000000000036.txt").is_file()
    assert (tmp_path / "elsewhere" / "y" / "predictions.json").is_file()


def test_metrics_per_class_as_the_table_prints_them():
    """Per class: a class with ground truth but no detection scores 0 (COCO gives it no AP), one without ground
    truth has no values; Ultralytics' ``box.maps`` gives it the overall mAP50-95."""
    evaluated = {"map50_95": 0.25, "map50": 0.5, "precision": 0.6, "recall": 0.4,
                 "per_class_ap50_95": [None, 0.5, None], "per_class_ap50": [None, 0.75, None],
                 "per_class_precision": [0.0, 0.9, None], "per_class_recall": [0.0, 0.8, None]}
    ground_truth = {"annotations": [{"category_id": 1}, {"category_id": 2}]}  # category = class + 1
    metrics = Metrics.from_evaluation(evaluated, ["a", "b", "c"], ground_truth)
    assert metrics.per_class == {"a": dict.fromkeys(("precision", "recall", "map50", "map50_95"), 0.0),
                                 "b": {"precision": 0.9, "recall": 0.8, "map50": 0.75, "map50_95": 0.5},
                                 "c": dict.fromkeys(("precision", "recall", "map50", "map50_95"))}
    assert metrics.box.maps.tolist() == [0.0, 0.5, 0.25] and (metrics.box.mp, metrics.box.mr) == (0.6, 0.4)
    # the classes with ground truth, in Ultralytics' per-class arrays (ap_class_index order)
    box = metrics.box
    assert [a.tolist() for a in (box.ap_class_index, box.ap, box.ap50, box.p, box.r)] == [
        [0, 1], [0.0, 0.5], [0.0, 0.75], [0.0, 0.9], [0.0, 0.8]]
    assert box.f1[0] == 0.0 and box.f1[1] == pytest.approx(2 * 0.9 * 0.8 / 1.7)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """``YOLO("yolo11n").train(...)`` in this process, its printed output, and the folder it wrote into."""
    folder = tmp_path_factory.mktemp("api")
    model = YOLO("yolo11n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        metrics = model.train(**TINY, lr0=0.02, project=str(folder), name="run")
    yield model, metrics, out.getvalue(), folder
    reset_accelerate_state()


def test_train_returns_the_best_weights_metrics_and_holds_them(trained):
    """Training returns the metrics of the best weights, validated after training (per class too), with the run
    folder, best/last paths and best epoch; the object then holds the best weights and the run's data and imgsz.
    A given lr0 that optimizer=auto ignores is said (the trainer's note)."""
    model, metrics, out, folder = trained
    run = folder / "run"
    assert (metrics.run_dir, metrics.best, metrics.last) == (run, run / "weights" / "best.safetensors",
                                                             run / "weights" / "last.safetensors")
    assert metrics.best.is_file() and metrics.last.is_file() and metrics.best_epoch == 1
    assert (model.ckpt_path, model.run_dir, model.overrides) == (str(metrics.best), run, {"data": TINY_DATA,
                                                                                          "imgsz": 64})
    assert list(model.names.values()) == list(SHAPES) == list(metrics.per_class)
    assert set(metrics.per_class["circle"]) == {"precision", "recall", "map50", "map50_95"}
    assert 0 <= metrics.map50_95 <= metrics.map50 <= 1 and 0 <= metrics.precision <= 1 and 0 <= metrics.recall <= 1
    assert metrics.results_dict["metrics/mAP50-95(B)"] == metrics.box.map == metrics.fitness == metrics.map50_95
    (row,) = read_results(run / "results.csv")  # the trainer's validation of the same weights
    assert float(row["metrics/mAP50-95(B)"]) == pytest.approx(metrics.map50_95, abs=1e-4)
    assert "optimizer=auto: lr0=0.02 ignored; AdamW(lr=" in out and f"validating {metrics.best}" in out


def test_the_run_args_yaml_has_ultralytics_keys_and_reads_back(trained):
    """The run's args.yaml: Ultralytics' keys only; ``cfg=args.yaml`` gives back the run's settings that have
    Ultralytics keys (config.yaml has the rest)."""
    run = trained[1].run_dir
    args = yaml.safe_load((run / "args.yaml").read_text())
    assert set(args) <= set(ULTRALYTICS_DEFAULTS) and args["model"] == "yolo11n.yaml" and args["batch"] == 4
    saved = TrainConfig.from_dict(yaml.safe_load((run / "config.yaml").read_text()))
    back = parse_config([f"cfg={run / 'args.yaml'}"])
    assert (back.model, back.data, back.optim) == (saved.model, saved.data, saved.optim)
    assert (back.run.epochs, back.run.batch_size, back.run.plots, back.run.name) == (1, 4, False, "run")


def test_val_predict_export_and_info_use_the_trained_model(trained, tmp_path, capsys, monkeypatch):
    """val (the run's data and imgsz by default; its files where ``yolo11 val`` writes them, Ultralytics' output
    keys read), predict and the call (arrays, a folder, a stream, saved outputs), export (ONNX beside the weights,
    safetensors), info; a run folder loads as its best weights."""
    model, metrics, _, _ = trained
    monkeypatch.chdir(tmp_path)
    again = model.val(batch=8)
    assert again.map50_95 == pytest.approx(metrics.map50_95, abs=1e-6) and list(again.per_class) == list(SHAPES)
    assert again.save_dir.resolve() == tmp_path / "runs" / "val" / "exp" and (again.save_dir / "metrics.json").is_file()
    named = model.val(batch=8, project=str(tmp_path / "vals"), name="v", save_json=True, plots=True)
    assert named.save_dir == tmp_path / "vals" / "v"
    assert {"metrics.json", "predictions.json"} <= {path.name for path in named.save_dir.iterdir()}
    assert any(path.suffix == ".png" for path in named.save_dir.iterdir())
    image = np.full((48, 80, 3), 114, np.uint8)
    (result,) = model(image, conf=0.0, max_det=5)
    assert result.boxes.shape == (5, 4) and result.image_size == (48, 80) and result.source is None
    stream = model.predict([image, image[:32]], stream=True, conf=0.0, max_det=5)
    assert not isinstance(stream, list) and [r.image_size for r in stream] == [(48, 80), (32, 80)]
    results = model.predict(str(COCO8_IMAGES), conf=0.0, max_det=2, batch=3, save=True, project=str(tmp_path),
                            name="p")
    files = sorted(path.name for path in COCO8_IMAGES.iterdir())
    assert [Path(r.source).name for r in results] == files and all(len(r) == 2 for r in results)
    assert sorted(path.name for path in (tmp_path / "p").iterdir()) == sorted([*files, "predictions.json"])
    assert len(json.loads((tmp_path / "p" / "predictions.json").read_text())) == len(files)
    pytest.importorskip("onnx")
    onnx = metrics.best.with_suffix(".onnx")
    capsys.readouterr()
    assert model.export(format="onnx") == onnx and onnx.is_file()
    said = capsys.readouterr().out  # the model's weights, not the temporary copy the export tool read
    assert [line.split(" -> ")[0] for line in said.splitlines() if " -> " in line] == [str(metrics.best)], said
    copy = model.export(format="safetensors", output=tmp_path / "copy.safetensors")
    assert YOLO(copy).names == model.names
    beside = model.export(format="safetensors")  # the default beside the weights would be the weights themselves
    assert beside == metrics.best.with_name("best_export.safetensors") and YOLO(beside).names == model.names
    with pytest.raises(UsageError, match="is the weights file this model was loaded from; pass another output="):
        model.export(format="safetensors", output=metrics.best)
    layers, parameters, gradients, gflops = model.info(verbose=False, imgsz=64)
    assert parameters == sum(p.numel() for p in model.model.parameters()) >= gradients and 0 < gflops < 1
    from_run = YOLO(metrics.run_dir)
    assert (from_run.ckpt_path, from_run.run_dir, from_run.overrides) == (model.ckpt_path, model.run_dir,
                                                                          model.overrides)


def test_errors_raise_with_the_command_line_message(trained, capsys):
    """A wrong key, path or value raises (``UsageError``, a ValueError, or the tools' FileNotFoundError) with the
    CLI's one-line message; argparse's usage text is not printed."""
    model = trained[0]
    with pytest.raises(UsageError, match=r"unknown argument 'epoch'; did you mean 'epochs'\?"):
        model.train(epoch=3)
    with pytest.raises(UsageError, match="--data missing.yaml: no such file or folder"):
        model.train(data="missing.yaml")
    with pytest.raises(FileNotFoundError, match="--data missing.yaml: no such file or folder"):
        model.val(data="missing.yaml")
    with pytest.raises(UsageError, match=r"predict: unknown key 'cnf' \(did you mean conf\?\)"):
        model.predict(np.zeros((32, 32, 3), np.uint8), cnf=0.3)
    with pytest.raises(FileNotFoundError, match="no such image, video or folder: missing.jpg"):
        model.predict("missing.jpg")
    with pytest.raises(UsageError, match="--opset must be >= 13, got 3"):
        model.export(opset=3)
    with pytest.raises(UsageError, match="val needs data="):
        YOLO("yolo11n").val()
    assert "usage:" not in capsys.readouterr().err


def test_a_stopped_or_failed_run_raises(tmp_path, monkeypatch):
    """The trainer's exit codes as exceptions: 130 (Ctrl-C, checkpoint saved) is KeyboardInterrupt and keeps the
    run folder for ``train(resume=True)``; 1 (a non-finite loss...) is TrainingError with its error line."""
    import yolo11.engine.trainer

    def stopped(config, typed):
        (Path(config.run.output_dir) / config.run.name).mkdir(parents=True)
        (Path(config.run.output_dir) / config.run.name / "config.yaml").write_text(yaml.safe_dump(config.to_dict()))
        return 130

    def failed(config, typed):
        print("error: the loss is not finite at step 3", file=sys.stderr)
        return 1

    model = YOLO("yolo11n")
    monkeypatch.setattr(yolo11.engine.trainer, "train", stopped)
    with pytest.raises(KeyboardInterrupt):
        model.train(data=TINY_DATA, project=str(tmp_path), name="stopped")
    assert model.run_dir == tmp_path / "stopped" and model.ckpt_path is None
    monkeypatch.setattr(yolo11.engine.trainer, "train", failed)
    with pytest.raises(TrainingError, match="^the loss is not finite at step 3$"):
        model.train(data=TINY_DATA, project=str(tmp_path), name="failed")


SCRIPT = """\
import json, os, sys
from yolo11 import YOLO

model = YOLO("yolo11n")
settings = dict(data="{data}", imgsz=64, epochs=1, batch=4, workers=0, plots=False, project=sys.argv[1])
metrics = model.train(**settings, name="launched")
again = model.val(batch=4)
second = model.train(**settings, name="second")
report = {{"map": metrics.map50_95, "best": str(metrics.best), "val": again.map50_95, "second": str(second.run_dir),
          "held": model.ckpt_path}}
with open(os.path.join(sys.argv[1], f"result{{os.environ['RANK']}}.json"), "w") as file:  # stdout lines may interleave
    json.dump(report, file)
"""


@pytest.mark.slow
def test_train_val_train_under_accelerate_launch_on_two_processes(tmp_path):
    """A script using the API under ``accelerate launch`` (2 CPU processes): every process trains its share, finds
    the run folder and validates the best weights on its shard, with the same metrics on both; val() and a second
    train() in the same script work (the trainer closes the process group at its end: the API makes it again)."""
    script = tmp_path / "train_api.py"
    script.write_text(SCRIPT.format(data=TINY_DATA))
    result = launch([str(tmp_path)], config="cpu_2proc.yaml", script=script, cpu_ddp=True,
                    env={"PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, describe(result)
    reports = [json.loads((tmp_path / f"result{rank}.json").read_text()) for rank in (0, 1)]
    best, second = tmp_path / "launched" / "weights" / "best.safetensors", tmp_path / "second"
    assert {(r["map"], r["val"], r["best"], r["second"], r["held"]) for r in reports} == {
        (reports[0]["map"], reports[0]["map"], str(best), str(second), str(second / "weights" / "best.safetensors"))}
    assert "2 process(es) x batch 2" in result.stdout


def test_results_and_info_take_the_ultralytics_calls_users_type(tmp_path, capsys):
    """``r.save(filename=...)``, ``r.save_txt(..., save_conf=True)``, ``r.summary()``, ``r.cpu()``,
    ``r.plot(conf=False, line_width=1)`` and ``model.info(detailed=True)`` raised TypeError or AttributeError."""
    from yolo11.predictor import Detections

    image = np.zeros((40, 80, 3), np.uint8)
    r = Detections(boxes=np.array([[8, 4, 40, 20]], np.float32), scores=np.array([0.9], np.float32),
                   class_ids=np.array([1]), names={0: "a", 1: "b"}, image_size=(40, 80), image=image)
    assert r.save(filename=tmp_path / "r.png") == tmp_path / "r.png" and (tmp_path / "r.png").is_file()
    r.save_txt(tmp_path / "r.txt", save_conf=True)
    r.save_txt(tmp_path / "r.txt")  # appended, as Ultralytics appends
    assert (tmp_path / "r.txt").read_text().splitlines() == ["1 0.300000 0.300000 0.400000 0.400000 0.90000",
                                                            "1 0.300000 0.300000 0.400000 0.400000"]
    assert r.summary() == [{"name": "b", "class": 1, "confidence": 0.9,
                            "box": {"x1": 8.0, "y1": 4.0, "x2": 40.0, "y2": 20.0}}]
    assert r.summary(normalize=True)[0]["box"] == {"x1": 0.1, "y1": 0.1, "x2": 0.5, "y2": 0.5}
    assert r.cpu() is r and r.numpy() is r
    bare, full = r.plot(conf=False, labels=False, line_width=1), r.plot()
    assert bare.shape == full.shape == image.shape and bare.sum() < full.sum()  # one-pixel lines, no caption
    YOLO("yolo11n.yaml").info(detailed=True, imgsz=64)
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split() == ["layer", "name", "gradient", "parameters", "shape", "mu", "sigma"]
    assert rows[1].split()[:3] == ["0", "backbone.layers.0.conv.weight", "True"] and "summary:" in rows[-1]


def test_a_torch_tensor_source_predicts_as_its_array(capsys):
    """Ultralytics' tensor source, (B, 3, H, W) float in [0, 1]: it was refused as 'images must be uint8'."""
    import torch

    from yolo11.api import UsageError

    model = YOLO("yolo11n.yaml")
    array = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    tensor = torch.from_numpy(array).permute(2, 0, 1).float() / 255
    settings = dict(imgsz=64, conf=0.0, max_det=5, device="cpu")
    (expected,) = model.predict(array[..., ::-1], **settings)  # an array is BGR (Ultralytics' habit), a tensor RGB
    results = model.predict(tensor[None].repeat(2, 1, 1, 1), **settings)
    assert len(results) == 2 and all(np.array_equal(r.boxes, expected.boxes) for r in results)
    (single,) = model.predict(torch.from_numpy(array).permute(2, 0, 1), **settings)  # uint8 (3, H, W)
    np.testing.assert_array_equal(single.boxes, expected.boxes)
    with pytest.raises(UsageError, match=r"values in \[0, 1\]"):
        model.predict(tensor * 255, **settings)


def test_ultralytics_results_habits_on_boxes_and_the_model(tmp_path, capsys):
    """What an Ultralytics script does with a model and its results: ``model.model`` in eval mode (a raw forward in
    train mode moved the BatchNorm statistics, and every later prediction), ``r.boxes.cpu().numpy().xyxy`` as a
    NumPy array, ``r.boxes.id`` None, ``verbose=False`` without a note; the boxes' values unchanged."""
    import torch

    from yolo11.models import create_model
    from yolo11.weights import save_weights

    weights = save_weights(create_model("yolo11n", num_classes=80), tmp_path / "w.safetensors")
    model = YOLO(weights)
    assert model.model.training is False
    image = str(COCO8_IMAGES / "000000000036.jpg")
    before = model.predict(image, imgsz=64, conf=0.0, verbose=False)[0]
    with torch.no_grad():
        model.model(torch.rand(2, 3, 64, 64))  # as a user's hook or benchmark would
    after = model(image, imgsz=64, conf=0.0, verbose=False)[0]
    assert "ignored" not in capsys.readouterr().err
    boxes = after.boxes
    assert len(boxes) > 0 and torch.equal(before.boxes.data, boxes.data)
    as_numpy = boxes.cpu().numpy()
    assert isinstance(as_numpy.xyxy, np.ndarray) and as_numpy.xyxy.shape == (len(boxes), 4)
    np.testing.assert_array_equal(as_numpy.xyxy, boxes.xyxy.numpy())
    np.testing.assert_array_equal(as_numpy[0].conf, boxes.conf.numpy()[:1])
    assert isinstance(boxes.to("cpu").xyxy, torch.Tensor) and boxes.data.shape == (len(boxes), 6)
    assert boxes.id is None and boxes.is_track is False and boxes.orig_shape == after.image_size


@pytest.mark.skipif(not (ROOT.parent / "shared" / "data" / "reference" / "yolo11n_coco128.pt").is_file(),
                    reason="shared/data/reference absent")
def test_an_ultralytics_checkpoint_brings_its_training_data_and_size():
    """``YOLO("best.pt")`` of Ultralytics keeps its ``train_args``' data and size, as Ultralytics' ``overrides``
    (``val()`` without ``data=`` validates on it, ``predict`` runs at that size), as ``yolo11 val best.pt`` does."""
    import torch

    model = YOLO(ROOT.parent / "shared" / "data" / "reference" / "yolo11n_coco128.pt")
    assert set(model.overrides) == {"data", "imgsz"} and model.overrides["imgsz"] == 640
    assert str(model.overrides["data"]).endswith(".yaml")
    assert model.model.training is False and isinstance(model.model, torch.nn.Module)


def test_results_verbose_and_to_json_as_ultralytics():
    """``r.verbose()`` (the predict line's counts) and ``r.to_json()`` (``summary()`` as JSON), as Ultralytics."""
    from yolo11.predictor import Detections

    r = Detections(boxes=np.array([[1, 2, 11, 12], [3, 4, 13, 14], [0, 0, 5, 5]], np.float32),
                   scores=np.array([0.9, 0.8, 0.7], np.float32), class_ids=np.array([2, 2, 0]),
                   names={0: "person", 2: "car"}, image_size=(20, 30))
    assert r.verbose() == "1 person, 2 cars, "
    assert json.loads(r.to_json()) == json.loads(json.dumps(r.summary()))
    assert json.loads(r.to_json())[0]["name"] == "car"
    empty = Detections(boxes=np.zeros((0, 4), np.float32), scores=np.zeros(0, np.float32),
                       class_ids=np.zeros(0, np.int64), names={0: "person"}, image_size=(20, 30))
    assert empty.verbose() == "(no detections), " and json.loads(empty.to_json()) == []


def test_the_torch_model_habits_load_to_eval_fuse(tmp_path, capsys):
    """``YOLO("yolo11n.yaml").load("w")`` transfers the tensors that fit (a 2-class file into an 80-class
    architecture: all but the class branch), ``to``, ``device``, ``eval`` and ``fuse`` act on the model and return
    the object, as Ultralytics' do; predictions after ``fuse`` equal those before."""
    import torch

    from yolo11.models import create_model
    from yolo11.weights import save_weights

    source = create_model("yolo11n", num_classes=2)
    weights = save_weights(source, tmp_path / "w.safetensors")
    model = YOLO("yolo11n.yaml")
    assert model.load(weights) is model
    said = capsys.readouterr().out
    assert said.startswith("transferred ") and "re-initialised" in said
    saved = dict(source.state_dict())
    loaded = dict(model.model.state_dict())
    same = [k for k in saved if k in loaded and saved[k].shape == loaded[k].shape]
    assert len(same) > 100 and all(torch.equal(saved[k].to(loaded[k].dtype), loaded[k]) for k in same)
    assert model.to("cpu") is model and model.device == torch.device("cpu") and model.eval() is model
    assert model.model.training is False
    image = str(COCO8_IMAGES / "000000000036.jpg")
    before = model.predict(image, imgsz=64, conf=0.0)[0]
    assert model.fuse() is model
    after = model.predict(image, imgsz=64, conf=0.0)[0]
    np.testing.assert_allclose(after.boxes, before.boxes, atol=1e-2)


def test_arrays_are_bgr_as_ultralytics_reads_them(tmp_path):
    """``model(cv2.imread(path))``, the commonest Ultralytics line, sees the image's own colours: the same
    detections as the path itself (arrays were read as RGB, and found other objects, or none)."""
    import cv2

    model = YOLO("yolo11n.yaml")
    path = COCO8_IMAGES / "000000000036.jpg"
    settings = dict(imgsz=64, conf=0.0, max_det=20, device="cpu")
    (from_path,) = model.predict(str(path), **settings)
    (from_array,) = model.predict(cv2.imread(str(path)), **settings)
    (from_rgb,) = model.predict(cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB), **settings)
    np.testing.assert_array_equal(from_array.boxes, from_path.boxes)
    np.testing.assert_array_equal(from_array.image, from_path.image)  # kept RGB inside
    np.testing.assert_array_equal(from_rgb.image, from_path.image[..., ::-1])  # an RGB array is read swapped


def test_results_carry_their_speed_as_ultralytics():
    """``r.speed``: the image's preprocess, inference and postprocess milliseconds, as Ultralytics' dict."""
    model = YOLO("yolo11n.yaml")
    results = model.predict([str(COCO8_IMAGES / "000000000036.jpg"), str(COCO8_IMAGES / "000000000042.jpg")],
                            imgsz=64, device="cpu")
    for r in results:
        assert set(r.speed) == {"preprocess", "inference", "postprocess"}
        assert all(value >= 0 for value in r.speed.values()) and r.speed["inference"] > 0
        assert r.source.endswith(".jpg")
