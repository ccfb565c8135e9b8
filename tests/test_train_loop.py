"""``train_one_epoch`` in process: accumulation scaling, state counters, the EMA, the profiler, the device feed (the
NaN stop: test_guard.py)."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers.one_epoch import make_batch, run_epoch

import yolo11
from yolo11.engine.loop import Accumulation

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


def test_accumulated_micro_batches_equal_one_large_batch():
    """Two identical micro-batches of 4 accumulated == one batch of those 8 images.

    With duplicated halves the large batch has the same BatchNorm statistics and twice the target-score sum as
    each half, so Ultralytics' per-batch normalisation times batch size gives the same gradient exactly when
    the accumulation scaling (x accumulation steps, undoing Accelerate's division) is right.
    """
    torch.manual_seed(0)
    model = yolo11.create_model("yolo11n", num_classes=3)
    images = torch.randint(0, 256, (4, 3, 64, 64), dtype=torch.uint8)
    half = make_batch(images, seed=1)
    full = {k: torch.cat([v, v]) for k, v in half.items()}
    big, big_state, _ = run_epoch([full], 1, copy.deepcopy(model))
    small, small_state, _ = run_epoch([half, copy.deepcopy(half)], 2, copy.deepcopy(model))
    assert big_state.optimizer_steps == small_state.optimizer_steps == 1
    assert small_state.iteration == 2 and small_state.batches_in_epoch == 2
    changed = 0.0
    for (name, p_big), p_small, p0 in zip(big.named_parameters(), small.parameters(), model.parameters()):
        torch.testing.assert_close(p_small, p_big, rtol=0, atol=1e-6, msg=name)
        changed = max(changed, (p_big - p0).abs().max().item())
    assert changed > 1e-4


def test_ema_skip_flag_on_the_device():
    from yolo11.engine.ema import ModelEMA

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    reference, gated = ModelEMA(model, decay=0.9, tau=1.0), ModelEMA(model, decay=0.9, tau=1.0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    before = copy.deepcopy(gated.module.state_dict())
    gated.update(model, skip=torch.ones(()))
    for key, value in gated.module.state_dict().items():
        torch.testing.assert_close(value, before[key], rtol=0, atol=0)
    gated.updates = 0
    gated.update(model, skip=torch.zeros(()))
    reference.update(model)
    for key, value in reference.module.state_dict().items():
        torch.testing.assert_close(gated.module.state_dict()[key], value, rtol=1e-6, atol=1e-7)
    assert (reference.module[0].weight - before["0.weight"]).abs().min() > 0.01  # the update did move


def test_max_steps_stops_and_counts():
    torch.manual_seed(0)
    model = yolo11.create_model("yolo11n", num_classes=3)
    images = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    batches = [make_batch(images, seed=i) for i in range(5)]
    _, state, result = run_epoch(batches, 2, model, max_steps=2)
    assert result.reached_max_steps and state.optimizer_steps == 2 and state.batches_in_epoch == 4


def test_compiled_model_trains_and_updates_ema():
    """--compile wraps the model (state-dict keys gain ``_orig_mod.``); the EMA must follow the real weights.
    Dynamo's eager backend traces the model the way inductor would, without compiling kernels."""
    from yolo11.engine.ema import ModelEMA

    torch.manual_seed(0)
    model = yolo11.create_model("yolo11n", num_classes=3)
    ema = ModelEMA(model, decay=0.5, tau=1.0)
    before = {k: v.clone() for k, v in ema.module.state_dict().items()}
    images = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    trained, state, _ = run_epoch([make_batch(images, seed=0)], 1, torch.compile(model, backend="eager"), ema=ema)
    assert state.optimizer_steps == 1 and ema.updates == 1
    after = ema.module.state_dict()
    moved = max((after[k] - before[k]).abs().max().item() for k in before if before[k].dtype.is_floating_point)
    assert moved > 0


def test_step_profiler_window_and_early_close(tmp_path):
    from yolo11.engine.profiling import StepProfiler

    net = torch.nn.Linear(8, 8)
    for name, last_step in (("full", 6), ("early", 3)):
        profiler = StepProfiler(tmp_path / name, enabled=True, device=torch.device("cpu"), start=2, steps=3)
        for step in range(1, last_step + 1):
            net(torch.randn(4, 8)).sum().backward()
            profiler.step(step)
        profiler.close(last_step)  # end of training: a no-op once the window has closed on time
        summary = (tmp_path / name / "summary.txt").read_text()
        expected = 3 if name == "full" else 1
        assert summary.startswith(f"{expected} optimizer steps in") and "aten::addmm" in summary
        assert (tmp_path / name / "trace.json").stat().st_size > 0
    disabled = StepProfiler(tmp_path / "off", enabled=False, device=torch.device("cpu"), start=1, steps=1)
    disabled.step(1)
    disabled.close(2)
    assert not (tmp_path / "off").exists()


def test_device_feed_passes_host_batches_through_on_cpu():
    from yolo11.engine.device_feed import DeviceFeed

    batches = [make_batch(torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8), seed=s) for s in range(3)]
    fed = list(DeviceFeed(batches, torch.device("cpu")))
    assert len(fed) == 3
    for ours, theirs in zip(fed, batches, strict=True):
        assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in theirs)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_feed_copies_on_a_side_stream_without_races():
    """Pinned host batches copied on the side stream, each consumed by a long kernel queue on the compute
    stream: every batch arrives intact, although the next copy starts while the GPU is still busy."""
    from yolo11.engine.device_feed import DeviceFeed

    device = torch.device("cuda")
    host = [{"images": torch.full((8, 3, 256, 256), i, dtype=torch.uint8).pin_memory(),
             "boxes": torch.full((8, 5, 4), float(i)).pin_memory(), "image_ids": list(range(8))} for i in range(6)]
    busy = torch.randn(2048, 2048, device=device)
    sums = []
    for batch in DeviceFeed(host, device):
        assert batch["images"].is_cuda and batch["image_ids"] == list(range(8))
        for _ in range(20):  # keep the compute stream busy so that copies overlap it
            busy = torch.tanh(busy @ busy)
        sums.append((batch["images"].float().mean() + batch["boxes"].mean() / 2).item())
    assert sums == [1.5 * i for i in range(6)]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_later_feeds_reuse_the_memory_of_earlier_ones():
    """Each epoch and each validation makes a new ``DeviceFeed``: their copies share one stream, so the memory a
    pass freed serves the next pass (memory freed on a stream serves only that stream's allocations)."""
    from yolo11.engine.device_feed import DeviceFeed

    device = torch.device("cuda")
    host = [{"images": torch.zeros((16, 3, 320, 320), dtype=torch.uint8).pin_memory()} for _ in range(3)]
    for _ in DeviceFeed(host, device):  # the first pass allocates its blocks
        pass
    torch.cuda.synchronize(device)
    reserved = torch.cuda.memory_reserved(device)
    for _ in range(6):
        for batch in DeviceFeed(host, device):
            assert batch["images"].is_cuda
        torch.cuda.synchronize(device)
    assert torch.cuda.memory_reserved(device) == reserved


def test_accumulation_ramps_up_during_warmup_as_ultralytics():
    ramp = Accumulation(nominal=4, warmup_iters=6)
    # round(interp(ni, [0, 6], [1, 4])), numpy's half-to-even rounding as Ultralytics' .round()
    assert [ramp.steps_at(i) for i in range(9)] == [1, 2, 2, 2, 3, 4, 4, 4, 4]
    assert Accumulation(4).steps_at(0) == 4
    # Ultralytics steps when `ni - last_opt_step >= accumulate`: after batches 0, 2 and 6
    torch.manual_seed(0)
    model = yolo11.create_model("yolo11n", num_classes=3)
    images = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    batches = [make_batch(images, seed=i) for i in range(10)]
    expected, last = [], -1
    for ni in range(10):
        if ni - last >= ramp.steps_at(ni):
            expected.append(ni)
            last = ni
    _, state, _ = run_epoch(batches, 4, model, ramp_iters=6, max_steps=3)
    assert expected == [0, 2, 6] and state.optimizer_steps == 3
    assert state.iteration == 7 and state.batches_in_epoch == 7
    # the epoch's last batch steps with what was accumulated since (batches 7-9), as Accelerate's rule
    _, state, _ = run_epoch(batches, 4, model, ramp_iters=6)
    assert state.optimizer_steps == 4 and state.iteration == 10 and state.batches_in_epoch == 10


def test_a_small_epoch_prints_a_line_even_below_the_log_interval(capsys):
    """3 batches accumulated into 2 optimizer steps, --log-interval 20: one line, at the epoch's last batch, with
    the batch and step counts (the interval counts batches, not optimizer steps)."""
    torch.manual_seed(0)
    images = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    run_epoch([make_batch(images, seed=i) for i in range(3)], 2, yolo11.create_model("yolo11n", num_classes=3),
        log_interval=20)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch")]
    assert len(lines) == 1 and lines[0].startswith("epoch 1/1 batch 3/3 step 2 | box ")
