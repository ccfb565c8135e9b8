"""Stop at the first non-finite loss or gradient norm, before that update is applied, without a host sync per step."""

from __future__ import annotations

import copy

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType

from yolo11.engine.ema import ModelEMA
from yolo11.engine.run_state import TrainState
from yolo11.weights.safetensors_io import non_finite_flag


class NonFiniteLossError(RuntimeError):
    """The loss or the gradient norm became NaN/inf; the weights were not updated with it."""


class NonFiniteGuard:
    """Stops training at the first non-finite loss or gradient norm, before that update is applied, without a
    host sync per step.

    Deferred mode (a fused optimizer, as ``build_optimizer`` makes on CUDA and CPU): a sticky device flag is raised
    by the first bad step; the optimizer kernels read it as ``found_inf`` and skip the update, the EMA skips too,
    and the flag is copied to pinned host memory and read one step later, when the device has long computed it.
    Training then stops with ``state`` (and the EMA's update count) rolled back to the last applied step. The
    forward passes of the skipped steps (at most two) still updated the raw model's BatchNorm running statistics,
    as the bad step's own forward always does; the EMA's are untouched. Under fp16 the GradScaler hands the kernels
    its own ``found_inf`` (gradients that overflowed at the current scale: that step is skipped and training goes
    on, as in Ultralytics' AMP); a step pre-hook adds the sticky flag to it.

    Immediate mode (DeepSpeed; foreach optimizers such as MuSGD; fused SGD with dampening): the flag is read at
    once, one host sync per step. The flag is summed over ranks so that every rank stops at the same step.
    """

    def __init__(self, accelerator: Accelerator, optimizer: torch.optim.Optimizer, ema: ModelEMA | None):
        self.accelerator = accelerator
        self.optimizer = getattr(optimizer, "optimizer", optimizer)  # under Accelerate's wrapper
        self.ema = ema
        self.check_grad_norm = accelerator.mixed_precision != "fp16"  # fp16's scaler skips inf steps by design
        self.deferred = (bool(self.optimizer.defaults.get("fused"))
                         and accelerator.distributed_type != DistributedType.DEEPSPEED
                         and _ready_for_skipped_steps(self.optimizer))
        device = accelerator.device
        self._bad = torch.zeros((), device=device)  # this optimizer step's micro-batches
        self._halted = torch.zeros((), device=device)  # sticky: 1.0 from the first bad step on
        self._host = torch.zeros((), pin_memory=device.type == "cuda")
        self._in_flight: tuple | None = None  # (event, state and EMA count before the step the copy belongs to)
        self._before: tuple | None = None
        self.skip_flag: torch.Tensor | None = None  # for ModelEMA.update
        self._scaled = accelerator.scaler is not None
        self._hook = self.optimizer.register_step_pre_hook(self._add_halt) if self.deferred and self._scaled else None

    def observe_loss(self, loss: torch.Tensor) -> None:
        """Every micro-batch, before backward."""
        self._bad = torch.maximum(self._bad, (~torch.isfinite(loss)).float())

    def before_update(self, grad_norm: torch.Tensor | None, state: TrainState) -> None:
        """After backward and clipping, before ``optimizer.step()``."""
        bad = self._bad
        if self.check_grad_norm and grad_norm is not None:
            bad = torch.maximum(bad, (~torch.isfinite(grad_norm)).float())
        if self.accelerator.num_processes > 1:
            bad = self.accelerator.reduce(bad, reduction="sum").clamp(max=1.0)
        self._bad = torch.zeros_like(self._bad)
        if not self.deferred:
            self.skip_flag = None
            if bool(bad):  # the host sync of immediate mode
                self._raise(state)
            return
        torch.maximum(self._halted, bad, out=self._halted)
        if not self._scaled:
            self.optimizer.found_inf = self._halted  # read by the fused kernels when they run
        self.skip_flag = self._halted
        self._before = (copy.copy(state), self.ema.updates if self.ema is not None else 0)

    def observe_weights(self, parameters: list[torch.Tensor]) -> None:
        """After ``optimizer.step()``: weights made non-finite by the update (an lr of nan, a huge step) stop
        training like a non-finite loss, before the EMA takes them; the training state rolls back to before
        the step. DDP keeps the weights equal on every rank, so each rank finds the same."""
        bad = non_finite_flag(parameters)  # the trainable ones
        if self.skip_flag is None:
            if bool(bad):  # the host sync of immediate mode
                raise NonFiniteLossError("non-finite weights after an optimizer step; the run stops. Lower --lr0 "
                                         "or check the data.")
            return
        torch.maximum(self._halted, bad, out=self._halted)  # the EMA skips it; read back one step later

    def after_update(self, state: TrainState) -> None:
        """After the step's counters were advanced: read the previous step's flag, send this one's."""
        if self.skip_flag is None:
            return
        self._check_in_flight(state)
        self._host.copy_(self._halted, non_blocking=True)
        event = None
        if self._halted.device.type == "cuda":
            event = torch.cuda.Event()
            event.record()
        self._in_flight = (event, self._before)

    def flush(self, state: TrainState) -> None:
        """End of the epoch: the last step's flag."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._check_in_flight(state)

    def _add_halt(self, optimizer, args, kwargs) -> None:
        """Step pre-hook under fp16: the GradScaler set ``found_inf`` for this step just before calling it."""
        found_inf = getattr(optimizer, "found_inf", None)
        if found_inf is not None:
            optimizer.found_inf = torch.maximum(found_inf, self._halted)

    def _check_in_flight(self, state: TrainState) -> None:
        if self._in_flight is None:
            return
        event, (before, ema_updates) = self._in_flight
        self._in_flight = None
        if event is not None:
            event.synchronize()
        if self._host.item():
            state.load_state_dict(vars(before))
            if self.ema is not None:
                self.ema.updates = ema_updates
            self._raise(state)

    @staticmethod
    def _raise(state: TrainState) -> None:
        raise NonFiniteLossError(
            f"non-finite loss or gradient at epoch {state.epoch + 1}, iteration {state.iteration + 1}; the update "
            "was not applied. Lower --lr0, check the data, or train in another precision: `accelerate launch "
            "--mixed_precision bf16|no` (the Accelerate config's mixed_precision; ACCELERATE_MIXED_PRECISION=no "
            "without a launcher).")


def _ready_for_skipped_steps(optimizer: torch.optim.Optimizer) -> bool:
    """Makes a step that ``found_inf`` skips leave the optimizer's state as if the step never came, and says
    whether it could. Fused SGD makes its momentum buffers with ``empty_like`` on its first step, and a skipped
    first step (a bad loss, or fp16's GradScaler at its initial scale) leaves them uninitialised: they are made
    here as zeros, which give the same first update (``momentum * 0 + g`` is ``g`` without dampening). Fused AdamW
    undoes its step count itself."""
    if not isinstance(optimizer, torch.optim.SGD):
        return True
    groups = [group for group in optimizer.param_groups if group["momentum"] != 0]
    if any(group["dampening"] != 0 for group in groups):
        return False  # dampening scales every update but the first: zeros would not give the same first step
    for group in groups:
        for param in group["params"]:
            optimizer.state[param].setdefault("momentum_buffer", torch.zeros_like(param))
    return True
