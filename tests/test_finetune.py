"""Fine-tuning from pretrained weights: the architecture from --weights, the transfer rules and what they print,
and the whole path from an Ultralytics checkpoint to a Hub folder (train, predict with names, ONNX metadata)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import torch
import yaml
from helpers.ultralytics_checkpoint import write_ultralytics_checkpoint

import yolo11
from yolo11 import hub
from yolo11.engine.build import build_model
from yolo11.engine.config import ModelConfig, parse_config
from yolo11.weights import load_weights, save_weights

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
COCO8 = DATA / "coco8.yaml"


def _trained_like(name: str, num_classes: int, names: list[str] | None = None) -> yolo11.YOLO11Detector:
    torch.manual_seed(0)
    model = yolo11.create_model(name, num_classes=num_classes, names=names)
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.add_(torch.randn_like(tensor) * 0.01)
    return model


def _class_dependent(name: str, before: int, after: int) -> list[str]:
    """The tensors whose shape depends on the class count, found by building both models."""
    with torch.device("meta"):
        a = yolo11.create_model(name, num_classes=before).state_dict()
        b = yolo11.create_model(name, num_classes=after).state_dict()
    return [k for k in b if a[k].shape != b[k].shape]


def test_other_classes_reinitialise_exactly_the_class_branch(tmp_path, capsys):
    source = _trained_like("yolo11n", 80, [f"c{k}" for k in range(80)])
    weights = save_weights(source, tmp_path / "coco.safetensors")
    model = build_model(ModelConfig(weights=str(weights)), ["cat", "dog", "bird"], "pets.yaml")
    assert model.config["name"] == "yolo11n" and model.names == ["cat", "dog", "bird"]
    changed = _class_dependent("yolo11n", 80, 3)
    assert changed and all(k.startswith("head.cv3.") for k in changed)
    ours, theirs = model.state_dict(), source.state_dict()
    for key in ours:
        if key not in changed:
            assert torch.equal(ours[key], theirs[key]), key
    out = capsys.readouterr().out
    total = len(ours)
    assert f"transferred {total - len(changed)}/{total} tensors; re-initialised {len(changed)} class-dependent " \
           f"head tensors (80 -> 3 classes): {', '.join(changed)}" in out
    assert "the weights predict 80 classes: c0, c1, c2, c3, ...; --data pets.yaml has 3 classes: cat, dog, bird" in out


def test_architecture_comes_from_the_weights_and_model_must_agree(tmp_path, capsys):
    source = _trained_like("yolo11s", 4)
    weights = str(save_weights(source, tmp_path / "s.safetensors"))
    model = build_model(ModelConfig(weights=weights), ["a", "b", "c", "d"])
    assert model.config["name"] == "yolo11s"
    total = len(model.state_dict())
    assert f"transferred {total}/{total} tensors" in capsys.readouterr().out
    expected = source.state_dict()  # once: a state_dict per key made this loop quadratic
    assert all(torch.equal(t, expected[k]) for k, t in model.state_dict().items())

    with pytest.raises(ValueError, match=r"--model yolo11n contradicts --weights .*s\.safetensors \(yolo11s, 4 "
                                         r"classes\).*--partial-weights true"):
        build_model(ModelConfig(model="yolo11n", weights=weights), ["a", "b", "c", "d"])

    partial = build_model(ModelConfig(model="yolo11n", weights=weights, partial_weights=True), list("abcd"))
    ours, theirs = partial.state_dict(), source.state_dict()
    same = [k for k in ours if k in theirs and ours[k].shape == theirs[k].shape]
    others = [k for k in ours if k not in same]
    assert 0 < len(same) < len(ours)
    out = capsys.readouterr().out
    assert f"transferred {len(same)}/{len(ours)} tensors" in out
    assert f"--partial-weights: re-initialised {len(others)} other tensors (missing from the weights or of another " \
           f"shape): {', '.join(others)}" in out
    assert all(torch.equal(ours[k], theirs[k]) for k in same)


def test_model_flag_given_a_weights_file_says_to_use_weights(capsys):
    with pytest.raises(SystemExit):
        parse_config(["--model", "yolo11n.pt"])
    assert "to start from weights pass --weights yolo11n.pt" in capsys.readouterr().err
    assert parse_config([]).model.model is None  # from --weights, else yolo11n (build_model)
    with pytest.raises(SystemExit):
        parse_config(["--push-to-hub", "not a repo"])


@pytest.mark.skipif(not COCO8.is_file(), reason=f"coco8 not found at {COCO8}")
def test_ultralytics_checkpoint_to_finetuned_hub_model(tmp_path, fake_hub, capsys):
    """Ultralytics .pt (5 classes) -> fine-tune on coco8 with --weights only -> best.safetensors with coco8's names
    -> yolo11-predict names its boxes -> ONNX with names in its metadata -> --push-to-hub folder ->
    from_pretrained gives the outputs of best.safetensors."""
    from yolo11 import train
    from yolo11.tools import export, predict

    coco8_names = [yaml.safe_load(COCO8.read_text())["names"][k] for k in range(80)]
    source = _trained_like("yolo11n", 5)
    checkpoint = write_ultralytics_checkpoint(source, ["ant", "bee", "cow", "dog", "eel"], tmp_path / "custom.pt")

    assert train.main(["--weights", str(checkpoint), "--data", str(COCO8), "--imgsz", "64", "--epochs", "1",
                       "--batch-size", "4", "--nominal-batch", "4", "--workers", "0", "--plots", "false",
                       "--val-images", "0", "--optimizer", "SGD", "--warmup-epochs", "0", "--cache-dir",
                       str(tmp_path / "cache"), "--output-dir", str(tmp_path / "runs"), "--name", "ft",
                       "--push-to-hub", "me/yolo11n-coco8"]) == 0
    out = capsys.readouterr().out
    changed = _class_dependent("yolo11n", 5, 80)
    assert re.search(rf"--weights .*custom\.pt \(yolo11n, 5 classes: ant, bee, cow, dog, \.\.\.\): transferred "
                     rf"{499 - len(changed)}/499 tensors; re-initialised {len(changed)} class-dependent head tensors "
                     r"\(5 -> 80 classes\)", out), out
    best = tmp_path / "runs" / "ft" / "weights" / "best.safetensors"
    model = load_weights(best)
    assert model.config["name"] == "yolo11n" and model.names == coco8_names

    images = sorted((DATA / "coco8" / "images" / "val").iterdir())
    assert predict.main([str(best), *map(str, images), "--imgsz", "64", "--conf", "0", "--max-det", "3",
                         "--output", str(tmp_path / "pred"), "--no-draw"]) == 0
    records = json.loads((tmp_path / "pred" / "predictions.json").read_text())
    labels = [d["name"] for r in records for d in r["detections"]]
    assert labels and all(name == coco8_names[d["class"]] for r in records for d in r["detections"]
                          for name in [d["name"]])

    onnx = pytest.importorskip("onnx")
    assert export.main([str(best), "--imgsz", "64", "--output", str(tmp_path / "best.onnx")]) == 0
    props = {p.key: p.value for p in onnx.load(str(tmp_path / "best.onnx")).metadata_props}
    assert ast.literal_eval(props["names"]) == dict(enumerate(coco8_names))
    assert props["task"] == "detect" and props["stride"] == "32" and ast.literal_eval(props["imgsz"]) == [64, 64]
    assert props["author"] and props["version"]

    uploaded = fake_hub.remote / "me" / "yolo11n-coco8"
    assert [c[0] for c in fake_hub.calls] == ["create_repo", "upload_folder"]
    assert sorted(p.name for p in uploaded.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    card = (uploaded / "README.md").read_text()
    assert "mAP50-95" in card and "0: person, 1: bicycle" in card
    assert f"`{COCO8.name}`" in card and str(COCO8.parent) not in card  # the dataset by name, not the local path
    pretrained = hub.from_pretrained(uploaded).eval()
    assert pretrained.names == coco8_names
    images = torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for a, b in zip(pretrained(images), model.eval()(images), strict=True):
            assert torch.equal(a, b)


def test_training_with_unreachable_weights_stops_before_the_run_folder(tmp_path, monkeypatch, capsys):
    from yolo11 import train

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.chdir(tmp_path)
    assert train.main(["--weights", "yolo11l.pt", "--data", "synthetic:num_images=2,imgsz=64", "--imgsz", "64",
                       "--cache-dir", str(tmp_path / "cache"), "--output-dir", str(tmp_path / "runs")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: weights yolo11l.pt:") and "releases/download/v8.3.0/yolo11l.pt" in line
    assert not (tmp_path / "runs").exists()
