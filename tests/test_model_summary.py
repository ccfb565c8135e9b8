"""The model summary line of ``yolo11 info`` against Ultralytics 8.4.190's ``model.info()`` (parameters, gradients
and GFLOPs at 640: its numbers, measured with ultralytics-thop 2.2.3 and written here, and checked live when
Ultralytics is importable)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from yolo11 import create_model
from yolo11.models.flops import count_gflops, summary_gflops
from yolo11.models.summary import model_summary
from yolo11.weights import load_weights, save_weights

# Ultralytics 8.4.190 `YOLO("yolo11n.yaml").info()` etc.: layers, parameters, gradients, GFLOPs (its summary line).
ULTRALYTICS_SUMMARY = {"yolo11n": (181, 2_624_080, 2_624_064, 6.6733184), "yolo26n": (260, 2_572_280, 2_572_280,
                                                                                     6.2396672),
                       "yolo11s": (181, 9_458_752, 9_458_736, 21.8363392)}


def ultralytics_importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("ultralytics") is not None


@pytest.mark.parametrize("name", list(ULTRALYTICS_SUMMARY))
def test_summary_matches_ultralytics_model_info(name):
    """Parameters and gradients equal; GFLOPs to 1e-6 of Ultralytics' figure (so the printed 0.1 is the same).
    Layers differ by design (``yolo11.models.summary``'s docstring says why)."""
    _, parameters, gradients, gflops = ULTRALYTICS_SUMMARY[name]
    with torch.device("meta"):
        model = create_model(name)
    summary = model_summary(model)
    assert (summary.parameters, summary.gradients) == (parameters, gradients)
    assert summary.gflops == pytest.approx(gflops, abs=1e-6)
    assert summary.line() == (f"{name.replace('yolo', 'YOLO')} summary: {summary.layers:,} layers, {parameters:,} "
                              f"parameters, {gradients:,} gradients, {gflops:.1f} GFLOPs")
    # the older thop convention (Ultralytics' published table) and the plain count stay what they were
    assert count_gflops(model, ultralytics=True) < summary.gflops and count_gflops(model) < summary.gflops


def test_summary_of_loaded_and_fused_weights(tmp_path):
    model = create_model("yolo11n", num_classes=3)
    loaded = load_weights(save_weights(model, tmp_path / "w.safetensors"))
    assert model_summary(loaded) == model_summary(model)
    fused = model_summary(loaded.fuse())
    assert fused.fused and fused.line().startswith("YOLO11n summary (fused): ")
    assert fused.parameters < model_summary(model).parameters  # the BatchNorms folded into the convs
    assert summary_gflops(loaded, 64, 64) > 0  # on the model's own device too, not only on meta


@pytest.mark.slow
@pytest.mark.skipif(not ultralytics_importable(), reason="ultralytics 8.4.190 is not importable (PYTHONPATH)")
def test_ultralytics_numbers_are_those_it_prints_now():
    """The table above is what the installed Ultralytics computes (a subprocess: its import sets global state)."""
    code = ("import json\nfrom ultralytics import YOLO\nfrom ultralytics.utils.torch_utils import model_info\n"
            f"print(json.dumps({{n: model_info(YOLO(n + '.yaml', verbose=False).model, verbose=True)[:4] "
            f"for n in {list(ULTRALYTICS_SUMMARY)!r}}}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "YOLO_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    for name, (layers, parameters, gradients, gflops) in ULTRALYTICS_SUMMARY.items():
        assert measured[name][:3] == [layers, parameters, gradients]
        assert measured[name][3] == pytest.approx(gflops, abs=1e-6)
