"""A model's one-line summary in Ultralytics' format (``model.info()``), as ``yolo11 info`` prints it:

    YOLO11n summary: 252 layers, 2,624,080 parameters, 2,624,064 gradients, 6.7 GFLOPs

Parameters and gradients (parameters that train: not the DFL's fixed bins) are Ultralytics' numbers for the same
scale (tested equal); GFLOPs at 640 px are those of its summary (``flops.summary_gflops``). Layers are counted
as Ultralytics counts them, modules without children, but our modules differ in number: each ``Conv`` here owns
its activation where Ultralytics' share one ``SiLU`` (counted once), and its neck's ``Concat``/``Upsample``
layers are ``torch.cat`` and one shared upsampling here (yolo11n: 252 against 181).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from torch import nn

from yolo11.models.blocks import Conv
from yolo11.models.flops import summary_gflops


@dataclass(frozen=True)
class ModelSummary:
    name: str  # yolo11n ... yolo26x
    layers: int
    parameters: int
    gradients: int
    gflops: float  # at imgsz x imgsz
    fused: bool = False

    def line(self) -> str:
        """Ultralytics' summary line (its model names: ``YOLO11n``)."""
        return (f"{self.name.replace('yolo', 'YOLO')} summary{' (fused)' if self.fused else ''}: {self.layers:,} "
                f"layers, {self.parameters:,} parameters, {self.gradients:,} gradients, {self.gflops:.1f} GFLOPs")


def model_summary(model: nn.Module, imgsz: int = 640) -> ModelSummary:
    """The summary of ``model`` (its FLOPs counted on a copy on the ``meta`` device: no memory, no compute)."""
    leaves = [module for module in model.modules() if not any(True for _ in module.children())]
    meta = copy.deepcopy(model).to("meta").eval()
    config = getattr(model, "config", {})
    return ModelSummary(
        name=config.get("name", type(model).__name__),
        layers=len(leaves),
        parameters=sum(p.numel() for p in model.parameters()),
        gradients=sum(p.numel() for p in model.parameters() if p.requires_grad),
        gflops=summary_gflops(meta, imgsz, imgsz),
        fused=any(isinstance(m, Conv) and not isinstance(m.bn, nn.BatchNorm2d) for m in model.modules()))
