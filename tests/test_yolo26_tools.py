"""YOLO26 in the tools: yolo11-predict, the Detector, yolo11-val, yolo11-export (ONNX and .pt), yolo11-convert, the
Hub card and the official names; the head switch (``--nms`` / ``nms=``, Ultralytics 8.4.190's ``nms`` argument).

The live comparisons run Ultralytics 8.4.190 (PYTHONPATH=/work/ultra) in a subprocess
(``tests/helpers/ultralytics_yolo26_predict.py``) on a yolo26n it builds from its own ``yolo26n.yaml`` and saves as a
``.pt``; they skip when it is not importable.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from huggingface_hub import constants

import yolo11
from yolo11.gate import FileRefusedError, check_model_config
from yolo11.models import YOLO26Detector
from yolo11.predictor import Detector
from yolo11.tools import convert, export, predict, val
from yolo11.weights import WeightsNotFoundError, load_weights, resolve_weights, save_pretrained, save_weights

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
COCO8 = DATA / "coco8.yaml"
IMAGES = sorted((DATA / "coco8" / "images" / "val").glob("*.jpg"))
IMGSZ, CONF = 320, 0.5
ULTRALYTICS = importlib.util.find_spec("ultralytics")
needs_ultralytics = pytest.mark.skipif(ULTRALYTICS is None or not IMAGES,
                                       reason="ultralytics 8.4.190 is not importable (PYTHONPATH=/work/ultra) or "
                                              "shared/data/coco8 is absent")
needs_coco8 = pytest.mark.skipif(not COCO8.is_file(), reason="shared/data/coco8.yaml absent")


def run_ultralytics(out: Path, model: str, rect: bool = True) -> dict:
    """``tests/helpers/ultralytics_yolo26_predict.py`` in a subprocess; its JSON report."""
    env = os.environ | {"YOLO_OFFLINE": "1", "YOLO_CONFIG_DIR": str(out.parent / "ultralytics-cfg"),
                        "PYTHONPATH": str(Path(ULTRALYTICS.origin).parents[1])}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "helpers" / "ultralytics_yolo26_predict.py"), str(out),
                           str(IMGSZ), str(CONF), "rect" if rect else "square", model, *map(str, IMAGES)],
                          env=env, capture_output=True, text=True, timeout=300, cwd=out.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def ultralytics_run(tmp_path_factory) -> tuple[Path, dict]:
    """A yolo26n built by Ultralytics from ``yolo26n.yaml`` (80 classes), saved as ``.pt``, and its predictions on
    coco8's val images with ``nms`` unset and ``nms=False``."""
    if ULTRALYTICS is None or not IMAGES:
        pytest.skip("ultralytics 8.4.190 is not importable (PYTHONPATH=/work/ultra) or shared/data/coco8 is absent")
    out = tmp_path_factory.mktemp("ultralytics") / "yolo26n.json"
    report = run_ultralytics(out, "yolo26n.yaml")
    return out.with_suffix(".pt"), report


def assert_same_detections(ours: list[np.ndarray], theirs: list[dict], box_atol: float = 0.011) -> None:
    """Per image, rows ``[x1, y1, x2, y2, score, class]`` against Ultralytics' boxes, scores and classes: the same
    number, scores equal in order, and each row of ours matched by a row of theirs of its class with a score
    within 1e-4 and the same box (rows of nearly equal score may come in either order)."""
    assert sum(len(rows) for rows in ours) >= 20  # enough to compare
    for rows, expected in zip(ours, theirs, strict=True):
        want = np.array([b + [s, c] for b, s, c in zip(expected["boxes"], expected["scores"], expected["classes"],
                                                      strict=True)]).reshape(-1, 6)
        assert rows.shape == want.shape
        np.testing.assert_allclose(rows[:, 4], want[:, 4], atol=1e-4)
        for row in rows:
            near = want[(want[:, 5] == row[5]) & (np.abs(want[:, 4] - row[4]) <= 1e-4)]
            assert len(near) and np.abs(near[:, :4] - row[:4]).max(axis=1).min() <= box_atol, row


def json_rows(directory: Path) -> list[np.ndarray]:
    records = json.loads((directory / "predictions.json").read_text())
    assert [Path(r["file"]).name for r in records] == [p.name for p in IMAGES]
    return [np.array([d["box"] + [d["score"], d["class"]] for d in r["detections"]]).reshape(-1, 6)
            for r in records]


def detector_rows(detector: Detector) -> list[np.ndarray]:
    return [np.concatenate([r.boxes, r.scores[:, None], r.class_ids[:, None]], axis=1).astype(np.float64)
            for r in detector.predict([str(p) for p in IMAGES])]


# --- predict and Detector against Ultralytics ------------------------------------------------------------------


@needs_ultralytics
@pytest.mark.parametrize("nms", [None, False])
def test_predict_cli_equals_ultralytics_predict_for_each_head(ultralytics_run, tmp_path, capsys, nms):
    """yolo11-predict on Ultralytics' own yolo26n .pt: its default (one-to-many head + NMS) and ``--nms false``
    (one-to-one top-k) equal ``YOLO(pt).predict`` with ``nms`` unset and ``nms=False``; the first line says which."""
    pt, report = ultralytics_run
    flags = [] if nms is None else ["--nms", "false"]
    assert predict.main([str(pt), *map(str, IMAGES), "--imgsz", str(IMGSZ), "--conf", str(CONF), "--no-draw",
                         "--batch", "1", "--output", str(tmp_path / "out"), *flags]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.startswith("head: yolo26n one-to-one, top-k without NMS" if nms is False else
                           "head: yolo26n one-to-many with NMS (Ultralytics' default")
    assert_same_detections(json_rows(tmp_path / "out"), report["default" if nms is None else "nms_false"])


@needs_ultralytics
def test_detector_heads_equal_ultralytics_and_differ_from_each_other(ultralytics_run):
    pt, report = ultralytics_run
    default = Detector.from_pretrained(pt, imgsz=IMGSZ, conf=CONF, device="cpu", batch=1)
    nms_free = Detector.from_pretrained(pt, imgsz=IMGSZ, conf=CONF, device="cpu", batch=1, nms=False)
    same_as_default = Detector.from_pretrained(pt, imgsz=IMGSZ, conf=CONF, device="cpu", batch=1, nms=True)
    assert (default.end2end, nms_free.end2end, same_as_default.end2end) == (False, True, False)
    assert "one-to-many with NMS" in default.head and "one-to-one, top-k without NMS" in nms_free.head
    rows = detector_rows(nms_free)
    assert_same_detections(rows, report["nms_false"])
    assert_same_detections(detector_rows(same_as_default), report["default"])  # Ultralytics' nms=True: as None
    assert any(a.shape != b.shape or not np.allclose(a, b) for a, b in zip(rows, detector_rows(default), strict=True))


# --- ONNX export of both heads --------------------------------------------------------------------------------------


@needs_ultralytics
def test_onnx_export_of_each_head_round_trips_through_onnxruntime_and_ultralytics(ultralytics_run, tmp_path,
                                                                                  capsys):
    """Default export: output0 (1, 84, A) of the one-to-many head, metadata end2end False; ``--nms false``:
    output0 (1, 300, 6) of the one-to-one head, end2end True. onnxruntime equals PyTorch (``--check``), and
    Ultralytics' runtime predicting with each graph gives our Detector's detections for that head."""
    onnxruntime = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed in this venv")
    import onnx

    pt, _ = ultralytics_run
    anchors = sum((IMGSZ // s) ** 2 for s in (8, 16, 32))
    files = {}
    for key, flags, shape, end2end in (("default", [], [1, 84, anchors], False),
                                       ("nms_false", ["--nms", "false"], [1, 300, 6], True)):
        files[key] = tmp_path / f"{key}.onnx"
        assert export.main([str(pt), "--imgsz", str(IMGSZ), "--output", str(files[key]), "--check", *flags]) == 0
        out = capsys.readouterr().out
        assert out.startswith("head: yolo26n one-to-one" if end2end else "head: yolo26n one-to-many"), out
        boxes, scores = (float(v.split()[0]) for v in out.split("boxes ")[1].split("scores ")[:2])
        assert boxes < 1e-3 * IMGSZ and scores < 1e-4, out
        session = onnxruntime.InferenceSession(str(files[key]), providers=["CPUExecutionProvider"])
        assert session.get_outputs()[0].shape == shape
        props = {p.key: p.value for p in onnx.load(str(files[key])).metadata_props}
        assert ast.literal_eval(props["end2end"]) is end2end and props["task"] == "detect"
        assert ast.literal_eval(props["names"]) == {k: f"class{k}" for k in range(80)}
    for key, path in files.items():  # Ultralytics reads the graph by its metadata (end2end: no NMS of its own)
        theirs = run_ultralytics(tmp_path / f"{key}.json", str(path))["default"]
        detector = Detector.from_pretrained(pt, imgsz=IMGSZ, conf=CONF, device="cpu", batch=1, rect=False,
                                            nms=False if key == "nms_false" else None)
        assert_same_detections(detector_rows(detector), theirs, box_atol=0.05)


def test_end2end_onnx_equals_pytorch_without_ultralytics(tmp_path, capsys):
    pytest.importorskip("onnxruntime", reason="onnxruntime is not installed in this venv")
    torch.manual_seed(0)
    weights = save_weights(yolo11.create_model("yolo26n", num_classes=3).eval(), tmp_path / "w.safetensors")
    assert export.main([str(weights), "--imgsz", "64", "--nms", "false", "--max-det", "50", "--dynamic",
                        "--check", "--output", str(tmp_path / "e.onnx")]) == 0
    out = capsys.readouterr().out
    assert "output0 (batch, 50, 6)" in out
    boxes, scores = (float(v.split()[0]) for v in out.split("boxes ")[1].split("scores ")[:2])
    assert boxes < 0.05 and scores < 1e-5, out


# --- val ------------------------------------------------------------------------------------------------------------


@needs_coco8
def test_val_on_coco8_scores_each_head_and_says_which(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the tool's run folders, runs/val/exp*, land here rather than in the checkout
    torch.manual_seed(0)
    model = yolo11.create_model("yolo26n", num_classes=80).eval()
    with torch.no_grad():  # a fresh head scores every class ~1e-4, under the 0.001 threshold: raise it
        for level in (*model.head.cv3, *model.head.one2one_cv3):
            level[-1].bias.uniform_(-6.0, -2.0)
    weights = save_weights(model, tmp_path / "w.safetensors")
    results = {}
    for key, flags in (("default", []), ("nms_false", ["nms=false"])):
        assert val.main([str(weights), "--data", str(COCO8), "--imgsz", "64", "--workers", "0", "--json",
                         str(tmp_path / f"{key}.json"), "--predictions-json", str(tmp_path / f"{key}-pred.json"),
                         *flags]) == 0
        heads = [line for line in capsys.readouterr().out.splitlines() if line.startswith("head:")]
        assert heads == ["head: yolo26n one-to-one, top-k without NMS (--nms false / nms=False)"
                         if flags else "head: yolo26n one-to-many with NMS (Ultralytics' default; --nms false / "
                                       "nms=False: the NMS-free one-to-one head)"]
        assert "map50_95" in json.loads((tmp_path / f"{key}.json").read_text())
        results[key] = json.loads((tmp_path / f"{key}-pred.json").read_text())
    assert results["default"] and results["nms_false"] and results["default"] != results["nms_false"]


# --- refusals -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def yolo11_weights(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    return save_weights(yolo11.create_model("yolo11n", num_classes=2).eval(),
                        tmp_path_factory.mktemp("y11") / "w.safetensors")


@pytest.mark.parametrize("tool", ["predict", "val", "export"])
def test_a_yolo11_model_with_the_nms_free_choice_is_refused_in_one_line(yolo11_weights, tmp_path, capsys, tool):
    argv = {"predict": [str(yolo11_weights), str(IMAGES[0] if IMAGES else yolo11_weights), "--output",
                        str(tmp_path / "p")],
            "val": [str(yolo11_weights), "--data", "synthetic"],
            "export": [str(yolo11_weights), "--imgsz", "64", "--output", str(tmp_path / "x.onnx")]}[tool]
    module = {"predict": predict, "val": val, "export": export}[tool]
    assert module.main([*argv, "--nms", "false"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --nms false / nms=False selects the NMS-free one-to-one head")
    assert "yolo11n has none" in err[0]
    assert not (tmp_path / "x.onnx").exists() and not (tmp_path / "p").exists()


def test_detector_refuses_nms_false_for_yolo11_and_the_flag_takes_only_booleans(yolo11_weights, capsys):
    model = load_weights(yolo11_weights)
    with pytest.raises(ValueError, match="nms=False selects the NMS-free one-to-one head of YOLO26 models; yolo11n"):
        Detector(model, nms=False, device="cpu")
    assert Detector(model, device="cpu").head == "head: yolo11n with NMS"
    with pytest.raises(SystemExit):
        predict.parse_args([str(yolo11_weights), "x.jpg", "--nms", "maybe"])
    assert "--nms: expected true or false, got 'maybe'" in capsys.readouterr().err
    assert predict.parse_args([str(yolo11_weights), "x.jpg", "nms=false"]).nms is False
    assert val.parse_args([str(yolo11_weights), "--data", "synthetic"]).nms is None
    assert export.parse_args([str(yolo11_weights), "--nms"]).nms is True  # the NMS graph, as before
    parsed = export.parse_args(["--nms", str(yolo11_weights)])  # a bare --nms before the weights
    assert parsed.nms is True and parsed.weights == str(yolo11_weights)


# --- convert, .pt, Hub card, gate -----------------------------------------------------------------------------------


def yolo26_checkpoint(tmp_path: Path) -> tuple[torch.nn.Module, Path]:
    from helpers.ultralytics_checkpoint import write_ultralytics_checkpoint

    torch.manual_seed(0)
    model = yolo11.create_model("yolo26n", num_classes=2, names=["ant", "bee"]).eval()
    return model, write_ultralytics_checkpoint(model, ["ant", "bee"], tmp_path / "yolo26n-ants.pt")


def test_convert_round_trip_and_the_hub_folder_say_yolo26_and_its_heads(tmp_path, capsys):
    model, pt = yolo26_checkpoint(tmp_path)
    assert convert.main([str(pt), str(tmp_path / "hub")]) == 0
    assert "yolo26n, 2 classes (ant, bee)" in capsys.readouterr().out
    loaded, original = load_weights(tmp_path / "hub"), load_weights(pt)
    assert isinstance(loaded, YOLO26Detector) and loaded.names == ["ant", "bee"]
    expected = original.state_dict()
    assert all(torch.equal(t, expected[k]) for k, t in loaded.state_dict().items())
    config = json.loads((tmp_path / "hub" / "config.json").read_text())
    assert (config["model_type"], config["head"], config["reg_max"]) == ("yolo26", "End2EndDetect", 1)
    card = (tmp_path / "hub" / "README.md").read_text()
    assert "A YOLO26n object detector" in card and "Ultralytics YOLO26 architecture" in card
    assert "## Heads" in card and "--nms false" in card and "nms=False" in card
    assert "- yolo26" in card.split("---")[1]  # a tag of the front matter
    eleven = save_pretrained(yolo11.create_model("yolo11n", num_classes=2), tmp_path / "y11")
    assert json.loads((eleven / "config.json").read_text())["head"] == "Detect"
    assert "## Heads" not in (eleven / "README.md").read_text()
    assert "A YOLO11n object detector" in (eleven / "README.md").read_text()


@pytest.mark.skipif(ULTRALYTICS is None, reason="--format pt needs ultralytics importable (PYTHONPATH=/work/ultra)")
def test_pt_export_of_a_yolo26_model_reads_back(tmp_path, capsys):
    _, pt = yolo26_checkpoint(tmp_path)
    assert export.main([str(pt), "--format", "pt", "--output", str(tmp_path / "again.pt")]) == 0
    assert "an Ultralytics yolo26n checkpoint with both heads" in capsys.readouterr().out
    again, original = load_weights(tmp_path / "again.pt"), load_weights(pt)
    assert isinstance(again, YOLO26Detector)
    expected = original.state_dict()
    assert all(torch.equal(t, expected[k]) for k, t in again.state_dict().items())
    assert export.main([str(pt), "--format", "pt", "--nms", "false"]) == 2  # an ONNX option


def test_gate_checks_model_type_and_head_against_the_name():
    base = {"name": "yolo26n", "num_classes": 2}
    assert check_model_config({**base, "model_type": "yolo26", "head": "End2EndDetect"}, "c.json")
    assert check_model_config({**base, "model_type": "yolo11"}, "c.json")  # folders written before YOLO26's type
    with pytest.raises(FileRefusedError, match="config head is 'Detect'; yolo26n has 'End2EndDetect'"):
        check_model_config({**base, "head": "Detect"}, "c.json")
    with pytest.raises(FileRefusedError, match="config model_type is 'yolo26'; yolo11n is 'yolo11'"):
        check_model_config({**base, "name": "yolo11n", "model_type": "yolo26"}, "c.json")


# --- official names -------------------------------------------------------------------------------------------------


def test_yolo26_official_names_resolve_like_yolo11s(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(WeightsNotFoundError) as caught:
        resolve_weights("yolo26s.pt")
    message = str(caught.value)
    assert "\n" not in message and "HF_HUB_OFFLINE is set" in message
    assert "/Ultralytics/YOLO26/resolve/main/yolo26s.pt" in message
    assert "https://github.com/ultralytics/assets/releases/download/v8.4.0/yolo26s.pt" in message
    # in the Hugging Face cache (as `hf download Ultralytics/YOLO26 yolo26n.pt` leaves it): found offline
    commit = "0123456789abcdef0123456789abcdef01234567"
    root = cache / "models--Ultralytics--YOLO26"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    _, pt = yolo26_checkpoint(tmp_path)
    (root / "snapshots" / commit).mkdir(parents=True)
    (root / "snapshots" / commit / "yolo26n.pt").write_bytes(pt.read_bytes())
    assert isinstance(load_weights("yolo26n.pt"), YOLO26Detector)
    assert convert.main(["yolo26n.pt", str(tmp_path / "out")]) == 0  # the tools' preflight accepts the name
    assert val.main(["yolo26q.pt", "--data", "synthetic"]) == 2
    assert "yolo26x.pt" in capsys.readouterr().err  # the accepted names are listed
