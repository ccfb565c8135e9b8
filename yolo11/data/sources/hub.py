"""Hub datasets and local dataset folders: load, pick the split, normalise columns and boxes to our schema."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path

import datasets
import numpy as np
from huggingface_hub import constants as hub_constants
from PIL import Image

from yolo11.data.schema import DataSourceError, detection_features
from yolo11.data.sources.box_format import box_array, resolve_bbox_format
from yolo11.data.sources.checks import oriented_size
from yolo11.data.sources.hub_classes import find_classes
from yolo11.data.sources.hub_columns import find_columns, object_features
from yolo11.data.sources.splits import choose_split

CROWD_NAME = "iscrowd"  # COCO's flag for a region of many objects: skipped, as for a COCO json


def load_hub(repo_id: str) -> datasets.DatasetDict:
    """``datasets.load_dataset(repo_id)``, every split (the Hub's builders prepare them all whichever is asked for),
    with a clear error when the Hub cannot be reached."""
    try:
        return datasets.load_dataset(repo_id)
    except Exception as err:  # connection errors come as many types (ConnectionError, HfHubHTTPError, OSError...)
        reason = "HF_HUB_OFFLINE is set" if hub_constants.HF_HUB_OFFLINE else f"{type(err).__name__}: {err}"
        raise DataSourceError(
            f"could not load {repo_id!r} from the Hugging Face Hub ({reason}). To use a local copy, save it once "
            f"with datasets.load_dataset({repo_id!r}).save_to_disk('DIR') on a machine with network and pass "
            "--data DIR, or pass a COCO json or an Ultralytics data YAML.") from None


def load_disk(folder: Path) -> datasets.Dataset | datasets.DatasetDict:
    """A ``save_to_disk`` folder (a Dataset or a DatasetDict), else a folder of data files such as a clone of a Hub
    dataset repository (``datasets.load_dataset(folder)``: parquet, json... split by file name)."""
    saved = (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()
    try:
        return datasets.load_from_disk(os.fspath(folder)) if saved else datasets.load_dataset(os.fspath(folder))
    except Exception as err:
        raise DataSourceError(f"{folder}: neither a save_to_disk dataset folder nor a folder of dataset files "
                              f"({type(err).__name__}: {err})") from None


def pick_split(loaded: datasets.Dataset | datasets.DatasetDict, split: str, fallbacks: Sequence[str],
               flag: str | None, where: str) -> tuple[datasets.Dataset, str, str]:
    """``(dataset, split used, note)``: the split of a DatasetDict (``choose_split``'s fallbacks); a single
    Dataset serves every split."""
    if not isinstance(loaded, datasets.DatasetDict):
        return loaded, split, ""
    chosen, note = choose_split(list(loaded), split, fallbacks, flag, where)
    return loaded[chosen], chosen, note


def image_sizes(dataset: datasets.Dataset, where: str = "") -> np.ndarray:
    """``(rows, 2)`` width and height of every image: the columns when there are, else the image headers (with
    the EXIF orientation applied, as OpenCV decodes them)."""
    if "width" in dataset.column_names and "height" in dataset.column_names:
        return np.stack([np.asarray(dataset["width"], np.int64), np.asarray(dataset["height"], np.int64)], 1)
    sizes = np.zeros((len(dataset), 2), np.int64)
    images = dataset.select_columns(["image"]).cast_column("image", datasets.Image(decode=False))
    for index, row in enumerate(images):  # row by row: the column at once would hold every image in memory
        image = row["image"]
        source = io.BytesIO(image["bytes"]) if image.get("bytes") else image["path"]
        try:
            with Image.open(source) as im:
                sizes[index] = oriented_size(im)
        except (OSError, ValueError, TypeError) as err:
            raise DataSourceError(f"{where}: row {index}: cannot read the image {image.get('path') or ''} "
                                  f"({type(err).__name__}: {err})") from None
    return sizes


def normalise(dataset: datasets.Dataset, where: str, bbox_format: str = "auto",
              names: Sequence[str] | None = None) -> tuple[datasets.Dataset, list[str], str]:
    """``(dataset in our schema, class names, note)``: columns renamed, image not decoded (an ``Image`` feature,
    decoded or not, or a path string), crowd objects (``iscrowd: 1``) dropped, boxes made COCO ``xywh`` from
    ``bbox_format`` (``auto``: read from the data, see ``box_format``). Class names are ``names`` when given, else
    found by ``hub_classes.find_classes``; ``note`` says what ``auto`` chose and where guessed names came from,
    for the log."""
    dataset, columns = find_columns(dataset, where)
    objects_name, bbox_name, category_name = columns.objects, columns.bbox, columns.category
    inner = object_features(dataset.features[objects_name])
    classes = find_classes(dataset, objects_name, category_name, object_features(inner[category_name]), names,
                           where)
    features = detection_features(classes.names)
    sizes = image_sizes(dataset, where)
    boxes, rows = box_array(dataset, objects_name, bbox_name, where)
    bbox_format, box_note = resolve_bbox_format(bbox_format, boxes, sizes[rows], where,
                                               f"{objects_name}.{bbox_name}")
    note = "\n".join(n for n in (classes.note, box_note) if n)
    if dataset.features == features and bbox_format == "xywh":
        return dataset, classes.names, note
    dataset = dataset.cast_column("image", datasets.Image(decode=False))
    xyxy, class_of = bbox_format == "xyxy", classes.class_of

    def to_schema(row: dict, index: int) -> dict:
        objs = object_lists(row[objects_name], (bbox_name, category_name, "id", CROWD_NAME))
        count = len(objs[bbox_name])
        keep = [i for i in range(count) if objs[CROWD_NAME][i] != 1] if objs[CROWD_NAME] else range(count)
        boxes = [list(map(float, objs[bbox_name][i])) for i in keep]
        if xyxy:
            boxes = [[x1, y1, x2 - x1, y2 - y1] for x1, y1, x2, y2 in boxes]
        ids = objs["id"] if objs["id"] and None not in objs["id"] else range(count)
        category = [objs[category_name][i] for i in keep]
        image_id = str(row.get("image_id"))  # an int, or digits; anything else: the row number
        width, height = (int(v) for v in sizes[index])
        return {"image_id": int(image_id) if image_id.isdigit() else index, "image": row["image"],
                "width": width, "height": height,
                "objects": {"id": [ids[i] for i in keep], "area": [w * h for _, _, w, h in boxes], "bbox": boxes,
                            "category": category if class_of is None else [class_of[c] for c in category]}}

    converted = dataset.map(to_schema, with_indices=True, features=features, remove_columns=dataset.column_names,
                            desc=f"normalising {where}")
    return converted, classes.names, note


def object_lists(objects: dict | list | None, keys: tuple[str, ...]) -> dict[str, list]:
    """``keys`` of one row's objects as lists (``[]`` for a key the objects lack), from a dict of lists or a list
    of dicts."""
    if isinstance(objects, list):
        return {key: [o.get(key) for o in objects] if any(key in o for o in objects) else [] for key in keys}
    return {key: list((objects or {}).get(key) or []) for key in keys}
