"""The assembled YOLO11 / YOLO26 detector: backbone (native or timm) -> PAN-FPN neck -> Detect head.

``create_model("yolo11n")`` builds Ultralytics' YOLO11n layer for layer (2,624,080 parameters with 80 classes),
``create_model("yolo26n")`` its YOLO26n (2,572,280). Ultralytics index of each part: backbone ``model.0-10``, neck
``model.11-22``, head ``model.23``.
"""

from __future__ import annotations

import torch
from torch import nn

from yolo11.architecture import FAMILIES, MODEL_NAMES, SCALES, STRIDES, Family, Scale, get_scale, split_name
from yolo11.models.backbone import YOLO11Backbone
from yolo11.models.blocks import Conv
from yolo11.models.head import Detect, End2EndDetect, End2EndMaps
from yolo11.models.neck import YOLO11Neck
from yolo11.models.timm_backbone import TimmBackbone

__all__ = ["MODEL_NAMES", "SCALES", "End2EndMaps", "YOLO11Detector", "YOLO26Detector", "create_model"]


class YOLO11Detector(nn.Module):
    """``forward(images (B, 3, H, W), H and W multiples of 32)`` -> three raw maps
    ``(B, 4 * reg_max + num_classes, H / s, W / s)`` for strides 8, 16, 32, box-distribution channels first,
    in every mode (decoding and NMS are in ``yolo11.postprocess``).

    ``images`` are float in ``[0, 1]`` or uint8 in ``[0, 255]``; uint8 images are scaled here, inside the model,
    so that a compiled model reads the uint8 batch once, in the kernel that feeds the first conv, instead of
    a separate float32 copy of the batch being written and read again.
    """

    def __init__(
        self,
        scale: Scale,
        num_classes: int,
        backbone: nn.Module,
        backbone_channels: tuple[int, int, int],
        config: dict,
        family: Family = FAMILIES["yolo11"],
    ) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.reg_max = family.reg_max
        self.end2end = family.end2end
        self.strides = STRIDES
        self.config = dict(config)
        neck_channels = (scale.channels(256), scale.channels(512), scale.channels(1024))
        self.backbone = backbone
        self.neck = YOLO11Neck(backbone_channels, neck_channels, scale.repeats(2), c3k=scale.c3k or family.neck_c3k,
                               p5_attention=family.neck_p5_attention)
        head = End2EndDetect if family.end2end else Detect
        self.head = head(num_classes, neck_channels, self.reg_max, self.strides)

    @property
    def names(self) -> list[str] | None:
        """Class names, index = class id (``config["names"]``, so every weights file carries them); None if unknown."""
        return self.config.get("names")

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        if images.dtype == torch.uint8:
            images = images.float().div(255.0)
        return self.head(self.neck(self.backbone(images)))

    def fuse(self) -> YOLO11Detector:
        """Fold every Conv's BatchNorm into its conv (inference only: uses running statistics); returns self."""
        self.eval()
        for module in self.modules():
            if isinstance(module, Conv) and isinstance(module.bn, nn.BatchNorm2d):
                module.fuse()
        return self


class YOLO26Detector(YOLO11Detector):
    """YOLO26 (Ultralytics 8.4's ``yolo26{n,s,m,l,x}.yaml``): YOLO11's layout with a residual SPPF, C3k inner blocks
    in the neck, attention in the last neck block, ``reg_max`` 1 (no DFL) and a second, one-to-one head.

    ``forward(images)`` -> ``End2EndMaps(one2many, one2one)``: two lists of three raw maps
    ``(B, 4 + num_classes, H / s, W / s)`` for strides 8, 16, 32, box distances (stride units) first, in every
    mode. Decode ``one2one`` with ``yolo11.postprocess.end2end_topk`` (NMS-free) or ``one2many`` with NMS.
    """

    def forward(self, images: torch.Tensor) -> End2EndMaps:  # type: ignore[override]
        return super().forward(images)


def create_model(
    name: str = "yolo11n", num_classes: int = 80, backbone: str | None = None, pretrained: bool = False,
    names: list[str] | None = None,
) -> YOLO11Detector:
    """Build ``yolo11{n,s,m,l,x}`` or ``yolo26{n,s,m,l,x}`` (a ``YOLO26Detector``); ``backbone`` names a timm model
    to use instead of the native one; ``names`` are the class names (``num_classes`` of them), kept in
    ``model.config`` and so in every saved file.

    ``pretrained`` loads ImageNet weights for a timm backbone (needs the Hugging Face Hub or its cache); for the
    native backbone use ``yolo11.weights.load_ultralytics`` or ``load_pretrained`` instead.
    """
    # YOLO11 names keep their old parsing (a bare "n" is yolo11n); YOLO26 names go through the families table
    family, scale = split_name(name) if name.startswith("yolo26") else (FAMILIES["yolo11"], get_scale(name))
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    if backbone is None:
        if pretrained:
            raise ValueError("pretrained=True applies to a timm backbone; load YOLO11 weights with yolo11.weights")
        body: nn.Module = YOLO11Backbone(scale, family=family)
        channels = tuple(info["num_chs"] for info in body.feature_info)
    else:
        body = TimmBackbone(backbone, pretrained=pretrained)
        channels = body.out_channels
    if names is not None:
        names = [str(n) for n in names]
        if len(names) != num_classes:
            raise ValueError(f"{len(names)} class names for a model of {num_classes} classes")
    config = {"name": name, "num_classes": num_classes, "backbone": backbone, "names": names}
    detector = YOLO26Detector if family.name == "yolo26" else YOLO11Detector
    return detector(scale, num_classes, body, channels, config, family)
