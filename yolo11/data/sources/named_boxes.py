"""Annotations that name each object's class and give its pixel corners (Pascal VOC xml, Roboflow's CSV and CreateML
exports) -> rows of the Hub schema, with one set of checks: the size a file states against the image's, each box
against the image, each name against the classes. Also the one reading of the text files beside them (class lists,
image lists): bounded, in the encodings Windows tools write.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from yolo11.data.image_io import read_regular_file
from yolo11.data.schema import BadSampleSummary, DataSourceError
from yolo11.data.sources.checks import check_box, image_cell, objects_row
from yolo11.gate import MAX_CLASSES, FileRefusedError, check_class_names


@dataclass(frozen=True)
class NamedBox:
    name: str
    corners: tuple[float, float, float, float] | None  # x1 y1 x2 y2, pixels; None when unusable
    problem: str = ""  # why ``corners`` is None
    difficult: bool = False  # VOC's flag: left out, as Ultralytics' VOC converter leaves it out
    where: str = ""  # "line 12" in a table; "" numbers the objects of the image ("object 2")


@dataclass(frozen=True)
class ImageAnnotation:
    source: str  # the file messages name
    size: tuple[int, int] | None  # (width, height) as the file states it; None when it does not
    objects: tuple[NamedBox, ...]


# One image: (its path or None, its size or why it is unusable, its annotation, why that is unusable, or None for
# an image without objects). A missing image has a message in place of its size.
Item = tuple[Path | None, "tuple[int, int] | str", "ImageAnnotation | str | None"]


def class_names(annotations: Iterable[ImageAnnotation | str | None], where: str) -> list[str]:
    """Every object name, sorted: the classes of a source that does not list them (the same for each split when
    ``annotations`` covers every split)."""
    annotations = list(annotations)
    names = sorted({obj.name for annotation in annotations if isinstance(annotation, ImageAnnotation)
                    for obj in annotation.objects if obj.name})
    if not names:
        # every file refused (too large, a DOCTYPE, not UTF-8...): the reasons, not only their consequence
        unusable = [annotation for annotation in annotations if isinstance(annotation, str)]
        why = f" ({len(unusable)} annotation files unusable, the first: {unusable[0]})" if unusable else ""
        raise DataSourceError(f"{where}: no object names in any annotation, so no classes{why}")
    try:
        return check_class_list(names, where)
    except DataSourceError as err:  # a bad name (a control character): the file it came from, not only the folders
        culprit = next((annotation.source for annotation in annotations if isinstance(annotation, ImageAnnotation)
                        for obj in annotation.objects if obj.name and repr(obj.name) in str(err)), None)
        if culprit is None:
            raise
        raise DataSourceError(f"{err} (first in {culprit})") from None


def decode_text(data: bytes) -> str:
    """A text file's bytes as Windows tools write them too: UTF-8 without its byte-order mark, or UTF-16 with its
    mark (Notepad's "Unicode"); undecodable bytes replaced (a name or a number then fails its own check)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8-sig", errors="replace")


def read_list_file(path: Path, max_bytes: int) -> str:
    """The text (``decode_text``) of a one-entry-per-line file (class names, image ids) of at most ``max_bytes``,
    read as a regular file; ``DataSourceError`` naming it when unreadable."""
    try:
        return decode_text(read_regular_file(path, max_bytes))
    except (ValueError, OSError) as err:
        raise DataSourceError(f"{path}: {err}") from None


def check_class_list(names: list[str], where: str) -> list[str]:
    """``names`` as a class list: at most ``MAX_CLASSES``, the gate's ``MAX_NAMES_CHARS`` in all, no control
    character, no name twice (a list numbers the classes by position; ``datasets`` refuses a repeated name without
    naming the file)."""
    if len(names) > MAX_CLASSES:
        raise DataSourceError(f"{where}: {len(names)} classes, more than the {MAX_CLASSES} a model may have "
                              "(yolo11.gate.MAX_CLASSES)")
    try:  # the gate's bound on all the names' characters, which every copy (config, plots, JSON) pays again
        names = check_class_names(names, where)
    except FileRefusedError as err:
        raise DataSourceError(str(err)) from None
    first = {}
    for class_id, name in enumerate(names):
        if any(ord(char) < 32 or ord(char) == 127 for char in name):  # a line break would split every table row
            raise DataSourceError(f"{where}: the name of class {class_id}, {name!r}, holds a control character "
                                  "(a line break or tab); class names are one line of text")
        if name in first:
            raise DataSourceError(f"{where}: the class name {name!r} is listed twice (classes {first[name]} and "
                                  f"{class_id}); each class needs a name of its own")
        first[name] = class_id
    return names


def annotated_rows(items: Sequence[Item], names: list[str], names_source: str) -> tuple[list[dict], BadSampleSummary]:
    """Rows of the images that can be used, in order; every problem recorded in the summary by file and object."""
    class_of = {name: k for k, name in enumerate(names)}
    summary, rows, next_object_id = BadSampleSummary(), [], 1
    for index, (image, size, annotation) in enumerate(items):
        if isinstance(size, str):
            summary.skipped_images.append(size)
            continue
        if isinstance(annotation, str):
            summary.skipped_images.append(f"{annotation}, image skipped")
            continue
        objects = ([], []) if annotation is None else _checked_objects(annotation, size, class_of, names_source,
                                                                      summary)
        if objects is None:
            continue
        boxes, classes = objects
        summary.backgrounds += not boxes
        rows.append({"image_id": index, "image": image_cell(image), "width": size[0],
                     "height": size[1], "objects": objects_row(boxes, classes, next_object_id)})
        next_object_id += len(boxes)
    return rows, summary


def _checked_objects(annotation: ImageAnnotation, size: tuple[int, int], class_of: dict[str, int],
                     names_source: str, summary: BadSampleSummary) -> tuple[list, list] | None:
    """Checked boxes (``xyxy`` px) and classes of one image; ``None`` when the image is skipped: labelled for an
    image of another size, or with objects of which none is usable (trained as a background, the image would teach
    the model that its objects are not there)."""
    if annotation.size is not None and annotation.size != size:
        turned = " (turned by its EXIF orientation?)" if annotation.size == size[::-1] else ""
        summary.skipped_images.append(f"{annotation.source}: labelled for a {annotation.size[0]}x"
                                      f"{annotation.size[1]} image, but its image is {size[0]}x{size[1]}{turned}, "
                                      "image skipped")
        return None
    boxes, classes, bad = [], [], 0
    for number, obj in enumerate(annotation.objects, start=1):
        if obj.difficult:
            continue
        problem = obj.problem
        if not problem and obj.name not in class_of:
            problem = f"class {obj.name!r} is not in {names_source}"
        box = None
        if not problem:
            box, clipped, problem = check_box(np.array(obj.corners), *size)
            summary.clipped_boxes += clipped
        if box is None:
            summary.skipped_lines.append(f"{annotation.source}: {obj.where or f'object {number}'} "
                                         f"({obj.name or 'unnamed'}): {problem}, skipped")
            bad += 1
            continue
        boxes.append(box)
        classes.append(class_of[obj.name])
    if not boxes and bad:
        summary.skipped_images.append(f"{annotation.source}: none of its {bad} objects is usable, image skipped")
        return None
    return boxes, classes
