"""``yolo11{n,s,m,l,x}_backbone`` and ``yolo26{n,s,m,l,x}_backbone`` in timm's registry, so that
``timm.create_model("yolo11n_backbone", features_only=True)`` builds our native backbone.

Imported when timm is: ``yolo11.models`` registers at once if timm is loaded, else when it loads
(``_register_when_timm_loads``). Importing timm costs ~2.7 s on a 2-core machine (it pulls in torchvision and
torch._dynamo), which a run with the native backbone never needs.
"""

from __future__ import annotations

from timm.models import build_model_with_cfg, generate_default_cfgs, register_model

from yolo11.architecture import FAMILIES, split_name
from yolo11.models.backbone import YOLO11Backbone


def _cfg(**kwargs) -> dict:
    # No hosted weights: YOLO11/YOLO26 weights come from an Ultralytics checkpoint (yolo11.weights), not the HF Hub.
    return dict(url="", input_size=(3, 640, 640), mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), **kwargs)


# timm requires the default configs to exist before the @register_model functions.
default_cfgs = generate_default_cfgs({f"{family}{key}_backbone": _cfg() for family in FAMILIES for key in "nsmlx"})


def _create(variant: str, pretrained: bool, **kwargs) -> YOLO11Backbone:
    family, scale = split_name(variant.removesuffix("_backbone"))
    return build_model_with_cfg(
        YOLO11Backbone,
        variant,
        pretrained,
        feature_cfg=dict(flatten_sequential=True, out_indices=(0, 1, 2)),
        kwargs_filter=("num_classes",),  # timm passes its default classifier size; a backbone has no classifier
        scale=scale,
        family=family,
        **kwargs,
    )


@register_model
def yolo11n_backbone(pretrained: bool = False, **kwargs) -> YOLO11Backbone:
    return _create("yolo11n_backbone", pretrained, **kwargs)


@register_model
def yolo11s_backbone(pretrained: bool = False, **kwargs) -> YOLO11Backbone:
    return _create("yolo11s_backbone", pretrained, **kwargs)


@register_model
def yolo11m_backbone(pretrained: bool = False, **kwargs) -> YOLO11Backbone:
    return _create("yolo11m_backbone", pretrained, **kwargs)


@register_model
def yolo11l_backbone(pretrained: bool = False, **kwargs) -> YOLO11Backbone:
    return _create("yolo11l_backbone", pretrained, **kwargs)


@register_model
def yolo11x_backbone(pretrained: bool = False, **kwargs) -> YOLO11Backbone:
    return _create("yolo11x_backbone", pretrained, **kwargs)


@register_model
def yolo26n_backbone(pretrained: bool = False, **kwargs) -> YOLO11Backbone:
    return _create("yolo26n_backbone", pretrained, **kwargs)


@register_model
def yolo26s_backbone(pretrained: bool = False, **kwargs) -> YOLO11Backbone:
    return _create("yolo26s_backbone", pretrained, **kwargs)


@register_model
def yolo26m_backbone(pretrained: bool = False, **kwargs) -> YOLO11Backbone:
    return _create("yolo26m_backbone", pretrained, **kwargs)


@register_model
def yolo26l_backbone(pretrained: bool = False, **kwargs) -> YOLO11Backbone:
    return _create("yolo26l_backbone", pretrained, **kwargs)


@register_model
def yolo26x_backbone(pretrained: bool = False, **kwargs) -> YOLO11Backbone:
    return _create("yolo26x_backbone", pretrained, **kwargs)
