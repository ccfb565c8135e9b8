"""YOLO26's end-to-end loss: a one-to-many and a one-to-one detection loss, weighted by an epoch schedule.

As Ultralytics 8.4.190's ``E2ELoss`` with ``v8DetectionLoss`` (``reg_max`` 1): the one-to-many branch is assigned
with ``topk`` 10, the one-to-one branch with ``topk`` 7 then ``topk2`` 1 (one anchor per GT, what lets inference
skip NMS). The total is ``w * loss_one2many + (1 - w) * loss_one2one``, ``w`` moving linearly from 0.8 at the
first epoch to 0.1 at the last (``one2many_weight``; ``End2EndLoss.set_epoch``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from yolo11.architecture import STRIDES
from yolo11.loss.detection_loss import DetectionLoss
from yolo11.models.head import End2EndMaps

START_ONE2MANY = 0.8
FINAL_ONE2MANY = 0.1


def one2many_weight(epoch: int, epochs: int) -> float:
    """Weight of the one-to-many loss during ``epoch`` (0-based) of ``epochs``; the one-to-one weight is
    ``max(1 - w, 0)``. Ultralytics' ``E2ELoss.decay(updates)``, with ``updates`` = epochs finished (its trainer calls
    ``update()`` after each epoch and sets ``updates`` so on resume)."""
    if epoch == 0:
        return START_ONE2MANY  # Ultralytics' initial gain, before any update (the formula gives the same value)
    return max(1 - epoch / max(epochs - 1, 1), 0) * (START_ONE2MANY - FINAL_ONE2MANY) + FINAL_ONE2MANY


class End2EndLoss(nn.Module):
    """``forward(maps, boxes, labels)`` -> ``(loss, parts)``, the same call as ``DetectionLoss``; no parameters.

    ``loss`` is ``w * loss_one2many + max(1 - w, 0) * loss_one2one`` (each already ``parts.sum() * B``) with ``w``
    set per epoch by ``set_epoch``; ``parts (3,)`` are the one-to-one branch's ``[box, cls, l1]``, the loss items
    Ultralytics logs for YOLO26. Move it to the training device (``.to(device)``): the two weights are a device
    buffer, so that a compiled or CUDA-graphed step reads the current epoch's values instead of capturing
    constants.
    """

    def __init__(
        self,
        num_classes: int,
        strides: Sequence[int] = STRIDES,
        box_gain: float = 7.5,
        cls_gain: float = 0.5,
        l1_gain: float = 1.5,
    ) -> None:
        super().__init__()
        gains = dict(box_gain=box_gain, cls_gain=cls_gain, dfl_gain=l1_gain)
        self.one2many = DetectionLoss(num_classes, strides, reg_max=1, topk=10, **gains)
        self.one2one = DetectionLoss(num_classes, strides, reg_max=1, topk=7, topk2=1, **gains)
        self.register_buffer("branch_weights", torch.zeros(2), persistent=False)  # [one2many, one2one]
        self.set_epoch(0, 1)

    @torch.no_grad()
    def set_epoch(self, epoch: int, epochs: int) -> None:
        """The branch weights of ``epoch`` (0-based) of ``epochs``; call before each epoch (and after a resume)."""
        weight = one2many_weight(epoch, epochs)
        # both in Python floats, then float32: the values Ultralytics' float32 losses are multiplied by
        self.branch_weights.copy_(torch.tensor([weight, max(1.0 - weight, 0)]))

    def forward(self, maps: End2EndMaps, boxes: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """Args: ``maps`` the model's output; ``boxes (B, M, 4)`` xyxy input pixels and ``labels (B, M)`` (``-1`` on
        padding rows), as ``DetectionLoss``."""
        loss_many, _ = self.one2many(maps.one2many, boxes, labels)
        loss_one, parts = self.one2one(maps.one2one, boxes, labels)
        return loss_many * self.branch_weights[0] + loss_one * self.branch_weights[1], parts
