"""Exponential moving average of model weights (Ultralytics' ``ModelEMA``)."""

from __future__ import annotations

import copy
import math

import torch
from torch import nn


class ModelEMA:
    """Keeps ``ema = d * ema + (1 - d) * model`` for every floating-point tensor of the state dict.

    ``d = decay * (1 - exp(-updates / tau))`` ramps the decay up over the first ``tau`` updates so that early,
    poor weights are forgotten quickly. Call ``update`` once per optimizer step. Integer buffers (BatchNorm's
    ``num_batches_tracked``) are copied. Checkpoints store it as safetensors (``engine/checkpoint.py``).
    """

    def __init__(self, model: nn.Module, decay: float = 0.9999, tau: float = 2000.0, updates: int = 0):
        self.module = copy.deepcopy(model).eval()
        for param in self.module.parameters():
            param.requires_grad_(False)
        self.decay = decay
        self.tau = tau
        self.updates = updates
        self._float_keys = [k for k, v in self.module.state_dict().items() if v.dtype.is_floating_point]
        self._other_keys = [k for k, v in self.module.state_dict().items() if not v.dtype.is_floating_point]
        self._pairs: tuple | None = None  # (source model, ema floats, model floats, ema others, model others)
        self._steps: tuple | None = None  # (flat buffer, its views shaped as the EMA's floats): the skipping update

    def current_decay(self) -> float:
        return self.decay * (1 - math.exp(-self.updates / self.tau))

    def _tensor_lists(self, model: nn.Module) -> tuple:
        # state_dict() builds ~700-entry dicts; the tensors themselves never change identity, so pair them once.
        if self._pairs is None or self._pairs[0] is not model:
            source, target = model.state_dict(), self.module.state_dict()
            self._pairs = (model, [target[k] for k in self._float_keys], [source[k] for k in self._float_keys],
                           [target[k] for k in self._other_keys], [source[k] for k in self._other_keys])
        return self._pairs[1:]

    @torch.no_grad()
    def update(self, model: nn.Module, skip: torch.Tensor | None = None) -> None:
        """``skip``: a device tensor, 1.0 to leave the EMA as it is (a step the optimizer skipped on the device),
        read by the kernels, so no host sync."""
        self.updates += 1
        ema_floats, model_floats, ema_others, model_others = self._tensor_lists(model)
        weight = 1.0 - self.current_decay()
        if skip is None:  # one fused launch per chunk of tensors: ema += (model - ema) * (1 - d)
            torch._foreach_lerp_(ema_floats, model_floats, weight)
            torch._foreach_copy_(ema_others, model_others)
            return
        # lerp takes its weight as a host scalar; a device weight needs the three-step form. The difference is
        # made in one flat buffer so that one masked fill can drop it whole: a skipped step's weights may be NaN,
        # and NaN * 0 is NaN.
        flat, steps = self._step_buffer(ema_floats)
        torch._foreach_copy_(steps, model_floats)
        torch._foreach_sub_(steps, ema_floats)
        flat.mul_(weight).masked_fill_(skip > 0, 0.0)
        torch._foreach_add_(ema_floats, steps)
        # Integer buffers (num_batches_tracked) are counters of the model, copied as they are.
        torch._foreach_copy_(ema_others, model_others)

    def _step_buffer(self, ema_floats: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        if self._steps is None:  # views with the EMA's strides (channels_last too): foreach's fast path needs them
            flat = torch.empty(sum(t.numel() for t in ema_floats), dtype=ema_floats[0].dtype,
                               device=ema_floats[0].device)
            views, offset = [], 0
            for tensor in ema_floats:
                views.append(flat[offset:offset + tensor.numel()].as_strided(tensor.shape, tensor.stride()))
                offset += tensor.numel()
            self._steps = (flat, views)
        return self._steps

    def state_dict(self) -> dict:
        return {"module": self.module.state_dict(), "updates": self.updates, "decay": self.decay, "tau": self.tau}

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state["module"])  # copies into the same tensors: cached pairs stay valid
        self.updates = int(state["updates"])
        self.decay = float(state["decay"])
        self.tau = float(state["tau"])
