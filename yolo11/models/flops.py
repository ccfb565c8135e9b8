"""Model FLOPs by ``torch.utils.flop_counter``, and the Ultralytics (thop) convention they differ from.

``FlopCounterMode`` counts 2 FLOPs per multiply-accumulate of convolutions and matmuls (including the attention
``bmm``s in C2PSA) and nothing for BatchNorm, upsampling or activations. Ultralytics reports ``2 * thop ops``,
and thop counts per leaf module: convolution MACs (bias not counted), 4 ops per BatchNorm output element
(normalise + affine), 1 per nearest-upsample output element, nothing for matmuls, max-pools or SiLU. So the
Ultralytics figure is ``conv FLOPs + 8 * BatchNorm outputs + 2 * upsample outputs`` (+ the DFL decode conv, which
our forward does not run: ~0.001 GFLOPs). ``ultralytics=True`` reproduces it (YOLO11n at 640: 6.613, published
"6.6"); the default gives the plain count (YOLO11n: 6.541, 0.9% lower).

Ultralytics 8.4.190's own model summary (``model.info()``) counts with ultralytics-thop 2.2, whose rules changed:
matmuls are counted (C2PSA's attention), nearest upsampling is free. ``summary_gflops`` reproduces that figure:
the plain count + 8 * BatchNorm outputs + the DFL decode conv (YOLO11n at 640: 6.673, printed "6.7"; YOLO26n:
6.240, "6.2"; both equal to Ultralytics' to 1e-6, tested).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def _profile(model: nn.Module, height: int, width: int) -> tuple[dict, dict]:
    """``FlopCounterMode``'s global counts (per aten op) of one forward pass on a ``(1, 3, height, width)`` image,
    and the output elements of the model's BatchNorm and Upsample modules."""
    device = next(model.parameters()).device
    image = torch.empty(1, 3, height, width, device=device)
    elements = {nn.BatchNorm2d: 0, nn.Upsample: 0}

    def count_elements(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        elements[type(module)] += output.numel()

    counted = [m for m in model.modules() if type(m) in elements]
    hooks = [m.register_forward_hook(count_elements) for m in counted]
    counter = FlopCounterMode(display=False)
    try:
        with counter, torch.no_grad():
            model(image)
    finally:
        for hook in hooks:
            hook.remove()
    return dict(counter.get_flop_counts()["Global"]), elements


def count_gflops(model: nn.Module, height: int = 640, width: int = 640, ultralytics: bool = False) -> float:
    """GFLOPs of one forward pass on a ``(1, 3, height, width)`` image.

    Works on a model built on the ``meta`` device (no memory, no compute), which is how the tests count l/x.
    """
    counts, elements = _profile(model, height, width)
    if not ultralytics:
        return sum(counts.values()) / 1e9
    conv_flops = counts.get(torch.ops.aten.convolution, 0)
    return (conv_flops + 8 * elements[nn.BatchNorm2d] + 2 * elements[nn.Upsample]) / 1e9


def summary_gflops(model: nn.Module, height: int = 640, width: int = 640) -> float:
    """The GFLOPs Ultralytics 8.4.190's model summary prints (ultralytics-thop 2.2's rules, see the module
    docstring): convolutions and matmuls at 2 per multiply-add, 8 per BatchNorm output element (normalise and
    affine, thop's 4 ops times 2) and, for a model with DFL bins (``reg_max`` > 1), the decode's 1x1 conv over
    ``4 * reg_max`` bins per anchor, which Ultralytics' forward runs and ours leaves to the post-processing."""
    counts, elements = _profile(model, height, width)
    reg_max = getattr(model, "reg_max", 1)
    anchors = sum((height // stride) * (width // stride) for stride in getattr(model, "strides", ()))
    dfl = 2 * anchors * 4 * reg_max if reg_max > 1 else 0
    return (sum(counts.values()) + 8 * elements[nn.BatchNorm2d] + dfl) / 1e9
