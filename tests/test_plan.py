"""``yolo11.engine.plan``: every value derived from the config and the launch (batch split, accumulation, scaled
weight decay, the optimizer 'auto' choice, warmup, workers, image cache, compile, CUDA graphs), each with the reason
the run prints, and the launch checks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from yolo11.engine.config import parse_config
from yolo11.engine.plan import (
    COMPILE_MIN_IMAGES,
    LaunchError,
    check_launch,
    cpu_fallback_warning,
    decide_compile,
    decide_cuda_graphs,
    plan_run,
)

LAUNCH_VARIABLES = ("ACCELERATE_USE_CPU", "MASTER_ADDR", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "PMI_SIZE",
                    "OMPI_COMM_WORLD_SIZE", "MV2_COMM_SIZE")


@pytest.fixture
def launch_env(monkeypatch):
    """No launcher variables of this process: each test sets the ones its launch would."""
    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_plan_accumulation_weight_decay_and_split():
    config = parse_config(["--batch-size", "16", "--optimizer", "SGD"])
    plan = plan_run(config, num_processes=4, num_train_images=1000, num_classes=80)
    assert (plan.per_process_batch, plan.accumulation_steps, plan.effective_batch) == (4, 4, 64)
    assert plan.weight_decay == pytest.approx(5e-4)
    assert plan.batches_per_epoch == 63 and plan.steps_per_epoch == 16
    assert plan.warmup_iters == 3 * 63  # Ultralytics 8.4: no 100-iteration minimum
    short = plan_run(parse_config(["--batch-size", "16", "--epochs", "2"]), 1, 1000, 80)
    assert short.warmup_iters == 63  # the last epoch is never warmup
    assert plan_run(parse_config(["--epochs", "1"]), 1, 1000, 80).warmup_iters == -1
    tiny = plan_run(parse_config(["--batch-size", "16", "--epochs", "2"]), 1, 10, 80)
    assert tiny.accumulation_steps == 2 and tiny.weight_decay == pytest.approx(5e-4)  # 2 batches in the whole run
    big = plan_run(parse_config(["--batch-size", "128"]), 1, 1000, 80)
    assert big.accumulation_steps == 1 and big.weight_decay == pytest.approx(5e-4 * 2)
    with pytest.raises(ValueError, match="divisible"):
        plan_run(parse_config(["--batch-size", "10"]), 4, 1000, 80)
    assert plan_run(parse_config(["--warmup-epochs", "0"]), 1, 1000, 80).warmup_iters == -1


@pytest.mark.parametrize("num_images, epochs, expected", [
    (128, 100, ("AdamW", round(0.002 * 5 / 84, 6))),  # 2 iterations/epoch at nbs 64 -> 200 < 10k
    (118_287, 100, ("MuSGD", 0.01)),  # Ultralytics 8.4 (before: SGD)
])
def test_auto_optimizer_follows_ultralytics(num_images, epochs, expected):
    config = parse_config(["--epochs", str(epochs), "--batch-size", "16"])
    plan = plan_run(config, num_processes=1, num_train_images=num_images, num_classes=80)
    assert (plan.optimizer.name, plan.optimizer.lr) == expected


@pytest.mark.parametrize("cores, device, imgsz, expected", [
    (2, "cpu", 640, 0), (1, "cpu", 320, 0), (2, "cpu", 160, 8), (4, "cpu", 640, 8), (2, "cuda", 640, 8),
    (16, "cuda", 640, 8)])
def test_workers_auto_loads_in_the_training_process_on_a_small_busy_cpu(monkeypatch, cores, device, imgsz,
                                                                         expected):
    import yolo11.engine.plan as plan

    monkeypatch.setattr(plan, "cores_per_process", lambda: cores)
    workers, reason = plan.decide_workers(None, device, imgsz)
    assert workers == expected and "auto" in reason
    assert plan.decide_workers(2, "cpu") == (2, "loader workers: 2 per process (--workers 2)")  # as typed
    config = parse_config(["--imgsz", str(imgsz)])
    assert plan_run(config, 1, 100, 80, device_type=device).workers == expected
    assert plan_run(parse_config(["--workers", "3"]), 1, 100, 80, device_type=device).workers == 3


def test_cache_images_auto_caches_when_the_images_fit_in_half_the_ram(monkeypatch):
    from yolo11.engine.plan import decide_cache

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    gib = 2**30
    assert decide_cache(None, 4 * gib, 10 * gib)[0]
    cached, reason = decide_cache(None, 6 * gib, 10 * gib)
    assert not cached and "do not fit" in reason and "6.00 GiB" in reason
    assert not decide_cache(None, 2 * gib, 10 * gib, processes=4)[0]  # every process of the machine has a copy
    assert decide_cache(True, 4 * gib, 10 * gib) == (True, "images cached in RAM: yes (--cache-images True)")
    with pytest.raises(ValueError, match="--cache-images true needs"):  # the same rule refuses a forced cache
        decide_cache(True, 6 * gib, 10 * gib)
    assert not decide_cache(None, 1, None)[0]  # RAM unknown: not without asking
    config = parse_config(["--cache-images", "auto"])
    assert config.data.cache_images is None
    assert plan_run(config, 1, 100, 80, cache_bytes=gib, available_ram=100 * gib).cache_images
    assert not plan_run(parse_config(["--cache-images", "false"]), 1, 100, 80, cache_bytes=1,
                        available_ram=100 * gib).cache_images


def test_the_plan_decides_from_explicit_inputs_only(monkeypatch):
    """The launch's facts come in as arguments: the environment Accelerate's launcher sets is not read by the plan
    (the trainer reads it once); the execution choices the engine used to make itself are in the plan."""
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")
    gib = 2**30
    config = parse_config(["--batch-size", "16"])
    cuda = plan_run(config, 1, 500, 80, "cuda", cache_bytes=gib, available_ram=10 * gib, mixed_precision="bf16",
                    num_val_images=5000)
    assert cuda.mixed_precision == "bf16"  # not the environment's fp16
    assert cuda.cache_images  # 1 GiB of 10 fits: 8 processes from the environment would not
    assert (cuda.fused_optimizer, cuda.fast_layers, cuda.pin_memory, cuda.eval_device) == (True, True, True, "cuda")
    small = plan_run(config, 1, 1000, 80, "cuda", mixed_precision="bf16", num_val_images=128)
    assert small.eval_device == "cpu"  # a few images score faster on the CPU
    cpu = plan_run(config, 1, 1000, 80, "cpu")
    assert (cpu.fused_optimizer, cpu.fast_layers, cpu.pin_memory, cpu.eval_device) == (True, False, False, "cpu")
    assert not plan_run(config, 1, 500, 80, "cuda", mixed_precision="bf16",
                        distributed_type="DEEPSPEED").cuda_graphs.enabled


def test_mixed_precision_is_the_accelerate_configs_else_amp_on_a_gpu():
    """A launch's config decides (its "no" too); without one (``yolo11 train``, the Python API) a CUDA run autocasts
    as Ultralytics' AMP does: bf16 where the GPU has it natively, else fp16 (with CUDA graphs: the scale is read on
    the device)."""
    config = parse_config([])
    assert plan_run(config, 1, 100, 80, "cuda", mixed_precision="no", bf16_native=True).mixed_precision == "no"
    bf16 = plan_run(config, 1, 100, 80, "cuda", mixed_precision=None, bf16_native=True)
    assert bf16.mixed_precision == "bf16" and bf16.cuda_graphs.enabled
    assert bf16.precision_reason.startswith("mixed precision: bf16 (no Accelerate config")
    fp16 = plan_run(config, 1, 100, 80, "cuda", mixed_precision=None, bf16_native=False)
    assert fp16.mixed_precision == "fp16" and fp16.cuda_graphs.enabled
    assert plan_run(config, 1, 100, 80, "cpu", mixed_precision=None).mixed_precision == "no"


def test_configured_precision_is_the_launchers_or_an_earlier_accelerators(monkeypatch, fresh_accelerate_state):
    from accelerate import Accelerator
    from helpers.engine_helpers import reset_accelerate_state

    from yolo11.engine.process_group import configured_precision

    reset_accelerate_state()  # an Accelerator of an earlier test in this process
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    assert configured_precision() is None
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")
    assert configured_precision() == "fp16"
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION")
    Accelerator(cpu=True, mixed_precision="bf16")  # Accelerate cannot change its precision after this
    assert configured_precision() == "bf16"


def test_forced_image_cache_beyond_the_ram_rule_is_refused_before_decoding():
    gib = 2**30
    forced = parse_config(["--cache-images", "true"])
    assert plan_run(forced, 1, 100, 80, cache_bytes=gib, available_ram=10 * gib).cache_images
    with pytest.raises(ValueError, match=r"--cache-images true needs about 6\.00 GiB .* more than 50% of the 10\.0"):
        plan_run(forced, 2, 100, 80, cache_bytes=3 * gib, available_ram=10 * gib, local_processes=2)


def test_compile_auto_compiles_long_cuda_runs_only_and_says_why():
    long_run = decide_compile(None, None, "auto", "cuda", COMPILE_MIN_IMAGES)
    assert (long_run.model, long_run.loss, long_run.mode) == (True, True, "reduce-overhead")
    assert "auto: this run trains 100,000 images, at least" in long_run.reason
    ddp = decide_compile(None, None, "auto", "cuda", COMPILE_MIN_IMAGES, num_processes=8)
    assert (ddp.model, ddp.loss, ddp.mode) == (True, True, "default")  # no CUDA graphs under DDP
    short_run = decide_compile(None, None, "auto", "cuda", COMPILE_MIN_IMAGES - 1)
    assert (short_run.model, short_run.loss) == (False, False) and "fewer than" in short_run.reason
    cpu = decide_compile(None, None, "auto", "cpu", 10**9)
    assert (cpu.model, cpu.loss, cpu.mode) == (False, False, "default") and "auto: cpu run" in cpu.reason
    # explicit flags win both ways, and the loss follows the model unless set
    assert decide_compile(False, None, "auto", "cuda", 10**9).model is False
    forced = decide_compile(True, False, "default", "cpu", 10)
    assert (forced.model, forced.loss, forced.mode) == (True, False, "default")
    assert "--compile true" in forced.reason


def test_the_accelerate_configs_dynamo_backend_compiles_unless_the_flag_says_otherwise():
    """A config with ``dynamo_backend: INDUCTOR`` compiled the model in ``prepare`` while the run said 'compiled:
    no' (and a CPU epoch took minutes): it is the compile choice now, said, and ``--compile false`` wins."""
    configured = decide_compile(None, None, "auto", "cpu", 10, dynamo_backend="INDUCTOR")
    assert (configured.model, configured.loss) == (True, True)
    assert "compiled: model and loss" in configured.reason and "the Accelerate config's dynamo_backend inductor" \
        in configured.reason
    refused = decide_compile(False, None, "auto", "cpu", 10, dynamo_backend="INDUCTOR")
    assert refused.model is False and "--compile false, not the Accelerate config's dynamo_backend" in refused.reason
    assert decide_compile(None, None, "auto", "cpu", 10, dynamo_backend="NO").model is False


def test_the_plan_counts_epochs_times_images_for_compile_auto():
    config = parse_config(["--epochs", "150", "--batch-size", "32"])
    assert plan_run(config, 1, 128, 80, "cuda").compile.model is False  # coco128 x 150 epochs: eager
    assert plan_run(config, 1, 118_287, 80, "cuda").compile.model is True  # COCO: compiled


@pytest.mark.usefixtures("fresh_accelerate_state")  # the CUDA cases ask PartialState about DeepSpeed
def test_cuda_graphs_auto_is_on_for_one_process_cuda_runs_only():
    assert decide_cuda_graphs(None, "cuda", 1, compiled=False).enabled  # fp16 too: the plan's precision is not read
    blocked_cases = [("cpu", 1, False), ("cuda", 2, False), ("cuda", 1, True)]
    for case in blocked_cases:
        blocked = decide_cuda_graphs(None, *case)
        assert not blocked.enabled and blocked.reason.startswith("CUDA graphs: no (")
    assert "--cuda-graphs false" in decide_cuda_graphs(None, "cuda", 1, False).reason
    assert not decide_cuda_graphs(False, "cuda", 1, False).enabled
    with pytest.raises(ValueError, match="--cuda-graphs true is not possible here .a cpu run"):
        decide_cuda_graphs(True, "cpu", 1, False)


def test_grad_accum_and_lr_scaling_flags_change_the_plan():
    """--grad-accum replaces round(nbs / batch); the weight decay follows the effective batch; --lr-scaling sqrt
    and none shrink lr0 for an effective batch above the nominal one (linear keeps it: the loss is a sum)."""
    flags = ["--batch-size", "16", "--optimizer", "SGD", "--lr0", "0.01"]
    plan = plan_run(parse_config([*flags, "--grad-accum", "8"]), 1, 1000, 80)
    assert plan.accumulation_steps == 8 and plan.effective_batch == 128
    assert plan.weight_decay == pytest.approx(5e-4 * 2) and plan.optimizer.lr == pytest.approx(0.01)
    sqrt = plan_run(parse_config([*flags, "--grad-accum", "16", "--lr-scaling", "sqrt"]), 1, 1000, 80)
    assert sqrt.optimizer.lr == pytest.approx(0.01 * 0.5)  # 256 against nbs 64
    none = plan_run(parse_config([*flags, "--grad-accum", "16", "--lr-scaling", "none"]), 1, 1000, 80)
    assert none.optimizer.lr == pytest.approx(0.01 * 0.25)


@pytest.mark.parametrize("device, channels_last, hsv_on_device", [("cuda", True, True), ("cpu", True, False),
                                                                  ("mps", False, False)])
def test_memory_format_and_hsv_follow_the_device_unless_set(device, channels_last, hsv_on_device):
    plan = plan_run(parse_config([]), 1, 100, 80, device_type=device)
    assert (plan.channels_last, plan.hsv_on_device) == (channels_last, hsv_on_device)
    assert plan_run(parse_config(["--channels-last", "false"]), 1, 100, 80, device_type=device).channels_last is False
    assert plan_run(parse_config(["--hsv-on-device", "true"]), 1, 100, 80, device_type=device).hsv_on_device is True
    assert plan_run(parse_config(["--hsv-on-device", "false"]), 1, 100, 80, device_type=device).hsv_on_device is False


def test_validation_batch_is_twice_the_training_batch_split_over_the_processes():
    assert plan_run(parse_config(["--batch-size", "16"]), 4, 100, 80).val_batch_size == 8
    assert plan_run(parse_config(["--batch-size", "16", "--val-batch-size", "6"]), 4, 100, 80).val_batch_size == 1
    assert plan_run(parse_config(["--batch-size", "4", "--val-batch-size", "2"]), 4, 100, 80).val_batch_size == 1


def test_steps_per_epoch_counts_the_last_partial_step():
    plan = plan_run(parse_config(["--batch-size", "16", "--nominal-batch", "48"]), 1, 100, 80)
    assert (plan.batches_per_epoch, plan.accumulation_steps, plan.steps_per_epoch) == (7, 3, 3)


def test_a_launch_of_one_world_passes(launch_env):
    check_launch(SimpleNamespace(num_processes=1, distributed_type="NO"))
    launch_env.setenv("WORLD_SIZE", "2")
    check_launch(SimpleNamespace(num_processes=2, distributed_type="MULTI_CPU"))


def test_processes_that_each_see_a_world_of_one_are_refused(launch_env):
    """FIELD-NOTES: a MULTI_GPU config on a host without GPUs starts N processes that each train alone."""
    launch_env.setenv("WORLD_SIZE", "2")
    with pytest.raises(LaunchError, match="2 processes were launched .WORLD_SIZE=2. but this one sees a world of 1"):
        check_launch(SimpleNamespace(num_processes=1, distributed_type="NO"))


def test_several_cpu_processes_without_mpirun_are_refused(launch_env):
    """``--num_processes 2`` with a use_cpu config: Accelerate starts one process, sets MASTER_ADDR and no
    WORLD_SIZE; under mpirun (its size variables) the same variables are a real launch."""
    launch_env.setenv("ACCELERATE_USE_CPU", "true")
    launch_env.setenv("MASTER_ADDR", "127.0.0.1")
    with pytest.raises(LaunchError, match="cpu_2proc.yaml"):
        check_launch(SimpleNamespace(num_processes=1, distributed_type="NO"))
    launch_env.setenv("PMI_SIZE", "1")
    check_launch(SimpleNamespace(num_processes=1, distributed_type="NO"))


def test_a_gpu_config_without_a_gpu_warns(launch_env):
    assert cpu_fallback_warning("cpu") is None  # no config said anything
    launch_env.setenv("ACCELERATE_USE_CPU", "false")
    assert "asks for GPUs (use_cpu: false) but none is visible" in cpu_fallback_warning("cpu")
    assert cpu_fallback_warning("cuda") is None
    launch_env.setenv("ACCELERATE_USE_CPU", "true")
    assert cpu_fallback_warning("cpu") is None


@pytest.mark.parametrize(("device", "flag", "train", "val"), [
    ("cuda", "true", True, False),  # training's one shape repays cuDNN's NHWC plans; validation's many do not
    ("cpu", "true", True, True),  # oneDNN: channels_last is faster for both, with no per-shape build
    ("cuda", "false", False, False),
    ("mps", "true", False, False),
])
def test_the_plan_picks_the_memory_layout_of_training_and_of_validation(device, flag, train, val):
    from yolo11.engine.config import parse_config
    from yolo11.engine.plan import plan_run

    plan = plan_run(parse_config(["--channels-last", flag]), 1, 128, 80, device)
    assert (plan.channels_last, plan.val_channels_last) == (train, val)


@pytest.mark.parametrize(("device", "cores", "env", "threads"), [
    ("cpu", 2, None, 1),  # a core left: OpenMP's barriers spin whenever another process holds every core
    ("cpu", 16, None, 15),
    ("cpu", 1, None, 1),
    ("cpu", 2, "2", None),  # OMP_NUM_THREADS decides: torch already read it
    ("cuda", 16, None, 1),  # the host's work beside the loader: one thread, as accelerate launch's GPU configs
    ("cuda", 16, "4", None),
    ("mps", 8, None, None),
])
def test_a_cpu_run_computes_on_all_cores_but_one_unless_omp_num_threads_says(device, cores, env, threads):
    from yolo11.engine.plan import decide_cpu_threads

    chosen, reason = decide_cpu_threads(device, cores, env)
    assert chosen == threads
    assert (reason == "") == (device != "cpu")
    if env and device == "cpu":
        assert "OMP_NUM_THREADS" in reason and env in reason
    if device == "cpu" and not env:  # a lone core leaves none for the loader: the reason must not say it does
        assert ("one left for the loader" in reason) == (cores > 1), reason


def test_a_cpu_run_in_a_callers_process_gives_its_thread_count_back(tmp_path, monkeypatch):
    """The trainer computes on all cores but one (``plan.cpu_threads``) and, called in-process (the Python API, a
    notebook), leaves torch's thread count as it found it."""
    import torch

    from yolo11.engine import plan as plan_module
    from yolo11.engine.config import parse_config
    from yolo11.engine.trainer import train

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(plan_module, "cores_per_process", lambda: 3)  # two compute threads planned
    seen = []
    real = plan_module.plan_run

    def spy(*args, **kwargs):
        made = real(*args, **kwargs)
        seen.append(made.cpu_threads)
        return made

    monkeypatch.setattr("yolo11.engine.trainer.plan_run", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        config = parse_config(["--data", "synthetic:num_images=4,num_val=2,imgsz=64", "--imgsz", "64", "--epochs",
                               "1", "--batch-size", "2", "--workers", "0", "--plots", "false", "--output-dir",
                               str(tmp_path), "--cache-dir", str(tmp_path / "cache")])
        assert train(config) == 0
        assert seen == [2]
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(("launcher", "launcher_env", "expected"), [
    (["python3", "/venv/bin/accelerate", "launch", "--config_file", "cpu.yaml", "train.py"], {}, None),
    (["python3", "-m", "accelerate.commands.launch", "train.py"], {}, None),
    (["python3", "/venv/bin/accelerate", "launch", "--num_cpu_threads_per_process", "2", "train.py"], {}, "2"),
    (["python3", "/venv/bin/accelerate", "launch", "train.py"], {"OMP_NUM_THREADS": "2"}, "2"),
    (["python3", "-m", "torch.distributed.run", "train.py"], {}, "2"),  # not Accelerate's: passed on as given
])
def test_omp_threads_that_accelerate_launch_set_by_itself_are_not_a_choice(monkeypatch, launcher, launcher_env,
                                                                            expected):
    """`accelerate launch` always sets OMP_NUM_THREADS (its default: the physical cores per process on a CPU
    config); the trainer gives way only to a value someone chose: the flag, or the variable set for the launcher."""
    import psutil

    from yolo11.engine.process_group import chosen_omp_threads

    class Parent:
        def __init__(self, pid):
            pass

        def cmdline(self):
            return launcher

        def environ(self):
            return launcher_env

    monkeypatch.setattr(psutil, "Process", Parent)
    assert chosen_omp_threads({"OMP_NUM_THREADS": "2", "ACCELERATE_MIXED_PRECISION": "no"}) == expected
    assert chosen_omp_threads({"OMP_NUM_THREADS": "3"}) == "3"  # no launcher: the user's own
    assert chosen_omp_threads({"ACCELERATE_MIXED_PRECISION": "no"}) is None
