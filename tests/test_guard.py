"""``yolo11.engine.guard``: training stops at the first non-finite loss, gradient or weight, before that update is
applied, in both modes of ``NonFiniteGuard`` (immediate: a host read per step; deferred: the fused optimizer's
``found_inf`` flag, read back one step later and rolled back to)."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from accelerate.utils import DistributedType
from helpers.one_epoch import make_batch, run_epoch

import yolo11
from yolo11.engine.guard import NonFiniteGuard, NonFiniteLossError
from yolo11.engine.run_state import TrainState
from yolo11.loss import DetectionLoss

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


class NaNOnCall:
    def __init__(self, nth: int):
        self.loss, self.calls, self.nth = DetectionLoss(3), 0, nth

    def __call__(self, feats, boxes, labels):
        self.calls += 1
        loss, parts = self.loss(feats, boxes, labels)
        return (loss * float("nan"), parts) if self.calls == self.nth else (loss, parts)


def test_nan_loss_stops_before_the_update():
    torch.manual_seed(0)
    model = yolo11.create_model("yolo11n", num_classes=3)
    images = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    batches = [make_batch(images, seed=i) for i in range(3)]
    after_one, _, _ = run_epoch(batches[:1], 1, copy.deepcopy(model))
    victim = copy.deepcopy(model)
    with pytest.raises(NonFiniteLossError, match="non-finite loss"):
        run_epoch(batches, 1, victim, criterion=NaNOnCall(2))
    for p_victim, p_ref in zip(victim.parameters(), after_one.parameters()):
        assert torch.isfinite(p_victim).all()
        torch.testing.assert_close(p_victim, p_ref, rtol=0, atol=0)  # step 2 was never applied


@pytest.mark.parametrize("bad_step", [3, 4])  # read back one step later / at the end of the epoch
def test_deferred_nan_check_rolls_back_to_the_last_applied_step(bad_step):
    """After the first step the check is deferred: the fused SGD kernels and the EMA skip on a device flag, read
    back a step later. Weights, EMA and counters must be those of a run that never saw the bad batch."""
    from yolo11.engine.ema import ModelEMA

    torch.manual_seed(0)
    model = yolo11.create_model("yolo11n", num_classes=3)
    images = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    batches = [make_batch(images, seed=i) for i in range(4)]
    good_model = copy.deepcopy(model)
    good_ema = ModelEMA(good_model, decay=0.5, tau=1.0)
    _, good_state, _ = run_epoch(batches[:bad_step - 1], 1, good_model, ema=good_ema)
    victim = copy.deepcopy(model)
    victim_ema, victim_state = ModelEMA(victim, decay=0.5, tau=1.0), TrainState()
    with pytest.raises(NonFiniteLossError, match=f"iteration {bad_step};"):
        run_epoch(batches, 1, victim, criterion=NaNOnCall(bad_step), ema=victim_ema, state=victim_state)
    for p_victim, p_good in zip(victim.parameters(), good_model.parameters(), strict=True):
        torch.testing.assert_close(p_victim, p_good, rtol=0, atol=0)
    victim_weights = victim_ema.module.state_dict()
    for key, value in good_ema.module.state_dict().items():
        if value.dtype.is_floating_point:
            torch.testing.assert_close(victim_weights[key], value, rtol=0, atol=0, msg=key)
    assert victim_ema.updates == good_ema.updates == bad_step - 1
    assert (victim_state.iteration, victim_state.optimizer_steps) == (good_state.iteration, good_state.optimizer_steps)
    torch.testing.assert_close(victim_state.loss_sum, good_state.loss_sum, rtol=0, atol=0)


@pytest.mark.parametrize("lr", [float("nan"), 1e30], ids=["lr-nan", "lr-huge"])
def test_an_update_that_makes_weights_non_finite_stops_and_the_ema_never_takes_it(lr):
    """Finite loss and gradients, but the update itself poisons the weights (first step: immediate check; later
    steps: the deferred flag, which the EMA reads before it takes the weights)."""
    from yolo11.engine.ema import ModelEMA

    torch.manual_seed(0)
    model = yolo11.create_model("yolo11n", num_classes=3)
    images = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    ema = ModelEMA(model, decay=0.5, tau=1.0)
    state = TrainState()
    with pytest.raises(NonFiniteLossError, match="non-finite"):
        run_epoch([make_batch(images, seed=i) for i in range(3)], 1, model, ema=ema, state=state, lr=lr)
    assert state.optimizer_steps == 0 and ema.updates == 0  # rolled back; the EMA holds the initial weights
    assert all(torch.isfinite(v).all() for v in ema.module.state_dict().values() if v.is_floating_point())


def fake_accelerator(mixed_precision: str = "no", scaler=None) -> SimpleNamespace:
    """What the guard reads of an ``Accelerator``: one CPU process."""
    return SimpleNamespace(mixed_precision=mixed_precision, scaler=scaler, distributed_type=DistributedType.NO,
                           device=torch.device("cpu"), num_processes=1)


def one_parameter(fused: bool) -> tuple[torch.nn.Parameter, torch.optim.Optimizer]:
    weight = torch.nn.Parameter(torch.ones(4))
    kernels = {"fused": True} if fused else {"foreach": True}
    return weight, torch.optim.SGD([weight], lr=0.1, momentum=0.9, **kernels)


def step(weight: torch.nn.Parameter, optimizer: torch.optim.Optimizer) -> None:
    weight.grad = torch.full_like(weight, 0.5)
    optimizer.step()


def test_fused_optimizers_defer_the_check_and_others_read_it_at_once():
    assert NonFiniteGuard(fake_accelerator(), one_parameter(fused=True)[1], None).deferred
    assert not NonFiniteGuard(fake_accelerator(), one_parameter(fused=False)[1], None).deferred
    # fp16: deferred too (the guard's flag joins the GradScaler's found_inf), the gradient norm left to the scaler
    scaler = torch.amp.GradScaler("cpu")
    scaled = NonFiniteGuard(fake_accelerator("fp16", scaler=scaler), one_parameter(fused=True)[1], None)
    assert scaled.deferred and not scaled.check_grad_norm
    dampened = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1, momentum=0.9, dampening=0.1, fused=True)
    assert not NonFiniteGuard(fake_accelerator(), dampened, None).deferred  # zeros would change its first step


def test_fp16_overflow_steps_are_skipped_and_training_goes_on_but_a_bad_loss_stops_it():
    """Under fp16 the GradScaler skips a step whose gradients overflowed at its scale (training goes on, the scale
    halves); the guard's flag for a non-finite loss is added to the scaler's ``found_inf``, so that step is skipped
    too, and the run stops one step later. A first step skipped by overflow must leave fused SGD as if it never
    came (its momentum buffers were made with ``empty_like``)."""
    def run(grads: list[float], losses: list[float]) -> tuple[torch.nn.Parameter, NonFiniteGuard, TrainState]:
        weight, optimizer = one_parameter(fused=True)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 4)
        scaler.scale(torch.ones(()))  # makes the scale tensor, as the first backward does
        guard, state = NonFiniteGuard(fake_accelerator("fp16", scaler=scaler), optimizer, None), TrainState()
        for grad, loss in zip(grads, losses, strict=True):
            guard.observe_loss(torch.tensor(loss))
            weight.grad = torch.full_like(weight, grad * scaler.get_scale())
            guard.before_update(None, state)
            scaler.step(optimizer)
            scaler.update()
            guard.observe_weights([weight])
            state.iteration += 1
            state.optimizer_steps += 1
            guard.after_update(state)
        return weight, guard, state

    skipped, guard, _ = run([float("inf")], [1.0])
    assert torch.equal(guard.optimizer.state[skipped]["momentum_buffer"], torch.zeros(4))  # not empty_like's
    reference, guard, state = run([0.5, 0.25], [1.0, 1.0])
    overflowed, guard, state = run([float("inf"), 0.5, 0.25], [1.0, 1.0, 1.0])
    guard.flush(state)  # an overflow is not a stop
    torch.testing.assert_close(overflowed, reference, rtol=0, atol=0)
    weight, guard, state = run([0.5, 0.25, 0.125], [1.0, 1.0, float("nan")])
    torch.testing.assert_close(weight, reference, rtol=0, atol=0)  # the finite gradients of the bad loss unused
    with pytest.raises(NonFiniteLossError, match="iteration 3;"):
        guard.flush(state)
    assert state.optimizer_steps == 2


def test_immediate_mode_raises_before_the_step_naming_where():
    weight, optimizer = one_parameter(fused=False)
    guard = NonFiniteGuard(fake_accelerator(), optimizer, None)
    state = TrainState(epoch=1, iteration=6)
    guard.observe_loss(torch.tensor(1.0))
    guard.before_update(torch.tensor(2.0), state)  # finite: nothing to say
    assert guard.skip_flag is None
    guard.observe_loss(torch.tensor(1.0))
    with pytest.raises(NonFiniteLossError, match="at epoch 2, iteration 7; the update was not applied"):
        guard.before_update(torch.tensor(float("inf")), state)
    guard.observe_loss(torch.tensor(float("nan")))
    with pytest.raises(NonFiniteLossError):
        guard.before_update(None, state)
    fp16 = NonFiniteGuard(fake_accelerator("fp16"), optimizer, None)
    fp16.observe_loss(torch.tensor(1.0))
    fp16.before_update(torch.tensor(float("inf")), state)  # the scaler skips inf gradients by design


def test_deferred_mode_skips_the_update_on_the_device_and_rolls_back_one_step_later():
    """After the first step (immediate: the fused SGD's momentum buffer is not made yet), a bad step raises the
    device flag that the fused kernel reads as ``found_inf``: the weights stay, and the flag read back at the next
    check rolls the counters back to before the bad step."""
    weight, optimizer = one_parameter(fused=True)
    guard = NonFiniteGuard(fake_accelerator(), optimizer, None)
    state = TrainState()
    for loss in (1.0, 1.0, float("nan")):
        guard.observe_loss(torch.tensor(loss))
        guard.before_update(torch.tensor(1.0), state)
        before = weight.detach().clone()
        step(weight, optimizer)
        guard.observe_weights([weight])
        state.iteration += 1
        state.optimizer_steps += 1
        guard.after_update(state)  # no raise yet: the bad step's flag is read at the next check
    assert guard.skip_flag is not None and optimizer.found_inf is guard.skip_flag
    assert torch.equal(weight.detach(), before)  # the bad step was skipped by the kernel
    with pytest.raises(NonFiniteLossError, match="iteration 3;"):
        guard.flush(state)
    assert (state.iteration, state.optimizer_steps) == (2, 2)  # as after the last applied step


def test_the_loop_under_a_gradient_scaler_unscales_and_skips_an_overflowed_step():
    """The loop as fp16 runs it (fp16 autocast, Accelerate's scaled backward, the unscaling clip, the scaler's step
    and update beside the guard's pre-hook), on the CPU: the update does not depend on the scale (to fp16's
    rounding of the smallest gradients), and a first step whose gradients overflow at the scale is skipped
    (weights and momentum kept, the scale backed off), not a stop."""
    torch.manual_seed(0)
    model = yolo11.create_model("yolo11n", num_classes=3)
    images = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    batch = [make_batch(images, seed=0)]
    low, _, _ = run_epoch(batch, 1, copy.deepcopy(model), scaler=torch.amp.GradScaler("cpu", init_scale=2.0 ** 10))
    high, _, _ = run_epoch(batch, 1, copy.deepcopy(model), scaler=torch.amp.GradScaler("cpu", init_scale=2.0 ** 16))
    high_step = torch.cat([(a - b).flatten() for a, b in zip(high.parameters(), model.parameters(), strict=True)])
    low_step = torch.cat([(a - b).flatten() for a, b in zip(low.parameters(), model.parameters(), strict=True)])
    assert (high_step - low_step).norm() < 0.01 * low_step.norm()  # an update left scaled would be 64x
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 127, backoff_factor=2.0 ** -110)
    overflowed, state, _ = run_epoch(batch, 1, copy.deepcopy(model), scaler=scaler)
    for a, b in zip(overflowed.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert scaler.get_scale() == 2.0 ** 17 and state.optimizer_steps == 1


@pytest.mark.parametrize("checkpoint_before", [False, True])
def test_a_non_finite_stop_says_what_was_saved_and_names_real_options(tmp_path, capsys, monkeypatch,
                                                                      checkpoint_before):
    """The stop named a --mixed-precision flag that does not exist, and 'the last good checkpoint' in a folder
    that no checkpoint had been written to."""
    import types

    from yolo11.engine import trainer
    from yolo11.engine.checkpoint import CheckpointError
    from yolo11.engine.guard import NonFiniteGuard, NonFiniteLossError
    from yolo11.engine.run_state import TrainState

    if checkpoint_before:
        (tmp_path / "checkpoints").mkdir()
        (tmp_path / "checkpoints" / "latest").write_text("checkpoint-00000004")

    def refused(run):
        raise CheckpointError("not finite")

    monkeypatch.setattr(trainer, "checkpoint", refused)
    run = types.SimpleNamespace(run_dir=tmp_path, step=types.SimpleNamespace(
        accelerator=types.SimpleNamespace(is_main_process=True)))
    with pytest.raises(NonFiniteLossError) as raised:
        NonFiniteGuard._raise(TrainState())
    assert trainer.stop_non_finite(run, raised.value) == 1
    err = capsys.readouterr().err
    assert "--mixed-precision" not in err and "accelerate launch --mixed_precision bf16|no" in err
    said = f"the last good checkpoint is in {tmp_path / 'checkpoints'}" if checkpoint_before else \
        "no checkpoint was written before it"
    assert said in err
