"""The native YOLO11 / YOLO26 backbone (Ultralytics layers 0-10), registered in timm (``timm_registry``) as
``yolo11{n,s,m,l,x}_backbone`` and ``yolo26{n,s,m,l,x}_backbone``.

Layer ``i`` here is Ultralytics' ``model.i``: ``layers.i.cv1.conv.weight`` <-> ``model.i.cv1.conv.weight``.
``timm.create_model("yolo11n_backbone", features_only=True)`` returns the P3/P4/P5 maps (reductions 8/16/32),
taken after layers 4, 6 and 10 exactly where the Ultralytics neck reads them. The two families differ here only in
layer 9 (YOLO26's residual SPPF, ``Family.sppf_residual``).
"""

from __future__ import annotations

import torch
from torch import nn

from yolo11.architecture import FAMILIES, Family, Scale
from yolo11.models.blocks import C2PSA, SPPF, C3k2, Conv

# Indices of the layers whose outputs feed the neck, with their reductions.
FEATURE_LAYERS = {4: 8, 6: 16, 10: 32}


class YOLO11Backbone(nn.Module):
    """Conv, Conv, C3k2, Conv, C3k2, Conv, C3k2, Conv, C3k2, SPPF, C2PSA, widths and repeats from ``scale``.

    ``forward(images (B, 3, H, W)) -> [P3 (B, C3, H/8, W/8), P4 (B, C4, H/16, W/16), P5 (B, C5, H/32, W/32)]``.
    """

    def __init__(self, scale: Scale, in_chans: int = 3, family: Family = FAMILIES["yolo11"]) -> None:
        super().__init__()
        ch, rep = scale.channels, scale.repeats
        self.layers = nn.Sequential(
            Conv(in_chans, ch(64), 3, 2),  # 0: P1/2
            Conv(ch(64), ch(128), 3, 2),  # 1: P2/4
            C3k2(ch(128), ch(256), rep(2), c3k=scale.c3k, expansion=0.25),  # 2
            Conv(ch(256), ch(256), 3, 2),  # 3: P3/8
            C3k2(ch(256), ch(512), rep(2), c3k=scale.c3k, expansion=0.25),  # 4
            Conv(ch(512), ch(512), 3, 2),  # 5: P4/16
            C3k2(ch(512), ch(512), rep(2), c3k=True),  # 6
            Conv(ch(512), ch(1024), 3, 2),  # 7: P5/32
            C3k2(ch(1024), ch(1024), rep(2), c3k=True),  # 8
            SPPF(ch(1024), ch(1024), 5, residual=family.sppf_residual),  # 9
            C2PSA(ch(1024), ch(1024), rep(2)),  # 10
        )
        out_channels = {4: ch(512), 6: ch(512), 10: ch(1024)}
        self.feature_info = [
            dict(num_chs=out_channels[i], reduction=reduction, module=f"layers.{i}")
            for i, reduction in FEATURE_LAYERS.items()
        ]

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        features = []
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i in FEATURE_LAYERS:
                features.append(x)
        return features
