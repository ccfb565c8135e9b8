"""Model FLOPs by ``torch.utils.flop_counter``, and the Ultralytics (thop) convention they differ from.

``FlopCounterMode`` counts 2 FLOPs per multiply-accumulate of convolutions and matmuls (including the attention
``bmm``s in C2PSA) and nothing for BatchNorm, biases or activations. Ultralytics reports ``2 * thop MACs``: thop
counts convolutions (plus one op per output for a bias), 4 ops per BatchNorm output element (normalise + affine)
and no matmuls. So the Ultralytics figure is ``conv FLOPs + 2 * conv-bias outputs + 8 * BatchNorm outputs``;
``ultralytics=True`` reproduces it (YOLO11n at 640: 6.613 -> "6.6 GFLOPs"), the default gives the plain count
(YOLO11n: 6.541, within 1% of it).
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
    bn_elements, bias_elements = 0, 0

    def count_elements(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        nonlocal bn_elements, bias_elements
        if isinstance(module, nn.BatchNorm2d):
            bn_elements += output.numel()
        elif isinstance(module, nn.Conv2d) and module.bias is not None:
            bias_elements += output.numel()

    counted = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d | nn.Conv2d)]
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
    return (conv_flops + 2 * bias_elements + 8 * bn_elements) / 1e9
