"""The trainer end to end through ``accelerate launch`` on CPU: DDP, resume, failures, launch checks."""

from __future__ import annotations

import csv
import subprocess
import time

import pytest
import torch
from helpers.engine_helpers import ACCELERATE, ROOT, TINY_FLAGS, TINY_RUN_FLAGS, checkpoint_model, describe, launch
from safetensors.torch import load_file

pytestmark = pytest.mark.slow


def read_results(run_dir):
    with open(run_dir / "results.csv") as fh:
        return list(csv.DictReader(fh))


def test_two_process_ddp_step_equals_single_process(tmp_path):
    """One optimizer step on 2 CPU processes (gloo) x 4 images == 1 process accumulating 2 x 4 images.

    BatchNorm statistics are per micro-batch in both, and each micro-batch loss is normalised by its own target
    scores in both, so the parameters must agree to float rounding.
    """
    common = [*TINY_FLAGS, "--max-steps", "1", "--nominal-batch", "8", "--epochs", "2", "--no-ema",
              "--output-dir", str(tmp_path)]
    # fp32 like the single CPU process (2gpu.yaml asks for bf16, which would run CPU autocast).
    ddp = launch([*common, "--batch-size", "8", "--name", "ddp"], config="2gpu.yaml", cpu_ddp=True,
                 launch_args=("--mixed_precision", "no"))
    assert ddp.returncode == 0, describe(ddp)
    assert "2 process(es) x batch 4 x accumulation 1" in ddp.stdout
    single = launch([*common, "--batch-size", "4", "--name", "single"])
    assert single.returncode == 0, describe(single)
    assert "1 process(es) x batch 4 x accumulation 2" in single.stdout
    initial = launch([*common, "--batch-size", "4", "--name", "init", "--lr0", "1e-12"])
    assert initial.returncode == 0, describe(initial)
    a, b, start = (checkpoint_model(tmp_path / n) for n in ("ddp", "single", "init"))
    assert a.keys() == b.keys()
    moved = 0.0
    for key in a:
        if key.endswith(("running_mean", "running_var", "num_batches_tracked")):
            continue  # DDP keeps rank 0's running statistics, the single process both micro-batches'
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6, msg=key)
        moved = max(moved, (a[key] - start[key]).abs().max().item())
    assert moved > 1e-5, "the step did not change the weights: the comparison would prove nothing"


def test_resume_mid_epoch_is_bitwise_identical(tmp_path, tiny_trained_run):
    """The suite's tiny run straight (2 epochs of 6 steps, mosaic in the first) == the same flags stopped inside
    epoch 2 (--max-steps) + --resume auto, weights and metrics bitwise."""
    common = [*TINY_RUN_FLAGS, "--output-dir", str(tmp_path)]
    straight = tiny_trained_run
    first = launch([*common, "--name", "resumed", "--max-steps", "8"])  # 6 steps per epoch: stops inside epoch 2
    assert first.returncode == 0, describe(first)
    assert len(read_results(tmp_path / "resumed")) == 1
    second = launch([*common, "--name", "resumed", "--resume", "auto"])
    assert second.returncode == 0, describe(second)
    assert "resumed from" in second.stdout and "at epoch 2, batch 2" in second.stdout, describe(second)
    a = load_file(straight / "weights" / "last.safetensors")
    b = load_file(tmp_path / "resumed" / "weights" / "last.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    rows_a, rows_b = read_results(straight), read_results(tmp_path / "resumed")
    assert len(rows_a) == len(rows_b) == 2
    for row_a, row_b in zip(rows_a, rows_b, strict=True):
        for column in row_a:
            if column.startswith(("train/", "val/", "metrics/", "lr/")):
                assert row_a[column] == row_b[column], (row_a["epoch"], column)


def test_gpu_config_on_cpu_host_is_refused(tmp_path):
    """FIELD-NOTES trap: a MULTI_GPU config without ACCELERATE_USE_CPU starts independent processes."""
    if torch.cuda.is_available():
        pytest.skip("the trap exists only on hosts without CUDA")
    result = launch([*TINY_FLAGS, "--output-dir", str(tmp_path), "--max-steps", "1", "--batch-size", "8"],
                    config="2gpu.yaml")
    assert result.returncode != 0
    assert "would train independently" in result.stderr + result.stdout


def test_accelerate_config_default_then_launch(tmp_path):
    config = tmp_path / "default_config.yaml"
    made = subprocess.run([ACCELERATE, "config", "default", "--config_file", str(config)], capture_output=True,
                          text=True)
    assert made.returncode == 0 and config.is_file(), made.stderr
    result = launch([*TINY_FLAGS, "--output-dir", str(tmp_path), "--max-steps", "1", "--batch-size", "8"],
                    config=str(config))
    assert result.returncode == 0, describe(result)
    assert (tmp_path / "exp" / "checkpoints" / "latest").is_file()


def test_wrong_flag_and_wrong_config_file_get_clear_errors(tmp_path):
    bad_flag = launch([*TINY_FLAGS, "--optimizer", "Lion"])
    assert bad_flag.returncode != 0 and "--optimizer" in bad_flag.stderr and "Lion" in bad_flag.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("lr_zero: 0.1\n")
    bad_yaml = launch([*TINY_FLAGS, "--config", str(bad)])
    assert bad_yaml.returncode != 0 and "unknown argument 'lr_zero'" in bad_yaml.stderr
    missing = launch([*TINY_FLAGS], config=str(tmp_path / "missing.yaml"))
    assert missing.returncode != 0 and "missing.yaml" in missing.stderr
    no_data = launch([*TINY_FLAGS, "--data", str(tmp_path / "nowhere.yaml"), "--output-dir", str(tmp_path)])
    assert no_data.returncode != 0 and "error: " in no_data.stderr and "nowhere.yaml" in no_data.stderr
    assert 'train.py", line' not in no_data.stderr  # our message, not our stack (accelerate adds its own)
    no_backbone = launch([*TINY_FLAGS, "--backbone", "vit_tiny_patch16_224", "--output-dir", str(tmp_path)])
    assert no_backbone.returncode != 0 and "error: timm model 'vit_tiny_patch16_224'" in no_backbone.stderr
    assert 'train.py", line' not in no_backbone.stderr


def test_failing_rank_ends_every_rank(tmp_path):
    """Rank 1 raises in its third step; both processes must end (no hang) with a non-zero exit."""
    script = ROOT / "tests" / "helpers" / "faulty_train.py"
    result = launch([*TINY_FLAGS, "--output-dir", str(tmp_path), "--batch-size", "8", "--epochs", "3"],
                    script=script, config="2gpu.yaml", cpu_ddp=True, env={"FAULT_RANK": "1", "FAULT_STEP": "3"},
                    timeout=300)
    assert result.returncode != 0, describe(result)
    assert "injected failure on rank 1" in result.stderr


def test_killed_rank_ends_every_rank_within_a_minute(tmp_path):
    """Rank 1 is SIGKILLed mid-epoch (no Python exception, no cleanup): the launcher must end rank 0 too."""
    script = ROOT / "tests" / "helpers" / "faulty_train.py"
    started = time.monotonic()
    result = launch([*TINY_FLAGS, "--output-dir", str(tmp_path), "--batch-size", "8", "--epochs", "3"],
                    script=script, config="2gpu.yaml", cpu_ddp=True,
                    env={"FAULT_RANK": "1", "FAULT_STEP": "3", "FAULT_KILL": "1"}, timeout=300)
    assert result.returncode != 0, describe(result)
    assert "SIGKILL" in result.stderr or "Signal 9" in result.stderr, describe(result)
    assert time.monotonic() - started < 60 + 30  # 60 s to notice, plus start-up of two processes on 2 cores


def test_crash_while_saving_leaves_previous_checkpoint_loadable(tmp_path):
    """The second checkpoint write dies half-way; --resume auto still finds the first, complete one."""
    script = ROOT / "tests" / "helpers" / "faulty_train.py"
    common = [*TINY_FLAGS, "--output-dir", str(tmp_path), "--name", "run", "--batch-size", "8", "--epochs", "3",
              "--save-period", "1"]
    crashed = launch(common, script=script, env={"FAULT_IN_SAVE": "2"})
    assert crashed.returncode != 0 and "injected failure while saving" in crashed.stderr, describe(crashed)
    checkpoints = tmp_path / "run" / "checkpoints"
    assert (checkpoints / "latest").read_text().strip() == "checkpoint-00000003"
    resumed = launch([*common, "--resume", "auto", "--max-steps", "2"])  # an epoch from it (1 step each) will do
    assert resumed.returncode == 0, describe(resumed)
    assert "at epoch 2, batch 0" in resumed.stdout


def test_a_full_disk_while_saving_is_one_line_and_keeps_the_last_checkpoint(tmp_path):
    """The second checkpoint write finds the disk full: one ``error: cannot write ...`` line naming the file and
    the intact checkpoint, no traceback from the trainer, and ``latest`` still names the first checkpoint."""
    script = ROOT / "tests" / "helpers" / "faulty_train.py"
    common = [*TINY_FLAGS, "--output-dir", str(tmp_path), "--name", "run", "--batch-size", "8", "--epochs", "3",
              "--save-period", "1"]
    full = launch(common, script=script, env={"FAULT_DISK_FULL": "2"})
    assert full.returncode != 0, describe(full)
    errors = [line for line in full.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot write" in errors[0] and "optimizer.bin" in errors[0], describe(full)
    assert "No space left on device" in errors[0] and "--resume" in errors[0]
    # the trainer exits 2 without a traceback of its own (plain `accelerate launch` adds its CalledProcessError)
    assert "OSError" not in full.stderr and "exit status 2" in full.stderr, describe(full)
    checkpoints = tmp_path / "run" / "checkpoints"
    assert (checkpoints / "latest").read_text().strip() == "checkpoint-00000003"


def test_wandb_offline_one_run_under_ddp_continued_on_resume(tmp_path):
    """2 CPU processes, --report-to wandb without an API key: one offline run, with per-step and per-epoch keys
    and validation images; --resume continues the same W&B run id."""
    from helpers import wandb_reader

    env = {"HOME": str(tmp_path), "WANDB_SILENT": "true", "WANDB_API_KEY": None, "WANDB_MODE": None}
    common = [*TINY_FLAGS, "--output-dir", str(tmp_path), "--name", "run", "--batch-size", "8", "--epochs", "2",
              "--nominal-batch", "8", "--report-to", "wandb", "--val-images", "2"]  # 3 steps an epoch: 4 stops in 2
    first = launch([*common, "--max-steps", "4"], config="2gpu.yaml", cpu_ddp=True, env=env,
                   launch_args=("--mixed_precision", "no"))
    assert first.returncode == 0, describe(first)
    runs = sorted((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs
    assert "wandb sync" in first.stdout
    rows = wandb_reader.history(wandb_reader.find_stream(tmp_path / "run" / "wandb"))
    keys = set().union(*rows)
    assert {"train/box_loss", "lr/pg0", "throughput/img_s", "metrics/mAP50(B)", "val/box_loss"} <= keys
    assert any(k.startswith("val/images") for k in keys)
    run_id = runs[0].name.rsplit("-", 1)[1]
    second = launch([*common, "--resume", "auto"], config="2gpu.yaml", cpu_ddp=True, env=env,
                    launch_args=("--mixed_precision", "no"))
    assert second.returncode == 0, describe(second)
    streams = sorted((tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert {s.name for s in streams} == {f"run-{run_id}.wandb"}, streams


def test_resume_on_a_different_process_count(tmp_path):
    """Stop a 2-process run mid-epoch, resume it on 1 process with the same global batch: the resumed epoch skips
    exactly the global batches already trained (the sample order is a function of seed and epoch only)."""
    common = [*TINY_FLAGS, "--output-dir", str(tmp_path), "--name", "run", "--batch-size", "8", "--epochs", "2",
              "--nominal-batch", "8"]
    first = launch([*common, "--max-steps", "4"], config="2gpu.yaml", cpu_ddp=True,
                   launch_args=("--mixed_precision", "no"))
    assert first.returncode == 0, describe(first)
    second = launch([*common, "--resume", "auto"])  # another process count: refused, saying what changed
    assert second.returncode != 0 and "--allow-changes true" in second.stderr, describe(second)  # launcher: 1
    second = launch([*common, "--resume", "auto", "--allow-changes", "true"])
    assert second.returncode == 0, describe(second)
    assert "1 process(es) x batch 8" in second.stdout and "at epoch 2, batch 1" in second.stdout
    rows = read_results(tmp_path / "run")
    assert [row["epoch"] for row in rows] == ["1", "2"]


def test_output_dir_that_is_a_file_is_one_error_line_and_leaves_no_run_folder(tmp_path):
    blocker = tmp_path / "runs"
    blocker.write_text("not a folder")
    result = launch([*TINY_FLAGS, "--output-dir", str(blocker), "--max-steps", "1"])
    assert result.returncode != 0 and f"error: --output-dir {blocker}" in result.stderr, describe(result)
    assert 'train.py", line' not in result.stderr
    bad_data = launch([*TINY_FLAGS, "--data", str(tmp_path / "nowhere.yaml"), "--output-dir", str(tmp_path / "out")])
    assert bad_data.returncode != 0 and not (tmp_path / "out").exists()  # no empty run folder after a failed start


@pytest.mark.parametrize("config, entry", [("cpu.yaml", "train_accelerate.py"), ("1gpu.yaml", "-m yolo11.train")],
                         ids=["script-cpu-config", "module-1gpu-config"])
def test_packaged_module_and_repository_script_train(tmp_path, config, entry):
    """``accelerate launch -m yolo11.train`` (what a pip install offers) and ``train_accelerate.py`` both train; a
    GPU config on a host without a GPU says that it trains on the CPU."""
    script, launch_args = (ROOT / entry, ()) if entry.endswith(".py") else ("yolo11.train", ("-m",))
    result = launch([*TINY_FLAGS, "--output-dir", str(tmp_path), "--max-steps", "1", "--batch", "8"],
                    config=config, script=script, launch_args=launch_args)
    assert result.returncode == 0, describe(result)
    assert (tmp_path / "exp" / "checkpoints" / "latest").is_file()
    # 3 batches accumulated into one step (nominal batch 64): a line per batch all the same (--log-interval 1)
    assert "epoch 1/100 batch 1/3 step 0 |" in result.stdout and "epoch 1/100 batch 3/3 step 1 |" in result.stdout
    warned = "asks for GPUs (use_cpu: false) but none is visible: training on the CPU" in result.stderr
    assert warned == (config == "1gpu.yaml" and not torch.cuda.is_available()), result.stderr[-2000:]
