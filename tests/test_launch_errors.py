"""What a user sees when a launched run fails to start: one error line and the trainer's exit code through
``yolo11-launch`` (``accelerate launch -q``: the line, exit 1), no run folder left, and a CPU config asked for more
processes than it can start refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.engine_helpers import ACCELERATE, CONFIGS, ROOT, TINY_FLAGS, describe
from helpers.run_folders import rewind

FLAGS = [*TINY_FLAGS, "--batch-size", "4", "--epochs", "1"]


def job(args: list[str], *, config: str = "cpu.yaml", wrapper: bool = True, launch_args: tuple[str, ...] = (),
        env: dict | None = None, cpu_ddp: bool = False) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    environment.pop("ACCELERATE_USE_CPU", None)
    if cpu_ddp:
        environment["ACCELERATE_USE_CPU"] = "1"
    launcher = [sys.executable, "-m", "yolo11.launch"] if wrapper else [ACCELERATE, "launch"]
    command = [*launcher, "--config_file", str(CONFIGS / config), *launch_args, str(ROOT / "train_accelerate.py"),
               *args]
    return subprocess.run(command, capture_output=True, text=True, env=environment, cwd=ROOT, timeout=300)


def one_error_line(result: subprocess.CompletedProcess, text: str) -> None:
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and text in errors[0], describe(result)
    assert "Traceback" not in result.stderr and "CalledProcessError" not in result.stderr, describe(result)


@pytest.mark.slow
@pytest.mark.parametrize("processes", [1, 2])
def test_a_user_error_is_one_line_and_exit_2_through_yolo11_launch(tmp_path, processes):
    config = "cpu_2proc.yaml" if processes == 2 else "cpu.yaml"
    result = job([*FLAGS, "--data", str(tmp_path / "nowhere.yaml"), "--output-dir", str(tmp_path / "out")],
                 config=config, cpu_ddp=processes == 2)
    assert result.returncode == 2, describe(result)
    one_error_line(result, "nowhere.yaml")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_accelerate_launch_quiet_shows_the_line_without_the_launcher_traceback(tmp_path):
    result = job([*FLAGS, "--data", str(tmp_path / "nowhere.yaml")], wrapper=False, launch_args=("-q",))
    assert result.returncode == 1, describe(result)  # accelerate maps every failure to 1
    one_error_line(result, "nowhere.yaml")


@pytest.mark.slow
def test_two_processes_from_the_cpu_config_are_refused(tmp_path):
    """``--num_processes 2`` with ``cpu.yaml`` starts one process (no mpirun): refused instead of training alone."""
    result = job([*FLAGS, "--output-dir", str(tmp_path / "out")], launch_args=("--num_processes", "2"))
    assert result.returncode == 2, describe(result)
    one_error_line(result, "cpu_2proc.yaml")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_gpu_config_of_two_processes_on_a_cpu_machine_is_one_line(tmp_path):
    """cpu_2proc.yaml without ACCELERATE_USE_CPU=1 on a machine without GPUs: each process sees a world of one, and
    each said so (the same line twice); the launcher's first rank says it."""
    if __import__("torch").cuda.is_available():
        pytest.skip("a machine without GPUs")
    result = job([*FLAGS, "--output-dir", str(tmp_path / "out")], config="cpu_2proc.yaml")
    assert result.returncode == 2, describe(result)
    one_error_line(result, "2 processes were launched (WORLD_SIZE=2) but this one sees a world of 1")


@pytest.mark.slow
def test_cpu_2proc_config_runs_two_processes(tmp_path):
    result = job([*FLAGS, "--batch-size", "8", "--max-steps", "1", "--output-dir", str(tmp_path)],
                 config="cpu_2proc.yaml", cpu_ddp=True)
    assert result.returncode == 0 and "2 process(es) x batch 4" in result.stdout, describe(result)


@pytest.mark.slow
def test_a_failed_start_after_the_run_folder_leaves_none_and_says_it_once(tmp_path):
    """An offline ``--pretrained`` timm backbone fails after the run folder was made: the folder goes again."""
    result = job([*FLAGS, "--backbone", "resnet18", "--pretrained", "--output-dir", str(tmp_path / "out")],
                 env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    assert result.returncode == 2, describe(result)
    one_error_line(result, "resnet18")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_one_process_checkpoint_resumed_on_two_says_what_changed(tiny_run_copy):
    """Rank 1 found no RNG state of its own and left without a word; rank 0 trained on until the launcher's
    SIGTERM, and the job exited 143 (read as a preemption). Now every rank refuses alike, naming the change and
    --allow-changes, and the job exits 2; with --allow-changes it goes on, saying what changed (the suite's tiny
    run, written by one process: its checkpoints hold random_states_0.pkl only; taken back to epoch 1 of 2, as a
    finished run is not resumable)."""
    run = tiny_run_copy
    rewind(run, "checkpoint-00000006")
    refused = job(["--resume", str(run)], config="cpu_2proc.yaml", cpu_ddp=True)
    assert refused.returncode == 2, describe(refused)
    one_error_line(refused, "written by 1 process(es), resumed on 2: process 1 has no saved random state")
    assert "--allow-changes true" in refused.stderr
    allowed = job(["--resume", str(run), "--allow-changes", "true"], config="cpu_2proc.yaml", cpu_ddp=True)
    assert allowed.returncode == 0, describe(allowed)
    assert "resume: checkpoint-00000006 written by 1 process(es), resumed on 2" in allowed.stdout, describe(allowed)


@pytest.mark.slow
def test_a_rank_that_refuses_its_own_rng_state_says_so_and_the_job_exits_2(tiny_run_copy):
    """Only rank 1 reads random_states_1.pkl: it says why in its own line, rank 0 ends with it, exit 2."""
    run = tiny_run_copy
    rewind(run, "checkpoint-00000006")  # epoch 1 of 2: a finished run is refused before any rank reads its state
    checkpoint = run / "checkpoints" / "checkpoint-00000006"
    (checkpoint / "random_states_1.pkl").write_bytes(b"not a pickle")
    result = job(["--resume", str(run)], config="cpu_2proc.yaml", cpu_ddp=True)
    assert result.returncode == 2, describe(result)
    one_error_line(result, f"[rank 1] {checkpoint / 'random_states_1.pkl'}")
    assert "resumed from" not in result.stdout


def test_a_conversion_stopped_while_saving_leaves_no_folder_in_the_cache(tmp_path, monkeypatch):
    import datasets

    from yolo11.data import sources

    def interrupted(self, path, **kwargs):
        Path(path).mkdir(parents=True)
        (Path(path) / "half.arrow").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(datasets.Dataset, "save_to_disk", interrupted)
    rows = [{"image_id": 1, "image": {"bytes": b"", "path": "a.jpg"}, "width": 8, "height": 8,
             "objects": {"id": [], "area": [], "bbox": [], "category": []}}]
    summary = type("Summary", (), {"to_dict": lambda self: {}})()
    with pytest.raises(KeyboardInterrupt):
        sources._convert_and_save(tmp_path, tmp_path / "synthetic-train-abc", lambda: (rows, ["a"], summary))
    assert list(tmp_path.iterdir()) == []


def test_a_waiting_process_stops_with_the_converting_one(tmp_path, monkeypatch):
    """The converting process was stopped by SIGTERM: the waiting one gets the same signal, not an error."""
    from yolo11.data import sources

    class Waiting:
        is_local_main_process = False

        def wait_for_everyone(self) -> None:
            (tmp_path / ".synthetic-train-abc.error").write_text(json.dumps(
                {"type": "StopRequested", "message": "SIGTERM", "signum": int(signal.SIGTERM)}))

    class Stopped(BaseException):
        pass

    def handler(signum, frame):
        raise Stopped(signum)

    monkeypatch.setattr(sources, "_launch_state", lambda: Waiting())
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        with pytest.raises(Stopped):
            sources._cached(tmp_path, "synthetic-train", "abc", lambda: pytest.fail("a waiting process converted"))
    finally:
        signal.signal(signal.SIGTERM, previous)
