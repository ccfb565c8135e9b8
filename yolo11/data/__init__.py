"""Data: sources -> ``datasets.Dataset`` in the Hub detection schema, transforms, the loader and batch previews.

The names below load with their modules on first use (``from yolo11.data import X`` included): the training
flags import ``yolo11.data.augment_params`` without loading cv2, torch and datasets.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULE_OF = {
    "DetectionCollate": "collate", "model_input": "collate",
    "DetectionDataset": "dataset", "EpochKeySampler": "dataset",
    "BatchHSV": "device_hsv",
    "LoaderConfig": "loader", "build_dataloader": "loader", "build_train_stream": "loader",
    "build_val_stream": "loader", "first_batches": "loader",
    "save_batch_preview": "preview",
    "BadSampleSummary": "schema", "DataSourceError": "schema", "DetectionSource": "schema",
    "class_names_of": "schema", "most_objects": "schema",
    "load_source": "sources",
    "PRESETS": "augment_params", "AugmentParams": "augment_params", "augment_preset": "augment_params",
}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        return getattr(importlib.import_module(f"yolo11.data.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module 'yolo11.data' has no attribute {name!r}")
