"""A newcomer's first hour, as a script: in a folder of their own, the README's quick start as they type it (a
smaller ``imgsz`` and fewer ``epochs``, nothing else changed), a run stopped early and ``yolo11 train resume``,
``yolo11 val`` / ``predict`` / ``export`` / ``info`` / ``version`` of the trained weights, and the Python API. Each
step must exit 0 and leave what the README says it does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers.engine_helpers import ROOT, describe

IMAGES = ROOT / "yolo11" / "assets" / "coco8" / "images" / "val"
TRAIN = ["data=coco8.yaml", "model=yolo11n", "imgsz=64", "epochs=2", "batch=4", "workers=0"]  # README: 160 px, 3

API_SCRIPT = """
from yolo11 import YOLO

model = YOLO("runs/train/coco8")
metrics = model.val()
results = model("{image}")
print("API", metrics.map50_95 >= 0, len(results))
"""


@pytest.mark.slow
def test_the_first_hour_of_a_newcomer(tmp_path):
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "YOLO11_CACHE": str(tmp_path / "cache")}
    env.pop("ACCELERATE_USE_CPU", None)
    home = tmp_path / "me"
    home.mkdir()

    def run(*words: str, program: tuple[str, ...] = (sys.executable, "-m", "yolo11.cli"), threads: int = 0) -> str:
        """``yolo11 <words>`` (this checkout's code) in the newcomer's folder; the step must exit 0. ``threads``:
        torch's CPU threads (0: its default)."""
        start = time.monotonic()
        limit = {"OMP_NUM_THREADS": str(threads)} if threads else {}
        done = subprocess.run([*program, *words], capture_output=True, text=True, cwd=home, env={**env, **limit},
                              timeout=300)
        assert done.returncode == 0, f"yolo11 {' '.join(words)}\n{describe(done)}"
        print(f"{time.monotonic() - start:5.1f} s  yolo11 {' '.join(words)}")
        return done.stdout + done.stderr

    assert run("version").strip()
    out = run("info", "yolo11n")
    assert "YOLO11n summary:" in out and "GFLOPs" in out, out

    out = run("train", *TRAIN, "name=coco8")  # coco8.yaml: the shipped sample, said in a line
    run_dir = home / "runs" / "train" / "coco8"
    for name in ("weights/best.safetensors", "weights/last.safetensors", "results.csv", "results.png", "args.yaml",
                 "config.yaml", "confusion_matrix.png", "BoxPR_curve.png", "labels.jpg", "train_batch0.jpg"):
        assert (run_dir / name).is_file(), (name, out)
    assert "best weights: runs/train/coco8/weights/best.safetensors" in out

    def stop_and_resume() -> None:  # a run stopped early (a checkpoint, and how to go on), then resumed
        out = run("train", *TRAIN, "name=stopped", "max_steps=1", threads=1)
        assert "resume with: yolo11 train resume model=runs/train/stopped/weights/last.safetensors" in out, out
        out = run("train", "resume", threads=1)
        assert "resume: runs/train/stopped, the newest unfinished run in runs/train: 1/2 epochs done" in out, out
        assert "epoch 2/2 done" in out

    def use_the_weights() -> None:  # the tools and the Python API on the trained run
        weights = "runs/train/coco8/weights/best.safetensors"
        out = run("val", weights, "workers=0", threads=1)  # no data: the run's
        assert (home / "runs" / "val" / "exp" / "confusion_matrix.png").is_file(), out
        out = run("predict", weights, str(IMAGES), threads=1)
        predictions = json.loads((home / "runs" / "predict" / "exp" / "predictions.json").read_text())
        assert len(predictions) == 4 and len(list((home / "runs" / "predict" / "exp").glob("*.jpg"))) == 4, out
        out = run("export", weights, threads=1)  # ONNX beside the weights
        assert (run_dir / "weights" / "best.onnx").is_file(), out
        (home / "first.py").write_text(API_SCRIPT.format(image=IMAGES / "000000000036.jpg"))
        out = run("first.py", program=(sys.executable,), threads=1)
        assert "API True 1" in out, out

    # two terminals, as a newcomer has them: a second run trains while the first one's weights are tried out (one
    # torch thread each: two cores)
    with ThreadPoolExecutor(2) as pool:
        for done in [pool.submit(stop_and_resume), pool.submit(use_the_weights)]:
            done.result()
    print(f"first hour: {time.monotonic() - started:.0f} s")
    assert time.monotonic() - started < 300  # ~80 s on 2 idle cores
