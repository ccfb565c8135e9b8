"""Checkpoints that fit the run: one resumable checkpoint by default (``--keep-checkpoints 1``; 0: none once the
run is finished), and ``weights/last.safetensors`` / ``best.safetensors`` in float16 as Ultralytics saves its
weights, read back into a float32 model exactly (the resumable checkpoint stays float32: resume is bitwise)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from helpers.engine_helpers import ROOT, describe
from safetensors import safe_open

from yolo11.engine.checkpoint import _prune
from yolo11.engine.config import parse_config
from yolo11.gate import FileRefusedError, read_safetensors
from yolo11.models.detector import create_model
from yolo11.weights import load_weights, save_weights


def stored_dtypes(path) -> set[str]:
    with safe_open(str(path), "pt") as file:
        return {str(file.get_slice(name).get_dtype()) for name in file.keys()}


def test_half_weights_are_half_the_size_and_load_into_float32_exactly(tmp_path):
    torch.manual_seed(0)
    model = create_model("yolo11n", num_classes=3).eval()
    with torch.no_grad():
        model.head.cv2[0][0].bn.running_var[0] = 1e5  # beyond float16's range: that tensor stays float32
    full, half = save_weights(model, tmp_path / "full.safetensors"), save_weights(model, tmp_path / "half.safetensors",
                                                                                   half=True)
    assert stored_dtypes(full) == {"F32", "I64"} and stored_dtypes(half) == {"F16", "F32", "I64"}
    assert half.stat().st_size < 0.52 * full.stat().st_size
    loaded = load_weights(half).eval()
    state, expected = loaded.state_dict(), model.state_dict()
    assert all(state[k].dtype == v.dtype for k, v in expected.items())  # float32 again
    for name, tensor in expected.items():
        if tensor.is_floating_point() and tensor.abs().max() <= torch.finfo(torch.float16).max:
            assert torch.equal(state[name], tensor.half().float()), name  # exactly float16's rounding
        else:
            assert torch.equal(state[name], tensor), name
    images = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        for ours, reference in zip(loaded(images), model(images), strict=True):
            torch.testing.assert_close(ours, reference, rtol=0, atol=2e-2 * float(reference.abs().max()))


def test_a_resumable_checkpoint_still_refuses_another_dtype(tmp_path):
    """Only weights files are widened: a checkpoint's model or EMA in float16 is not the state that was trained."""
    model = create_model("yolo11n", num_classes=3)
    half = save_weights(model, tmp_path / "half.safetensors", half=True)
    with pytest.raises(FileRefusedError, match=r"stored as F16, the model expects F32 \(not cast\)"):
        read_safetensors(half, expected=model.state_dict())


def test_one_checkpoint_is_kept_by_default_and_zero_keeps_the_newest_while_training(tmp_path):
    assert parse_config([]).run.keep_checkpoints == 1
    assert parse_config(["--keep-checkpoints", "0"]).run.keep_checkpoints == 0
    for iteration in (1, 2, 3):
        (tmp_path / f"checkpoint-{iteration:08d}").mkdir()
    _prune(tmp_path, 0, "checkpoint-00000003")
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint-00000003"]


def train(cwd, *args):
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
                   "YOLO11_CACHE": str(cwd / "cache")}
    environment.pop("ACCELERATE_USE_CPU", None)
    return subprocess.run([sys.executable, "-m", "yolo11.cli", "train", "data=synthetic:num_images=4,num_val=4,"
                           "imgsz=64", "imgsz=64", "batch=4", "workers=0", "plots=false", "val_images=0", *args],
                          capture_output=True, text=True, cwd=cwd, env=environment, timeout=300)


def sizes(folder) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_small_run_keeps_one_checkpoint_and_half_size_weights(tmp_path):
    """A 4-image, 3-epoch run saving every epoch: one checkpoint (it was three of 42 MB pruned to two, beside two
    10.6 MB fp32 weights files); the weights are float16, half the checkpoint's EMA. ``keep_checkpoints=0``: the
    finished run keeps no checkpoint; one stopped early keeps its newest to be resumed."""
    result = train(tmp_path, "epochs=3", "save_period=1", "name=x")
    assert result.returncode == 0, describe(result)
    run = tmp_path / "runs" / "train" / "x"
    files = sizes(run)
    assert [p.name for p in (run / "checkpoints").iterdir() if p.name != "latest"] == ["checkpoint-00000003"], files
    ema = files["checkpoints/checkpoint-00000003/ema.safetensors"]
    for name in ("best", "last"):
        assert stored_dtypes(run / "weights" / f"{name}.safetensors") == {"F16", "I64"}
        assert files[f"weights/{name}.safetensors"] < 0.52 * ema, files
    assert sum(files.values()) < 60e6, files  # 42 MB of checkpoint, 2 x 5.3 MB of weights, figures and logs

    stripped = train(tmp_path, "epochs=2", "name=stripped", "keep_checkpoints=0")
    assert stripped.returncode == 0, describe(stripped)
    assert "--keep-checkpoints 0: the finished run's checkpoint (checkpoint-00000002) removed" in stripped.stdout
    assert not list((tmp_path / "runs/train/stripped/checkpoints").glob("checkpoint-*"))
    assert (tmp_path / "runs/train/stripped/weights/last.safetensors").is_file()
    stopped = train(tmp_path, "epochs=2", "name=stopped", "keep_checkpoints=0", "max_steps=1")
    assert stopped.returncode == 0, describe(stopped)
    assert [p.name for p in (tmp_path / "runs/train/stopped/checkpoints").glob("checkpoint-*")] == [
        "checkpoint-00000001"]


def test_weights_files_are_written_from_the_snapshots_buffers_as_safetensors_writes_them(tmp_path):
    """``write_weights`` lays the file out from one buffer per dtype (no per-tensor copies): safetensors reads it
    back bitwise, bfloat16 and integer tensors included, with the metadata; a non-finite value leaves no file."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    from yolo11.weights.safetensors_io import weights_snapshot, write_weights

    model = create_model("yolo11n", num_classes=3).to(torch.bfloat16)
    state = model.state_dict()
    path = write_weights(weights_snapshot(model), tmp_path / "bf16.safetensors")
    written = load_file(path)
    assert list(written) == list(state) and stored_dtypes(path) == {"BF16", "I64"}
    assert all(torch.equal(written[name], tensor) for name, tensor in state.items())
    with safe_open(str(path), "pt") as file:
        assert json.loads(file.metadata()["config"]) == model.config
    model = create_model("yolo11n", num_classes=3)
    with torch.no_grad():
        model.head.cv2[0][0].bn.running_var[0] = float("nan")
    with pytest.raises(ValueError, match=r"not writing .*nan\.safetensors: 1 tensors hold non-finite values "
                                         r"\(e\.g\. head\.cv2\.0\.0\.bn\.running_var\)"):
        write_weights(weights_snapshot(model, half=True), tmp_path / "nan.safetensors")
    assert not (tmp_path / "nan.safetensors").exists()
