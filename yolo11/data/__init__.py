"""Data: sources -> ``datasets.Dataset`` in the Hub detection schema, transforms, the loader and batch previews."""

from yolo11.data.collate import DetectionCollate, model_input
from yolo11.data.dataset import DetectionDataset, EpochKeySampler
from yolo11.data.device_hsv import BatchHSV
from yolo11.data.loader import LoaderConfig, build_dataloader, build_train_stream
from yolo11.data.preview import save_batch_preview
from yolo11.data.schema import BadSampleSummary, DataSourceError, DetectionSource, class_names_of
from yolo11.data.sources import load_source
from yolo11.data.transforms import PRESETS, AugmentParams, augment_preset

__all__ = ["PRESETS", "AugmentParams", "BadSampleSummary", "BatchHSV", "DataSourceError", "DetectionCollate",
           "DetectionDataset", "DetectionSource", "EpochKeySampler", "LoaderConfig", "augment_preset",
           "build_dataloader", "build_train_stream",
           "class_names_of", "load_source", "model_input", "save_batch_preview"]
