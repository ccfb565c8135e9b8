"""Data: sources -> ``datasets.Dataset`` in the Hub detection schema, transforms, the loader and batch previews."""

from yolo11.data.schema import BadSampleSummary, DataSourceError, DetectionSource, class_names_of
from yolo11.data.sources import load_source

__all__ = ["BadSampleSummary", "DataSourceError", "DetectionSource", "class_names_of", "load_source"]
