"""Our weight format: safetensors tensors plus the ``create_model`` config as JSON.

- ``save_pretrained(model, directory)`` -> ``directory/model.safetensors`` + ``directory/config.json``;
- ``save_weights(model, file)`` -> one ``.safetensors`` file, the config in its metadata (used for run outputs);
- ``load_pretrained`` / ``load_weights`` rebuild the model with ``create_model(**config)`` and load strictly.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, safe_open, save_file
from torch import nn

from yolo11.models.blocks import Conv
from yolo11.models.detector import YOLO11Detector, create_model

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"


def _tensors(model: YOLO11Detector) -> dict:
    if any(isinstance(m, Conv) and not isinstance(m.bn, nn.BatchNorm2d) for m in model.modules()):
        raise ValueError("cannot save a fused model (its BatchNorms are folded away); save before fuse()")
    return {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}


def _build(config: dict, state: dict) -> YOLO11Detector:
    model = create_model(name=config["name"], num_classes=config["num_classes"], backbone=config.get("backbone"))
    model.load_state_dict(state, strict=True)
    return model


def save_pretrained(model: YOLO11Detector, directory: str | Path) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(_tensors(model), directory / WEIGHTS_NAME)
    (directory / CONFIG_NAME).write_text(json.dumps(model.config, indent=2) + "\n")
    return directory


def load_pretrained(directory: str | Path) -> YOLO11Detector:
    directory = Path(directory)
    config = json.loads((directory / CONFIG_NAME).read_text())
    return _build(config, load_file(directory / WEIGHTS_NAME))


def save_weights(model: YOLO11Detector, file: str | Path) -> Path:
    """Write ``model``'s tensors and config; refuses (``ValueError``) weights that are not all finite."""
    file = Path(file)
    tensors = _tensors(model)
    bad = [name for name, t in tensors.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise ValueError(f"not writing {file}: {len(bad)} tensors hold non-finite values (e.g. {bad[0]})")
    file.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, file, metadata={"config": json.dumps(model.config)})
    return file


def load_weights(path: str | Path) -> YOLO11Detector:
    """Load a ``.safetensors`` file, a ``save_pretrained`` folder, or an Ultralytics ``.pt`` checkpoint."""
    path = Path(path)
    if path.is_dir():
        return load_pretrained(path)
    if path.suffix == ".pt":
        from yolo11.weights.ultralytics import load_ultralytics

        return load_ultralytics(path)
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata() or {}
    if "config" not in metadata:
        raise ValueError(f"{path}: no model config in the safetensors metadata; was it written by save_weights?")
    return _build(json.loads(metadata["config"]), load_file(path))
