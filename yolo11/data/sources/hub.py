"""Hub datasets and ``save_to_disk`` folders: load, pick the split, normalise columns to our schema."""

from __future__ import annotations

import io
import os
from pathlib import Path

import datasets
from huggingface_hub import constants as hub_constants
from PIL import Image

from yolo11.data.schema import DataSourceError, detection_features
from yolo11.data.sources.checks import oriented_size

BBOX_NAMES = ("bbox", "bboxes", "boxes")
CATEGORY_NAMES = ("category", "categories", "label", "labels", "class", "classes")


def load_hub(repo_id: str, split: str) -> datasets.Dataset:
    """``datasets.load_dataset(repo_id, split=split)`` with a clear error when the Hub cannot be reached."""
    try:
        return datasets.load_dataset(repo_id, split=split)
    except ValueError as err:
        if "split" in str(err).lower():
            raise DataSourceError(f"Hub dataset {repo_id!r} has no split {split!r}: {err}") from None
        raise
    except Exception as err:  # connection errors come as many types (ConnectionError, HfHubHTTPError, OSError...)
        reason = "HF_HUB_OFFLINE is set" if hub_constants.HF_HUB_OFFLINE else f"{type(err).__name__}: {err}"
        raise DataSourceError(
            f"could not load {repo_id!r} from the Hugging Face Hub ({reason}). To use a local copy, save it once "
            f"with datasets.load_dataset({repo_id!r}).save_to_disk('DIR') on a machine with network and pass "
            "--data DIR, or pass a COCO json or an Ultralytics data YAML.") from None


def load_disk(folder: Path, split: str) -> datasets.Dataset:
    """A ``save_to_disk`` folder holding a Dataset, or a DatasetDict with ``split``."""
    try:
        loaded = datasets.load_from_disk(os.fspath(folder))
    except Exception as err:
        raise DataSourceError(f"{folder}: not a save_to_disk dataset folder ({err})") from None
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise DataSourceError(f"{folder}: no split {split!r} (has {sorted(loaded)})")
        return loaded[split]
    return loaded


def _pick(names, candidates: tuple[str, ...], what: str, where: str) -> str:
    for name in candidates:
        if name in names:
            return name
    raise DataSourceError(f"{where}: no {what} column (looked for {candidates}, found {sorted(names)})")


def normalise(dataset: datasets.Dataset, where: str) -> tuple[datasets.Dataset, list[str]]:
    """The dataset in our schema (columns renamed, image not decoded) and its class names."""
    objects_name = _pick(dataset.features, ("objects", "annotations"), "objects", where)
    objects = dataset.features[objects_name]
    inner = objects.feature if isinstance(objects, (datasets.Sequence, datasets.List)) else objects
    if isinstance(inner, datasets.Sequence | datasets.List):  # a list of per-object dicts
        inner = inner.feature
    bbox_name = _pick(inner, BBOX_NAMES, "objects bbox", where)
    category_name = _pick(inner, CATEGORY_NAMES, "objects category", where)
    label = inner[category_name]
    label = label.feature if hasattr(label, "feature") else label
    if not isinstance(label, datasets.ClassLabel):
        raise DataSourceError(f"{where}: objects.{category_name} is not a ClassLabel, so class names are unknown")
    class_names = list(label.names)
    features = detection_features(class_names)
    if dataset.features == features:
        return dataset, class_names
    dataset = dataset.cast_column("image", datasets.Image(decode=False))

    def to_schema(row: dict, index: int) -> dict:
        objs = row[objects_name]
        if isinstance(objs, list):  # list of dicts -> dict of lists
            objs = {key: [o[key] for o in objs] for key in (objs[0] if objs else {})}
        boxes = [list(map(float, b)) for b in objs.get(bbox_name, [])]
        width, height = row.get("width"), row.get("height")
        if width is None or height is None:  # read the header only
            image = row["image"]
            source = io.BytesIO(image["bytes"]) if image.get("bytes") else image["path"]
            with Image.open(source) as im:
                width, height = oriented_size(im)
        return {"image_id": int(row["image_id"]) if row.get("image_id") is not None else index,
                "image": row["image"], "width": width, "height": height,
                "objects": {"id": list(objs.get("id", range(len(boxes)))), "area": [w * h for _, _, w, h in boxes],
                            "bbox": boxes, "category": list(objs.get(category_name, []))}}

    converted = dataset.map(to_schema, with_indices=True, features=features, remove_columns=dataset.column_names,
                            desc=f"normalising {where}")
    return converted, class_names
