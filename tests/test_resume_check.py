"""``yolo11.engine.resume_check``: every file of a checkpoint through the loading gate and compared with the model,
optimizer and run that resume from it, before Accelerate's ``load_state`` reads the folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from yolo11.engine.resume_check import CheckpointError, RunBounds, check_train_state
from yolo11.gate import FileRefusedError

CONV = "head.cv2.0.0.conv.weight"
STATE = {"epoch": 1, "batches_in_epoch": 2, "iteration": 8, "optimizer_steps": 8, "loss_sum": [1.0, 2.0, 3.0],
         "loss_batches": 2, "best_fitness": 0.25, "best_epoch": 0, "tracker_run_id": None}
BOUNDS = RunBounds(epochs=3, batches_per_epoch=6)


def test_a_consistent_training_state_passes(tmp_path):
    assert check_train_state(tmp_path / "train_state.json", dict(STATE), BOUNDS) == STATE
    finished = STATE | {"epoch": 3, "batches_in_epoch": 0, "iteration": 18, "loss_sum": None, "loss_batches": 0}
    check_train_state(tmp_path / "train_state.json", finished, BOUNDS)


@pytest.mark.parametrize("change", [
    {"epoch": 4, "iteration": 26},  # beyond --epochs 3: nothing would train
    {"epoch": -1},
    {"batches_in_epoch": 7, "iteration": 13},  # more than an epoch holds: the epoch's skip crashed
    {"batches_in_epoch": 2, "epoch": 3, "iteration": 20},  # after the last epoch
    {"iteration": 9},  # not where 1 epoch of 6 batches + 2 put it
    {"iteration": 2, "optimizer_steps": 2},  # fewer batches than the finished epoch and this one hold
    {"iteration": "8"},
    {"optimizer_steps": 9},
    {"loss_batches": 3},
    {"loss_sum": None},
    {"loss_sum": [1.0, float("inf"), 3.0]},
    {"best_fitness": float("nan")},
    {"best_fitness": 7.0},
    {"best_epoch": 1},  # the epoch in progress cannot be the best one
    {"best_epoch": -2},
])
def test_training_state_values_out_of_range_are_refused_naming_the_key(tmp_path, change):
    path = tmp_path / "train_state.json"
    key = next(iter(change))
    with pytest.raises(CheckpointError, match=rf"^{path}: {key} is "):
        check_train_state(path, STATE | change, BOUNDS)


def test_an_iteration_off_the_epochs_passes_with_allow_changes(tmp_path):
    """A batch size changed by an earlier resume (--allow-changes) leaves the iteration where the old epochs put
    it: not derivable, so allowed then."""
    check_train_state(tmp_path / "train_state.json", STATE | {"iteration": 9}, BOUNDS, allow_changes=True)


def test_more_batches_done_than_an_epoch_now_holds_resume_at_its_end_with_allow_changes(tmp_path):
    """A run stopped at its epoch's end (a signal during validation), resumed with a larger batch: its batch count
    exceeded the new epoch's and the resume was refused as a corrupt file, --allow-changes or not. With it, the
    epoch resumes at its end, said in a note; without, still refused."""
    notes: list[str] = []
    saved = STATE | {"batches_in_epoch": 6, "iteration": 12}  # epoch 2 complete at 6 batches an epoch
    bounds = RunBounds(epochs=3, batches_per_epoch=3)  # twice the batch size now
    state = check_train_state(tmp_path / "train_state.json", dict(saved), bounds, allow_changes=True, notes=notes)
    assert state["batches_in_epoch"] == 3 and notes == [
        "epoch 2: 6 batches were done, more than it holds at this batch size (3): resumed at its end"]
    with pytest.raises(CheckpointError, match="batches_in_epoch is 6, but an epoch of this run has 3 batches"):
        check_train_state(tmp_path / "train_state.json", dict(saved), bounds)


def _resume(resumable, edit, tmp_path: Path, allow_changes: bool = False) -> list[str]:
    import shutil

    from yolo11.engine.checkpoint import TrainState, load_checkpoint

    accelerator, model, optimizer, ema, template = resumable
    folder = Path(shutil.copytree(template, tmp_path / "checkpoint-00000005"))
    edit(folder)
    return load_checkpoint(accelerator, folder, TrainState(), ema, model=model, optimizer=optimizer,
                           allow_changes=allow_changes)


def _save(payload: object):
    return lambda path: torch.save(payload, path)


def _json_edit(**changes):
    def edit(path: Path) -> None:
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return edit


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


class _RunsOnLoad:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("file, edit, message", [
    ("optimizer.bin", _save({"state": {}, "param_groups": []}), "0 parameter groups, the optimizer has 1"),
    ("optimizer.bin", lambda p: p.write_bytes(b"garbage"), "not a torch.save zip archive"),
    ("optimizer.bin", _cut, "not a readable zip archive"),
    ("optimizer.bin", lambda p: torch.save({"state": {0: {"momentum_buffer": torch.zeros(3)}}, "param_groups": []}, p),
     "0 parameter groups"),
    ("random_states_0.pkl", _cut, "not a readable zip archive"),
    ("random_states_0.pkl", _save({"random_state": (3, (1, 2), None), "numpy_random_seed": ("MT19937",),
                                   "torch_manual_seed": torch.zeros(3, dtype=torch.uint8)}), "invalid RNG state"),
    ("random_states_0.pkl", _save({"step": 0}), "RNG state without random_state"),
    ("train_state.json", _json_edit(epoch=-5), "epoch is -5, expected an integer >= 0"),
    ("train_state.json", _json_edit(iteration="9"), "iteration is '9', expected an integer >= 0"),
    ("train_state.json", _json_edit(best_fitness=None), "best_fitness is None, expected a finite number"),
    ("train_state.json", lambda p: p.write_text("{"), "line 1: not valid JSON"),
    ("ema.safetensors", _cut, "(truncated file)"),
    ("model.safetensors", lambda p: p.write_bytes(b"\x10" + b"\0" * 7 + b"{}"), "safetensors header claims 16 bytes"),
])
def test_crafted_or_broken_checkpoint_file_is_refused(resumable, tmp_path: Path, file: str, edit, message) -> None:
    from yolo11.engine.checkpoint import CheckpointError

    with pytest.raises((FileRefusedError, CheckpointError)) as err:  # both print as one line, exit 2
        _resume(resumable, lambda folder: edit(folder / file), tmp_path)
    assert f"{tmp_path / 'checkpoint-00000005' / file}: " in str(err.value) and message in str(err.value)
    assert "\n" not in str(err.value)


def test_pickled_code_in_optimizer_state_never_runs(resumable, tmp_path: Path) -> None:
    from yolo11.weights import UnsafeCheckpointError

    marker = tmp_path / "pwned"
    with pytest.raises(UnsafeCheckpointError, match=r"optimizer\.bin: .*os\.system"):
        _resume(resumable, lambda folder: torch.save({"state": _RunsOnLoad(marker)}, folder / "optimizer.bin"),
                tmp_path)
    assert not marker.exists()


def test_nan_in_checkpoint_weights_is_refused_at_resume(resumable, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    def poison(folder: Path) -> None:
        tensors = load_file(folder / "model.safetensors")
        tensors[CONV].view(-1)[0] = float("nan")
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})

    with pytest.raises(FileRefusedError, match=f"model.safetensors: 1 tensors hold NaN or inf values .e.g. {CONV}"):
        _resume(resumable, poison, tmp_path)


@pytest.mark.parametrize("file", ["random_states_0.pkl", "ema.safetensors"])
def test_missing_state_is_an_error_unless_changes_are_allowed(resumable, tmp_path: Path, file: str) -> None:
    from yolo11.engine.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match=f"{file}: missing; .* add --allow-changes true"):
        _resume(resumable, lambda folder: (folder / file).unlink(), tmp_path / "a")
    notes = _resume(resumable, lambda folder: (folder / file).unlink(), tmp_path / "b", allow_changes=True)
    assert len(notes) == 1 and notes[0].startswith(f"{file} missing (--allow-changes)")


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _to_dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


@pytest.mark.parametrize("file, replace, kind", [
    ("random_states_0.pkl", _fifo, "a FIFO"), ("optimizer.bin", _fifo, "a FIFO"),
    ("model.safetensors", _to_dev_zero, "a character device"), ("ema.safetensors", _fifo, "a FIFO"),
])
def test_a_checkpoint_file_that_is_no_regular_file_is_refused_by_kind(resumable, tmp_path: Path, file: str,
                                                                     replace, kind: str) -> None:
    """A FIFO in a checkpoint was "missing", which --allow-changes accepted; Accelerate's load_state then blocked
    for ever opening it (a resume that hung)."""
    with pytest.raises(FileRefusedError, match=f"{file}: {kind}.*, not a regular file"):
        _resume(resumable, lambda folder: replace(folder / file), tmp_path, allow_changes=True)


def test_unknown_file_in_a_checkpoint_is_refused(resumable, tmp_path: Path) -> None:
    from yolo11.engine.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match=r"holds \['pytorch_model.bin'\], which this trainer does not write"):
        _resume(resumable, lambda folder: (folder / "pytorch_model.bin").write_bytes(b""), tmp_path)


def test_resume_restores_rng_state_itself(resumable, tmp_path: Path) -> None:
    """Accelerate's load_state skips RNG state it cannot apply; ours is checked and applied, so the streams go on
    as saved."""
    _resume(resumable, lambda folder: None, tmp_path / "a")
    expected = torch.rand(3), np.random.rand(3)
    torch.manual_seed(123), np.random.seed(123)
    _resume(resumable, lambda folder: None, tmp_path / "b")
    assert torch.equal(torch.rand(3), expected[0]) and np.array_equal(np.random.rand(3), expected[1])


def test_optimizer_state_of_another_shape_is_refused(resumable, tmp_path: Path) -> None:
    def reshape_first_buffer(folder: Path) -> None:
        saved = torch.load(folder / "optimizer.bin", weights_only=True)
        entry = saved["state"][0]
        entry["momentum_buffer"] = torch.zeros(3, *entry["momentum_buffer"].shape[1:])
        torch.save(saved, folder / "optimizer.bin")

    with pytest.raises(CheckpointError, match=r"optimizer state 0\.momentum_buffer has shape \[3, "):
        _resume(resumable, reshape_first_buffer, tmp_path)


@pytest.mark.parametrize("key, value, message", [("decay", "2.0", "out of range"), ("updates", "x", "valid")])
def test_ema_metadata_out_of_range_is_refused(resumable, tmp_path: Path, key: str, value: str, message: str) -> None:
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    def edit_metadata(folder: Path) -> None:
        path = folder / "ema.safetensors"
        with safe_open(path, "pt") as opened:
            metadata = opened.metadata()
        save_file(load_file(path), path, metadata=metadata | {key: value})

    with pytest.raises(CheckpointError, match=f"ema.safetensors: EMA metadata .*{message}"):
        _resume(resumable, edit_metadata, tmp_path)


def test_another_process_count_is_refused_unless_changes_are_allowed(tmp_path: Path) -> None:
    """One RNG state per process that wrote the checkpoint: resumed on another count, the random streams and each
    process's share of a batch change."""
    from yolo11.engine.resume_check import check_process_count

    for rank in (0, 1):
        (tmp_path / f"random_states_{rank}.pkl").write_bytes(b"")
    check_process_count(tmp_path, 2, allow_changes=False, notes=[])
    with pytest.raises(CheckpointError, match=r"written by 2 process\(es\), resumed on 1: the saved random state of "
                                              r"process 1 is dropped.* add --allow-changes true"):
        check_process_count(tmp_path, 1, allow_changes=False, notes=[])
    notes: list[str] = []
    check_process_count(tmp_path, 4, allow_changes=True, notes=notes)
    assert notes == [f"{tmp_path.name} written by 2 process(es), resumed on 4: processes 2..3 have no saved random "
                     "state, and each process's share of a batch changes (--allow-changes)"]
