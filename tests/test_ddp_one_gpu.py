"""Two processes on one GPU (``YOLO11_SHARE_GPU=1``, issue 39): the multi-process path run for real where one GPU is
at hand, through ``accelerate launch`` and accelerate_configs/2proc_1gpu.yaml, with the defaults a GPU run trains
with (bf16 autocast, channels_last, optimizer 'auto' (fused AdamW here), HSV on the device, EMA, loader workers),
SyncBatchNorm where asked, validation's gathers and checkpoints of two ranks. The GPU tests need CUDA and skip
without it (with several GPUs visible they use the first); ``bash benchmarks/gpu_ddp_one_gpu.sh`` runs them.

The checks, each on the GPU and, where the CPU can run it, on 2 gloo CPU processes:
- the ranks hold identical weights after every optimizer step, and the losses equal a one-process run with the
  same global batch (``YOLO11_WEIGHT_TRACE``; CPU: here, parametrised);
- the collectives a run calls are all ones gloo runs on CUDA tensors (``traced_train.py``'s audit; CPU: here);
- the process group has the trainer's 30-minute timeout, and the shared-GPU mode's barrier is the one every wait
  uses (CPU: here); the mode is refused in one line where it cannot work (CPU: here);
- evaluation on 2 processes equals one process (CPU: test_tools.test_val_two_processes_equal_one_process);
- a 2-process checkpoint resumes bitwise, and Ctrl-C stops both ranks with one checkpoint (CPU:
  test_interrupt.test_ctrl_c_on_two_gloo_processes_saves_together_and_resumes_bitwise);
- a 1-process checkpoint resumed on 2 processes says what changed (CPU:
  test_launch_errors.test_a_one_process_checkpoint_resumed_on_two_says_what_changed).

Same global batch: one process at batch 4 accumulating 2 micro-batches against two processes at batch 4 each. Both
normalise each micro-batch's loss by its own targets and BatchNorm sees 4 images per forward in both, so the losses
and weights agree to float rounding. With ``--sync-bn`` BatchNorm sees all 8 images of a step, which no one-process
run reproduces (a batch of 8 normalises its loss over 8 images): that run is checked for equal ranks only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers.engine_helpers import (
    ROOT,
    checkpoint_model,
    describe,
    launch,
    one_error_line,
    signal_after_step,
    start_in_own_group,
)
from safetensors.torch import load_file

from yolo11.engine.plan import LaunchError
from yolo11.engine.process_group import SHARE_GPU_VARIABLE, check_gpu_layout, share_gpu_requested
from yolo11.engine.weight_trace import TRACE_VARIABLE

TRACED = ROOT / "tests" / "helpers" / "traced_train.py"
CUDA = torch.cuda.is_available()
gpu = [pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")]
DEVICES = [pytest.param("cpu", marks=pytest.mark.slow), pytest.param("cuda", marks=gpu)]
CONFIG = {"cpu": {1: "cpu.yaml", 2: "cpu_2proc.yaml"}, "cuda": {1: "1gpu.yaml", 2: "2proc_1gpu.yaml"}}
TIMEOUT_S = 1800.0  # process_group.COLLECTIVE_TIMEOUT
# What gloo runs on CUDA tensors (through host copies); object collectives and barriers it runs on the CPU.
GLOO_CUDA = {"all_reduce", "broadcast", "all_gather"}
GLOO_HOST = {"barrier", "all_gather_object", "broadcast_object_list"}

# 24 train images, 3 optimizer steps per epoch at a global batch of 8, 8 validation images; defaults otherwise.
COMMON = ["--data", "synthetic:num_images=24,num_val=8,imgsz=64", "--imgsz", "64", "--plots", "false",
          "--warmup-epochs", "0", "--log-interval", "1", "--epochs", "2", "--nominal-batch", "8"]
SAVED = ["--save-period", "1", "--keep-checkpoints", "10"]  # a checkpoint after every epoch


def job(device: str, processes: int, args: list[str], *, env: dict | None = None, script: Path = TRACED,
        **kwargs) -> subprocess.CompletedProcess:
    """The trainer (``traced_train.py``: deterministic cuDNN) on ``processes`` processes of ``device``: the CPU
    (gloo with 2) or one GPU (shared with 2)."""
    return launch(args, config=CONFIG[device][processes], script=script, env={**device_env(device, processes),
                                                                               **(env or {})},
                  cpu_ddp=device == "cpu" and processes == 2, **kwargs)


def device_env(device: str, processes: int) -> dict:
    env = {SHARE_GPU_VARIABLE: "1" if device == "cuda" and processes == 2 else None, TRACE_VARIABLE: None,
           "COLLECTIVE_AUDIT": None}
    if device == "cpu":
        return {**env, "CUDA_VISIBLE_DEVICES": ""}
    return {**env, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]}


def device_flags(device: str) -> list[str]:
    # CPU: batches made in the training process; fp32 in both runs (cpu.yaml and cpu_2proc.yaml ask for no autocast)
    return ["--workers", "0"] if device == "cpu" else []


def read_trace(folder: Path) -> dict[int, tuple[list[dict], list[dict]]]:
    """rank -> (headers, step records) of a ``YOLO11_WEIGHT_TRACE`` folder."""
    traces = {}
    for path in sorted(folder.glob("rank*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        traces[int(path.stem[4:])] = ([r for r in lines if "step" not in r], [r for r in lines if "step" in r])
    return traces


@dataclass
class Runs:
    """A one-process and a two-process run of the same global batch, traced and audited."""

    device: str
    root: Path
    one: subprocess.CompletedProcess
    two: subprocess.CompletedProcess

    def trace(self, name: str) -> dict[int, tuple[list[dict], list[dict]]]:
        return read_trace(self.root / f"trace-{name}")

    def audit(self, name: str) -> dict[int, dict[str, list[str]]]:
        return {int(p.stem[4:]): json.loads(p.read_text()) for p in (self.root / f"audit-{name}").glob("rank*.json")}


def make_runs(device: str, root: Path) -> Runs:
    flags = [*COMMON, *SAVED, *device_flags(device), "--output-dir", str(root)]
    env = {"one": {TRACE_VARIABLE: str(root / "trace-one"), "COLLECTIVE_AUDIT": str(root / "audit-one")},
           "two": {TRACE_VARIABLE: str(root / "trace-two"), "COLLECTIVE_AUDIT": str(root / "audit-two")}}
    # the one-process reference runs the eager step (CUDA graphs would be its default): only the split differs
    one = job(device, 1, [*flags, "--batch-size", "4", "--name", "one", "--cuda-graphs", "false"], env=env["one"])
    assert one.returncode == 0, describe(one)
    assert "1 process(es) x batch 4 x accumulation 2" in one.stdout, describe(one)
    two = job(device, 2, [*flags, "--batch-size", "8", "--name", "two"], env=env["two"])
    assert two.returncode == 0, describe(two)
    assert "2 process(es) x batch 4 x accumulation 1" in two.stdout, describe(two)
    return Runs(device, root, one, two)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Callable[[str], Runs]:
    """``runs(device)``: the device's pair of runs, made once for the tests of this file."""
    made: dict[str, Runs] = {}

    def get(device: str) -> Runs:
        if device not in made:
            made[device] = make_runs(device, tmp_path_factory.mktemp(f"runs-{device}"))
        return made[device]

    return get


@pytest.mark.parametrize("device", DEVICES)
def test_the_ranks_hold_identical_weights_after_every_step(runs, device):
    traces = runs(device).trace("two")
    assert sorted(traces) == [0, 1]
    (_, steps0), (_, steps1) = traces[0], traces[1]
    assert [r["step"] for r in steps0] == [r["step"] for r in steps1] == list(range(1, 7))
    for a, b in zip(steps0, steps1, strict=True):
        assert a["weights"] == b["weights"], f"the ranks' weights differ after step {a['step']}"
    assert len({r["weights"] for r in steps0}) == 6, "the weights did not change: the comparison proves nothing"


@pytest.mark.parametrize("device", DEVICES)
def test_the_process_group_is_gloo_with_the_trainers_timeout(runs, device):
    traces = runs(device).trace("two")
    for rank, (headers, _) in traces.items():
        header = headers[0]
        assert header["processes"] == 2 and header["backend"] == "gloo" and header["timeout_s"] == TIMEOUT_S, header
        assert header["distributed_type"].endswith("MULTI_CPU" if device == "cpu" else "MULTI_GPU"), header
        if device == "cuda":
            assert header["device"] == "cuda:0", (rank, header)
    if device == "cuda":
        assert "YOLO11_SHARE_GPU=1: 2 processes share cuda:0" in runs(device).two.stdout


@pytest.mark.parametrize("device", DEVICES)
def test_the_losses_equal_one_process_with_the_same_global_batch(runs, device):
    made = runs(device)
    (_, one), = made.trace("one").values()
    two = made.trace("two")
    rtol = 1e-5 if device == "cpu" else 1e-3  # bf16 autocast on the GPU
    worst = 0.0
    for single, rank0, rank1 in zip(one, two[0][1], two[1][1], strict=True):
        assert single["step"] == rank0["step"] and single["batches"] == rank0["batches"] + rank1["batches"]
        expected = torch.tensor(single["loss_sum"], dtype=torch.float64)
        got = torch.tensor(rank0["loss_sum"], dtype=torch.float64) + torch.tensor(rank1["loss_sum"],
                                                                                  dtype=torch.float64)
        worst = max(worst, ((got - expected).abs() / expected.abs()).max().item())
        torch.testing.assert_close(got, expected, rtol=rtol, atol=1e-6, msg=f"step {single['step']}")
    a, b = checkpoint_model(made.root / "one"), checkpoint_model(made.root / "two")
    weights = max((a[k] - b[k]).abs().max().item() for k in a if not k.endswith(("running_mean", "running_var",
                                                                                  "num_batches_tracked")))
    same = [s["weights"] for s in one] == [r["weights"] for r in two[0][1]]
    print(f"parity ({device}): losses at most {worst:.2e} apart (relative), final weights {weights:.2e}, "
          f"every step's weights bitwise equal to one process: {same}")
    assert weights < (1e-5 if device == "cpu" else 1e-3)
    if device == "cpu":  # one thread, the same kernels: the gradient sum g0 + g1 is the same sum in both runs
        assert same and weights == 0


@pytest.mark.parametrize("device", DEVICES)
def test_a_run_calls_only_collectives_that_gloo_runs_on_cuda_tensors(runs, device):
    """What gloo cannot do with CUDA tensors (reduce, gather, scatter, all_gather_into_tensor...) would fail the
    shared-GPU mode: no part of a run may call it. DDP's own calls from C++ are all_reduce and broadcast."""
    audits = runs(device).audit("two")
    assert sorted(audits) == [0, 1]
    for rank, calls in audits.items():
        assert set(calls) <= GLOO_CUDA | GLOO_HOST, (rank, calls)
        for name in GLOO_HOST:
            assert set(calls.get(name, [])) <= {"-", "cpu"}, (rank, name, calls)
        if device == "cuda":
            assert "cuda" in calls["all_reduce"], calls  # the non-finite guard, the stop agreement, the losses


def test_the_process_group_has_the_trainers_timeout_and_the_shared_barrier(tmp_path):
    """The first ``PartialState`` makes the group, with the timeout ``launch_state`` gives it; an ``Accelerator``
    asking for 5 minutes afterwards is ignored (issue 39: the trainer's 30 minutes never applied, since its
    ``PartialState`` came first without them). 7 minutes here: gloo's default is 30, the trainer's value, which the
    traced runs above check. In the shared-GPU mode (the CPU standing in for the GPU) the group is gloo's, DDP gets
    no device_ids, and every way to wait (Accelerator, accelerate.utils, the states) goes through the mode's barrier,
    without device_ids."""
    result = launch([str(tmp_path), "7"], config="cpu_2proc.yaml",
                    script=ROOT / "tests" / "helpers" / "process_group_probe.py", cpu_ddp=True,
                    env={SHARE_GPU_VARIABLE: None})
    assert result.returncode == 0, describe(result)
    records = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    for record in records:
        assert record["processes"] == 2 and record["backend"] == "gloo" and record["device"] == "cpu", record
        assert record["timeout_s"] == 7 * 60, record
        assert record["bypass_device_map"] == "true" and record["torch_device"] == "cpu", record
        assert record["barriers"] == [["_barrier_on_the_host"]] * 4, record


@pytest.mark.parametrize("environ, devices, reason", [
    ({SHARE_GPU_VARIABLE: "1", "ACCELERATE_USE_CPU": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, 0, "a CPU run"),
    ({SHARE_GPU_VARIABLE: "1"}, 1, "this launch has one process"),
    ({SHARE_GPU_VARIABLE: "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, 0, "no CUDA GPU is visible"),
    ({SHARE_GPU_VARIABLE: "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, 2, "2 GPUs are visible"),
    ({SHARE_GPU_VARIABLE: "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "0"}, 1, "several machines"),
    ({SHARE_GPU_VARIABLE: "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "ACCELERATE_USE_FSDP": "true"}, 1, "FSDP"),
    ({"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "0"}, 1, "NCCL refuses two processes on one GPU"),
    ({SHARE_GPU_VARIABLE: "maybe"}, 1, "set it to 1"),
])
def test_a_launch_that_cannot_use_its_gpus_is_refused_before_its_process_group(environ, devices, reason):
    with pytest.raises(LaunchError, match=reason):
        check_gpu_layout(share_gpu_requested(environ), environ, devices)


@pytest.mark.parametrize("environ, devices", [
    ({SHARE_GPU_VARIABLE: "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1"}, 1),
    ({SHARE_GPU_VARIABLE: "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1"}, 2),
    ({"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1", "ACCELERATE_USE_CPU": "1"}, 1),
    ({}, 1),
])
def test_launches_that_can_use_their_gpus_pass(environ, devices):
    check_gpu_layout(share_gpu_requested(environ), environ, devices)


@pytest.mark.slow
def test_the_shared_gpu_mode_on_a_cpu_launch_is_one_line_and_exit_2(tmp_path):
    result = launch([*COMMON, "--workers", "0", "--output-dir", str(tmp_path)], config="cpu_2proc.yaml",
                    cpu_ddp=True, wrapper=True, env={SHARE_GPU_VARIABLE: "1"})
    assert result.returncode == 2, describe(result)
    assert "YOLO11_SHARE_GPU=1 cannot work here: this is a CPU run" in one_error_line(result)
    assert not any(tmp_path.iterdir())  # refused before the run folder


# ---- on the GPU only ------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_two_processes_on_one_gpu_without_the_variable_are_refused_in_one_line(tmp_path):
    result = job("cuda", 2, [*COMMON, "--batch-size", "8", "--output-dir", str(tmp_path)],
                 env={SHARE_GPU_VARIABLE: None}, script=ROOT / "train_accelerate.py", wrapper=True)
    assert result.returncode == 2, describe(result)
    assert f"or set {SHARE_GPU_VARIABLE}=1 to share one GPU" in one_error_line(result)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_evaluation_on_two_processes_equals_one_process(runs, tmp_path):
    """The val tool on the one-process run's weights: 1 process at batch 4, 2 processes at 4 each."""
    weights = runs("cuda").root / "one" / "weights" / "last.safetensors"
    common = [str(weights), "--data", "synthetic:num_images=24,num_val=8,imgsz=64", "--imgsz", "64", "--no-plots",
              "--project", str(tmp_path)]
    metrics = {}
    for processes, batch in ((1, 4), (2, 8)):
        out = tmp_path / f"{processes}.json"
        result = job("cuda", processes, [*common, "--batch", str(batch), "--name", str(processes), "--json",
                                         str(out)], script="yolo11.tools.val", launch_args=("-m",))
        assert result.returncode == 0, describe(result)
        assert f"on {processes} process(es)" in result.stdout, describe(result)
        metrics[processes] = json.loads(out.read_text())
    worst = max_difference(metrics[1], metrics[2])
    print(f"evaluation (cuda): 2 processes against 1, largest difference of any metric {worst:.2e}")
    assert worst <= 1e-4, (metrics[1], metrics[2])
    assert metrics[1]["map50"] > 0 or metrics[1]["map50_95"] >= 0  # scored at all


def max_difference(a, b) -> float:
    """The largest absolute difference between two JSON values of the same shape (numbers compared, other
    leaves must be equal)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        return max((max_difference(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, list):
        assert len(a) == len(b)
        return max((max_difference(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(float(a) - float(b))
    assert a == b
    return 0.0


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_a_two_process_checkpoint_resumes_bitwise(runs, tmp_path):
    """The 2-process run stopped inside epoch 2 (--max-steps 4), resumed: the same weights as straight through."""
    made = runs("cuda")
    flags = [*COMMON, *SAVED, "--batch-size", "8", "--output-dir", str(tmp_path), "--name", "two"]
    env = {TRACE_VARIABLE: str(tmp_path / "trace")}
    first = job("cuda", 2, [*flags, "--max-steps", "4"], env=env)
    assert first.returncode == 0, describe(first)
    resumed = job("cuda", 2, [*flags, "--resume", "auto"], env=env)
    assert resumed.returncode == 0, describe(resumed)
    assert "resumed from" in resumed.stdout, describe(resumed)
    straight, got = checkpoint_model(made.root / "two"), checkpoint_model(tmp_path / "two")
    assert straight.keys() == got.keys()
    different = [k for k in straight if not torch.equal(straight[k], got[k])]
    assert not different, f"{len(different)} tensors differ, e.g. {different[:3]}"
    a, b = load_file(made.root / "two" / "weights" / "last.safetensors"), load_file(tmp_path / "two" / "weights" /
                                                                                   "last.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    expected = {r["step"]: r["weights"] for r in made.trace("two")[0][1]}
    for rank, (_, steps) in read_trace(tmp_path / "trace").items():
        assert [r["step"] for r in steps] == list(range(1, 7)), rank
        assert all(r["weights"] == expected[r["step"]] for r in steps), rank


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_ctrl_c_stops_both_ranks_with_one_checkpoint_and_sync_bn_keeps_them_equal(tmp_path):
    """SIGINT to the launcher alone (torch elastic passes it on to both ranks) after step 2 of a --sync-bn run: both
    ranks stop after the same step and write one checkpoint; SyncBatchNorm keeps even the BatchNorm statistics equal
    on both ranks at every step."""
    env = {**device_env("cuda", 2), TRACE_VARIABLE: str(tmp_path / "trace"),
           "COLLECTIVE_AUDIT": str(tmp_path / "audit")}
    # --save-period 100: no checkpoint at an epoch's end, only the stop's
    process = start_in_own_group([*COMMON, "--batch-size", "8", "--sync-bn", "true", "--save-period", "100",
                                  "--output-dir", str(tmp_path), "--name", "run"], config="2proc_1gpu.yaml", env=env,
                                 script=TRACED)
    output = signal_after_step(process, 2, signal.SIGINT, whole_group=False)
    assert process.returncode not in (None, 0), output[-3000:]
    # at a step boundary, or (the stop read at the epoch's last step) during the validation of epoch 1
    assert "stopped by a signal at step" in output or "stopped by a signal during the validation" in output, \
        output[-3000:]
    checkpoints = sorted((tmp_path / "run" / "checkpoints").glob("checkpoint-*"))
    assert len(checkpoints) == 1, checkpoints
    assert {p.name for p in checkpoints[0].glob("random_states_*.pkl")} == {"random_states_0.pkl",
                                                                            "random_states_1.pkl"}
    traces = read_trace(tmp_path / "trace")
    (headers0, steps0), (_, steps1) = traces[0], traces[1]
    assert headers0[0]["sync_batchnorm"], headers0
    assert [r["step"] for r in steps0] == [r["step"] for r in steps1] and len(steps0) >= 2
    stopped_at = json.loads((checkpoints[0] / "train_state.json").read_text())["optimizer_steps"]
    assert steps0[-1]["step"] == stopped_at
    for a, b in zip(steps0, steps1, strict=True):
        assert a["weights"] == b["weights"] and a["buffers"] == b["buffers"], a["step"]
    for rank in (0, 1):  # SyncBatchNorm's all_gather and all_reduce of CUDA tensors included
        calls = json.loads((tmp_path / "audit" / f"rank{rank}.json").read_text())
        assert set(calls) <= GLOO_CUDA | GLOO_HOST and "cuda" in calls["all_gather"], (rank, calls)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_a_one_process_checkpoint_resumed_on_two_says_what_changed(runs, tmp_path):
    run = shutil.copytree(runs("cuda").root / "one", tmp_path / "one")
    first = sorted((run / "checkpoints").glob("checkpoint-*"))[0]  # after epoch 1
    refused = job("cuda", 2, ["--resume", str(first)], script=ROOT / "train_accelerate.py", wrapper=True)
    assert refused.returncode == 2, describe(refused)
    assert "written by 1 process(es), resumed on 2: process 1 has no saved random state" in one_error_line(refused)
    allowed = job("cuda", 2, ["--resume", str(first), "--allow-changes", "true"], script=ROOT / "train_accelerate.py")
    assert allowed.returncode == 0, describe(allowed)
    assert f"resume: {first.name} written by 1 process(es), resumed on 2" in allowed.stdout, describe(allowed)

