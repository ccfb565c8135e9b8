"""The README's main job, shortened: YOLO11n learns the built-in synthetic data on CPU."""

from __future__ import annotations

import csv

import pytest
from helpers.engine_helpers import describe, launch

pytestmark = pytest.mark.slow
MEASURED = ("time", "throughput/img_s", "memory/peak_gb")  # results.csv columns that are measurements


def test_synthetic_training_reaches_map50(tmp_path):
    """12 epochs at 64 px on 2 CPU cores (~1 min). Measured on the CI-sized box, 2026-12-02: best mAP50 0.889
    after 12 epochs (0.994 after the README's 20 epochs); the bar is 0.5.

    Why a loaded machine cannot change the result: with the thread count fixed (OMP_NUM_THREADS=2 here; 1 thread
    gives other float sums, hence other values) the run is bitwise the same whatever the load, the loader workers,
    the image cache decision (free RAM) or the checkpoints written (``--save-period auto`` is time based):
    ``test_training_values_do_not_depend_on_load_dependent_choices`` below checks it. What load does change is the
    time: on 2026-12-04, with the two cores shared by five engineers' jobs (load average 6-9), this run got ~20%
    of a core and its ETA read 27 minutes, past the 900 s the test allowed then; so the limit only guards
    against a hang."""
    result = launch(["--data", "synthetic:imgsz=64", "--model", "yolo11n", "--imgsz", "64", "--epochs", "12",
                     "--batch-size", "16", "--nominal-batch", "16", "--workers", "2", "--output-dir", str(tmp_path),
                     "--name", "main"], env={"OMP_NUM_THREADS": "2"}, timeout=3600)
    assert result.returncode == 0, describe(result)
    run = tmp_path / "main"
    with open(run / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 12
    best = max(float(row["metrics/mAP50(B)"]) for row in rows)
    print(f"best mAP50 {best:.4f}")
    assert best >= 0.5
    assert "mAP50-95" in result.stdout and "best weights:" in result.stdout
    assert "compiled: no, eager (auto: cpu run" in result.stdout  # the run says what it chose and why
    for name in ("config.yaml", "results.png", "weights/best.safetensors", "weights/last.safetensors",
                 "checkpoints/latest"):
        assert (run / name).exists(), name


def test_training_values_do_not_depend_on_load_dependent_choices(tmp_path):
    """What a busy machine can change: the image cache decision (free RAM), checkpoints of ``--save-period auto``
    (one a minute, so more of them when epochs are slow), the loader's workers racing the trainer. None of it may
    change a value: two runs that differ in all three give the same results.csv, bit for bit (the measured time,
    throughput and memory aside)."""
    common = ["--data", "synthetic:num_images=16,num_val=4,imgsz=64", "--model", "yolo11n", "--imgsz", "64",
              "--epochs", "2", "--batch-size", "8", "--nominal-batch", "16", "--plots", "false", "--val-images", "0",
              "--output-dir", str(tmp_path)]
    variants = {"a": ["--workers", "0", "--cache-images", "false"],  # --save-period auto: no save before the end
                "b": ["--workers", "2", "--cache-images", "true", "--save-period", "1", "--keep-checkpoints", "2"]}
    rows = {}
    for name, flags in variants.items():
        result = launch([*common, *flags, "--name", name], env={"OMP_NUM_THREADS": "2"}, timeout=1800)
        assert result.returncode == 0, describe(result)
        with open(tmp_path / name / "results.csv") as fh:
            rows[name] = [{k: v for k, v in row.items() if k not in MEASURED} for row in csv.DictReader(fh)]
    assert len(rows["a"]) == 2 and float(rows["a"][-1]["train/box_loss"]) > 0
    assert rows["a"] == rows["b"]
    assert len(list((tmp_path / "b" / "checkpoints").glob("checkpoint-*"))) == 2  # b did save after epoch 1


def test_installed_console_script_takes_ultralytics_key_values(tmp_path):
    """``yolo11-train`` as installed beside the interpreter (one process, no launcher), in ``yolo train``'s
    key=value style: the run happens with the values given."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    script = shutil.which("yolo11-train", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("yolo11-train is not installed beside this interpreter (pip install -e .)")
    env = {**os.environ, "OMP_NUM_THREADS": "2", "PYTHONUNBUFFERED": "1"}
    result = subprocess.run([script, "data=synthetic:num_images=8,num_val=4,imgsz=64", "model=yolo11n", "epochs=2",
                             "imgsz=64", "batch=4", "workers=0", "plots=false", f"project={tmp_path}", "name=kv"],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, describe(result)
    assert "batch -> --batch-size" in result.stdout and "project -> --output-dir" in result.stdout
    with open(tmp_path / "kv" / "results.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 2
