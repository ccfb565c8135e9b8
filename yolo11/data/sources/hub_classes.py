"""Class names of a Hub or folder dataset, whichever way its objects carry their classes.

A ``ClassLabel`` (cppe-5, detection-datasets/*) names its ids. COCO-style ``annotations`` hold plain
``category_id`` integers: the names then come from names the caller gives, a single ``ClassLabel`` elsewhere in the
features that covers every id, or a ``categories`` column of ``{id, name}`` (ids then made contiguous in sorted
order, as for a COCO json); failing all of these, classes are named by their ids and a note says so. Classes stored
as text (``"helmet"``, as many ``metadata.jsonl`` files write them) are numbered in sorted name order.

Guessed classes (names from the ids or from the text) are counted over every split of the dataset, so that training
and validation number them alike when validation lacks some.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from yolo11.data.schema import DataSourceError
from yolo11.data.sources.box_format import object_field
from yolo11.data.sources.hub_columns import ObjectColumns, find_columns
from yolo11.data.sources.named_boxes import check_class_list
from yolo11.gate import MAX_CLASSES

PREVIEW_NAMES = 10  # class names quoted in a note


@dataclass(frozen=True)
class Classes:
    """``names`` (index = class); ``class_of`` maps stored ids (or names, for classes stored as text) to classes
    where they differ (``None``: the stored id is the class); ``note`` says where the names came from when that was
    a guess, for the log."""

    names: list[str]
    class_of: dict[int, int] | dict[str, int] | None = None
    note: str = ""

    def index_of(self, stored: np.ndarray) -> np.ndarray:
        """The class ``(N,)`` int64 of each stored id or name ``(N,)``."""
        if self.class_of is None:
            return stored.astype(np.int64)
        return np.array([self.class_of[v] for v in stored.tolist()], np.int64)


def is_text(arrow_type: pa.DataType) -> bool:
    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)


def stored_classes(dataset: datasets.Dataset, columns: ObjectColumns, where: str) -> np.ndarray:
    """The class stored for every object ``(N,)`` (for every row where one class serves all its boxes): int64 ids,
    or an object array of names where the field holds text; a missing one is an error naming the field."""
    values, _ = object_field(dataset, columns.objects, columns.category)
    field = columns.path(columns.category)
    if pa.types.is_null(values.type) and not len(values):  # every object list empty: a split of backgrounds
        return np.zeros(0, np.int64)
    if not pa.types.is_integer(values.type) and not is_text(values.type):
        raise DataSourceError(f"{where}: {field} holds {values.type}, not integer class ids or class names")
    if values.null_count:
        raise DataSourceError(f"{where}: {field} has {values.null_count} objects without a class")
    if is_text(values.type):
        return values.to_numpy(zero_copy_only=False).astype(object)
    return pc.cast(values, "int64").to_numpy(zero_copy_only=False) if len(values) else np.zeros(0, np.int64)


def find_classes(dataset: datasets.Dataset, columns: ObjectColumns, label: object, names: Sequence[str] | None,
                 where: str, other_splits: Sequence[datasets.Dataset] = ()) -> Classes:
    """The ``Classes`` of the objects' class field (``columns.category``), whose feature is ``label``; ``names``
    given by the caller win. ``other_splits``: the dataset's other splits, whose classes count too where the names
    are guessed. Raises ``DataSourceError`` when a stored class has no name (``check_classes``)."""
    stored = stored_classes(dataset, columns, where)
    others = [other for split in other_splits if (other := split_classes(split, where)) is not None]
    if not len(stored) and any(len(other) for other in others):  # no object here: the classes as the others store
        stored = stored.astype(next(other.dtype for other in others if len(other)))
    field, text = columns.path(columns.category), stored.dtype == object
    if names is not None:
        names = [str(n) for n in names]
        classes = Classes(names, {name: k for k, name in enumerate(names)} if text else None)
    elif isinstance(label, datasets.ClassLabel):
        classes = Classes(list(label.names))
    else:
        every = np.concatenate([stored, *(other for other in others if other.dtype == stored.dtype)])
        if text:
            classes = named_by_text(every, field, where)
        else:
            classes = (label_elsewhere(dataset.features, every, f"{where}: {field}")
                       or categories_column(dataset, field, where) or named_by_id(every, field, where))
    check_classes(classes, stored, field, where)
    return classes


def split_classes(dataset: datasets.Dataset, where: str) -> np.ndarray | None:
    """The classes stored in another split; ``None`` where its objects cannot be read (loading it names why)."""
    try:
        dataset, columns = find_columns(dataset, where)
        return stored_classes(dataset, columns, where)
    except DataSourceError:
        return None


def check_classes(classes: Classes, ids: np.ndarray, field: str, where: str) -> None:
    """Names a class list (``check_class_list``: unique, bounded), and one for every id stored in ``field``."""
    check_class_list(list(classes.names), where)
    if ids.dtype == object:  # names as text: only names given by the caller can miss one
        unknown = [name for name in ids.tolist() if name not in classes.class_of]
        if unknown:
            raise DataSourceError(f"{where}: {field} holds class {unknown[0]!r}, not one of the "
                                  f"{len(classes.names)} names given ({len(unknown)} objects)")
        return
    known = np.array(sorted(classes.class_of), np.int64) if classes.class_of is not None else None
    unknown = ids[~np.isin(ids, known)] if known is not None else ids[(ids < 0) | (ids >= len(classes.names))]
    if len(unknown):
        have = "the 'categories' ids" if known is not None else f"0..{len(classes.names) - 1}"
        raise DataSourceError(f"{where}: {field} holds class id {int(unknown[0])}, outside {have} "
                              f"({len(unknown)} objects)")


def class_labels(feature: object, path: str = "") -> list[tuple[str, datasets.ClassLabel]]:
    """Every ``ClassLabel`` in a (nested) feature, with its column path."""
    if isinstance(feature, datasets.ClassLabel):
        return [(path, feature)]
    if isinstance(feature, dict):
        return [found for key, sub in feature.items() for found in class_labels(sub, f"{path}.{key}".lstrip("."))]
    inner = getattr(feature, "feature", None)
    return class_labels(inner, path) if inner is not None else []


def label_elsewhere(features: datasets.Features, ids: np.ndarray, what: str) -> Classes | None:
    """The one ``ClassLabel`` in the features that has a name for every stored id, if exactly one does; ``what``
    names the field of the ids in the note."""
    fits = [(path, label) for path, label in class_labels(features)
            if not len(ids) or (ids.min() >= 0 and ids.max() < label.num_classes)]
    if len(fits) != 1:
        return None
    path, label = fits[0]
    return Classes(list(label.names), note=f"{what} holds plain ids; class names taken from the ClassLabel {path}")


def categories_column(dataset: datasets.Dataset, field: str, where: str) -> Classes | None:
    """Names from a ``categories`` column of COCO ``{id, name}`` entries (read from the first row: the same list
    on every row), ids made contiguous in sorted order; ``None`` when there is no such column, or when it is
    ``field``, the objects' classes themselves (a top-level class list of that name)."""
    if "categories" not in dataset.column_names or field == "categories" or not len(dataset):
        return None
    entries = dataset.select_columns(["categories"])[0]["categories"]
    if isinstance(entries, dict):  # Sequence({...}): a dict of lists
        entries = [dict(zip(entries, values, strict=True)) for values in zip(*entries.values(), strict=True)]
    if not isinstance(entries, list) or not all(isinstance(e, dict) and type(e.get("id")) is int and "name" in e
                                                for e in entries):
        raise DataSourceError(f"{where}: the 'categories' column must list {{id, name}} entries like a COCO json's")
    entries = sorted(entries, key=lambda e: e["id"])
    return Classes([str(e["name"]) for e in entries], {e["id"]: k for k, e in enumerate(entries)})


def named_by_id(ids: np.ndarray, field: str, where: str) -> Classes:
    """Classes ``"0"`` .. the largest id, with a note saying how to give the names."""
    if not len(ids):
        raise DataSourceError(f"{where}: {field} holds plain class ids with no names, and there are no objects to "
                              "count the classes from; store the field as a datasets.ClassLabel(names=[...])")
    count = int(ids.max()) + 1
    if count > MAX_CLASSES:
        raise DataSourceError(f"{where}: {field} holds class id {count - 1}, past the {MAX_CLASSES} classes a model "
                              "may have (yolo11.gate.MAX_CLASSES)")
    return Classes([str(i) for i in range(count)], note=(
        f"{where}: {field} holds plain class ids with no names (no ClassLabel, no 'categories' column): classes are "
        f"named by their ids '0'..'{count - 1}'. To name them, store the field as datasets.ClassLabel(names=[...]) "
        "(cast_column, then save_to_disk) or pass names=[...] to yolo11.data.sources.hub.normalise"))


def named_by_text(names: np.ndarray, field: str, where: str) -> Classes:
    """Classes for names stored as text ``(N,)``, numbered in sorted order, with a note saying so."""
    ordered = sorted(set(names.tolist()))
    if not ordered:
        raise DataSourceError(f"{where}: {field} holds class names as text, and there are no objects to read the "
                              "classes from; store the field as a datasets.ClassLabel(names=[...])")
    if len(ordered) > MAX_CLASSES:
        raise DataSourceError(f"{where}: {field} holds {len(ordered)} class names, more than the {MAX_CLASSES} "
                              "classes a model may have (yolo11.gate.MAX_CLASSES)")
    preview = ", ".join(ordered[:PREVIEW_NAMES]) + (", ..." if len(ordered) > PREVIEW_NAMES else "")
    return Classes(ordered, {name: k for k, name in enumerate(ordered)}, note=(
        f"{where}: {field} holds class names as text: classes numbered in sorted order ({preview}); to choose the "
        "order, store the field as datasets.ClassLabel(names=[...])"))
