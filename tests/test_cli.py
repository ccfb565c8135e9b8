"""The command lines before torch loads: ``--help`` without torch, "did you mean", key=value arguments for every
tool, Ultralytics' rounding of ``--imgsz``, the shipped sample data, and the ``yolo11`` umbrella command."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from yolo11.engine.config import parse_config
from yolo11.preflight import SAMPLE_DATA, check_report_to, resolve_data, round_imgsz

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ["yolo11.train", "yolo11.tools.val", "yolo11.tools.predict", "yolo11.tools.export", "yolo11.tools.convert",
         "yolo11.tools.info", "yolo11.cli"]
HEAVY = ("torch", "timm", "accelerate", "datasets", "onnx", "cv2")


def _run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)


def _as_program(module: str, args: list[str]) -> str:
    """Python code that runs ``module`` as ``python -m module args`` would and prints, as the process ends (an exit
    handler: the programs end through ``exit_process``), which heavy modules it had loaded."""
    return (f"import atexit, runpy, sys\nsys.argv = {[module, *args]!r}\n"
            f"atexit.register(lambda: print('LOADED', sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
            f"runpy.run_module({module!r}, run_name='__main__')")


@pytest.mark.parametrize("module", TOOLS)
def test_help_loads_no_torch(module):
    """``--help`` of each tool exits 0 with its usage and leaves torch, timm, accelerate, datasets unimported."""
    result = _run_python(_as_program(module, ["--help"]))
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout
    assert "LOADED []" in result.stdout


@pytest.mark.parametrize("module", ["yolo11.tools.val", "yolo11.tools.predict"])
def test_help_names_every_weights_reference(module, capsys, monkeypatch):
    """val and predict take the same weights references (docs/weights.md), ONNX exports and run folders too; their
    --help says so (predict's named only "our .safetensors file or folder, or an Ultralytics .pt")."""
    import importlib

    monkeypatch.setenv("COLUMNS", "100000")
    with pytest.raises(SystemExit):
        importlib.import_module(module).parse_args(["--help"])
    weights = next(line for line in capsys.readouterr().out.splitlines() if line.lstrip().startswith("weights "))
    for reference in (".safetensors", ".pt", ".onnx", "run folder", "hf://", "owner/name", "yolo26x.pt"):
        assert reference in weights, weights


@pytest.mark.parametrize("argv, expected", [
    (["yolo11.tools.val", "missing.safetensors", "--data", "synthetic"], "no such weights file"),
    (["yolo11.tools.val", "yolo11n.pt", "--data", "missing.yaml"], "--data missing.yaml: no such file"),
    (["yolo11.tools.predict", "missing.safetensors", "x.jpg"], "no such weights file"),
    (["yolo11.tools.export", "yolo11n.pt", "--opset", "11"], "--opset must be >= 13"),
    (["yolo11.train", "--report-to", "wandbb"], "(did you mean wandb?)"),
    (["yolo11.train", "--data", "missing.yaml"], "--data missing.yaml: no such file"),
    (["yolo11.train", "--weights", "missing.safetensors"], "no such weights file or folder: missing.safetensors"),
])
def test_wrong_paths_and_names_fail_before_torch(argv, expected):
    result = _run_python(_as_program(argv[0], argv[1:]))
    assert result.returncode == 2 and "LOADED []" in result.stdout, result.stdout + result.stderr
    assert expected in result.stderr


def test_did_you_mean_for_flags_and_keys(capsys):
    """A misspelt flag or key is one line naming the closest one, exit 2, no usage (which ``--help`` prints).
    Ultralytics' ``yolo train epocs=3`` also names 'epochs' (after printing its whole help)."""
    cases = [(parse_config, ["--epoch", "3"], "unknown argument '--epoch'; did you mean '--epochs'?"),
             (parse_config, ["epocs=3"], "unknown argument 'epocs'; did you mean 'epochs'?"),
             (parse_config, ["epoch=3", "data=synthetic"], "unknown argument 'epoch'; did you mean 'epochs'?")]
    from yolo11.tools import predict, val

    cases += [(predict.parse_args, ["yolo11n.pt", "x.jpg", "--save-text"],
               "unknown argument '--save-text'; did you mean '--save-txt'?"),
              (predict.parse_args, ["yolo11n.pt", "x.jpg", "cnf=0.5"], "unknown argument 'cnf'; did you mean 'conf'?"),
              (val.parse_args, ["yolo11n.pt", "--imgsz-x", "3"],
               "unknown argument '--imgsz-x'; did you mean '--imgsz'?"),
              (val.parse_args, ["yolo11n.pt", "epocs=3"], "unknown argument 'epocs'; did you mean 'epochs'?")]
    for parse, argv, expected in cases:
        with pytest.raises(SystemExit) as exc:
            parse(argv)
        assert exc.value.code == 2
        assert capsys.readouterr().err == f"error: {expected}\n", argv


@pytest.mark.parametrize("argv, expected", [
    (["train", "epocs=3"], "error: unknown argument 'epocs'; did you mean 'epochs'?"),
    (["val", "--imgsz-x", "3"], "error: unknown argument '--imgsz-x'; did you mean '--imgsz'?"),
    (["train", "model=yolo11q"], "error: --model is the architecture, one of yolo11n, yolo11s, yolo11m, yolo11l, "
                                 "yolo11x, yolo26n, yolo26s, yolo26m, yolo26l, yolo26x, got 'yolo11q'"),
    (["train", "--config", "missing.yaml"], "error: --config: no such file: missing.yaml"),
])
def test_usage_errors_are_one_line_before_torch(argv, expected):
    """The whole of stderr is the one line (the old output put 44 lines of usage before it); the model-name error
    no longer ends with "(the architecture then comes from the weights)", which applies only to a weights file."""
    code = (f"import sys\nfrom yolo11.cli import main\ntry:\n    code = main({argv!r})\nexcept SystemExit as e:\n"
            f"    code = e.code\nprint('EXIT', code, sorted(m for m in {HEAVY!r} if m in sys.modules))")
    result = _run_python(code)
    assert result.stdout.strip() == "EXIT 2 []", result.stdout + result.stderr
    assert result.stderr == expected + "\n"


def test_model_name_hint_keeps_its_clause_for_a_weights_file(capsys):
    with pytest.raises(SystemExit):
        parse_config(["--model", "best.pt"])
    assert capsys.readouterr().err.strip().endswith(
        "got 'best.pt'; to start from weights pass --weights best.pt (the architecture then comes from the weights)")


def test_imgsz_rounds_up_to_the_stride_with_a_warning(capsys):
    """Ultralytics' check_imgsz: 150 -> 160 with a warning; a multiple of 32 is kept silently."""
    warning = "warning: --imgsz 150 must be a multiple of the largest stride 32, updating to 160"
    assert round_imgsz(150) == (160, warning)
    assert round_imgsz(640) == (640, None) and round_imgsz(1)[0] == 32
    with pytest.raises(ValueError, match="positive"):
        round_imgsz(0)
    assert parse_config(["--imgsz", "150"]).data.imgsz == 160
    assert "updating to 160" in capsys.readouterr().out
    assert parse_config(["imgsz=100"]).data.imgsz == 128


def test_light_constants_agree_with_the_modules_that_load_torch():
    from yolo11.data.sources import BBOX_FORMATS
    from yolo11.engine.tracking import KNOWN_TRACKERS
    from yolo11.evaluation.coco import BACKENDS
    from yolo11.geometry import MAX_STRIDE
    from yolo11.preflight import KNOWN_TRACKERS as LIGHT_TRACKERS
    from yolo11.preflight import MAX_STRIDE as LIGHT_STRIDE
    from yolo11.preflight import OFFICIAL_WEIGHTS
    from yolo11.tools import export, onnx_export, val
    from yolo11.weights.resolve import OFFICIAL_NAMES

    assert (LIGHT_STRIDE, LIGHT_TRACKERS, OFFICIAL_WEIGHTS) == (MAX_STRIDE, KNOWN_TRACKERS, OFFICIAL_NAMES)
    assert (val.BBOX_FORMATS, val.BACKENDS) == (BBOX_FORMATS, BACKENDS)
    assert (export.OPSET, export.MIN_OPSET) == (onnx_export.OPSET, onnx_export.MIN_OPSET)
    for value in ("wandb", "all", "none", "wandb,tensorboard", ""):
        check_report_to(value)
    with pytest.raises(ValueError, match="did you mean tensorboard"):
        check_report_to("tensorbord")


def test_tool_key_values_become_flags(tmp_path):
    from yolo11.tools import export, predict, val

    args = val.parse_args(["model=yolo11n.pt", "data=synthetic", "imgsz=320", "conf=0.01", "rect=false", "batch=4"])
    assert (args.weights, args.data, args.imgsz, args.conf, args.rect, args.batch) == ("yolo11n.pt", "synthetic", 320,
                                                                                       0.01, False, 4)
    image = tmp_path / "a=b.jpg"  # an existing file named like a key=value stays a source
    image.write_bytes(b"")
    args = predict.parse_args(["model=yolo11n.pt", f"source={image}", str(image), "save_txt=true", "save_conf=True",
                               "max_det=5", "exist_ok=false"])
    assert (args.weights, args.sources, args.save_txt, args.save_conf, args.max_det, args.exist_ok) == (
        "yolo11n.pt", [str(image), str(image)], True, True, 5, False)
    assert export.parse_args(["yolo11n.pt", "imgsz=320", "opset=18"]).opset == 18


def test_coco8_by_name_is_the_shipped_sample(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec, note = resolve_data("coco8.yaml")
    assert spec == str(SAMPLE_DATA["coco8.yaml"]) and "shipped with yolo11" in note
    (tmp_path / "coco8.yaml").write_text("path: .\n")  # a local file of that name wins
    assert resolve_data("coco8.yaml") == ("coco8.yaml", None)
    images = sorted((SAMPLE_DATA["coco8.yaml"].parent / "coco8" / "images").glob("*/*.jpg"))
    assert len(images) == 8 and sum(p.stat().st_size for p in images) < 100_000  # the repo stays small


def test_missing_image_is_no_such_file(tmp_path):
    from yolo11.predictor import read_rgb

    with pytest.raises(FileNotFoundError, match="no such file: bus.jpg"):
        read_rgb("bus.jpg")


def test_save_txt_has_no_score_unless_save_conf():
    from yolo11.predictor import Detections

    detections = Detections(boxes=np.array([[10, 20, 30, 60]], np.float32), scores=np.array([0.5], np.float32),
                            class_ids=np.array([2]), names={2: "car"}, image_size=(100, 200))
    assert detections.txt_lines() == ["2 0.100000 0.400000 0.100000 0.400000"]
    assert detections.txt_lines(save_conf=True) == ["2 0.100000 0.400000 0.100000 0.400000 0.50000"]
    np.testing.assert_allclose(detections.xyxyn, [[0.05, 0.2, 0.15, 0.6]])
    np.testing.assert_allclose(detections.xywh, [[20, 40, 20, 40]])
    np.testing.assert_allclose(detections.xywhn, [[0.1, 0.4, 0.1, 0.4]])


def test_detections_save_writes_the_drawn_image(tmp_path):
    import cv2

    from yolo11.predictor import Detections

    image = np.zeros((40, 60, 3), np.uint8)
    detections = Detections(boxes=np.array([[5, 5, 30, 30]], np.float32), scores=np.array([0.9], np.float32),
                            class_ids=np.array([0]), names={0: "cat"}, image_size=(40, 60), image=image)
    path = detections.save(tmp_path / "out" / "drawn.png")
    assert cv2.imread(str(path)).shape == (40, 60, 3) and cv2.imread(str(path)).any()


def test_umbrella_command_dispatches_and_lists_api(capsys):
    import yolo11
    from yolo11.cli import main

    assert [name for name in dir(yolo11) if not name.startswith("_")] == sorted(yolo11.__all__)
    assert main(["trian"]) == 2
    assert capsys.readouterr().err == "error: unknown command 'trian'; did you mean 'train'?\n"
    with pytest.raises(SystemExit) as exc:
        main(["detect", "val", "--help"])  # Ultralytics' task word is accepted
    assert exc.value.code == 0 and "yolo11 val" in capsys.readouterr().out
    assert main(["info"]) == 0
    assert "torch " in capsys.readouterr().out


def test_info_help_version_scale_names_and_weights(tmp_path, capsys):
    """``yolo11 info --help`` is its usage (it was "no such weights file or folder: --help"); a scale name is built
    without weights; weights are given as a path or, as Ultralytics' key, ``model=path``; ``yolo11 version`` prints
    the version alone, as ``yolo version``."""
    from yolo11 import create_model
    from yolo11.cli import main
    from yolo11.weights import save_weights

    with pytest.raises(SystemExit) as exc:
        main(["info", "--help"])
    assert exc.value.code == 0 and capsys.readouterr().out.startswith("usage: yolo11 info")
    assert main(["version"]) == 0
    assert capsys.readouterr().out.strip() == importlib.metadata.version("yolo11-accelerate")
    assert main(["info", "yolo26n"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("YOLO26n summary: ") and out[0].endswith(
        " layers, 2,572,280 parameters, 2,572,280 gradients, 6.2 GFLOPs")  # Ultralytics' model.info() numbers
    assert "yolo26n (built from its scale, no weights): 80 classes" in out[1]
    weights = save_weights(create_model("yolo11n", num_classes=2, names=["a", "b"]), tmp_path / "best.safetensors")
    for argv in ([str(weights)], [f"model={weights}"]):
        assert main(["info", *argv]) == 0
        out = capsys.readouterr().out.splitlines()
        assert len(out) == 2 and out[0].startswith("YOLO11n summary: ") and "2 classes (a, b)" in out[1]
    assert main(["info", str(tmp_path / "missing.safetensors")]) == 2
    assert "no such weights file" in capsys.readouterr().err


@pytest.mark.slow
def test_readme_quick_start_runs_on_the_shipped_sample(tmp_path):
    """The README's quick start, as written but into tmp_path: ``yolo11 train`` on ``coco8.yaml`` by name, then
    ``yolo11 predict`` and ``yolo11 val`` on its weights (1 epoch at 64 px: the commands, not the accuracy)."""
    env_cmd = [sys.executable, "-m", "yolo11"]
    run = dict(capture_output=True, text=True, cwd=tmp_path, timeout=600,
               env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "2", "PATH": "/usr/bin:/bin"})
    train = subprocess.run([*env_cmd, "train", "data=coco8.yaml", "model=yolo11n", "imgsz=64", "epochs=1", "batch=4",
                            "workers=0", "plots=false", "name=quick"], **run)
    assert train.returncode == 0, train.stdout[-2000:] + train.stderr[-2000:]
    assert "using the data YAML shipped with yolo11" in train.stdout
    weights = tmp_path / "runs" / "train" / "quick" / "weights" / "best.safetensors"
    images = SAMPLE_DATA["coco8.yaml"].parent / "coco8" / "images" / "val"
    predict = subprocess.run([*env_cmd, "predict", str(weights), str(images), "imgsz=64", "conf=0.0",
                              "save_txt=true"], **run)
    assert predict.returncode == 0, predict.stderr[-2000:]
    records = json.loads((tmp_path / "runs" / "predict" / "exp" / "predictions.json").read_text())
    assert len(records) == 4
    val = subprocess.run([*env_cmd, "val", str(weights), "data=coco8.yaml", "imgsz=64", "workers=0"], **run)
    assert val.returncode == 0, val.stderr[-2000:]
    assert "mAP50-95" in val.stdout


def test_save_txt_writes_no_file_for_an_image_without_detections(tmp_path):
    """As Ultralytics' ``Results.save_txt``: an image without detections gets no label file (they were written
    empty, and counted among the labels saved)."""
    from yolo11.predictor import Detections
    from yolo11.tools.predict import PredictionWriter

    none = Detections(boxes=np.zeros((0, 4), np.float32), scores=np.zeros(0, np.float32),
                      class_ids=np.zeros(0, np.int64), names={0: "cat"}, image_size=(40, 60))
    one = Detections(boxes=np.array([[5, 5, 30, 30]], np.float32), scores=np.array([0.9], np.float32),
                     class_ids=np.array([0]), names={0: "cat"}, image_size=(40, 60))
    writer = PredictionWriter(tmp_path, draw=False, save_txt=True)
    writer.add(none, "a.jpg", "a")
    writer.add(one, "b.jpg", "b")
    assert sorted(path.name for path in (tmp_path / "labels").iterdir()) == ["b.txt"]
    assert none.save_txt(tmp_path / "r.txt") == tmp_path / "r.txt" and not (tmp_path / "r.txt").exists()
