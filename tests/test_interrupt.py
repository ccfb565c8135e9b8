"""Stopping on SIGINT/SIGTERM at a step boundary, pickle-free and never-poisoned checkpoints, atomic replacement."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml
from helpers.engine_helpers import (
    ROOT,
    TINY_FLAGS,
    TINY_RUN_FLAGS,
    TINY_RUN_TRAINING,
    checkpoint_model,
    describe,
    launch,
    signal_after_step,
    start_in_own_group,
)
from helpers.run_folders import rewind

import yolo11
from yolo11.engine.checkpoint import TrainState

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


COMMON = [*TINY_RUN_TRAINING, "--keep-checkpoints", "5"]  # the suite's tiny run, checkpoints aside


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_signal_in_the_first_epoch_saves_and_resume_is_bitwise(tmp_path, tiny_trained_run, signum):
    """Ctrl-C to a single-process ``accelerate launch`` (SIGINT, then the launcher's SIGTERM), or a
    preemption's SIGTERM, in the first epoch: a checkpoint at a step boundary, and the resumed run ends with
    weights bitwise equal to the run that was never interrupted (the suite's tiny run: the same flags)."""
    common = [*COMMON, "--output-dir", str(tmp_path)]
    interrupted = signal_after_step(start_in_own_group([*common, "--name", "run"]), 2, signum)
    assert "stopped by a signal at step" in interrupted, interrupted[-3000:]
    latest = (tmp_path / "run" / "checkpoints" / "latest").read_text().strip()
    state = TrainState()
    state.load_state_dict(__import__("json").loads((tmp_path / "run" / "checkpoints" / latest /
                                                    "train_state.json").read_text()))
    assert state.epoch == 0 and 2 <= state.optimizer_steps < 6  # inside the first epoch (6 steps)
    resumed = launch([*common, "--name", "run", "--resume", "auto"])
    assert resumed.returncode == 0, describe(resumed)
    expected, got = checkpoint_model(tiny_trained_run), checkpoint_model(tmp_path / "run")
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected)


@pytest.mark.slow
def test_ctrl_c_on_two_gloo_processes_saves_together_and_resumes_bitwise(tmp_path):
    common = [*COMMON, "--batch-size", "8", "--nominal-batch", "8", "--output-dir", str(tmp_path)]
    straight = launch([*common, "--name", "straight"], config="2gpu.yaml", cpu_ddp=True)
    assert straight.returncode == 0, describe(straight)
    job = start_in_own_group([*common, "--name", "run"], config="2gpu.yaml", cpu_ddp=True)
    output = signal_after_step(job, 1, signal.SIGINT)
    assert "stopped by a signal" in output, output[-3000:]
    resumed = launch([*common, "--name", "run", "--resume", "auto"], config="2gpu.yaml", cpu_ddp=True)
    assert resumed.returncode == 0, describe(resumed)
    expected, got = checkpoint_model(tmp_path / "straight"), checkpoint_model(tmp_path / "run")
    assert all(torch.equal(expected[k], got[k]) for k in expected)


@pytest.mark.slow
def test_crafted_checkpoint_folder_is_refused_by_the_trainer(tmp_path, tiny_run_copy):
    common = [*TINY_RUN_FLAGS, "--output-dir", str(tmp_path), "--name", "run"]  # the run tiny_run_copy holds
    latest = tmp_path / "run" / "checkpoints" / (tmp_path / "run" / "checkpoints" / "latest").read_text().strip()
    marker = tmp_path / "pwned"
    payload = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()  # a protocol-0 pickle calling os.system
    (latest / "custom_checkpoint_0.pkl").write_bytes(payload)
    result = launch([*common, "--resume", str(latest)])
    # accelerate launch reports the trainer's exit 2 as its own failure (exit 1, with its own traceback;
    # yolo11-launch passes the 2 on: tests/test_launch_errors.py)
    assert result.returncode != 0 and "error:" in result.stderr and "custom_checkpoint_0.pkl" in result.stderr
    assert 'train.py", line' not in result.stderr and not marker.exists()


def test_a_second_signal_after_the_grace_window_ends_the_process_at_once():
    script = ("import os, signal, time\nfrom yolo11.engine.interrupt import GRACE_SECONDS, StopSignal\n"
              "stop = StopSignal().install()\nstop.defer()  # training has started\n"
              "os.kill(os.getpid(), signal.SIGINT)\n"
              "assert stop.requested and stop.exit_code == 130\n"
              "os.kill(os.getpid(), signal.SIGTERM)  # a launcher passing the request on: the same request\n"
              "os.kill(os.getpid(), signal.SIGINT)\nassert stop.exit_code == 130\nprint('survived', flush=True)\n"
              "time.sleep(GRACE_SECONDS + 0.2)\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(5)\n"
              "print('not reached')\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert "survived" in result.stdout and "not reached" not in result.stdout
    assert result.returncode == -signal.SIGINT


def test_before_training_a_signal_ends_the_start_at_once():
    """Start-up (and dataset conversion): the first signal raises StopRequested where the code is, so the trainer
    exits without waiting for the start to finish."""
    script = ("import os, signal, time\nfrom yolo11.engine.interrupt import StopRequested, StopSignal\n"
              "stop = StopSignal(raise_first=True).install()\n"
              "try:\n    os.kill(os.getpid(), signal.SIGTERM)\n    time.sleep(5)\n"
              "    print('not reached')\nexcept StopRequested as stopped:\n    print('stopped', stopped.signum)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert f"stopped {int(signal.SIGTERM)}" in result.stdout and "not reached" not in result.stdout, result.stderr


@pytest.mark.slow
def test_resume_auto_without_a_checkpoint_starts_fresh_as_a_requeued_job_needs(tmp_path):
    # a step a batch (--nominal-batch 4): --max-steps 2 stops inside the epoch, so the run is left unfinished
    common = [*TINY_FLAGS, "--batch-size", "4", "--nominal-batch", "4", "--epochs", "1", "--output-dir",
              str(tmp_path), "--name", "job", "--resume", "auto", "--max-steps", "2"]
    first = launch(common)
    assert first.returncode == 0 and "no checkpoint in" in first.stdout, describe(first)
    assert (tmp_path / "job" / "checkpoints" / "latest").is_file() and not (tmp_path / "job2").exists()
    second = launch([*common[:-1], "4"])  # requeued: continues from the checkpoint the first part saved
    assert second.returncode == 0 and "resumed from" in second.stdout, describe(second)


def test_weights_files_refuse_non_finite_tensors(tmp_path):
    from yolo11.weights import save_weights

    model = yolo11.create_model("yolo11n", num_classes=2)
    with torch.no_grad():
        model.head.cv2[0][-1].bias[0] = float("inf")
    with pytest.raises(ValueError, match="non-finite"):
        save_weights(model, tmp_path / "w.safetensors")
    assert not (tmp_path / "w.safetensors").exists()


@pytest.mark.slow
def test_resume_with_flags_that_change_the_run_is_refused_unless_allowed(tmp_path, tiny_run_copy):
    """Each resume is compared with the checkpoint's flags before anything trains. The copy is taken back to its
    checkpoint after epoch 1 of 2 (a finished run is not resumable): --max-steps 2 stops inside epoch 2, leaving
    the run unfinished until the last resume."""
    rewind(tiny_run_copy, "checkpoint-00000006")
    common = [*TINY_RUN_FLAGS, "--output-dir", str(tmp_path), "--name", "run"]  # the run tiny_run_copy holds
    # --model was left out: the run records the architecture it built, so that a resume compares like with like
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["model"]["model"] == "yolo11n"
    other = launch([*common, "--resume", "auto", "--model", "yolo11s"])
    assert other.returncode != 0 and "--model: 'yolo11n' in the checkpoint, 'yolo11s' now" in other.stderr
    refused = launch([*common, "--resume", "auto", "--lr0", "0.02"])
    assert refused.returncode != 0 and "--lr0: 0.01 in the checkpoint, 0.02 now" in refused.stderr, describe(refused)
    assert "--allow-changes" in refused.stderr
    harmless = launch([*common, "--resume", "auto", "--max-steps", "2", "--log-interval", "2"])
    assert harmless.returncode == 0 and "resume: --log-interval: 1 in the checkpoint, 2 now" in harmless.stdout
    allowed = launch([*common, "--resume", "auto", "--lr0", "0.02", "--allow-changes", "true"])
    assert allowed.returncode == 0 and "resume: --lr0: 0.01 in the checkpoint, 0.02 now" in allowed.stdout


def test_save_period_auto_checkpoints_once_a_minute_and_n_every_n_epochs():
    """Short epochs under the default (auto) checkpoint when a minute has passed since the last checkpoint;
    --save-period N every N epochs whatever the clock."""
    from types import SimpleNamespace

    from yolo11.engine.trainer import AUTO_CHECKPOINT_SECONDS, checkpoint_due

    def run(period, seconds_since):
        return SimpleNamespace(config=SimpleNamespace(run=SimpleNamespace(save_period=period)),
                               last_checkpoint=time.monotonic() - seconds_since,
                               step=SimpleNamespace(accelerator=SimpleNamespace(num_processes=1)))

    assert not checkpoint_due(run(None, 1.0), epoch=0)
    assert checkpoint_due(run(None, AUTO_CHECKPOINT_SECONDS + 1), epoch=0)
    assert [checkpoint_due(run(3, 0.0), epoch) for epoch in range(6)] == [False, False, True] * 2
    assert checkpoint_due(run(1, 0.0), epoch=0)
