"""``torch.compile`` of the model and of the loss for training.

The trainer compiles the model once, after the EMA copy is taken and before ``accelerator.prepare``:

    model = compile_model(model, plan.compile.mode, fast_layers=accelerator.device.type == "cuda")

``fast_layers=True`` first swaps in the fast training variants of the model's blocks, in place
(``yolo11.models.fast_layers.use_fast_training_layers``: same outputs, same state-dict keys), which pay off only
compiled on CUDA. The plain model never asks whether it is compiled; this call is the one place that chooses the
faster layers. With ``--compile-loss`` the trainer wraps its loss: ``criterion = CompiledLoss(criterion)``.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from yolo11.models.fast_layers import use_fast_training_layers

# Inductor writes an intermediate to memory, instead of recomputing it inside each kernel that uses it, once it has
# several users and reads more than `realize_reads_threshold` (default 4) buffers. In the backward graph, the
# reduction and the pointwise kernel of each BatchNorm + SiLU backward both use the BN output (five reads: x, mean,
# rstd, weight, bias) and the gradient at the BN output (six: the incoming gradient too). At 6 both are recomputed
# from the conv output and the incoming gradient, which the two kernels read anyway, instead of each being written
# as a float32 map and read back twice (benchmarks/RESULTS.md).
MODEL_INDUCTOR_OPTIONS = {"realize_reads_threshold": 6}


def compile_model(model: nn.Module, mode: str | None = None, *, fast_layers: bool, **inductor_options) -> nn.Module:
    """``torch.compile(model, mode=mode)`` with ``MODEL_INDUCTOR_OPTIONS`` (and ``inductor_options``) added.

    ``fast_layers``: first swap the model's blocks for their fast training variants, in place (for CUDA; the
    caller decides). The options apply to this model's graphs only, not to other compiled code in the process
    (the loss).
    """
    import torch._inductor

    if fast_layers:
        use_fast_training_layers(model)
    options = {**torch._inductor.list_mode_options(mode or "default"), **MODEL_INDUCTOR_OPTIONS, **inductor_options}
    return torch.compile(model, options=options)


def use_compile_cache(directory: str) -> str:
    """Keep inductor's caches (FX graphs, AOTAutograd graphs, Triton kernels) in ``directory`` unless the user
    chose with ``TORCHINDUCTOR_CACHE_DIR``. torch's default is a folder under /tmp, which a reboot or a fresh
    cluster node empties; there every run would compile from scratch. Returns the folder used."""
    chosen = os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(directory).expanduser()))
    Path(chosen).mkdir(parents=True, exist_ok=True)
    return chosen


class CompiledLoss(nn.Module):
    """``torch.compile`` of the loss with the box-row dimension dynamic from the first call.

    Every batch pads its targets to its own largest box count M, so M changes from batch to batch. Left to
    itself, dynamo first compiles for the first batch's M as a constant, then recompiles once M changes; marking
    M dynamic up front gives one graph for every M, and no kernel specialised to a small constant M (with torch
    2.11 / triton 3.6, inductor's kernels for a constant M = 8 fail to compile; the dynamic graph compiles).
    """

    def __init__(self, loss: nn.Module, **compile_kwargs):
        super().__init__()
        self.loss = loss
        self.compiled = torch.compile(loss, **compile_kwargs)

    def forward(self, feats: list[torch.Tensor], boxes: torch.Tensor, labels: torch.Tensor):
        torch._dynamo.maybe_mark_dynamic(boxes, 1)
        torch._dynamo.maybe_mark_dynamic(labels, 1)
        return self.compiled(feats, boxes, labels)
