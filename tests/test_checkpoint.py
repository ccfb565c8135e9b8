"""``yolo11.engine.checkpoint``: checkpoints written atomically without pickles of ours, never of non-finite
weights; ``latest``, pruning and the checkpoints set aside; which checkpoint ``--resume`` names; the resumed
optimizer's state layout; the resume's flags against the checkpoint's."""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator
from helpers.run_folders import checkpoint_folders

import yolo11
from yolo11.engine import checkpoint as ckpt
from yolo11.engine.checkpoint import (
    CheckpointError,
    TrainState,
    _prune,
    load_checkpoint,
    resolve_resume,
    save_checkpoint,
    set_aside_checkpoints,
)
from yolo11.engine.ema import ModelEMA

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


def tiny_accelerator_and_model():
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(yolo11.create_model("yolo11n", num_classes=2))
    return accelerator, model


def test_checkpoint_holds_no_pickle_of_ours_and_round_trips(tmp_path):
    accelerator, model = tiny_accelerator_and_model()
    ema = ModelEMA(model, updates=7)
    state = TrainState(epoch=1, batches_in_epoch=3, iteration=9, optimizer_steps=5, loss_sum=torch.tensor([1.5, 2, 3]),
                       loss_batches=3, best_fitness=0.25, best_epoch=0)
    folder = save_checkpoint(accelerator, tmp_path, state, keep=2, model=model, ema=ema)
    assert not list(folder.glob("custom_checkpoint_*")) and (folder / "train_state.json").is_file()
    restored_state, restored_ema = TrainState(), ModelEMA(model)
    load_checkpoint(accelerator, folder, restored_state, restored_ema)
    assert restored_state.state_dict() == state.state_dict()
    assert restored_ema.updates == 7
    torch.testing.assert_close(restored_ema.module.state_dict(), ema.module.state_dict(), rtol=0, atol=0)


def test_a_pickle_in_a_checkpoint_folder_is_refused_and_never_run(tmp_path):
    accelerator, model = tiny_accelerator_and_model()
    folder = save_checkpoint(accelerator, tmp_path, TrainState(), keep=2, model=model)
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (folder / "custom_checkpoint_0.pkl").write_bytes(pickle.dumps(Exploit()))
    with pytest.raises(CheckpointError, match="custom_checkpoint_0.pkl"):
        resolve_resume("auto", tmp_path)
    assert not marker.exists()


def test_non_finite_weights_are_never_checkpointed(tmp_path):
    accelerator, model = tiny_accelerator_and_model()
    good = save_checkpoint(accelerator, tmp_path, TrainState(iteration=1), keep=5, model=model)
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] = float("nan")
    with pytest.raises(CheckpointError, match="non-finite"):
        save_checkpoint(accelerator, tmp_path, TrainState(iteration=2), keep=5, model=model)
    assert (tmp_path / "checkpoints" / "latest").read_text() == good.name
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [good.name, "latest"]


def test_saving_an_iteration_again_never_deletes_before_latest_moves(tmp_path, monkeypatch):
    """The same iteration saved twice (Ctrl-C right after an epoch-end save): the new checkpoint is written beside
    the old one; dying before ``latest`` moves leaves ``latest`` naming a complete checkpoint."""
    accelerator, model = tiny_accelerator_and_model()
    first = save_checkpoint(accelerator, tmp_path, TrainState(iteration=4), keep=5, model=model)

    def die(path, text):
        raise KeyboardInterrupt("killed between the rename and latest")

    monkeypatch.setattr(ckpt, "write_text_atomic", die)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(accelerator, tmp_path, TrainState(iteration=4, optimizer_steps=1), keep=5, model=model)
    assert resolve_resume("auto", tmp_path) == first  # still complete, still named
    monkeypatch.undo()
    second = save_checkpoint(accelerator, tmp_path, TrainState(iteration=4, optimizer_steps=2), keep=1, model=model)
    assert resolve_resume("auto", tmp_path) == second and second.name.startswith(first.name + ".")
    assert not first.exists()  # pruned only after latest moved


def test_pruning_never_deletes_the_checkpoint_just_written(tmp_path):
    """An older run's checkpoint-00001000 sorts after this run's checkpoint-00000020: pruning to 1 kept it and
    deleted the new one, which ``latest`` then named."""
    root = tmp_path / "checkpoints"
    checkpoint_folders(root, 10, 20, 1000)
    _prune(root, 1, "checkpoint-00000020")
    assert sorted(p.name for p in root.glob("checkpoint-*")) == ["checkpoint-00000020", "checkpoint-00001000"]


def test_a_new_run_sets_aside_an_earlier_runs_checkpoints(tmp_path):
    run = tmp_path / "run"
    checkpoint_folders(run / "checkpoints", 500, 1000)
    aside, names = set_aside_checkpoints(run, None)
    assert names == ["checkpoint-00000500", "checkpoint-00001000"] and aside.name.startswith("checkpoints.old-")
    assert (aside / "latest").read_text() == "checkpoint-00001000" and (aside / "checkpoint-00001000").is_dir()
    assert list((run / "checkpoints").iterdir()) == []  # no `latest` naming a folder that is gone
    assert set_aside_checkpoints(run, None) is None


def test_a_resume_of_an_earlier_checkpoint_sets_aside_the_later_ones(tmp_path):
    run = tmp_path / "run"
    root = run / "checkpoints"
    checkpoint_folders(root, 10, 20, 30)
    aside, names = set_aside_checkpoints(run, root / "checkpoint-00000020")
    assert names == ["checkpoint-00000030"] and (aside / "checkpoint-00000030").is_dir()
    assert sorted(p.name for p in root.iterdir()) == ["checkpoint-00000010", "checkpoint-00000020", "latest"]
    assert (root / "latest").read_text() == "checkpoint-00000020"
    assert set_aside_checkpoints(run, root / "checkpoint-00000020") is None


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))])
@pytest.mark.parametrize("name", ["SGD", "AdamW"])
def test_optimizer_state_read_back_takes_its_channels_last_parameter_layout(name, device):
    """Checkpoints hold the optimizer state contiguous; after ``match_parameter_layouts`` the fused optimizer's
    next steps equal those of the optimizer that never left memory (without it the CPU kernels mixed elements and
    the CUDA ones refuse mismatched strides)."""
    from yolo11.engine.build import _optimizer_state_to_host
    from yolo11.engine.checkpoint import match_parameter_layouts

    def optimizer_for(param):
        if name == "SGD":
            return torch.optim.SGD([param], lr=0.1, momentum=0.9, nesterov=True, fused=True)
        return torch.optim.AdamW([param], lr=0.01, fused=True)

    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(8, 4, 3, 3, device=device).contiguous(memory_format=torch.channels_last))
    grads = [torch.randn(8, 4, 3, 3, device=device).contiguous(memory_format=torch.channels_last) for _ in range(3)]
    live = optimizer_for(weight)
    weight.grad = grads[0]
    live.step()
    file = io.BytesIO()
    torch.save(_optimizer_state_to_host(live, live.state_dict()), file)  # as save_state writes it
    on_disk = torch.load(io.BytesIO(file.getvalue()), weights_only=True)  # on the CPU; loading moves it
    assert all(v.is_contiguous() for v in on_disk["state"][0].values() if v.dim() == 4)
    resumed_weight = torch.nn.Parameter(weight.detach().clone(memory_format=torch.preserve_format))
    resumed = optimizer_for(resumed_weight)
    resumed.load_state_dict(on_disk)
    match_parameter_layouts(resumed)
    for grad in grads[1:]:
        weight.grad, resumed_weight.grad = grad.clone(), grad.clone()
        live.step()
        resumed.step()
    assert torch.equal(weight, resumed_weight)
    assert all(v.stride() == resumed_weight.stride() for v in resumed.state[resumed_weight].values() if v.dim() == 4)


@pytest.mark.parametrize(("flag", "value", "accepted"), [
    ("cuda_graphs", False, True), ("compile", False, True), ("channels_last", False, True), ("workers", 2, True),
    ("imgsz", 320, False), ("mosaic", 0.5, False), ("lr0", 0.02, False), ("batch_size", 8, False)])
def test_resume_accepts_what_changes_execution_and_refuses_what_changes_the_run(tmp_path, flag, value, accepted):
    """The checkpoint's saved config against this resume's, decided by the flags' own declarations (a resume with
    --cuda-graphs false used to be refused: the flag was in neither hand-kept list)."""
    import json

    from yolo11.engine.checkpoint import CheckpointError, check_resume_config
    from yolo11.engine.config import parse_config

    saved = parse_config([]).to_dict()
    (tmp_path / "config.json").write_text(json.dumps(saved))
    current = {section: dict(values) for section, values in saved.items()}
    section = next(name for name, values in current.items() if flag in values)
    current[section][flag] = value
    if accepted:  # a value chosen at run time is stored as None and shown as the command line writes it, auto
        before = "auto" if saved[section][flag] is None else repr(saved[section][flag])
        assert check_resume_config(tmp_path, current, allow_changes=False) == [
            f"--{flag.replace('_', '-')}: {before} in the checkpoint, {value!r} now"]
    else:
        with pytest.raises(CheckpointError, match=f"--{flag.replace('_', '-')}: "):
            check_resume_config(tmp_path, current, allow_changes=False)
        assert check_resume_config(tmp_path, current, allow_changes=True)  # said, and let through


def test_checkpoint_without_config_is_an_error_unless_changes_are_allowed(resumable, tmp_path: Path) -> None:
    from yolo11.engine.checkpoint import CheckpointError, check_resume_config

    folder = resumable[-1]
    config = folder / "config.json"
    moved = config.rename(tmp_path / "config.json")
    try:
        with pytest.raises(CheckpointError, match="config.json: missing, so the flags of this resume cannot be"):
            check_resume_config(folder, {"train": {"lr0": 0.01}}, allow_changes=False)
        assert check_resume_config(folder, {"train": {"lr0": 0.01}}, allow_changes=True)[0].startswith(
            "config.json missing (--allow-changes)")
    finally:
        moved.rename(config)


def test_latest_naming_a_folder_elsewhere_is_refused(resumable) -> None:
    from yolo11.engine.checkpoint import CheckpointError, resolve_resume

    run_dir = resumable[-1].parent.parent
    latest = run_dir / "checkpoints" / "latest"
    saved = latest.read_text()
    latest.write_text("../../../elsewhere")
    try:
        with pytest.raises(CheckpointError, match=r"latest: names '../../../elsewhere', not a checkpoint-<iteration>"):
            resolve_resume("auto", run_dir)
    finally:
        latest.write_text(saved)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize("kind", ["fifo", "huge"])
def test_a_latest_file_that_is_a_pipe_or_huge_is_not_read(kind: str, tmp_path: Path) -> None:
    """``checkpoints/latest`` in a run folder someone else wrote: a named pipe (a read would wait forever) or a
    file of gigabytes (read whole into memory) is neither; the run has no usable checkpoint, and resuming it names
    the file."""
    from yolo11.engine.checkpoint import CheckpointError, latest_checkpoint, resolve_resume

    run = tmp_path / "run"
    checkpoint_folders(run / "checkpoints", 3)
    latest = run / "checkpoints" / "latest"
    latest.unlink()
    if kind == "fifo":
        os.mkfifo(latest)
    else:
        with latest.open("wb") as fh:
            fh.truncate(8 << 30)  # sparse: gigabytes that take no disk
    assert latest_checkpoint(run) is None
    with pytest.raises(CheckpointError, match=r"latest: "):
        resolve_resume(os.fspath(run), run)


def test_latest_checkpoint_is_the_complete_one_latest_names(tmp_path):
    from yolo11.engine.checkpoint import latest_checkpoint

    run = tmp_path / "run"
    assert latest_checkpoint(run) is None  # no checkpoints folder
    checkpoint_folders(run / "checkpoints", 3, 7)
    assert latest_checkpoint(run) == run / "checkpoints" / "checkpoint-00000007"
    (run / "checkpoints" / "checkpoint-00000007" / "train_state.json").unlink()  # incomplete
    assert latest_checkpoint(run) is None
    (run / "checkpoints" / "latest").write_text("../elsewhere")
    assert latest_checkpoint(run) is None


def test_resume_names_a_run_or_a_checkpoint_folder_and_says_when_there_is_none(tmp_path):
    run = tmp_path / "run"
    assert resolve_resume("auto", run, missing_ok=True) is None  # a requeued job's first start
    with pytest.raises(FileNotFoundError, match="--resume auto: no complete checkpoint at"):
        resolve_resume("auto", run)
    checkpoint_folders(run / "checkpoints", 5, 9)
    assert resolve_resume("auto", run) == run / "checkpoints" / "checkpoint-00000009"
    assert resolve_resume(str(run), tmp_path / "other") == run / "checkpoints" / "checkpoint-00000009"
    older = run / "checkpoints" / "checkpoint-00000005"
    assert resolve_resume(str(older), tmp_path / "other") == older
