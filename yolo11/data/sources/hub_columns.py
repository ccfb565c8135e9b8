"""Where a Hub or folder dataset keeps its objects, found by the names popular datasets give them.

Objects are an ``objects`` (or COCO-style ``annotations``) column, a dict of lists or a list of dicts; or, in
datasets without one, top-level columns: a list of boxes per image (``bbox``, ``bboxes``) beside a list of
classes, or a single class for all the image's boxes.

An ``imagefolder``'s ``metadata.csv`` can hold only text: its nested values (``objects``, box lists, class lists)
arrive as JSON or as Python's repr (what ``pandas.DataFrame.to_csv`` writes for a dict or a list), and are parsed
into values here before anything else reads them.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass

import datasets

from yolo11.data.schema import DataSourceError

IMAGE_NAMES = ("image", "img")  # img: the name some Hub datasets use (cifar10 does)
OBJECTS_NAMES = ("objects", "annotations")
BBOX_NAMES = ("bbox", "bboxes", "boxes")
CATEGORY_NAMES = ("category", "categories", "category_id", "label", "labels", "class", "classes", "class_id")
TEXT_PREVIEW = 60  # characters of an unparsable text value quoted in the error


@dataclass(frozen=True)
class ObjectColumns:
    """The objects column (``objects`` or COCO-style ``annotations``; ``""`` where the fields are top-level
    columns) and the names of its box and class fields."""

    objects: str
    bbox: str
    category: str

    def path(self, field: str) -> str:
        """``objects.bbox`` (or ``bbox`` at the top level): a field as messages name it."""
        return f"{self.objects}.{field}" if self.objects else field

    def features(self, dataset: datasets.Dataset) -> dict:
        """The per-object features: the objects column's, or the top-level columns'."""
        return object_features(dataset.features[self.objects]) if self.objects else dataset.features


def pick(names, candidates: tuple[str, ...], what: str, where: str) -> str:
    """The first of ``candidates`` in ``names``; an error listing both when there is none."""
    for name in candidates:
        if name in names:
            return name
    raise DataSourceError(f"{where}: no {what} column (looked for {candidates}, found {sorted(names)})")


def object_features(feature: object) -> dict:
    """The per-object features of an ``objects`` column: a dict of lists (``Sequence({...})``) or a list of dicts
    (``List({...})``)."""
    inner = feature.feature if isinstance(feature, datasets.Sequence | datasets.List) else feature
    return inner.feature if isinstance(inner, datasets.Sequence | datasets.List) else inner


def find_columns(dataset: datasets.Dataset, where: str) -> tuple[datasets.Dataset, ObjectColumns]:
    """``(dataset, where its objects are)``: the dataset with its image column named ``image`` and its text
    columns parsed."""
    image = pick(dataset.features, IMAGE_NAMES, "image", where)
    if image != "image":
        dataset = dataset.rename_column(image, "image")
    dataset = parse_text_columns(dataset, where)
    features = dataset.features
    objects = next((name for name in OBJECTS_NAMES if name in features), None)
    if objects is not None:
        inner = object_features(features[objects])
        return dataset, ObjectColumns(objects, pick(inner, BBOX_NAMES, "objects bbox", where),
                                      pick(inner, CATEGORY_NAMES, "objects category", where))
    bbox = next((name for name in BBOX_NAMES if name in features), None)
    category = next((name for name in CATEGORY_NAMES if name in features), None)
    if bbox is None or category is None:
        # imagefolder without a metadata file beside the images labels them by their folder, as for classification
        hint = {("image", "label"): ": datasets read it as images labelled by folder name; put a metadata.jsonl "
                                    "(or metadata.csv) with the objects in each split folder, beside its images (a "
                                    "folder per class is an image-classification layout, without boxes)",
                ("image",): ": images without annotations that yolo11 recognises; a detection folder holds a data "
                            "YAML, YOLO labels/ beside images/ (with classes.txt when there is no YAML), COCO "
                            "jsons, Pascal VOC xml, LabelMe json, a Roboflow export, or a metadata.jsonl of objects "
                            "(docs/data.md, 'Sources')"}.get(tuple(sorted(features)), "")
        raise DataSourceError(f"{where}: no objects column (looked for {OBJECTS_NAMES}, or box columns {BBOX_NAMES} "
                              f"beside a class column {CATEGORY_NAMES}; found {sorted(features)}){hint}")
    return dataset, ObjectColumns("", bbox, category)


def parse_text_columns(dataset: datasets.Dataset, where: str) -> datasets.Dataset:
    """The object columns stored as text (``metadata.csv``) parsed into values; other columns untouched."""
    text = [name for name in (*OBJECTS_NAMES, *BBOX_NAMES, *CATEGORY_NAMES)
            if _is_text(dataset.features.get(name)) and _holds_nested(dataset, name)]
    if not text:
        return dataset

    def parse(batch: dict, indices: list[int]) -> dict:
        return {name: [_parse(value, name, index, where) for value, index in zip(batch[name], indices)]
                for name in text}

    # one batch: Arrow then infers each column's type from every row (ints in one row, floats in another: floats)
    return dataset.map(parse, batched=True, batch_size=None, with_indices=True, desc=f"parsing text in {where}")


def _is_text(feature: object) -> bool:
    return isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")


def _holds_nested(dataset: datasets.Dataset, name: str) -> bool:
    """A text column whose first value is a list or a dict (a column of class names stays text)."""
    first = next((v for v in dataset.select_columns([name])[name] if v is not None), None)
    return first is not None and first.lstrip().startswith(("[", "{"))


def _parse(value: str | None, name: str, index: int, where: str) -> object:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError:
        pass
    try:
        return ast.literal_eval(value)  # pandas writes a dict as its repr: single quotes, True, None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise DataSourceError(f"{where}: row {index}: column '{name}' holds text that is neither JSON nor a Python "
                              f"literal: {value[:TEXT_PREVIEW]!r}") from None
