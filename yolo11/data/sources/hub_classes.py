"""Class names of a Hub or folder dataset, whichever way its objects carry their classes.

A ``ClassLabel`` (cppe-5, detection-datasets/*) names its ids. COCO-style ``annotations`` hold plain
``category_id`` integers: the names then come from names the caller gives, a single ``ClassLabel`` elsewhere in the
features that covers every id, or a ``categories`` column of ``{id, name}`` (ids then made contiguous in sorted
order, as for a COCO json); failing all of these, classes are named by their ids and a note says so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from yolo11.data.schema import DataSourceError
from yolo11.data.sources.box_format import object_field
from yolo11.data.sources.hub_columns import ObjectColumns
from yolo11.gate import MAX_CLASSES


@dataclass(frozen=True)
class Classes:
    """``names`` (index = class); ``class_of`` maps stored ids to classes where they differ (``None``: the stored
    id is the class); ``note`` says where the names came from when that was a guess, for the log."""

    names: list[str]
    class_of: dict[int, int] | None = None
    note: str = ""

    def index_of(self, stored: np.ndarray) -> np.ndarray:
        """The class ``(N,)`` int64 of each stored id ``(N,)``."""
        if self.class_of is None:
            return stored.astype(np.int64)
        return np.array([self.class_of[v] for v in stored.tolist()], np.int64)


def stored_ids(dataset: datasets.Dataset, columns: ObjectColumns, where: str) -> np.ndarray:
    """The class id stored for every object ``(N,)`` int64 (for every row where one class serves all its boxes); a
    missing one is an error naming the field."""
    values, _ = object_field(dataset, columns.objects, columns.category)
    field = columns.path(columns.category)
    if not pa.types.is_integer(values.type):
        raise DataSourceError(f"{where}: {field} holds {values.type}, not integer class ids")
    if values.null_count:
        raise DataSourceError(f"{where}: {field} has {values.null_count} objects without a class")
    return pc.cast(values, "int64").to_numpy(zero_copy_only=False) if len(values) else np.zeros(0, np.int64)


def find_classes(dataset: datasets.Dataset, columns: ObjectColumns, label: object, names: Sequence[str] | None,
                 where: str) -> Classes:
    """The ``Classes`` of the objects' class field (``columns.category``), whose feature is ``label``; ``names``
    given by the caller win. Raises ``DataSourceError`` when a stored id has no class (``check_classes``)."""
    ids = stored_ids(dataset, columns, where)
    field = columns.path(columns.category)
    if names is not None:
        classes = Classes([str(n) for n in names])
    elif isinstance(label, datasets.ClassLabel):
        classes = Classes(list(label.names))
    else:
        classes = (label_elsewhere(dataset.features, ids, f"{where}: {field}")
                   or categories_column(dataset, field, where) or named_by_id(ids, field, where))
    check_classes(classes, ids, field, where)
    return classes


def check_classes(classes: Classes, ids: np.ndarray, field: str, where: str) -> None:
    """Names unique, at most ``MAX_CLASSES``, and one for every id stored in ``field``."""
    repeated = [name for name, count in Counter(classes.names).items() if count > 1]
    if repeated:
        raise DataSourceError(f"{where}: class name {repeated[0]!r} is given to more than one class; names must be "
                              "unique")
    if len(classes.names) > MAX_CLASSES:
        raise DataSourceError(f"{where}: {len(classes.names)} classes, more than the {MAX_CLASSES} a model may have "
                              "(yolo11.gate.MAX_CLASSES)")
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
