"""Weight I/O: our safetensors format, and import of Ultralytics checkpoints through a restricted unpickler."""

from yolo11.weights.safe_pickle import UnsafeCheckpointError
from yolo11.weights.safetensors_io import load_pretrained, load_weights, save_pretrained, save_weights
from yolo11.weights.ultralytics import load_ultralytics, ultralytics_state_dict

__all__ = [
    "UnsafeCheckpointError",
    "load_pretrained",
    "load_ultralytics",
    "load_weights",
    "save_pretrained",
    "save_weights",
    "ultralytics_state_dict",
]
