"""The Detect heads: per level, a box branch (``cv2``) and a class branch (``cv3``); YOLO26 adds a one-to-one copy.

Attribute names are Ultralytics' (``model.23.cv2.0.0.conv.weight`` <-> ``head.cv2.0.0.conv.weight``,
``model.23.one2one_cv3.0.2.bias`` <-> ``head.one2one_cv3.0.2.bias``).
"""

from __future__ import annotations

import copy
import math
from typing import NamedTuple

import torch
from torch import nn

from yolo11.architecture import STRIDES
from yolo11.models.blocks import DFL, Conv, DWConv


class End2EndMaps(NamedTuple):
    """The raw maps of a head with both branches (YOLO26), each a list per stride of
    ``(B, 4 * reg_max + num_classes, H / s, W / s)``, box channels first.

    ``one2many``: the branch trained with top-10 assignment and decoded with NMS. ``one2one``: the branch trained
    with top-1 assignment and decoded by top-k without NMS (``yolo11.postprocess.end2end_topk``).

    A NamedTuple, not a dataclass: DDP, Accelerate's fp32 output conversion and torch.compile walk tuples.
    """

    one2many: list[torch.Tensor]
    one2one: list[torch.Tensor]


def _box_branch(c: int, width: int, reg_max: int) -> nn.Sequential:
    return nn.Sequential(Conv(c, width, 3), Conv(width, width, 3), nn.Conv2d(width, 4 * reg_max, 1))


def _class_branch(c: int, width: int, num_classes: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Sequential(DWConv(c, c, 3), Conv(c, width, 1)),
        nn.Sequential(DWConv(width, width, 3), Conv(width, width, 1)),
        nn.Conv2d(width, num_classes, 1),
    )


class Detect(nn.Module):
    """Raw head maps: ``forward([N3, N4, N5]) -> [(B, 4 * reg_max + num_classes, H / s, W / s)]`` per stride.

    Box channels come first: 4 sides x ``reg_max`` bins of logits for distances in stride units (``reg_max`` 1:
    the distance itself). ``dfl`` is not used by ``forward`` (decoding lives in ``yolo11.postprocess``); it is
    kept so the state dict and parameter count match Ultralytics' (an ``nn.Identity`` when ``reg_max`` is 1).
    """

    def __init__(
        self,
        num_classes: int,
        in_channels: tuple[int, ...],
        reg_max: int = 16,
        strides: tuple[int, ...] = STRIDES,
    ) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.reg_max = reg_max
        self.strides = tuple(strides)
        box_width = max(16, in_channels[0] // 4, 4 * reg_max)
        cls_width = max(in_channels[0], min(num_classes, 100))
        self.cv2 = nn.ModuleList(_box_branch(c, box_width, reg_max) for c in in_channels)
        self.cv3 = nn.ModuleList(_class_branch(c, cls_width, num_classes) for c in in_channels)
        self.dfl = DFL(reg_max) if reg_max > 1 else nn.Identity()
        self.reset_bias()

    def _branches(self) -> list[tuple[nn.ModuleList, nn.ModuleList]]:
        return [(self.cv2, self.cv3)]

    @torch.no_grad()
    def reset_bias(self) -> None:
        """Ultralytics 8.4's bias init: box logits 2.0; class logits as if ~5 objects per 640 px image at each level."""
        for boxes, classes in self._branches():
            for box, cls, stride in zip(boxes, classes, self.strides, strict=True):
                box[-1].bias.fill_(2.0)
                cls[-1].bias.fill_(math.log(5 / self.num_classes / (640 / stride) ** 2))

    @staticmethod
    def _maps(features: list[torch.Tensor], boxes: nn.ModuleList, classes: nn.ModuleList) -> list[torch.Tensor]:
        return [torch.cat((box(x), cls(x)), 1) for x, box, cls in zip(features, boxes, classes, strict=True)]

    def forward(self, features: list[torch.Tensor]) -> list[torch.Tensor]:
        return self._maps(features, self.cv2, self.cv3)


class End2EndDetect(Detect):
    """YOLO26's head (Ultralytics' ``Detect`` with ``end2end=True``): the one-to-many branches ``cv2``/``cv3`` and
    one-to-one copies ``one2one_cv2``/``one2one_cv3``, which start equal to them, as Ultralytics' deepcopy.

    ``forward([N3, N4, N5]) -> End2EndMaps(one2many=[...], one2one=[...])`` in every mode. In training the one-to-one
    branch sees detached features, as in Ultralytics: its loss trains only itself, not the backbone and neck.
    """

    def __init__(
        self,
        num_classes: int,
        in_channels: tuple[int, ...],
        reg_max: int = 1,
        strides: tuple[int, ...] = STRIDES,
    ) -> None:
        super().__init__(num_classes, in_channels, reg_max, strides)
        self.one2one_cv2 = copy.deepcopy(self.cv2)
        self.one2one_cv3 = copy.deepcopy(self.cv3)

    def _branches(self) -> list[tuple[nn.ModuleList, nn.ModuleList]]:
        # reset_bias runs inside Detect.__init__, before the copies exist; they are made from the initialised branch
        branches = [(self.cv2, self.cv3)]
        if hasattr(self, "one2one_cv2"):
            branches.append((self.one2one_cv2, self.one2one_cv3))
        return branches

    def forward(self, features: list[torch.Tensor]) -> End2EndMaps:  # type: ignore[override]
        one2many = self._maps(features, self.cv2, self.cv3)
        detached = [x.detach() for x in features] if self.training else features
        return End2EndMaps(one2many, self._maps(detached, self.one2one_cv2, self.one2one_cv3))
