"""``--resume``: which run folder a resumed run writes to, and the one-line resume (flags read from the checkpoint)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import yaml
from helpers.engine_helpers import (
    TINY_RUN_TRAINING,
    checkpoint_model,
    describe,
    launch,
    one_error_line,
    reset_accelerate_state,
)
from helpers.run_folders import checkpoint_folders
from safetensors.torch import load_file

from yolo11.engine.config import parse_command_line
from yolo11.engine.resume import locate_resume, owning_run, prepare_resume

COMMON = TINY_RUN_TRAINING  # the suite's tiny run, checkpoints aside


def fake_run(root, name="run", iteration=3):
    """A run folder as the trainer leaves it (config.yaml, checkpoints/latest), with a minimal checkpoint."""
    run = root / name
    checkpoint = run / "checkpoints" / f"checkpoint-{iteration:08d}"
    checkpoint.mkdir(parents=True)
    (checkpoint / "train_state.json").write_text("{}\n")
    config, _ = parse_command_line(["--epochs", "7", "--imgsz", "64", "--output-dir", str(root), "--name", name])
    (checkpoint / "config.json").write_text(__import__("json").dumps(config.to_dict()))
    (run / "checkpoints" / "latest").write_text(checkpoint.name)
    (run / "config.yaml").write_text(yaml.safe_dump(config.to_dict()))
    (run / "weights").mkdir()
    (run / "weights" / "last.safetensors").write_bytes(b"")
    return run, checkpoint


def test_a_run_owns_only_checkpoints_in_its_checkpoints_folder_beside_its_config(tmp_path):
    run, checkpoint = fake_run(tmp_path)
    assert owning_run(checkpoint) == run.resolve()
    copy = tmp_path / "elsewhere" / "dir" / "ck"
    shutil.copytree(checkpoint, copy)
    assert owning_run(copy) is None  # <dir>'s parent is not a run folder
    look_alike = tmp_path / "other" / "checkpoints" / "checkpoint-00000003"  # the path shape without a run
    shutil.copytree(checkpoint, look_alike)
    assert owning_run(look_alike) is None


@pytest.mark.parametrize("form", ["run", "checkpoint", "weights", "auto"])
def test_resume_accepts_a_run_a_checkpoint_its_weights_or_auto(tmp_path, form):
    run, checkpoint = fake_run(tmp_path)
    resume = {"run": run, "checkpoint": checkpoint, "weights": run / "weights" / "last.safetensors",
              "auto": "auto"}[form]
    target = locate_resume(str(resume), str(tmp_path), "run")
    assert target.checkpoint.resolve() == checkpoint.resolve() and target.owner.resolve() == run.resolve()


def test_a_weights_file_outside_a_run_is_refused_in_one_line(tmp_path):
    stray = tmp_path / "last.safetensors"
    stray.write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="weights/last.safetensors"):
        locate_resume(str(stray), "runs/train", "exp")


def test_resume_reads_every_flag_not_typed_from_the_checkpoint(tmp_path):
    run, checkpoint = fake_run(tmp_path)
    config, typed = parse_command_line(["--resume", str(run), "--workers", "0"])
    config, resume = prepare_resume(config, typed)
    assert (config.run.epochs, config.data.imgsz, config.data.workers) == (7, 64, 0)
    assert resume.run_dir.resolve() == run.resolve()
    assert (config.run.output_dir, config.run.name) == (str(tmp_path), "run")  # where the run lives
    # a typed flag is kept (check_resume_config then compares it with the checkpoint's)
    config, _ = prepare_resume(*parse_command_line(["--resume", str(run), "--epochs", "9"]))
    assert config.run.epochs == 9


def test_ultralytics_resume_model_form_names_the_run(tmp_path):
    run, checkpoint = fake_run(tmp_path)
    weights = run / "weights" / "last.safetensors"
    for argv in (["resume", f"model={weights}"], [f"resume={weights}"], ["resume=true", f"model={weights}"]):
        config, typed = parse_command_line(argv)
        assert config.run.resume == str(weights) and config.model.weights is None and typed == {"resume"}
        config, resume = prepare_resume(config, typed)
        assert resume.checkpoint.resolve() == checkpoint.resolve() and config.run.epochs == 7


@pytest.mark.slow
def test_resume_from_a_copied_checkpoint_writes_the_named_run_never_next_to_the_copy(tmp_path, tiny_trained_run):
    """A checkpoint copied to <dir>/ck: the resumed run writes --output-dir/--name, and nothing lands in (or is
    pruned from) the copy's parent folders."""
    outside = tmp_path / "outside"
    copy = outside / "dir" / "ck"
    shutil.copytree(tiny_trained_run / "checkpoints" / "checkpoint-00000006", copy)  # after epoch 1 of 2
    (outside / "checkpoint-00000001").mkdir()  # a folder of the user's that pruning must not touch
    before = sorted(p.relative_to(tmp_path) for p in outside.rglob("*"))
    resumed = launch([*COMMON, "--resume", str(copy), "--output-dir", str(tmp_path / "out"), "--name", "cont",
                      "--keep-checkpoints", "1"])
    assert resumed.returncode == 0, describe(resumed)
    assert sorted(p.relative_to(tmp_path) for p in outside.rglob("*")) == before
    assert (tmp_path / "out" / "cont" / "config.yaml").is_file()
    assert (tmp_path / "out" / "cont" / "weights" / "last.safetensors").is_file()
    assert checkpoint_model(tmp_path / "out" / "cont")  # the run's own checkpoints


@pytest.mark.slow
def test_one_line_resume_of_a_run_ends_bitwise_as_the_straight_run(tmp_path, tiny_trained_run):
    """``--resume <run>`` alone (and Ultralytics' ``resume model=<run>/weights/last.safetensors``) continues the
    run with its own flags to the weights of the uninterrupted run (the suite's tiny run: the same flags)."""
    common = [*COMMON, "--output-dir", str(tmp_path)]
    straight = tiny_trained_run
    first = launch([*common, "--name", "run", "--max-steps", "5"])
    assert first.returncode == 0, describe(first)
    second = launch(["--resume", str(tmp_path / "run"), "--max-steps", "8"])
    assert second.returncode == 0 and "resumed from" in second.stdout, describe(second)
    assert "flags that change the run" not in second.stderr
    third = launch(["resume", f"model={tmp_path / 'run' / 'weights' / 'last.safetensors'}"])
    assert third.returncode == 0, describe(third)
    expected, got = checkpoint_model(straight), checkpoint_model(tmp_path / "run")
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)
    final = load_file(tmp_path / "run" / "weights" / "last.safetensors")
    assert all(torch.equal(v, load_file(straight / "weights" / "last.safetensors")[k]) for k, v in final.items())
    typed = launch(["--resume", str(tmp_path / "run"), "--epochs", "3"])  # typed and different: refused
    assert typed.returncode != 0 and "--epochs: 2 in the checkpoint, 3 now" in typed.stderr, describe(typed)


@pytest.mark.slow
def test_a_new_run_into_an_older_runs_folder_keeps_its_checkpoint_and_sets_the_older_ones_aside(tmp_path):
    """``--exist-ok`` into a folder whose run reached iteration 1000: the new run's checkpoint is kept (``latest``
    names it), the older run's are moved aside with one line, not deleted."""
    root = tmp_path / "run" / "checkpoints"
    checkpoint_folders(root, 1000)
    result = launch([*COMMON, "--output-dir", str(tmp_path), "--name", "run", "--exist-ok", "--keep-checkpoints",
                     "1", "--max-steps", "2"])
    assert result.returncode == 0, describe(result)
    assert (root / "latest").read_text().strip() == "checkpoint-00000002"
    assert (root / "checkpoint-00000002" / "model.safetensors").is_file()
    aside = list(root.parent.glob("checkpoints.old-*"))
    assert len(aside) == 1 and (aside[0] / "checkpoint-00001000" / "train_state.json").is_file()
    assert f"moved to {aside[0]} (not deleted" in result.stdout, describe(result)


@pytest.mark.slow
def test_a_crafted_training_state_is_refused_in_one_line_before_anything_trains(tiny_run_copy):
    """``batches_in_epoch`` beyond the epoch crashed the resumed epoch's skip (a traceback), ``epoch`` beyond
    ``--epochs`` trained nothing and exited 0: both are refused naming the file and the key, exit 2. Each crafted
    state is inside an epoch: a state at an epoch's end beyond --epochs is a finished run, refused as such first."""
    state_file = tiny_run_copy / "checkpoints" / "checkpoint-00000012" / "train_state.json"  # epoch 2 of 2 done
    saved = json.loads(state_file.read_text())
    for change, key in (({"batches_in_epoch": 99, "iteration": 2 * 6 + 99}, "batches_in_epoch"),
                        ({"epoch": 5, "batches_in_epoch": 2, "iteration": 5 * 6 + 2}, "epoch")):  # 6 batches an epoch
        state_file.write_text(json.dumps(saved | change))
        resumed = launch(["--resume", str(tiny_run_copy)], wrapper=True)
        assert resumed.returncode == 2, describe(resumed)
        assert f"error: {state_file}: {key} is {change[key]}" in one_error_line(resumed)


@pytest.mark.slow  # the trainer in this process, up to the resume
def test_the_trainer_in_process_refuses_a_crafted_training_state_in_one_line(tiny_run_copy, capsys):
    """The trainer passes its model and optimizer to the gate (``resume_check``): a checkpoint whose epoch is -5
    stops the resume with one line and exit 2 (it used to "resume at epoch -4", then fail with a traceback)."""
    from yolo11 import train

    checkpoints = tiny_run_copy / "checkpoints"
    state_file = checkpoints / (checkpoints / "latest").read_text().strip() / "train_state.json"
    state_file.write_text(json.dumps(json.loads(state_file.read_text()) | {"epoch": -5}))
    try:
        assert train.main(["--resume", str(tiny_run_copy)]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line == f"error: {state_file}: epoch is -5, expected an integer >= 0"
    finally:
        reset_accelerate_state()
