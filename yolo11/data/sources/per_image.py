"""Datasets with an annotation file per image (Pascal VOC xml, LabelMe json) -> rows of the Hub schema.

``layouts.py`` pairs each image with its file (``ImageFileSplit``); this module reads the files and checks the
images in worker processes, takes the class names from a label map or from the files of every split, and builds
the rows through ``named_boxes``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from yolo11.data.schema import BadSampleSummary
from yolo11.data.sources.checks import image_size
from yolo11.data.sources.labelme import read_labelme_json
from yolo11.data.sources.named_boxes import ImageAnnotation, annotated_rows, check_class_list, class_names
from yolo11.data.sources.parallel import ordered_map
from yolo11.data.sources.voc import read_label_map, read_voc_xml

READERS = {".xml": read_voc_xml, ".json": read_labelme_json}


@dataclass(frozen=True)
class ImageFileSplit:
    """One split: ``(image, annotation file)`` pairs, either side ``None`` when missing (an image without a file is
    a background; a file without its image is skipped by name). ``name`` identifies the pairs: the val split of a
    folder with one list is the train split under another key, and shares its name."""

    name: str
    pairs: tuple[tuple[Path | None, Path | None], ...]
    list_files: tuple[Path, ...] = ()  # VOC's ImageSets lists, whose changes key the cache


def _check_pair(task: tuple[Path | None, Path | None]) -> tuple[tuple[int, int] | str | None,
                                                                 ImageAnnotation | str | None]:
    """Run in a worker: ``(image size, or why the image is unusable, or None when not asked;
    annotation, or why its file is unusable, or None without one)``."""
    image, file = task
    size = None
    if image is not None:
        try:
            size = image_size(image)
        except (ValueError, OSError) as err:
            size = f"{image}: {err}, image skipped"
    annotation = None
    if file is not None:
        try:
            annotation = READERS[file.suffix.lower()](file)
        except (ValueError, OSError) as err:
            annotation = f"{file}: {err}"
    return size, annotation


def per_image_rows(splits: dict[str, ImageFileSplit], split: str, label_map: Path | None = None,
                   workers: int | None = None) -> tuple[list[dict], list[str], BadSampleSummary]:
    """Rows of one split. Without ``label_map`` the class names are read from the files of every split, so that
    each split's conversion numbers the classes alike; the images are checked for ``split`` only."""
    chosen = splits[split]
    files = {file for part in splits.values() for _, file in part.pairs if file is not None} if label_map is None \
        else set()
    tasks = list(chosen.pairs) + [(None, file) for file in sorted(files - {file for _, file in chosen.pairs})]
    results = ordered_map(_check_pair, tasks, workers=workers, desc=f"converting {chosen.name}")
    if label_map is not None:
        names = check_class_list(read_label_map(label_map), os.fspath(label_map))
    else:
        where = ", ".join(sorted({os.fspath(file.parent) for file in files})[:3])
        names = class_names((annotation for _, annotation in results), where)
    items = [(image, size if image is not None else f"{file}: no image of this name beside it (or in JPEGImages/), "
              "skipped", annotation)
             for (image, file), (size, annotation) in zip(chosen.pairs, results[:len(chosen.pairs)], strict=True)]
    rows, summary = annotated_rows(items, names, label_map.name if label_map else "the class names")
    return rows, names, summary


def per_image_fingerprint_files(splits: dict[str, ImageFileSplit], split: str, label_map: Path | None) -> list[Path]:
    """Files whose size/mtime decide whether a cached conversion is still valid: the split's images and lists,
    the label map, and every annotation file whose names may number the classes."""
    chosen = splits[split]
    parts = splits.values() if label_map is None else [chosen]
    files = sorted({file for part in parts for _, file in part.pairs if file is not None})
    images = [image for image, _ in chosen.pairs if image is not None]
    # a listed id whose xml is missing is skipped by name at conversion; its absence is keyed by the list files
    return [*chosen.list_files, *([label_map] if label_map else []), *(p for p in files if p.exists()), *images]
