"""Writing an Ultralytics-format YOLO11 checkpoint in a test, without the ultralytics package.

A finished Ultralytics run saves ``{"model": DetectionModel in fp16, "ema": None, "train_args": {...}, "date",
"version", ...}``; the ``DetectionModel`` keeps its layers in ``.model`` (an ``nn.Sequential``, index = Ultralytics
layer) and its class names in ``.names`` (``{0: "person", ...}``). This writes the same structure: the pickle names
the class ``ultralytics.nn.tasks.DetectionModel`` (a stand-in module registered while saving) and torch module
containers, exactly the globals a real checkpoint names and our restricted unpickler turns into stubs.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

from yolo11.models.detector import YOLO11Detector
from yolo11.weights.ultralytics import HEAD_LAYER, ultralytics_key

_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


class DetectionModel(nn.Module):
    """Stand-in for ``ultralytics.nn.tasks.DetectionModel`` (pickled under that name)."""


@contextlib.contextmanager
def _ultralytics_modules() -> Iterator[None]:
    """Make ``ultralytics.nn.tasks.DetectionModel`` importable while pickling, then restore ``sys.modules``."""
    names = ("ultralytics", "ultralytics.nn", "ultralytics.nn.tasks")
    saved = {name: sys.modules.get(name) for name in names}
    modules = {name: types.ModuleType(name) for name in names}
    modules["ultralytics.nn.tasks"].DetectionModel = DetectionModel
    DetectionModel.__module__, DetectionModel.__qualname__ = "ultralytics.nn.tasks", "DetectionModel"
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _child(parent: nn.Module, path: list[str]) -> nn.Module:
    for name in path:
        if name not in parent._modules:
            parent.add_module(name, nn.Module())
        parent = parent._modules[name]
    return parent


def write_ultralytics_checkpoint(model: YOLO11Detector, names: list[str], path: Path) -> Path:
    """``model``'s weights (fp16, as Ultralytics stores them) in an Ultralytics checkpoint with ``names``."""
    layers = nn.Sequential(*[nn.Module() for _ in range(HEAD_LAYER + 1)])  # layers 11, 12... stay empty
    for key, tensor in model.state_dict().items():
        parts = ultralytics_key(key).split(".")  # model.<layer>.<...>.<tensor>
        owner = _child(layers[int(parts[1])], parts[2:-1])
        value = tensor.detach().clone()
        value = value.half() if value.is_floating_point() else value
        if parts[-1] in _BUFFERS:
            owner.register_buffer(parts[-1], value)
        else:
            owner.register_parameter(parts[-1], nn.Parameter(value, requires_grad=False))
    detection_model = DetectionModel()
    detection_model.model = layers
    detection_model.names = dict(enumerate(names))
    detection_model.nc = len(names)
    detection_model.stride = torch.tensor([8.0, 16.0, 32.0])
    detection_model.yaml = {"nc": len(names), "scale": model.config["name"][-1], "yaml_file": "yolo11.yaml"}
    checkpoint = {"date": "2026-01-01T00:00:00", "version": "8.4.190", "epoch": -1, "best_fitness": None,
                  "model": detection_model, "ema": None, "updates": None, "optimizer": None,
                  "train_args": {"model": f"{model.config['name']}.pt", "imgsz": 640}}
    path.parent.mkdir(parents=True, exist_ok=True)
    with _ultralytics_modules():
        torch.save(checkpoint, path)
    return path
