"""MuSGD: Ultralytics 8.4's optimizer for long schedules (``optimizer='auto'`` above 10,000 iterations).

Groups flagged ``use_muon`` (the conv and linear weights) get two updates per step: Muon's (a Nesterov momentum
average of the gradient, orthogonalised by a Newton-Schulz iteration, at ``muon`` x lr) and then SGD's (Nesterov
momentum with weight decay, at ``sgd`` x lr, with its own momentum buffer). The other groups get SGD's alone at lr.
Written from the algorithm Ultralytics 8.4.190 runs; tests/test_optim.py checks a step against numbers recorded
from it.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch import Tensor

# The quintic Newton-Schulz coefficients of Muon: a fast rise of small singular values towards 1, at the price of
# leaving them in roughly [0.5, 1.5] rather than exactly 1, which works as well for training.
_NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
_NS_STEPS = 5


def orthogonalize(matrices: Tensor, eps: float = 1e-7) -> Tensor:
    """Approximately ``U V^T`` for each ``(rows, cols)`` matrix ``U S V^T`` of a ``(n, rows, cols)`` batch, by five
    Newton-Schulz steps in bfloat16 (as Muon); returns bfloat16."""
    x = matrices.bfloat16()
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + eps)  # singular values <= 1: inside the iteration's basin
    tall = x.size(-2) > x.size(-1)
    if tall:  # iterate on the smaller Gram matrix
        x = x.transpose(-2, -1)
    a, b, c = _NS_COEFFICIENTS
    for _ in range(_NS_STEPS):
        gram = x @ x.transpose(-2, -1)
        poly = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)  # b * G + c * G @ G
        x = torch.baddbmm(x, poly, x, beta=a)  # a * X + poly @ X
    return x.transpose(-2, -1) if tall else x


def muon_directions(grads: list[Tensor], momenta: list[Tensor], beta: float, nesterov: bool) -> list[Tensor]:
    """Muon's update direction for each gradient; ``momenta`` (zero-initialised) are updated in place.

    ``m = beta * m + (1 - beta) * g``; the direction is ``m`` or, with Nesterov, ``beta * m + (1 - beta) * g``,
    viewed as a ``(shape[0], -1)`` matrix, orthogonalised, and scaled by ``sqrt(max(1, shape[-2] / shape[-1]))``
    (1 for square conv kernels). Matrices of the same shape are orthogonalised in one batched call.
    """
    torch._foreach_mul_(momenta, beta)
    torch._foreach_add_(momenta, grads, alpha=1 - beta)
    if nesterov:
        directions = list(torch._foreach_mul(momenta, beta))
        torch._foreach_add_(directions, grads, alpha=1 - beta)
    else:
        directions = list(momenta)
    by_shape: dict[tuple, list[int]] = defaultdict(list)
    for i, direction in enumerate(directions):
        by_shape[(direction.shape, direction.device)].append(i)
    for indices in by_shape.values():
        grad = grads[indices[0]]
        matrices = torch.stack([directions[i].reshape(grad.shape[0], -1) for i in indices])
        scale = max(1.0, grad.size(-2) / grad.size(-1)) ** 0.5
        orthogonal = orthogonalize(matrices).to(grad.dtype).mul_(scale)
        for j, i in enumerate(indices):
            directions[i] = orthogonal[j].reshape(grad.shape)
    return directions


class MuSGD(torch.optim.Optimizer):
    """Muon + SGD for groups with ``use_muon``, SGD (momentum, optional Nesterov, weight decay) for the others."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False, use_muon: bool = False, muon: float = 0.2, sgd: float = 1.0):
        defaults = {"lr": lr, "momentum": momentum, "weight_decay": weight_decay, "nesterov": nesterov,
                    "use_muon": use_muon}
        super().__init__(params, defaults)
        self.muon, self.sgd = muon, sgd

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            lr, momentum, nesterov = group["lr"], group["momentum"], group["nesterov"]
            for p in params:
                state = self.state[p]
                if not state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                    if group["use_muon"]:
                        state["momentum_buffer_SGD"] = torch.zeros_like(p)
            grads = [p.grad for p in params]
            if group["use_muon"]:
                directions = muon_directions(grads, [self.state[p]["momentum_buffer"] for p in params], momentum,
                                             nesterov)
                torch._foreach_add_(params, directions, alpha=-lr * self.muon)
                buffers = [self.state[p]["momentum_buffer_SGD"] for p in params]
                lr *= self.sgd
            else:
                buffers = [self.state[p]["momentum_buffer"] for p in params]
            if group["weight_decay"]:
                grads = torch._foreach_add(grads, params, alpha=group["weight_decay"])
            torch._foreach_mul_(buffers, momentum)
            torch._foreach_add_(buffers, grads)
            steps = torch._foreach_add(grads, buffers, alpha=momentum) if nesterov else buffers
            torch._foreach_add_(params, steps, alpha=-lr)
        return loss
