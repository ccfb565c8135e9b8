"""Stop requests in every phase of a run: phase x signal x 1 and 2 CPU processes.

Each phase is stopped deterministically: ``YOLO11_STOP_AT=<phase>:<signal>:<target>`` makes the trainer send the
signal when it enters the phase (``engine/interrupt.py``). SIGINT goes to the whole process group, as a terminal's
Ctrl-C does (the launcher forwards SIGTERM and kills 5 s later); SIGTERM goes to the last rank only, a preemption
that the launcher does not see. The phases that train are chained: the run is stopped in training, its resume in
validation, the next resume while it writes a checkpoint, the last one at the end: each stop must leave a
checkpoint that the next resume continues from, and the chain ends on the uninterrupted run's weights bitwise.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest
import torch
from helpers.engine_helpers import ACCELERATE, CONFIGS, ROOT, checkpoint_model, default_signals, describe
from safetensors.torch import load_file

DATA = "synthetic:num_images=16,num_val=8,imgsz=64"  # 4 optimizer steps per epoch at batch 4
FLAGS = ["--data", DATA, "--imgsz", "64", "--workers", "0", "--plots", "false", "--optimizer", "SGD",
         "--warmup-epochs", "0", "--log-interval", "1", "--batch-size", "4", "--nominal-batch", "4", "--epochs", "2",
         "--save-period", "1", "--keep-checkpoints", "10"]
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}


def run_job(args: list[str], processes: int, stop_at: str | None = None, cache: os.PathLike | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    """The trainer under ``accelerate launch``, in a process group of its own (a signal to the group reaches the
    launcher and the ranks, as a terminal's Ctrl-C does)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    env.pop("ACCELERATE_USE_CPU", None)
    env.pop("YOLO11_STOP_AT", None)
    if stop_at:
        env["YOLO11_STOP_AT"] = stop_at
    if cache is not None:
        env["YOLO11_CACHE"] = str(cache)
    config = "cpu.yaml"
    if processes == 2:
        env["ACCELERATE_USE_CPU"] = "1"
        config = "cpu_2proc.yaml"
    command = [ACCELERATE, "launch", "--config_file", str(CONFIGS / config), str(ROOT / "train_accelerate.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout,
                          start_new_session=True, preexec_fn=default_signals)


def target(signame: str, processes: int) -> str:
    return "group" if signame == "SIGINT" else str(processes - 1)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The uninterrupted run of each process count, made once for the module."""
    root, runs = tmp_path_factory.mktemp("straight"), {}

    def get(processes: int):
        if processes not in runs:
            result = run_job([*FLAGS, "--output-dir", str(root), "--name", f"p{processes}"], processes,
                             cache=root / "cache")
            assert result.returncode == 0, describe(result)
            runs[processes] = root / f"p{processes}"
        return runs[processes]

    return get


def latest_state(run) -> dict:
    latest = (run / "checkpoints" / "latest").read_text().strip()
    return json.loads((run / "checkpoints" / latest / "train_state.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_stop_in_each_phase_exits_with_the_signal_and_resumes_bitwise(tmp_path, straight, signame, processes):
    code, where = 128 + SIGNALS[signame], target(signame, processes)
    cache, run = tmp_path / "cache", tmp_path / "run"
    common = [*FLAGS, "--output-dir", str(tmp_path), "--name", "run"]

    # start-up and dataset conversion: out at once, no run folder, no half-written cache (a rank that had not seen
    # the signal yet may have finished converting: a whole cache is kept)
    for phase in ("startup", "conversion"):
        stopped = run_job(common, processes, f"{phase}:{signame}:{where}", cache=cache)
        assert stopped.returncode == code, describe(stopped)
        assert not run.exists(), phase
        for folder in cache.iterdir() if cache.exists() else ():  # (a stopped conversion's note is a file)
            assert folder.is_file() or (folder / "yolo11_source.json").is_file(), f"{phase}: half a cache {folder}"
        assert "Traceback" not in stopped.stderr, describe(stopped)

    # training: every rank stops after the same step, inside the first epoch
    stopped = run_job(common, processes, f"training:{signame}:{where}", cache=cache)
    assert stopped.returncode == code and "stopped by a signal at step" in stopped.stdout, describe(stopped)
    state = latest_state(run)
    assert state["epoch"] == 0 and 1 <= state["optimizer_steps"] < 4, state
    assert "Traceback" not in stopped.stderr, describe(stopped)

    # validation (of the first epoch, run by the resume): cut short; the checkpoint holds the trained epoch
    stopped = run_job(["--resume", str(run)], processes, f"validation:{signame}:{where}", cache=cache)
    assert stopped.returncode == code and "during the validation of epoch 1" in stopped.stdout, describe(stopped)
    state = latest_state(run)
    assert (state["epoch"], state["batches_in_epoch"], state["optimizer_steps"]) == (0, 4, 4), state
    assert not (run / "results.csv").is_file() or len((run / "results.csv").read_text().splitlines()) == 1

    # checkpoint writing (after the first epoch, validated this time): the write completes, then the run stops
    stopped = run_job(["--resume", str(run)], processes, f"checkpoint:{signame}:{where}", cache=cache)
    assert stopped.returncode == code and "stopped by a signal after epoch 1" in stopped.stdout, describe(stopped)
    state = latest_state(run)
    assert (state["epoch"], state["batches_in_epoch"]) == (1, 0), state
    assert len((run / "results.csv").read_text().splitlines()) == 2  # epoch 1 validated once, recorded once

    # the end (summary, final plots, push): skipped; the last checkpoint is the finished run
    stopped = run_job(["--resume", str(run)], processes, f"finish:{signame}:{where}", cache=cache)
    assert stopped.returncode == code and "final plots" in stopped.stdout, describe(stopped)
    expected, got = checkpoint_model(straight(processes)), checkpoint_model(run)
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)
    last = load_file(run / "weights" / "last.safetensors")
    reference = load_file(straight(processes) / "weights" / "last.safetensors")
    assert all(torch.equal(last[k], reference[k]) for k in reference)


@pytest.mark.parametrize("where", ["launch_state", "job_token"])
def test_a_stop_during_the_first_collectives_ends_the_start_quietly(tmp_path, monkeypatch, capsys, where):
    """The launcher forwards a stop to every rank, and a rank may get it while the process group forms or during
    the start's first collective (the job token's broadcast): that start ends as a stop (exit 130, nothing made),
    not a traceback."""
    from yolo11.engine import trainer
    from yolo11.engine.config import parse_config
    from yolo11.engine.interrupt import StopRequested

    def stopped_here(*args):
        raise StopRequested(signal.SIGINT)

    monkeypatch.setattr(trainer, where, stopped_here)
    config = parse_config(["--data", "synthetic:num_images=4,num_val=2,imgsz=64", "--imgsz", "64", "--epochs", "1",
                           "--batch-size", "2", "--workers", "0", "--output-dir", str(tmp_path / "runs"),
                           "--cache-dir", str(tmp_path / "cache")])
    assert trainer.train(config) == 128 + signal.SIGINT
    assert not (tmp_path / "runs").exists()
    assert "Traceback" not in capsys.readouterr().err
