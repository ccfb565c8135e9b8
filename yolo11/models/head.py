"""The YOLO11 Detect head: per level, a box-distribution branch (``cv2``) and a class branch (``cv3``).

Attribute names are Ultralytics' (``model.23.cv2.0.0.conv.weight`` <-> ``head.cv2.0.0.conv.weight``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from yolo11.models.blocks import DFL, Conv, DWConv


class Detect(nn.Module):
    """Raw head maps: ``forward([N3, N4, N5]) -> [(B, 4 * reg_max + num_classes, H / s, W / s)]`` per stride.

    Box channels come first: 4 sides x ``reg_max`` bins of logits for distances in stride units. ``dfl`` is not
    used by ``forward`` (decoding lives in ``yolo11.postprocess``); it is kept so the state dict and parameter
    count match Ultralytics'.
    """

    def __init__(
        self,
        num_classes: int,
        in_channels: tuple[int, ...],
        reg_max: int = 16,
        strides: tuple[int, ...] = (8, 16, 32),
    ) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.reg_max = reg_max
        self.strides = tuple(strides)
        box_width = max(16, in_channels[0] // 4, 4 * reg_max)
        cls_width = max(in_channels[0], min(num_classes, 100))
        self.cv2 = nn.ModuleList(
            nn.Sequential(Conv(c, box_width, 3), Conv(box_width, box_width, 3), nn.Conv2d(box_width, 4 * reg_max, 1))
            for c in in_channels
        )
        self.cv3 = nn.ModuleList(
            nn.Sequential(
                nn.Sequential(DWConv(c, c, 3), Conv(c, cls_width, 1)),
                nn.Sequential(DWConv(cls_width, cls_width, 3), Conv(cls_width, cls_width, 1)),
                nn.Conv2d(cls_width, num_classes, 1),
            )
            for c in in_channels
        )
        self.dfl = DFL(reg_max)
        self.reset_bias()

    @torch.no_grad()
    def reset_bias(self) -> None:
        """Ultralytics 8.4's bias init: box logits 2.0; class logits as if ~5 objects per 640 px image at each level."""
        for box, cls, stride in zip(self.cv2, self.cv3, self.strides, strict=True):
            box[-1].bias.fill_(2.0)
            cls[-1].bias.fill_(math.log(5 / self.num_classes / (640 / stride) ** 2))

    def forward(self, features: list[torch.Tensor]) -> list[torch.Tensor]:
        return [torch.cat((box(x), cls(x)), 1) for x, box, cls in zip(features, self.cv2, self.cv3, strict=True)]
