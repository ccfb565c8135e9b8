"""``yolo11.engine.cuda_graphs``: the graphed training micro-step equals the eager one.

CPU tests cover the static-shape pieces (box buckets, target padding, the plan's choice); the CUDA tests run the
real training loop graphed and eager and compare losses, gradients and weights, and resume."""

from __future__ import annotations

import copy
import functools
import os
import signal

import pytest
import torch
from accelerate import Accelerator
from helpers.engine_helpers import reset_accelerate_state

import yolo11
from yolo11.engine.build import build_criterion, build_train_step
from yolo11.engine.checkpoint import TrainState
from yolo11.engine.cuda_graphs import MIN_BOX_ROWS, GraphedValStep, box_bucket, pad_targets
from yolo11.engine.ema import ModelEMA
from yolo11.engine.interrupt import StopAgreement, StopSignal
from yolo11.engine.loop import train_one_epoch
from yolo11.engine.optim import OptimizerChoice, WarmupSchedule, build_optimizer, lr_lambda
from yolo11.engine.progress import Progress
from yolo11.evaluation.runner import ValStep
from yolo11.loss import DetectionLoss

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


@pytest.mark.parametrize("rows, bucket", [(0, MIN_BOX_ROWS), (1, MIN_BOX_ROWS), (MIN_BOX_ROWS, MIN_BOX_ROWS),
                                          (MIN_BOX_ROWS + 1, 2 * MIN_BOX_ROWS), (100, 128), (128, 128), (129, 256)])
def test_box_bucket_is_the_next_power_of_two(rows, bucket):
    assert box_bucket(rows) == bucket


def random_targets(batch: int, rows: int, imgsz: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(batch, rows, 2, generator=g) * imgsz * 0.7
    wh = torch.rand(batch, rows, 2, generator=g) * imgsz * 0.3 + 1
    labels = torch.randint(0, 5, (batch, rows), generator=g)
    labels[0, rows // 2:] = -1  # the collate's padding rows of a shorter image
    boxes = torch.cat([xy, xy + wh], -1) * (labels >= 0).unsqueeze(-1)
    return boxes, labels


def test_padded_targets_give_the_same_loss_and_gradients():
    """The graphs pad every batch's box rows to its bucket: the loss and every gradient must not move (CPU, where
    the kernels are deterministic: bitwise)."""
    torch.manual_seed(0)
    model = yolo11.create_model("yolo11n", num_classes=5)
    criterion = DetectionLoss(5)
    images = torch.rand(2, 3, 96, 96)
    boxes, labels = random_targets(2, 5, 96, seed=1)
    padded_boxes, padded_labels = pad_targets(boxes, labels, box_bucket(5))
    assert padded_boxes.shape == (2, MIN_BOX_ROWS, 4) and (padded_labels[:, 5:] == -1).all()

    def loss_and_grads(b, lab):
        model.zero_grad()
        loss, parts = criterion(model(images), b, lab)
        loss.backward()
        return loss.detach(), parts, [p.grad.clone() for p in model.parameters() if p.grad is not None]

    reference, padded = loss_and_grads(boxes, labels), loss_and_grads(padded_boxes, padded_labels)
    assert torch.equal(reference[0], padded[0]) and torch.equal(reference[1], padded[1])
    assert all(torch.equal(a, b) for a, b in zip(reference[2], padded[2], strict=True))


def test_pad_targets_leaves_a_full_batch_alone():
    boxes, labels = random_targets(2, 16, 64, seed=0)
    assert pad_targets(boxes, labels, 16) == (boxes, labels)


# --- CUDA: the real loop, graphed against eager ---------------------------------------------------------------

def cuda_batches(count: int, batch: int = 4, imgsz: int = 96, seed: int = 0, device: str = "cuda") -> list[dict]:
    """Training batches as ``DeviceFeed`` yields them: uint8 channels_last images, HSV gains, box counts that
    change bucket (and change within a bucket)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        rows = [3, 5, 3, 20, 5, 3, 7, 3][i % 8]
        images = torch.randint(0, 256, (batch, imgsz, imgsz, 3), dtype=torch.uint8, generator=g).permute(0, 3, 1, 2)
        boxes, labels = random_targets(batch, rows, imgsz, seed=seed * 100 + i)
        gains = torch.rand(batch, 3, generator=g, dtype=torch.float64) * 2 - 1
        out.append({"images": images.to(device), "boxes": boxes.to(device), "labels": labels.to(device),
                    "hsv_gains": gains.to(device)})
    return out


def train(batches, graphs: bool, model=None, state: TrainState | None = None, optimizer_state=None, ema_state=None,
          mixed_precision: str = "no", accumulation: int = 2, ramp: int = 4, stop=None, cpu: bool = False,
          model_name: str = "yolo11n"):
    """``train_one_epoch`` over ``batches`` as the trainer builds it on CUDA (fused AdamW, channels_last, EMA,
    warmup ramp of the accumulation and the lr); returns model, optimizer, EMA, state and result."""
    reset_accelerate_state()
    accelerator = Accelerator(mixed_precision=mixed_precision, cpu=cpu)
    if model is None:
        torch.manual_seed(0)
        model = yolo11.create_model(model_name, num_classes=5)
    model = model.to(accelerator.device).to(memory_format=torch.channels_last)
    criterion = build_criterion(model, accelerator.device)  # YOLO26: the end-to-end loss
    ema = ModelEMA(model)
    optimizer = build_optimizer(model, OptimizerChoice("AdamW", 0.002, 0.9), 5e-4)
    schedule = WarmupSchedule(optimizer, lr_lambda("linear", 10, 0.01), ramp, 0.1, 0.8, 0.937)
    model, optimizer = accelerator.prepare(model, optimizer)
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    if ema_state is not None:
        ema.load_state_dict(ema_state)
    step = build_train_step(accelerator, model, optimizer, schedule, criterion=criterion, ema=ema,
                            accumulation=accumulation, warmup_iters=ramp, channels_last=True, cuda_graphs=graphs,
                            progress=Progress(accelerator, interval=1, epochs=1, batches_per_epoch=8, bars=False),
                            stop=StopAgreement(accelerator, stop) if stop is not None else None)
    state = state or TrainState()
    result = train_one_epoch(step, batches, state, epoch=0)
    if not cpu:
        torch.cuda.synchronize()
    return step, state, result


@pytest.fixture
def deterministic():
    before = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize(("model_name", "mixed_precision"), [("yolo11n", "no"), ("yolo11n", "bf16"),
                                                             ("yolo26n", "bf16"), ("yolo11n", "fp16"),
                                                             ("yolo26n", "fp16")])
def test_graphed_step_equals_the_eager_step(deterministic, model_name, mixed_precision):
    """Eight micro-batches with a ramping accumulation (1, 1, 2, 2...: an optimizer step after batches 1, 2, 4,
    6, 8), box counts that change bucket: graphs are captured mid-run and replayed. Losses, weights, EMA and the
    optimizer's moments equal the eager run's to float rounding (YOLO26: its end-to-end loss, both branches).
    fp16: the graph reads the GradScaler's scale in place, so both runs skip the same overflowed steps."""
    batches = cuda_batches(8)
    eager_step, eager_state, eager = train(batches, graphs=False, mixed_precision=mixed_precision,
                                           model_name=model_name)
    graph_step, graph_state, graphed = train(batches, graphs=True, mixed_precision=mixed_precision,
                                             model_name=model_name)
    assert graph_step.graphed.captures == 1  # the 16-row bucket; the one 32-row batch ran eagerly
    assert (graph_state.optimizer_steps, graph_state.iteration) == (eager_state.optimizer_steps, 8) == (5, 8)
    tol = {"no": dict(rtol=1e-5, atol=1e-6), "bf16": dict(rtol=1e-3, atol=1e-5),
           "fp16": dict(rtol=1e-3, atol=1e-5)}[mixed_precision]
    if mixed_precision == "fp16":
        scales = [step.accelerator.scaler.get_scale() for step in (graph_step, eager_step)]
        assert scales[0] == scales[1]  # the same steps overflowed (and were skipped) in both
    torch.testing.assert_close(graphed.mean_losses, eager.mean_losses, **tol)
    for a, b in zip(graph_step.model.parameters(), eager_step.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, **tol)
    for a, b in zip(graph_step.ema.module.state_dict().values(), eager_step.ema.module.state_dict().values(),
                    strict=True):
        torch.testing.assert_close(a, b, **tol)
    graph_moments = [s["exp_avg"] for s in graph_step.optimizer.state_dict()["state"].values()]
    eager_moments = [s["exp_avg"] for s in eager_step.optimizer.state_dict()["state"].values()]
    for a, b in zip(graph_moments, eager_moments, strict=True):
        torch.testing.assert_close(a, b, **tol)


@cuda
@pytest.mark.gpu
def test_graphed_run_resumes_bitwise(deterministic):
    """Eight batches in one go against four, then a fresh model, optimizer and EMA from the saved state (as
    ``--resume`` rebuilds them) for the other four: the same weights to the bit."""
    batches = cuda_batches(8, seed=3)
    whole, _, _ = train(batches, graphs=True)
    first, state, _ = train(batches[:4], graphs=True)
    saved_model = copy.deepcopy(first.accelerator.unwrap_model(first.model)).cpu()
    saved_optimizer = copy.deepcopy(first.optimizer.state_dict())
    saved_ema = copy.deepcopy(first.ema.state_dict())
    resumed_state = TrainState()
    resumed_state.load_state_dict(state.state_dict())  # as on disk: the loss sum as floats
    second, _, _ = train(batches[4:], graphs=True, model=saved_model, state=resumed_state,
                         optimizer_state=saved_optimizer, ema_state=saved_ema)
    for a, b in zip(whole.model.parameters(), second.model.parameters(), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(whole.ema.module.state_dict().values(), second.ema.module.state_dict().values(), strict=True):
        assert torch.equal(a, b)


@cuda
@pytest.mark.gpu
def test_graphs_are_replayed_not_recaptured():
    """After the first batch of a shape (eager) and the second (captured), every later batch of that shape is a
    replay: captures count distinct shapes only."""
    batches = [b for b in cuda_batches(8) if b["boxes"].shape[1] <= MIN_BOX_ROWS]
    step, _, _ = train(batches * 3, graphs=True, accumulation=1, ramp=-1)
    assert step.graphed.captures == 1 and len(step.graphed.graphs) == 1


@cuda
@pytest.mark.gpu
def test_graphed_validation_step_follows_the_weights_in_place():
    """Validation's graphed step (forward, float maps, loss) equals the eager ``ValStep`` for every rect shape and
    box bucket, also after the weights changed in place (as the EMA changes them between epochs)."""
    torch.manual_seed(0)
    model = yolo11.create_model("yolo11n", num_classes=5).cuda().eval()
    autocast = functools.partial(torch.autocast, "cuda", torch.bfloat16, cache_enabled=False)
    eager = ValStep(model, autocast, DetectionLoss(num_classes=5).cuda())
    graphed = GraphedValStep(eager, torch.device("cuda"))
    shapes = [((2, 3, 96, 128), 3), ((2, 3, 128, 96), 20), ((1, 3, 96, 128), 3)]
    for round_ in range(4):  # eager, capture, replay, replay
        if round_ == 3:
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(0.9)
        for shape, rows in shapes:
            generator = torch.Generator().manual_seed(rows)
            images = torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator).cuda()
            xy = torch.rand(shape[0], rows, 2, generator=generator) * 60
            boxes = torch.cat((xy, xy + 10 + torch.rand(shape[0], rows, 2, generator=generator) * 20), -1).cuda()
            labels = torch.randint(-1, 5, (shape[0], rows), generator=generator).cuda()
            expected_maps, expected_parts = eager(images, boxes, labels)
            maps, parts = graphed(images, boxes, labels)
            for a, b in zip(maps, expected_maps, strict=True):
                torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)
            torch.testing.assert_close(parts, expected_parts, rtol=1e-4, atol=1e-5)  # padded box rows
    assert len(graphed.graphs) == len(shapes)


@cuda
@pytest.mark.gpu
def test_graphed_validation_equals_eager_validation_through_the_validator(deterministic, tmp_path):
    """Training's ``Validator`` on CUDA as a run builds it (bf16, the trained model channels_last, validation on its
    NCHW copy, rect batches) with and without CUDA graphs, over two validations with the weights changed between
    them: the same detections (boxes, scores, classes) and the same metrics, to bf16's rounding."""
    import dataclasses

    from yolo11.data import load_source
    from yolo11.engine import evaluate
    from yolo11.engine.config import parse_config
    from yolo11.engine.plan import plan_run

    spec = "synthetic:num_images=4,num_val=12,imgsz=96"
    source = load_source(spec, split="val", cache_dir=tmp_path)
    accelerator = Accelerator(mixed_precision="bf16")
    config = parse_config(["--data", spec, "--imgsz", "96", "--batch-size", "2", "--workers", "0"])
    plan = plan_run(config, 1, len(source.dataset), 6, "cuda", mixed_precision="bf16")
    assert plan.channels_last and not plan.val_channels_last and plan.cuda_graphs.enabled
    torch.manual_seed(0)
    model = yolo11.create_model("yolo11n", num_classes=6).cuda().to(memory_format=torch.channels_last).eval()
    criterion = DetectionLoss(6, strides=model.strides, reg_max=model.reg_max).cuda()
    graphed = evaluate.Validator.build(config, plan, source, accelerator, model)
    eager = evaluate.Validator.build(config, dataclasses.replace(
        plan, cuda_graphs=dataclasses.replace(plan.cuda_graphs, enabled=False)), source, accelerator, model)
    for _ in range(3):  # eager warm-up and capture, replay, replay after the weights changed
        ours, theirs = graphed.run(model, criterion), eager.run(model, criterion)
        assert [i for i, _ in ours.predictions] == [i for i, _ in theirs.predictions]
        assert sum(len(d) for _, d in ours.predictions) > 0
        for (_, a), (_, b) in zip(ours.predictions, theirs.predictions, strict=True):
            assert a.shape == b.shape
            torch.testing.assert_close(a[:, :4], b[:, :4], rtol=0, atol=0.5)  # pixels
            torch.testing.assert_close(a[:, 4:], b[:, 4:], rtol=0, atol=2e-3)  # scores, classes
        for key in ("map50_95", "map50", "precision", "recall"):
            assert abs(ours.metrics[key] - theirs.metrics[key]) <= 1e-3, key
        torch.testing.assert_close(ours.losses, theirs.losses, rtol=1e-3, atol=1e-4)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.mul_(0.95)
    assert len(graphed._graphed) == 1 and not eager._graphed


@cuda
@pytest.mark.gpu
def test_validation_on_a_side_stream_equals_each_batch_post_processed_alone(deterministic, tmp_path):
    """``predict_and_score`` on CUDA post-processes a batch on a side stream while the next batch's graphed forward
    replays into the same static outputs: every detection equals the one made from that batch's maps post-processed
    at once, with the device synchronised between batches, bit for bit."""
    import itertools

    from yolo11.data import load_source, model_input
    from yolo11.engine import evaluate
    from yolo11.engine.config import parse_config
    from yolo11.engine.device_feed import DeviceFeed
    from yolo11.engine.plan import plan_run
    from yolo11.evaluation.runner import predict_and_score
    from yolo11.postprocess import to_original_pixels

    spec = "synthetic:num_images=4,num_val=40,imgsz=96"
    source = load_source(spec, split="val", cache_dir=tmp_path)
    accelerator = Accelerator()
    config = parse_config(["--data", spec, "--imgsz", "96", "--batch-size", "2", "--workers", "0"])
    plan = plan_run(config, 1, len(source.dataset), 6, "cuda")
    torch.manual_seed(0)
    model = yolo11.create_model("yolo11n", num_classes=6).cuda().eval()
    criterion = DetectionLoss(6, strides=model.strides, reg_max=model.reg_max).cuda()
    validator = evaluate.Validator.build(config, plan, source, accelerator, model)
    loader = validator.loader
    batches = list(DeviceFeed(itertools.islice(iter(loader), loader.batch_sampler.batches_per_pass),
                                torch.device("cuda")))
    assert len(batches) >= 8
    step = GraphedValStep(ValStep(model, accelerator.autocast, criterion), torch.device("cuda"))
    for _ in range(3):  # eager, capture, replay
        got = predict_and_score(accelerator, model, batches, validator.postprocessor, validator.evaluator,
                                criterion=criterion, step=step)
    expected = []
    for batch in batches:
        feats, _ = step(model_input(batch["images"], False), batch["boxes"], batch["labels"])
        detections = to_original_pixels(validator.postprocessor(feats), batch["ratio_pad"], batch["orig_sizes"])
        expected += [(int(i), d.cpu()) for i, d in zip(batch["image_ids"], detections, strict=True)]
        torch.cuda.synchronize()
    assert sum(len(d) for _, d in expected) > 0
    assert [i for i, _ in got.predictions] == [i for i, _ in expected]
    for (_, ours), (_, theirs) in zip(got.predictions, expected, strict=True):
        assert torch.equal(ours, theirs)


def signalled_after(batches: list[dict], count: int):
    """The batches, with SIGTERM sent to this process once ``count`` of them were handed out."""
    for i, batch in enumerate(batches):
        if i == count:
            os.kill(os.getpid(), signal.SIGTERM)
        yield batch


@pytest.mark.parametrize("graphs", [pytest.param(False, id="cpu-eager"),
                                    pytest.param(True, id="cuda-graphs", marks=[cuda, pytest.mark.gpu])])
def test_a_signal_stops_the_graphed_loop_at_a_step_boundary(graphs, deterministic):
    """SIGTERM while batch 4 is handed out (accumulation 2: the second of a pair): the loop finishes that
    optimizer step and stops there, every micro-batch it ran applied; the weights equal a run over those 4
    batches to the bit."""
    device = "cuda" if graphs else "cpu"
    batches = cuda_batches(8, seed=5, device=device)
    stop = StopSignal().install()
    try:
        step, state, result = train(signalled_after(batches, 3), graphs=graphs, stop=stop, cpu=not graphs, ramp=-1)
    finally:
        stop.uninstall()
    assert result.interrupted and stop.signum == signal.SIGTERM
    assert (state.batches_in_epoch, state.optimizer_steps) == (4, 2)  # a step boundary: nothing half-accumulated
    reference, _, _ = train(batches[:4], graphs=graphs, cpu=not graphs, ramp=-1)
    for a, b in zip(step.model.parameters(), reference.model.parameters(), strict=True):
        assert torch.equal(a, b)


@cuda
@pytest.mark.gpu
def test_one_process_without_a_launcher_trains_in_bf16_with_graphs(tmp_path):
    """``yolo11 train`` on a GPU (no ``accelerate launch``, so no config): bf16 autocast, as Ultralytics' AMP, and the
    graphed step, not a float32 run at half the speed."""
    import subprocess
    import sys

    env = {key: value for key, value in os.environ.items() if not key.startswith("ACCELERATE_")}
    result = subprocess.run([sys.executable, "-m", "yolo11.train", "--data", "synthetic:imgsz=64,num_images=32",
                             "--imgsz", "64", "--epochs", "1", "--batch-size", "16", "--workers", "0",
                             "--output-dir", str(tmp_path), "--name", "run"],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    expected = "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp16"
    assert f"mixed precision: {expected} (no Accelerate config" in result.stdout
    assert "CUDA graphs: the training step" in result.stdout  # fp16 too: its scale is read on the device
