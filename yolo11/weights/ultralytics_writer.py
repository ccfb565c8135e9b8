"""Write our weights as an Ultralytics ``.pt`` checkpoint, for users who deploy with Ultralytics' ``YOLO(...)``.

Ultralytics' loader (``ultralytics.nn.tasks.load_checkpoint`` in 8.4.190) requires ``ckpt["model"]`` to be a
pickled ``torch.nn.Module`` (it raises on anything else, and there is no state-dict or YAML path), so a file that
``YOLO("ours.pt")`` can predict and validate with must pickle Ultralytics' own ``DetectionModel``. We therefore
build that class from the installed ultralytics package inside this writer (never at import time), copy our
tensors into it by name (``ultralytics_key``: every key after the layer index is the same) and save
``{"model": DetectionModel, "ema": None, "train_args": {...}, "date", "version", ...}`` as a finished Ultralytics
run does. The file names only Ultralytics and torch module classes, tensors and plain containers, no class of
ours: our own ``load_weights`` reads it back through the restricted unpickler (``weights/safe_pickle.py``) without
importing ultralytics, exactly as it reads Ultralytics' official checkpoints.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import torch

from yolo11.models.detector import YOLO11Detector
from yolo11.weights.ultralytics import ultralytics_key

ULTRALYTICS_REQUIRED = ("--format pt builds Ultralytics' DetectionModel and needs the ultralytics package "
                        "(pip install ultralytics==8.4.190); our .safetensors and ONNX exports do not")


def ultralytics_detection_model(model: YOLO11Detector, imgsz: int = 640, data: str | None = None) -> torch.nn.Module:
    """Ultralytics' ``DetectionModel`` of the same scale and class count, holding ``model``'s weights (strict)."""
    try:
        from ultralytics.nn.tasks import DetectionModel
    except ImportError as error:
        raise ValueError(ULTRALYTICS_REQUIRED) from error
    if model.config.get("backbone"):
        raise ValueError(f"--format pt: the timm backbone {model.config['backbone']!r} has no Ultralytics layer; "
                         "only native YOLO11 models convert")
    detection = DetectionModel(f"{model.config['name']}.yaml", nc=model.num_classes, verbose=False)
    detection.load_state_dict({ultralytics_key(k): v for k, v in model.state_dict().items()}, strict=True)
    names = model.names or [str(k) for k in range(model.num_classes)]
    detection.names = dict(enumerate(names))
    # what a finished Ultralytics run leaves on its model (strip_optimizer turns args into a dict)
    detection.args = {"task": "detect", "imgsz": imgsz, "data": data}
    detection.eval()
    for parameter in detection.parameters():
        parameter.requires_grad = False
    return detection


def save_ultralytics(model: YOLO11Detector, path: str | Path, *, imgsz: int = 640, half: bool = False,
                     data: str | None = None) -> Path:
    """Write ``path`` (.pt) loadable by Ultralytics 8.4.190's ``YOLO(path)``; ``half`` stores float16 tensors as
    Ultralytics' own checkpoints do (its loader makes them float32 again). Written to a temporary file, then
    renamed: an interrupted export leaves no partial checkpoint.

    ``imgsz`` (the training size) and ``data`` (the training data) go into ``train_args`` as a finished
    Ultralytics run records them: ``YOLO(path)`` keeps exactly ``imgsz``, ``data``, ``task`` and ``single_cls`` of
    them (``Model._reset_ckpt_args``), so its ``predict`` runs at the trained size and its ``val`` finds the data
    without being told."""
    path = Path(path)
    if path.suffix != ".pt":
        raise ValueError(f"--format pt: the output must end in .pt (Ultralytics' loader checks it), got {path}")
    detection = ultralytics_detection_model(model, imgsz, data)
    import ultralytics  # importable: ultralytics_detection_model checked it; here for its version

    detection = detection.half() if half else detection.float()
    checkpoint = {
        "date": datetime.datetime.now().astimezone().isoformat(),
        "version": ultralytics.__version__,
        "license": "Apache-2.0 weights by yolo11-accelerate; the Ultralytics classes they load into are AGPL-3.0",
        "epoch": -1,  # a finished run: Ultralytics' resume refuses it, as for its own final weights
        "best_fitness": None,
        "model": detection,
        "ema": None,
        "updates": None,
        "optimizer": None,
        "train_args": {"task": "detect", "imgsz": imgsz, "data": data, "model": f"{model.config['name']}.yaml"},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    torch.save(checkpoint, partial)
    os.replace(partial, path)
    return path
