"""Model FLOPs by ``torch.utils.flop_counter``, and the Ultralytics (thop) convention they differ from.

``FlopCounterMode`` counts 2 FLOPs per multiply-accumulate of convolutions and matmuls (including the attention
``bmm``s in C2PSA) and nothing for BatchNorm, upsampling or activations. Ultralytics reports ``2 * thop ops``,
and thop counts per leaf module: convolution MACs (bias not counted), 4 ops per BatchNorm output element
(normalise + affine), 1 per nearest-upsample output element, nothing for matmuls, max-pools or SiLU. So the
Ultralytics figure is ``conv FLOPs + 8 * BatchNorm outputs + 2 * upsample outputs`` (+ the DFL decode conv, which
our forward does not run: ~0.001 GFLOPs). ``ultralytics=True`` reproduces it (YOLO11n at 640: 6.613, published
"6.6"); the default gives the plain count (YOLO11n: 6.541, 0.9% lower).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def count_gflops(model: nn.Module, height: int = 640, width: int = 640, ultralytics: bool = False) -> float:
    """GFLOPs of one forward pass on a ``(1, 3, height, width)`` image.

    Works on a model built on the ``meta`` device (no memory, no compute), which is how the tests count l/x.
    """
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
    if not ultralytics:
        return counter.get_total_flops() / 1e9
    conv_flops = counter.get_flop_counts()["Global"].get(torch.ops.aten.convolution, 0)
    return (conv_flops + 8 * elements[nn.BatchNorm2d] + 2 * elements[nn.Upsample]) / 1e9
