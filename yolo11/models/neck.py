"""The YOLO11 / YOLO26 PAN-FPN neck (Ultralytics layers 11-22): a top-down path, then a bottom-up path.

Ultralytics layer -> attribute (parameter-free layers 11, 12, 14, 15, 18, 21 are the upsamples and concats):
13 ``top_down_p4``, 16 ``top_down_p3``, 17 ``down_p3``, 19 ``bottom_up_p4``, 20 ``down_p4``, 22 ``bottom_up_p5``.
"""

from __future__ import annotations

import torch
from torch import nn

from yolo11.models.blocks import C3k2, Conv

# Ultralytics layer index of each neck module, for mapping checkpoint keys.
ULTRALYTICS_LAYERS = {
    13: "top_down_p4",
    16: "top_down_p3",
    17: "down_p3",
    19: "bottom_up_p4",
    20: "down_p4",
    22: "bottom_up_p5",
}


class YOLO11Neck(nn.Module):
    """Fuses backbone maps P3/P4/P5 (widths ``in_channels``) into three maps of widths ``out_channels``.

    ``forward([P3, P4, P5])`` with strides 8/16/32 -> ``[N3, N4, N5]`` at the same strides. The P4 path widths
    (layers 13 and 20) equal ``out_channels[1]`` and layer 17 equals ``out_channels[0]``, as in the YAML.
    ``c3k`` is the flag for layers 13/16/19 (YOLO11: the scale's; YOLO26: always); layer 22 always uses C3k inner
    blocks (the YAML says so), or Bottleneck + PSABlock ones when ``p5_attention`` (YOLO26).
    """

    def __init__(
        self,
        in_channels: tuple[int, int, int],
        out_channels: tuple[int, int, int],
        num_blocks: int,
        c3k: bool,
        p5_attention: bool = False,
    ) -> None:
        super().__init__()
        in3, in4, in5 = in_channels
        out3, out4, out5 = out_channels
        self.upsample = nn.Upsample(scale_factor=2, mode="nearest")
        self.top_down_p4 = C3k2(in5 + in4, out4, num_blocks, c3k=c3k)
        self.top_down_p3 = C3k2(out4 + in3, out3, num_blocks, c3k=c3k)
        self.down_p3 = Conv(out3, out3, 3, 2)
        self.bottom_up_p4 = C3k2(out3 + out4, out4, num_blocks, c3k=c3k)
        self.down_p4 = Conv(out4, out4, 3, 2)
        # YOLO26 writes `C3k2 [1024, True, 0.5, True]` with repeats 1 where YOLO11 has 2: one block at every scale
        self.bottom_up_p5 = C3k2(out4 + in5, out5, 1 if p5_attention else num_blocks, c3k=True, attn=p5_attention)

    def forward(self, features: list[torch.Tensor]) -> list[torch.Tensor]:
        p3, p4, p5 = features
        t4 = self.top_down_p4(torch.cat((self.upsample(p5), p4), 1))
        n3 = self.top_down_p3(torch.cat((self.upsample(t4), p3), 1))
        n4 = self.bottom_up_p4(torch.cat((self.down_p3(n3), t4), 1))
        n5 = self.bottom_up_p5(torch.cat((self.down_p4(n4), p5), 1))
        return [n3, n4, n5]
