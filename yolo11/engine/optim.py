"""Optimizer, parameter groups and learning-rate schedule, following Ultralytics' recipe.

Parameter groups, in the order and with the names of Ultralytics 8.4 (``param_group``), so that ``lr/pg0..2`` mean
the same thing in both tools: ``pg0`` "weight" (conv/linear weights, decay), ``pg1`` "bn" (normalisation weights,
no decay), ``pg2`` "bias" (no decay).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from yolo11.engine.config import OptimConfig
from yolo11.engine.musgd import MuSGD

_NORM_TYPES = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm)


def parameter_groups(model: nn.Module) -> dict[str, list]:
    """Trainable parameters by group: ``{"weight": [...], "bn": [...], "bias": [...]}``, in that order."""
    groups: dict[str, list] = {"weight": [], "bn": [], "bias": []}
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad:
                continue
            if name == "bias":
                groups["bias"].append(param)
            elif isinstance(module, _NORM_TYPES) or param.ndim <= 1:
                groups["bn"].append(param)  # norm scales, layer-scale vectors, logit scales: no decay
            else:
                groups["weight"].append(param)
    return groups


@dataclass(frozen=True)
class OptimizerChoice:
    name: str
    lr: float
    momentum: float
    auto_iterations: int | None = None  # optimizer 'auto': the iteration count its rule chose for


def resolve_optimizer(config: OptimConfig, num_classes: int, total_iterations: int) -> OptimizerChoice:
    """Ultralytics' ``optimizer='auto'``: SGD for long schedules, AdamW with a class-count-dependent lr otherwise.

    ``total_iterations`` counts optimizer steps at the nominal batch, as Ultralytics does:
    ``ceil(num_images / max(batch, nbs)) * epochs``. Long schedules (more than 10,000 iterations: COCO-sized
    runs) get MuSGD, as in Ultralytics 8.4; shorter ones (coco128 for 100 epochs: 200 iterations) AdamW.
    """
    if config.optimizer != "auto":
        return OptimizerChoice(config.optimizer, config.lr0, config.momentum)
    if total_iterations > 10_000:
        return OptimizerChoice("MuSGD", 0.01, 0.9, total_iterations)
    return OptimizerChoice("AdamW", round(0.002 * 5 / (4 + num_classes), 6), 0.9, total_iterations)


def auto_optimizer_note(config: OptimConfig, choice: OptimizerChoice, typed: frozenset[str] | None) -> str | None:
    """The line saying that optimizer 'auto' ignored the ``--lr0``/``--momentum`` the user set (``typed``: the
    flags set; None: every flag, so always, as Ultralytics says it), with what it chose (``choice``: the plan's);
    None when there is nothing to say."""
    if config.optimizer != "auto" or choice.auto_iterations is None:
        return None
    given = [name for name in ("lr0", "momentum") if typed is None or name in typed]
    if not given:
        return None
    ignored = " and ".join(f"{name}={getattr(config, name):g}" for name in given)
    iterations = f"{choice.auto_iterations:,} iteration{'s' if choice.auto_iterations != 1 else ''}"
    return (f"optimizer=auto: {ignored} ignored; {choice.name}(lr={choice.lr:g}, momentum={choice.momentum:g}) "
            f"chosen for {iterations} (set optimizer=SGD or AdamW to use {'them' if len(given) > 1 else given[0]})")


def build_optimizer(model: nn.Module, choice: OptimizerChoice, weight_decay: float,
                    fused: bool = True) -> torch.optim.Optimizer:
    """SGD (Nesterov) or AdamW over the three parameter groups, or MuSGD over Ultralytics' eight (``musgd_groups``).

    ``fused`` (SGD and AdamW; CUDA and CPU have the kernels): one kernel per group for the whole update, and the
    kernels take a device-side ``found_inf`` flag that skips the update without a host sync (``NonFiniteGuard``).
    Otherwise ``foreach``: one launch per operation for all tensors of a group.
    """
    if choice.name == "MuSGD":
        groups = musgd_groups(model, choice.lr, weight_decay)  # each group with its own lr
        optimizer = MuSGD(groups, lr=choice.lr, momentum=choice.momentum, nesterov=True, muon=0.2, sgd=1.0)
    else:
        groups = [{"params": params, "weight_decay": weight_decay if name == "weight" else 0.0, "param_group": name}
                  for name, params in parameter_groups(model).items()]
        kernels = {"fused": True} if fused else {"foreach": True}
        if choice.name == "SGD":
            optimizer = torch.optim.SGD(groups, lr=choice.lr, momentum=choice.momentum, nesterov=True, **kernels)
        elif choice.name == "AdamW":
            optimizer = torch.optim.AdamW(groups, lr=choice.lr, betas=(choice.momentum, 0.999), **kernels)
        else:
            raise ValueError(f"unknown optimizer {choice.name!r}; expected auto, SGD, AdamW or MuSGD")
    for group in optimizer.param_groups:
        group["initial_lr"] = group["lr"]  # WarmupSchedule's base
    return optimizer


def musgd_groups(model: nn.Module, lr: float, weight_decay: float) -> list[dict]:
    """MuSGD's parameter groups as Ultralytics 8.4 builds them: "weight", "bn", "bias" and "muon" (the conv and
    linear weights, which get Muon's update, with weight decay), each split in two, the detection head's class
    branches (``head.cv3``, and YOLO26's ``head.one2one_cv3``) first at 3x lr, the rest at lr."""
    groups = parameter_groups(model)
    weights = groups["weight"]
    groups["weight"] = [p for p in weights if p.ndim not in (2, 4)]
    groups["muon"] = [p for p in weights if p.ndim in (2, 4)]
    head = getattr(model, "head", None)
    class_branches = [getattr(head, name, None) for name in ("cv3", "one2one_cv3")]
    boosted = {id(p) for branch in class_branches if branch is not None for p in branch.parameters()}
    out = []
    for name, params in groups.items():
        options = {"param_group": name, "weight_decay": weight_decay if name in ("weight", "muon") else 0.0,
                   "use_muon": name == "muon"}
        out.append({"params": [p for p in params if id(p) in boosted], **options, "lr": lr * 3})
        out.append({"params": [p for p in params if id(p) not in boosted], **options, "lr": lr})
    return out


def lr_lambda(schedule: str, epochs: int, lrf: float) -> Callable[[float], float]:
    """Per-epoch multiplier of the initial lr: 1 at epoch 0 down to ``lrf`` at ``epochs``."""
    if schedule == "linear":
        return lambda epoch: max(1 - epoch / epochs, 0) * (1.0 - lrf) + lrf
    if schedule == "cosine":
        return lambda epoch: ((1 - math.cos(epoch * math.pi / epochs)) / 2) * (lrf - 1) + 1
    raise ValueError(f"unknown schedule {schedule!r}; expected linear or cosine")


def lr_scale_for_batch(rule: str, effective_batch: int, nominal_batch: int) -> float:
    """Multiplier of lr0 for an effective batch (global batch x accumulation) other than the nominal one.

    The loss is a sum over the images of a step (as in Ultralytics), so the step already grows linearly with the
    effective batch: ``linear`` keeps lr0; ``sqrt`` makes the growth a square root; ``none`` cancels it.
    """
    ratio = nominal_batch / effective_batch
    return {"linear": 1.0, "sqrt": math.sqrt(ratio), "none": ratio}[rule]


class WarmupSchedule:
    """Sets lr and momentum of every group for a given (epoch, iteration).

    During the first ``warmup_iters`` iterations lr rises linearly from 0 (biases: from ``warmup_bias_lr``) to the
    scheduled value and SGD momentum from ``warmup_momentum`` to ``momentum``; afterwards the per-epoch lambda
    applies (each group's ``initial_lr * lr_fn(epoch)``, Ultralytics' LambdaLR stepped once per epoch).
    The state is a pure function of (epoch, iteration), so resuming needs nothing but those two numbers.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, lr_fn: Callable[[float], float], warmup_iters: int,
                 warmup_bias_lr: float, warmup_momentum: float, momentum: float):
        self.optimizer = optimizer
        self.lr_fn = lr_fn
        self.warmup_iters = warmup_iters
        self.warmup_bias_lr = warmup_bias_lr
        self.warmup_momentum = warmup_momentum
        self.momentum = momentum
        # As in Ultralytics, only SGD's momentum is warmed up; Adam's betas stay as built.
        self._has_momentum = "momentum" in optimizer.param_groups[0]

    def step(self, epoch: int, iteration: int) -> None:
        """``iteration`` counts batches since the start of training (Ultralytics' ``ni``)."""
        scale = self.lr_fn(epoch)
        warm = iteration <= self.warmup_iters
        for group in self.optimizer.param_groups:
            target = group["initial_lr"] * scale
            if warm:
                start = self.warmup_bias_lr if group.get("param_group") == "bias" else 0.0
                group["lr"] = float(np.interp(iteration, [0, self.warmup_iters], [start, target]))
                momentum = float(np.interp(iteration, [0, self.warmup_iters], [self.warmup_momentum, self.momentum]))
            else:
                group["lr"] = target
                # Where the warmup left it; without a warmup, as built (optimizer 'auto' builds with 0.9, not
                # --momentum: Ultralytics touches momentum only in the warmup)
                momentum = self.momentum if self.warmup_iters > 0 else None
            if self._has_momentum and momentum is not None:
                group["momentum"] = momentum

    def lrs(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]
