"""Ultralytics data YAML + YOLO txt labels (``class cx cy w h``, normalised) -> rows of the Hub schema."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from yolo11.data.image_io import read_regular_file
from yolo11.data.schema import BadSampleSummary, DataSourceError
from yolo11.data.sources.checks import IMAGE_SUFFIXES, check_box, image_size, objects_row
from yolo11.data.sources.parallel import ordered_map
from yolo11.gate import FileRefusedError, check_class_names, read_yaml

SPLIT_KEYS = ("train", "val", "test")
MAX_LABEL_BYTES = 64 << 20  # a label file of a million boxes is ~40 MB; more is not a label file


def names_coco_jsons(data: dict) -> bool:
    """Whether the YAML's splits are COCO jsons (``train: annotations/instances_train2017.json``)."""
    return any(isinstance(data.get(k), str) and data[k].endswith(".json") for k in SPLIT_KEYS)


def read_data_yaml(path: Path) -> dict:
    """The YAML as a dict with ``names`` as a list (``None`` for a YAML of COCO jsons without it: the jsons name
    the classes); raises ``DataSourceError`` for a file we cannot use."""
    try:
        data = read_yaml(path)  # the gate: safe_load, a !!python tag or a syntax error refused in one line
    except (OSError, FileRefusedError) as err:
        raise DataSourceError(f"cannot read the data YAML {err}") from None
    if not isinstance(data, dict):
        raise DataSourceError(f"{path}: a data YAML must be a mapping with path/train/val/names")
    names = data.get("names")
    if not names and names_coco_jsons(data):
        data["names"] = None
        return data
    if not names:
        raise DataSourceError(f"{path}: no 'names' (class names, a list or a dict index -> name)")
    try:
        names = check_class_names(names, path)  # the gate: a list (not a string), bounded in count and size
    except FileRefusedError as err:
        raise DataSourceError(str(err)) from None
    if "nc" in data and data["nc"] != len(names):  # Ultralytics rejects this too: which one is wrong is unknown
        raise DataSourceError(f"{path}: 'nc' is {data['nc']} but 'names' lists {len(names)} classes")
    data["names"] = names
    return data


def dataset_root(yaml_path: Path, data: dict) -> Path:
    """``path`` resolved against the YAML's folder first, then the working directory (as Ultralytics does)."""
    root = Path(data.get("path") or "")
    if root.is_absolute():
        return root
    for base in (yaml_path.parent, Path.cwd()):
        if (base / root).exists():
            return (base / root).resolve()
    return (yaml_path.parent / root).resolve()


def yaml_splits(data: dict) -> list[str]:
    return [k for k in SPLIT_KEYS if data.get(k)]


def coco_split(yaml_path: Path, data: dict, split: str) -> tuple[Path, Path | None] | None:
    """``(json, image folder or None)`` when the YAML names a COCO json for ``split``, else ``None``.

    ``images`` is optional: a mapping split -> folder, or one folder (``{split}`` replaced by the split name);
    paths are relative to the dataset root, as the splits are.
    """
    entry = data.get(split)
    if not (isinstance(entry, str) and entry.endswith(".json")):
        return None
    root = dataset_root(yaml_path, data)
    images = data.get("images")
    if isinstance(images, dict):
        images = images.get(split)
    if images is not None and not isinstance(images, str):
        raise DataSourceError(f"{yaml_path}: 'images' must be a folder or a mapping split -> folder")
    images = images.replace("{split}", split) if images else None
    return root / entry, (root / images if images else None)


def split_locations(yaml_path: Path, data: dict, split: str) -> list[Path]:
    """The folders, txt lists or jsons ``split`` names, resolved against the dataset root.

    A relative entry starting with ``../`` that does not exist is tried again without it, as Ultralytics does:
    a Roboflow export's ``data.yaml`` says ``train: ../train/images`` beside the ``train/`` folder."""
    root = dataset_root(yaml_path, data)
    entries = data[split] if isinstance(data[split], list) else [data[split]]
    locations = []
    for entry in map(str, entries):
        location = Path(entry) if Path(entry).is_absolute() else root / entry
        if not location.exists() and entry.startswith("../") and (root / entry[3:]).exists():
            location = root / entry[3:]
        locations.append(location)
    return locations


def list_split_images(yaml_path: Path, data: dict, split: str) -> list[Path]:
    """Image files of a split given as a folder, a txt of paths, or a list of either."""
    if split not in data or not data[split]:
        raise DataSourceError(f"{yaml_path}: no '{split}' split (has {yaml_splits(data)})")
    images: list[Path] = []
    for location in split_locations(yaml_path, data, split):
        if location.is_dir():
            images += sorted(p for p in location.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        elif location.is_file() and location.suffix == ".txt":
            for line in location.read_text().splitlines():
                if line.strip():
                    item = Path(line.strip())
                    images.append(item if item.is_absolute() else (location.parent / item).resolve())
        else:
            raise DataSourceError(f"{yaml_path}: '{split}' image folder or list {location} does not exist")
    if not images:
        raise DataSourceError(f"{yaml_path}: no images found for '{split}' in {data[split]}")
    return images


def label_path(image: Path, beside: bool = False) -> Path:
    """The parallel ``labels/`` file of an image: the last ``images`` folder in the path becomes ``labels``;
    ``beside``: the ``.txt`` of the same name in the image's folder."""
    if beside:
        return image.with_suffix(".txt")
    parts = list(image.parts)
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "images":
            parts[i] = "labels"
            break
    return Path(*parts).with_suffix(".txt")


def read_label_text(path: Path) -> str:
    """A label file's text; ``ValueError`` for a FIFO or device named ``.txt`` (a read would block or never end)
    or a file over ``MAX_LABEL_BYTES``."""
    return read_regular_file(path, MAX_LABEL_BYTES).decode(errors="replace")


def parse_label_file(path: Path, width: int, height: int, num_classes: int,
                     summary: BadSampleSummary) -> tuple[list[np.ndarray], list[int]]:
    """Valid boxes (``xyxy`` px) and classes of one label file; each bad line is skipped with a message.

    A line is ``class cx cy w h`` or, for segment labels, ``class x1 y1 x2 y2 ...`` (the polygon's extent is the
    box, as Ultralytics does). Exact duplicate lines are dropped silently.
    """
    boxes, classes, seen = [], [], set()
    for number, line in enumerate(read_label_text(path).splitlines(), start=1):
        fields = line.split()
        if not fields or tuple(fields) in seen:
            continue
        seen.add(tuple(fields))
        where = f"{path}:{number}"
        if len(fields) != 5 and (len(fields) < 7 or len(fields) % 2 == 0):
            summary.skipped_lines.append(f"{where}: expected 5 fields (class cx cy w h), got {len(fields)}")
            continue
        try:
            values = np.array([float(v) for v in fields], dtype=np.float64)
        except ValueError:
            summary.skipped_lines.append(f"{where}: non-numeric field in {line.strip()!r}")
            continue
        if not np.isfinite(values).all():
            summary.skipped_lines.append(f"{where}: non-finite value (nan or inf) in {line.strip()!r}")
            continue
        cls = values[0]
        if cls != int(cls) or not 0 <= cls < num_classes:
            summary.skipped_lines.append(f"{where}: class {fields[0]} is not in 0..{num_classes - 1}")
            continue
        if len(fields) == 5:
            cx, cy, w, h = values[1:]
            if w < 0 or h < 0:
                summary.skipped_lines.append(f"{where}: negative width or height")
                continue
            box = np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])
        else:
            xy = values[1:].reshape(-1, 2)
            box = np.concatenate([xy.min(0), xy.max(0)])
        box, clipped, reason = check_box(box * [width, height, width, height], width, height)
        if box is None:
            summary.skipped_lines.append(f"{where}: {reason}, line skipped")
            continue
        summary.clipped_boxes += clipped
        boxes.append(box)
        classes.append(int(cls))
    return boxes, classes


def check_image_and_labels(task: tuple[Path, Path, int]) -> tuple[tuple[int, int] | None, list, list,
                                                                    BadSampleSummary]:
    """One image's work, run in a worker: ``(size or None, boxes, classes, its own problems)``."""
    image, label, num_classes = task
    summary = BadSampleSummary()
    try:
        width, height = image_size(image)
    except (ValueError, OSError) as err:
        summary.skipped_images.append(f"{image}: {err}, image skipped")
        return None, [], [], summary
    try:  # exists, not is_file: a FIFO or device named .txt is refused with its reason, not read as "no labels"
        boxes, classes = parse_label_file(label, width, height, num_classes, summary) if label.exists() else ([], [])
    except (ValueError, OSError) as err:
        summary.skipped_images.append(f"{label}: {err}, image skipped")
        return None, [], [], summary
    return (width, height), boxes, classes, summary


def yolo_rows(yaml_path: Path, split: str, workers: int | None = None, data: dict | None = None,
              labels_beside_images: bool = False) -> tuple[list[dict], list[str], BadSampleSummary]:
    """Rows of one split; bad images are skipped and every problem is recorded in the summary.

    ``data`` is the YAML's content when it does not come from ``yaml_path`` (a folder recognised by
    ``layouts.py``: ``yaml_path`` is then its names file); ``labels_beside_images``: ``x.txt`` beside ``x.jpg``
    (darknet, CVAT YOLO 1.1, LabelImg) instead of the ``labels/`` folder beside ``images/``.
    The per-image checks run in ``workers`` processes (all cores when ``None``); the rows do not depend on it.
    """
    data = data or read_data_yaml(yaml_path)
    names = data["names"]
    images = list_split_images(yaml_path, data, split)
    labels = [label_path(image, labels_beside_images) for image in images]
    if not any(p.is_file() for p in labels):  # a few missing files are backgrounds; all missing is a wrong layout
        folders = sorted({os.fspath(p.parent) for p in labels})
        raise DataSourceError(f"{yaml_path}: no label file for any of the {len(images)} '{split}' images; expected "
                              f"YOLO txt labels in {', '.join(folders[:3])}{' ...' if len(folders) > 3 else ''}")
    use_stems = all(p.stem.isdigit() for p in images) and len({int(p.stem) for p in images}) == len(images)
    tasks = [(image, label, len(names)) for image, label in zip(images, labels)]
    checked = ordered_map(check_image_and_labels, tasks, workers=workers, desc=f"converting {yaml_path.stem} {split}")
    summary, rows, next_object_id = BadSampleSummary(), [], 1
    for index, (image, (size, boxes, classes, problems)) in enumerate(zip(images, checked, strict=True)):
        summary.merge(problems)
        if size is None:
            continue
        summary.backgrounds += not boxes
        rows.append({"image_id": int(image.stem) if use_stems else index,
                     "image": {"bytes": None, "path": os.fspath(image)}, "width": size[0], "height": size[1],
                     "objects": objects_row(boxes, classes, next_object_id)})
        next_object_id += len(boxes)
    return rows, names, summary


def yolo_fingerprint_files(yaml_path: Path, split: str, data: dict | None = None,
                           labels_beside_images: bool = False) -> list[Path]:
    """Files whose size/mtime decide whether a cached conversion is still valid."""
    data = data or read_data_yaml(yaml_path)
    images = list_split_images(yaml_path, data, split)
    labels = (label_path(image, labels_beside_images) for image in images)
    return [yaml_path, *images, *(p for p in labels if p.exists())]


def yolo_fingerprint_stats(yaml_path: Path, split: str, data: dict | None = None,
                           labels_beside_images: bool = False) -> list[tuple[str, int, int]]:
    """``(path, size, mtime_ns)`` of ``yolo_fingerprint_files``, in the same order, from one directory scan per
    folder instead of a ``Path`` and a ``stat`` per file: a cached start on COCO's 118k images spent most of its
    time here. Splits given as txt lists take the per-file way."""
    data = data or read_data_yaml(yaml_path)
    locations = split_locations(yaml_path, data, split) if data.get(split) else []
    if labels_beside_images or not locations or not all(location.is_dir() for location in locations):
        return [_stat(path) for path in yolo_fingerprint_files(yaml_path, split, data, labels_beside_images)]
    entries: dict[str, os.stat_result] = {}
    images: list[str] = []
    image_folders = [folder for location in locations for folder in _folders(os.fspath(location))]
    for folder in image_folders:
        images += [path for path in _scan(folder, entries) if os.path.splitext(path)[1].lower() in IMAGE_SUFFIXES]
    # Path order, part by part, as sorted(rglob) gives; within one folder that is the names' string order
    images.sort(key=None if len(image_folders) == 1 else lambda path: path.split(os.sep))
    if not images:
        list_split_images(yaml_path, data, split)  # its error names what is missing
    for folder in {os.path.dirname(_label_string(os.path.join(f, "x.jpg"))) for f in image_folders}:
        if folder not in image_folders:
            _scan(folder, entries)
    labels = [label for label in map(_label_string, images) if label in entries]
    stats = {os.fspath(yaml_path): yaml_path.stat()} | entries
    return [(path, stats[path].st_size, stats[path].st_mtime_ns) for path in [os.fspath(yaml_path), *images, *labels]]


def _stat(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return os.fspath(path), stat.st_size, stat.st_mtime_ns


def _folders(root: str) -> list[str]:
    """``root`` and every folder below it, not through symlinked folders (as ``Path.rglob``)."""
    folders, stack = [], [root]
    while stack:
        folder = stack.pop()
        folders.append(folder)
        with os.scandir(folder) as it:
            stack += [entry.path for entry in it if entry.is_dir(follow_symlinks=False)]
    return folders


def _scan(folder: str, into: dict[str, os.stat_result]) -> list[str]:
    """The files of ``folder`` (symlinks followed, as ``Path.stat``), their stats added to ``into``."""
    found = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                try:
                    if entry.is_dir():
                        continue
                    into[entry.path] = entry.stat()
                except OSError:  # a dangling link or a link loop: the conversion reports it by name
                    continue
                found.append(entry.path)
    except FileNotFoundError:  # a labels folder that does not exist: no labels
        pass
    return found


def _label_string(image: str) -> str:
    """``label_path`` on strings: the last ``images`` folder becomes ``labels``, the suffix ``.txt``."""
    head, found, tail = (os.sep + image).rpartition(f"{os.sep}images{os.sep}")
    path = f"{head}{os.sep}labels{os.sep}{tail}"[1:] if found else image
    return os.path.splitext(path)[0] + ".txt"
