"""Resume as Ultralytics users type it: ``yolo11 train resume`` (``resume=True``, ``--resume auto`` without a name)
takes the newest unfinished run of the output folder and says which; a finished run, or none at all, is an error
that says so (with the command that trains longer); a stop prints the command that resumes that very run."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest
import yaml
from helpers.engine_helpers import ACCELERATE, CONFIGS, ROOT, describe

from yolo11.engine import resume as resume_module
from yolo11.engine.config import parse_command_line
from yolo11.engine.resume import prepare_resume, resume_command

STATE = {"epoch": 0, "batches_in_epoch": 0, "iteration": 0, "optimizer_steps": 0, "loss_sum": None,
         "loss_batches": 0, "best_fitness": -1.0, "best_epoch": -1, "tracker_run_id": None}


def make_run(root, name, *, done, epochs=3, batches=0, best=-1, patience=100, mtime=None):
    """A run folder as the trainer leaves it under ``root``: config.yaml, checkpoints/latest naming a checkpoint
    whose train_state.json says ``done`` epochs (and ``batches`` of the next) and whose config.json says
    ``epochs``; its time ``mtime`` (seconds since the epoch)."""
    run = root / name
    checkpoint = run / "checkpoints" / "checkpoint-00000007"
    checkpoint.mkdir(parents=True)
    config, _ = parse_command_line(["--epochs", str(epochs), "--patience", str(patience), "--imgsz", "64",
                                    "--output-dir", str(root), "--name", name])
    state = {**STATE, "epoch": done, "batches_in_epoch": batches, "iteration": 7, "best_epoch": best}
    (checkpoint / "train_state.json").write_text(json.dumps(state))
    (checkpoint / "config.json").write_text(json.dumps(config.to_dict()))
    (run / "checkpoints" / "latest").write_text(checkpoint.name)
    (run / "config.yaml").write_text(yaml.safe_dump(config.to_dict()))
    if mtime is not None:
        os.utime(checkpoint / "train_state.json", (mtime, mtime))
    return run, checkpoint


def resolve(argv):
    return prepare_resume(*parse_command_line(argv))


@pytest.mark.parametrize("argv", [["resume"], ["resume=True"], ["--resume", "auto"], ["resume", "epochs=3"]])
def test_bare_resume_takes_the_newest_unfinished_run_and_says_which(tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "runs" / "train"
    make_run(root, "old", done=1, mtime=1_000)
    make_run(root, "middle", done=2, batches=3, mtime=2_000)  # mid-epoch: unfinished
    make_run(root, "finished", done=3, mtime=3_000)  # the newest, but its last epoch is done
    make_run(root, "exp", done=1, mtime=500)  # the default name: no longer what a bare resume means
    config, resume = resolve(argv)
    assert resume.checkpoint.resolve() == (root / "middle" / "checkpoints" / "checkpoint-00000007").resolve()
    assert str(resume.run_dir) == "runs/train/middle" and (config.run.output_dir, config.run.name) == (str(root),
                                                                                                      "middle")
    assert config.run.epochs == 3 and config.data.imgsz == 64  # the run's own flags
    assert resume.note == "resume: runs/train/middle, the newest unfinished run in runs/train: 2/3 epochs done"


def test_a_named_auto_resume_keeps_its_run_and_a_fresh_start_before_any_checkpoint(tmp_path, monkeypatch):
    """``--resume auto --name`` (a requeued SLURM job): that run's latest checkpoint, or a new run when it has none
    yet, whatever other runs the folder holds."""
    monkeypatch.chdir(tmp_path)
    make_run(tmp_path / "runs" / "train", "other", done=1)
    _, resume = resolve(["--resume", "auto", "--name", "job"])
    assert resume.checkpoint is None and resume.note is None
    run, checkpoint = make_run(tmp_path / "runs" / "train", "job", done=1, mtime=1)
    _, resume = resolve(["--resume", "auto", "--name", "job"])
    assert resume.checkpoint.resolve() == checkpoint.resolve()


def test_without_an_unfinished_run_a_bare_resume_is_an_error_not_a_new_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["yolo11 train"])
    with pytest.raises(FileNotFoundError, match=r"nothing to resume: no run in runs/train has a checkpoint"):
        resolve(["resume"])
    make_run(tmp_path / "runs" / "train", "exp", done=3, epochs=3)
    with pytest.raises(FileNotFoundError) as error:
        resolve(["resume"])
    assert str(error.value) == (
        "no unfinished run in runs/train to resume: the newest, runs/train/exp, finished all 3 epochs. To train "
        "longer: yolo11 train resume model=runs/train/exp/weights/last.safetensors epochs=6 allow_changes=true")


@pytest.mark.parametrize("form", ["run", "weights", "ultralytics", "checkpoint"])
def test_resuming_a_finished_run_says_so_and_how_to_train_longer(tmp_path, monkeypatch, form):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["yolo11 train"])
    run, checkpoint = make_run(tmp_path / "runs" / "train", "x", done=3, epochs=3)
    rel = "runs/train/x"
    argv = {"run": ["--resume", rel], "weights": [f"resume={rel}/weights/last.safetensors"],
            "ultralytics": ["resume", f"model={rel}/weights/last.safetensors"],
            "checkpoint": ["--resume", f"{rel}/checkpoints/checkpoint-00000007"]}[form]
    with pytest.raises(ValueError) as error:
        resolve(argv)
    assert str(error.value) == (f"{rel} finished all 3 epochs; nothing to resume. To train longer: yolo11 train "
                                f"resume model={rel}/weights/last.safetensors epochs=6 allow_changes=true")
    config, resume = resolve([*argv, "epochs=6", "allow_changes=true"])  # the command it prints: accepted
    assert resume.checkpoint.resolve() == checkpoint.resolve() and config.run.epochs == 6


def test_resuming_with_fewer_epochs_than_trained_suggests_more_than_trained(tmp_path, monkeypatch):
    """``resume epochs=1`` on a run of 4 epochs: the suggestion is twice the 4 (it was twice the 1 typed, 2, which
    ended the same way, then 4, then 8)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["yolo11 train"])
    make_run(tmp_path / "runs" / "train", "x", done=4, epochs=4)
    weights = "runs/train/x/weights/last.safetensors"
    with pytest.raises(ValueError) as error:
        resolve(["resume", f"model={weights}", "epochs=1"])
    assert str(error.value) == ("runs/train/x has trained 4 epochs, more than the 1 asked; nothing to resume. To train "
                                f"longer: yolo11 train resume model={weights} epochs=8 allow_changes=true")
    config, resume = resolve(["resume", f"model={weights}", "epochs=8", "allow_changes=true"])
    assert resume.checkpoint is not None and config.run.epochs == 8


def test_a_run_that_patience_stopped_is_finished_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["yolo11 train"])
    make_run(tmp_path / "runs" / "train", "p", done=8, epochs=100, best=2, patience=5)
    with pytest.raises(ValueError, match=r"runs/train/p was stopped by --patience 5 after epoch 8 of 100 \(no better "
                                         r"fitness since epoch 3\); nothing to resume. To train longer: yolo11 train "
                                         r"resume model=runs/train/p/weights/last.safetensors patience=0 "
                                         r"allow_changes=true"):
        resolve(["--resume", "runs/train/p"])
    config, resume = resolve(["--resume", "runs/train/p", "patience=0", "allow_changes=true"])
    assert resume.checkpoint is not None and config.run.patience == 0


def test_weights_last_of_a_run_resumes_before_that_file_is_written(tmp_path, monkeypatch):
    """A stop inside the first epoch leaves no weights yet: ``resume model=<run>/weights/last.safetensors``, the
    command the stop prints, still names the run."""
    monkeypatch.chdir(tmp_path)
    run, checkpoint = make_run(tmp_path / "runs" / "train", "x", done=0, batches=2)
    assert not (run / "weights" / "last.safetensors").exists()
    _, resume = resolve(["resume", "model=runs/train/x/weights/last.safetensors"])
    assert resume.checkpoint.resolve() == checkpoint.resolve() and str(resume.run_dir) == "runs/train/x"


@pytest.mark.parametrize(("argv0", "launcher", "expected"), [
    ("yolo11 train", None, "yolo11 train resume model=runs/train/x/weights/last.safetensors epochs=6"),
    ("/venv/bin/yolo11-train", None, "yolo11-train --resume runs/train/x --epochs 6"),
    ("/src/yolo11/train.py", None, "python -m yolo11.train --resume runs/train/x --epochs 6"),
    ("train_accelerate.py", None, "python train_accelerate.py --resume runs/train/x --epochs 6"),
    ("train_accelerate.py", ["/venv/bin/accelerate", "launch", "--config_file", "c.yaml", "train_accelerate.py"],
     "accelerate launch --config_file c.yaml train_accelerate.py --resume runs/train/x --epochs 6"),
    ("/src/yolo11/train.py", ["/venv/bin/python", "/venv/bin/torchrun", "--nproc-per-node", "2", "-m",
                              "yolo11.train"],
     "torchrun --nproc-per-node 2 -m yolo11.train --resume runs/train/x --epochs 6"),
    ("train_accelerate.py", ["/venv/bin/python3", "-m", "accelerate.commands.launch", "--num_processes", "2",
                             "train_accelerate.py"],
     "python3 -m accelerate.commands.launch --num_processes 2 train_accelerate.py --resume runs/train/x --epochs 6"),
])
def test_the_resume_command_is_the_way_this_run_was_started(monkeypatch, argv0, launcher, expected):
    from pathlib import Path

    trainer_args = ["--data", "my data.yaml", "--name", "x"]
    monkeypatch.setattr(sys, "argv", [argv0, *trainer_args])

    class Parent:
        def cmdline(self):
            return [*launcher, *trainer_args] if launcher else ["/bin/bash"]

    psutil = pytest.importorskip("psutil")
    monkeypatch.setattr(psutil, "Process", lambda pid: Parent())
    assert resume_command(Path("runs/train/x"), epochs=6) == expected
    assert resume_module._launcher_words() == (None if launcher is None else shlex.split(expected)[:-4])


def test_the_resume_command_keeps_the_launch_environment_the_user_set(monkeypatch):
    """cpu_2proc.yaml runs as ``ACCELERATE_USE_CPU=1 accelerate launch ...``: the printed command without it
    started ranks that refused their world; what the launcher set for its children is not the user's."""
    from pathlib import Path

    launcher = ["/venv/bin/accelerate", "launch", "--config_file", "cpu_2proc.yaml", "train_accelerate.py"]
    monkeypatch.setattr(sys, "argv", ["train_accelerate.py", "--name", "x"])

    class Parent:
        def cmdline(self):
            return [*launcher, "--name", "x"]

        def environ(self):
            return {"ACCELERATE_USE_CPU": "1", "HOME": "/root", "CUDA_VISIBLE_DEVICES": ""}

    psutil = pytest.importorskip("psutil")
    monkeypatch.setattr(psutil, "Process", lambda pid: Parent())
    assert resume_command(Path("runs/train/x")) == ("ACCELERATE_USE_CPU=1 accelerate launch --config_file "
                                                    "cpu_2proc.yaml train_accelerate.py --resume runs/train/x")


# -- end to end: what a user types, in a folder of their own ---------------------------------------------------------

TINY = ["imgsz=64", "batch=4", "nbs=4", "workers=0", "plots=false",
        "optimizer=SGD", "warmup_epochs=0", "val_images=0"]


def yolo11(cwd, *args, env=None, timeout=300):
    """``yolo11 <args>`` as a user types it (this checkout's code), in ``cwd``."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
                   "YOLO11_CACHE": str(cwd / "cache"), **(env or {})}
    environment.pop("ACCELERATE_USE_CPU", None)
    return subprocess.run([sys.executable, "-m", "yolo11.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=environment, timeout=timeout)


def printed_command(output: str, after: str = "resume with: ") -> list[str]:
    line = next(line for line in output.splitlines() if after in line)
    return shlex.split(line.split(after, 1)[1])


@pytest.mark.slow
def test_stop_resume_and_train_longer_as_a_user_types_them(tmp_path):
    """Two runs stopped early (--max-steps); the first one's printed command resumes that one, not the newer;
    ``yolo11 train resume`` then takes the newer and says so; with both finished it refuses and prints the command
    that trains longer, which does."""
    data = "data=synthetic:num_images=4,num_val=4,imgsz=64"  # one step an epoch
    first = yolo11(tmp_path, "train", data, *TINY, "epochs=2", "name=first", "max_steps=1")
    assert first.returncode == 0, describe(first)
    command = printed_command(first.stdout)
    assert command == ["yolo11", "train", "resume", "model=runs/train/first/weights/last.safetensors"], first.stdout
    second = yolo11(tmp_path, "train", data, *TINY, "epochs=2", "name=second", "max_steps=1")
    assert second.returncode == 0, describe(second)

    resumed = yolo11(tmp_path, *command[1:])  # the first run's command: the first run, though the second is newer
    assert resumed.returncode == 0 and "resumed from runs/train/first/checkpoints/" in resumed.stdout, \
        describe(resumed)
    newest = yolo11(tmp_path, "train", "resume")
    assert newest.returncode == 0, describe(newest)
    assert "resume: runs/train/second, the newest unfinished run in runs/train: 1/2 epochs done" in newest.stdout
    assert "epoch 2/2 done" in newest.stdout

    refused = yolo11(tmp_path, "train", "resume")
    assert refused.returncode == 2, describe(refused)
    assert "error: no unfinished run in runs/train to resume: the newest, runs/train/second, finished all 2 " \
           "epochs. To train longer: yolo11 train resume model=runs/train/second/weights/last.safetensors " \
           "epochs=4 allow_changes=true" in refused.stderr, describe(refused)
    longer = yolo11(tmp_path, *printed_command(refused.stderr, "To train longer: ")[1:])
    assert longer.returncode == 0 and "epoch 4/4 done" in longer.stdout, describe(longer)
    assert [row.split(",")[0].strip() for row in (tmp_path / "runs/train/second/results.csv").read_text()
            .splitlines()[1:]] == ["1", "2", "3", "4"]


@pytest.mark.slow
def test_a_stop_signal_under_accelerate_launch_prints_the_launch_that_resumes_the_run(tmp_path):
    """SIGTERM inside the first epoch of a named run under ``accelerate launch``: the printed command is the
    launcher's, with that run folder, and running it resumes that run."""
    config = str(CONFIGS / "cpu.yaml")
    script = str(ROOT / "train_accelerate.py")
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "YOLO11_CACHE": str(tmp_path / "c")}
    environment.pop("ACCELERATE_USE_CPU", None)
    args = ["data=synthetic:num_images=8,num_val=4,imgsz=64", *TINY, "epochs=1", "project=out", "name=job"]
    stopped = subprocess.run([ACCELERATE, "launch", "--config_file", config, script, *args], capture_output=True,
                             text=True, cwd=tmp_path, timeout=300,
                             env={**environment, "YOLO11_STOP_AT": "training:SIGTERM"})
    assert stopped.returncode == 143, describe(stopped)
    command = printed_command(stopped.stdout)
    assert command == ["accelerate", "launch", "--config_file", config, script, "--resume", "out/job"], \
        stopped.stdout
    resumed = subprocess.run([ACCELERATE, *command[1:]], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                             env=environment)
    assert resumed.returncode == 0 and "resumed from out/job/checkpoints/" in resumed.stdout, describe(resumed)
    assert "epoch 1/1 done" in resumed.stdout


def test_the_docs_name_every_flag_a_resume_does_not_read_back():
    """docs/runs.md said every untyped flag is read from the checkpoint "except --max-steps", while six are not: the
    list there follows the flags' own declarations."""
    from yolo11.engine.config import LOCAL, flags_with_rule

    text = " ".join((ROOT / "docs" / "runs.md").read_text().split())
    sentence = text[text.index("every flag you do not type is read from it"):][:400]
    for flag in flags_with_rule(LOCAL):
        assert f"`--{flag.replace('_', '-')}`" in sentence, flag
