"""What the trainer compiles: the model (with its own inductor options) and the loss (box rows dynamic)."""

from __future__ import annotations

import torch
from torch import nn

# Inductor writes an intermediate to memory, instead of recomputing it inside each kernel that uses it, once it has
# several users and reads more than `realize_reads_threshold` (default 4) buffers. In the backward graph, the
# reduction and the pointwise kernel of each BatchNorm + SiLU backward both use the BN output (five reads: x, mean,
# rstd, weight, bias) and the gradient at the BN output (six: the incoming gradient too). With the default, the BN
# output had a kernel of its own that wrote it as a float32 map, read back by both (seen in inductor's code); at 5,
# the gradient at the BN output still had a kernel of its own (seen in the kernel profile). At 6, both can be
# recomputed from the conv output and the incoming gradient, which the two kernels read anyway (measured in
# benchmarks/RESULTS.md).
MODEL_INDUCTOR_OPTIONS = {"realize_reads_threshold": 6}


def compile_model(model: nn.Module, mode: str | None = None, **inductor_options) -> nn.Module:
    """``torch.compile(model, mode=mode)`` with ``MODEL_INDUCTOR_OPTIONS`` (and ``inductor_options``) added.

    The options apply to this model's graphs only, not to other compiled code in the process (the loss).
    """
    import torch._inductor

    options = {**torch._inductor.list_mode_options(mode or "default"), **MODEL_INDUCTOR_OPTIONS, **inductor_options}
    return torch.compile(model, options=options)


class CompiledLoss(nn.Module):
    """``torch.compile`` of the loss with the box-row dimension dynamic from the first call.

    Every batch pads its targets to its own largest box count M, so M changes from batch to batch. Left to
    itself, dynamo first compiles for the first batch's M as a constant, then recompiles once M changes; marking
    M dynamic up front gives one graph for every M, and no kernel specialised to a small constant M (on torch
    2.11 / triton 3.6, inductor's kernels for a constant M = 8 failed to compile on an H200, while the dynamic
    graph compiled and trained).
    """

    def __init__(self, loss: nn.Module, **compile_kwargs):
        super().__init__()
        self.loss = loss
        self.compiled = torch.compile(loss, **compile_kwargs)

    def forward(self, feats: list[torch.Tensor], boxes: torch.Tensor, labels: torch.Tensor):
        torch._dynamo.maybe_mark_dynamic(boxes, 1)
        torch._dynamo.maybe_mark_dynamic(labels, 1)
        return self.compiled(feats, boxes, labels)
