"""``--resume``: which run folder a resumed run writes to, and the one-line resume (flags read from the checkpoint)."""

from __future__ import annotations

import io
import shutil

import pytest
import torch
import yaml
from engine_helpers import TINY_FLAGS, checkpoint_model, describe, launch
from safetensors.torch import load_file

from yolo11.engine.config import parse_command_line
from yolo11.engine.resume import locate_resume, owning_run, prepare_resume

COMMON = [*TINY_FLAGS, "--batch-size", "4", "--nominal-batch", "4", "--epochs", "2"]


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
def test_resume_from_a_copied_checkpoint_writes_the_named_run_never_next_to_the_copy(tmp_path):
    """A checkpoint copied to <dir>/ck: the resumed run writes --output-dir/--name, and nothing lands in (or is
    pruned from) the copy's parent folders."""
    first = launch([*COMMON, "--output-dir", str(tmp_path / "runs"), "--name", "orig", "--max-steps", "2"])
    assert first.returncode == 0, describe(first)
    latest = tmp_path / "runs" / "orig" / "checkpoints" / (tmp_path / "runs/orig/checkpoints/latest").read_text()
    outside = tmp_path / "outside"
    copy = outside / "dir" / "ck"
    shutil.copytree(latest.parent / latest.name.strip(), copy)
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
def test_one_line_resume_of_a_run_ends_bitwise_as_the_straight_run(tmp_path):
    """``--resume <run>`` alone (and Ultralytics' ``resume model=<run>/weights/last.safetensors``) continues the
    run with its own flags to the weights of the uninterrupted run."""
    common = [*COMMON, "--output-dir", str(tmp_path)]
    straight = launch([*common, "--name", "straight"])
    assert straight.returncode == 0, describe(straight)
    first = launch([*common, "--name", "run", "--max-steps", "5"])
    assert first.returncode == 0, describe(first)
    second = launch(["--resume", str(tmp_path / "run"), "--max-steps", "8"])
    assert second.returncode == 0 and "resumed from" in second.stdout, describe(second)
    assert "flags that change the run" not in second.stderr
    third = launch(["resume", f"model={tmp_path / 'run' / 'weights' / 'last.safetensors'}"])
    assert third.returncode == 0, describe(third)
    expected, got = checkpoint_model(tmp_path / "straight"), checkpoint_model(tmp_path / "run")
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)
    final = load_file(tmp_path / "run" / "weights" / "last.safetensors")
    assert all(torch.equal(v, load_file(tmp_path / "straight" / "weights" / "last.safetensors")[k])
               for k, v in final.items())
    typed = launch(["--resume", str(tmp_path / "run"), "--epochs", "3"])  # typed and different: refused
    assert typed.returncode != 0 and "--epochs: 2 in the checkpoint, 3 now" in typed.stderr, describe(typed)


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
