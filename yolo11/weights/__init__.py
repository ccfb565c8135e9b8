"""Weight I/O: our safetensors format, import of Ultralytics checkpoints through a restricted unpickler (and
export to them for Ultralytics users), and the
one resolver of weights references (local files and folders, the Hugging Face Hub, official names)."""

from yolo11.weights.resolve import WeightsNotFoundError, resolve_weights
from yolo11.weights.safe_pickle import UnsafeCheckpointError
from yolo11.weights.safetensors_io import load_pretrained, load_weights, save_pretrained, save_weights
from yolo11.weights.ultralytics import load_ultralytics, ultralytics_state_dict
from yolo11.weights.ultralytics_writer import save_ultralytics

__all__ = [
    "UnsafeCheckpointError",
    "WeightsNotFoundError",
    "load_pretrained",
    "load_ultralytics",
    "load_weights",
    "resolve_weights",
    "save_pretrained",
    "save_ultralytics",
    "save_weights",
    "ultralytics_state_dict",
]
