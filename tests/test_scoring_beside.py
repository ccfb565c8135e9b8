"""An epoch scored while the next one trains (``trainer.score_beside_training``: one GPU, short epochs) is
recorded as if it had been scored at once: the same results.csv, best epoch, weights files and checkpoints, also
when a stop comes while it is pending. On the CPU the trainer never defers; these tests allow it there."""

from __future__ import annotations

import csv
import re

import pytest
import torch
from helpers.engine_helpers import TINY_FLAGS, checkpoint_model, train_in_process
from safetensors.torch import load_file

from yolo11.engine import trainer

FLAGS = [*TINY_FLAGS, "--batch-size", "4", "--nominal-batch", "4", "--epochs", "4", "--close-mosaic", "1"]
TIMED = {"time", "throughput/img_s", "memory/peak_gb"}  # columns that are the machine's, not the run's


@pytest.fixture
def deferring(monkeypatch):
    """Every epoch that ``score_beside_training`` would defer on a GPU deferred here; the deferred epochs listed."""
    deferred: list[int] = []

    def allowed(run, epoch, result, final):
        later = not final and not trainer.checkpoint_due(run, epoch)
        if later:
            deferred.append(epoch)
        return later

    monkeypatch.setattr(trainer, "score_beside_training", allowed)
    return deferred


def rows(run_dir) -> list[dict]:
    with open(run_dir / "results.csv", newline="") as fh:
        return [{k: v for k, v in row.items() if k not in TIMED} for row in csv.DictReader(fh)]


def assert_same_files(expected, got) -> None:
    for name in ("last.safetensors", "best.safetensors"):
        a, b = load_file(expected / "weights" / name), load_file(got / "weights" / name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    a, b = checkpoint_model(expected), checkpoint_model(got)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_epochs_scored_beside_the_next_are_recorded_as_if_scored_at_once(tmp_path, deferring, capsys,
                                                                          monkeypatch):
    assert train_in_process([*FLAGS, "--output-dir", str(tmp_path), "--name", "beside"]) == 0
    out = capsys.readouterr().out
    assert deferring == [0, 1, 2]  # every epoch but the last
    monkeypatch.setattr(trainer, "score_beside_training", lambda *args: False)
    assert train_in_process([*FLAGS, "--output-dir", str(tmp_path), "--name", "at_once"]) == 0
    beside, at_once = tmp_path / "beside", tmp_path / "at_once"
    assert rows(beside) == rows(at_once) and len(rows(beside)) == 4
    assert_same_files(at_once, beside)
    lines = [line for line in out.splitlines() if line.startswith("epoch ") and " done in " in line]
    assert [line.split()[1] for line in lines] == ["1/4", "2/4", "3/4", "4/4"]  # in order, one each
    assert "scoring alongside" in out  # the time line tells the scoring that training hid
    # the final checkpoint's time is told apart within saving, as is the wait for the weights' writer thread
    saving = re.search(r"saving ([\d.]+) s \(checkpoints ([\d.]+) s, writer waits ([\d.]+) s\)", out)
    assert saving, out
    total, checkpoints, waits = map(float, saving.groups())
    assert 0 < checkpoints and checkpoints + waits <= total + 0.1  # parts of saving, rounded to 0.1 s each


@pytest.mark.slow
def test_a_stop_while_an_epoch_is_pending_records_it_before_the_checkpoint(tmp_path, deferring):
    """--max-steps 9 stops in epoch 2 while epoch 1 is still being scored: its checkpoint holds epoch 1's record
    (results.csv row, best epoch), and the resumed run ends as the straight one."""
    straight = tmp_path / "straight"
    assert train_in_process([*FLAGS, "--output-dir", str(tmp_path), "--name", "straight"]) == 0
    deferring.clear()
    assert train_in_process([*FLAGS, "--output-dir", str(tmp_path), "--name", "stopped", "--max-steps", "9"]) == 0
    stopped = tmp_path / "stopped"
    assert deferring == [0]
    assert rows(stopped) == rows(straight)[:1]
    assert (stopped / "weights" / "best.safetensors").is_file()
    assert train_in_process(["--resume", str(stopped)]) == 0
    assert rows(stopped) == rows(straight)
    assert_same_files(straight, stopped)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_gpu_run_scores_its_short_epochs_beside_the_next(tmp_path, monkeypatch, capsys):
    """Nothing forced: on one GPU every epoch of the tiny run but the last is scored while the next one trains,
    and the run's record is whole."""
    decided: list[bool] = []
    decide = trainer.score_beside_training

    def spy(*args):
        decided.append(decide(*args))
        return decided[-1]

    monkeypatch.setattr(trainer, "score_beside_training", spy)
    assert train_in_process([*FLAGS, "--output-dir", str(tmp_path), "--name", "gpu"]) == 0
    assert decided == [True, True, True, False]
    recorded = rows(tmp_path / "gpu")
    assert [row["epoch"] for row in recorded] == ["1", "2", "3", "4"]
    assert all(row["metrics/mAP50-95(B)"] != "" for row in recorded)
    assert "scoring alongside" in capsys.readouterr().out


@pytest.mark.slow
def test_an_error_in_the_next_epoch_still_records_the_pending_one(tmp_path, deferring, monkeypatch):
    """A crash while epoch 1 is being scored (in epoch 2's training) leaves epoch 1's row and weights, as a run
    that scored it at once would have, and the crash is what the run reports."""
    train_one_epoch, calls = trainer.train_one_epoch, []

    def failing_second_epoch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("a crash in epoch 2")
        return train_one_epoch(*args, **kwargs)

    monkeypatch.setattr(trainer, "train_one_epoch", failing_second_epoch)
    with pytest.raises(RuntimeError, match="a crash in epoch 2"):
        train_in_process([*FLAGS, "--output-dir", str(tmp_path), "--name", "crash"])
    assert deferring == [0]
    assert [row["epoch"] for row in rows(tmp_path / "crash")] == ["1"]
    assert (tmp_path / "crash" / "weights" / "last.safetensors").is_file()
