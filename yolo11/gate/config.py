"""Model configs (``config.json``, safetensors metadata): a JSON object of known keys, a known scale,
``num_classes`` an int in 1..``MAX_CLASSES``, names matching it, and a timm backbone resolved among local timm
names only (no network access decided by a file) unless the user named it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from yolo11.architecture import FAMILIES, MODEL_NAMES, STRIDES
from yolo11.gate.files import FileRefusedError
from yolo11.gate.names import MAX_CLASSES

FAMILY_REG_MAX = {name: family.reg_max for name, family in FAMILIES.items()}  # DFL bins per family
SCALE_NAMES = MODEL_NAMES
# config.json keys: create_model's arguments plus what save_pretrained adds for readers without our code.
_CONFIG_KEYS = {"name", "num_classes", "backbone", "names", "model_type", "task", "strides", "reg_max", "head"}
_CONFIG_FIXED = {"task": "detect", "strides": list(STRIDES)}
FAMILY_HEAD = {name: family.head for name, family in FAMILIES.items()}  # as save_pretrained's config.json says


def check_model_config(config: Any, source: str | Path, user_backbone: str | None = None) -> dict:
    """``create_model`` arguments (name, num_classes, backbone, names) from a file's config, or a refusal.

    ``user_backbone`` is the backbone the user named (``--backbone``, ``load_weights(backbone=)``): only that name
    may be one that timm would fetch (``hf-hub:...``); a file's own must be a local timm model name."""
    if not isinstance(config, dict):
        raise FileRefusedError(source, f"the model config is a JSON {type(config).__name__}, expected an object")
    unknown = sorted(set(config) - _CONFIG_KEYS)
    if unknown:
        raise FileRefusedError(source, f"unknown model config keys {unknown}")
    for key, value in _CONFIG_FIXED.items():
        if key in config and config[key] != value:
            raise FileRefusedError(source, f"config {key} is {config[key]!r}; only {value!r} is supported")
    name, num_classes = config.get("name"), config.get("num_classes")
    if name not in SCALE_NAMES:
        raise FileRefusedError(source, f"config name {repr(name)[:40]} is not one of {', '.join(SCALE_NAMES)}")
    family = name[:-1]
    reg_max = FAMILY_REG_MAX[family]
    if "reg_max" in config and config["reg_max"] != reg_max:
        raise FileRefusedError(source, f"config reg_max is {config['reg_max']!r}; {name} has {reg_max!r}")
    # model_type is the family; "yolo11" for any name in folders written before YOLO26 had its own
    if "model_type" in config and config["model_type"] not in ("yolo11", family):
        raise FileRefusedError(source, f"config model_type is {repr(config['model_type'])[:40]}; {name} is "
                                       f"{family!r}")
    if "head" in config and config["head"] != FAMILY_HEAD[family]:
        raise FileRefusedError(source, f"config head is {repr(config['head'])[:40]}; {name} has "
                                       f"{FAMILY_HEAD[family]!r}")
    if type(num_classes) is not int or not 1 <= num_classes <= MAX_CLASSES:
        raise FileRefusedError(source, f"config num_classes {repr(num_classes)[:40]} is not an integer in "
                                       f"1..{MAX_CLASSES}")
    names = config.get("names")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise FileRefusedError(source, "config names must be a list of strings")
        if len(names) != num_classes:
            raise FileRefusedError(source, f"config has {len(names)} names for num_classes {num_classes}")
    backbone = config.get("backbone")
    if backbone is not None:
        check_backbone_name(backbone, source, user_backbone)
    return {"name": name, "num_classes": num_classes, "backbone": backbone, "names": names}


def check_backbone_name(backbone: Any, source: str | Path, user_backbone: str | None = None) -> None:
    """A backbone named by a file must be a timm model registered locally: a name like ``hf-hub:owner/repo``
    would have timm download its config (network access decided by the file). The user may name one."""
    if backbone == user_backbone:
        return
    import timm

    import yolo11.models  # noqa: F401 - registers our native backbones with timm

    if not isinstance(backbone, str) or ":" in backbone or not timm.is_model(backbone):
        raise FileRefusedError(source, f"backbone {str(backbone)[:80]!r} is not a locally known timm model name; "
                                       "a backbone named by a file is never fetched (pass --backbone with that "
                                       "name to allow it)")
