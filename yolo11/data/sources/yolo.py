"""Ultralytics data YAML + YOLO txt labels (``class cx cy w h``, normalised) -> rows of the Hub schema."""

from __future__ import annotations

import datetime
import functools
import os
import sys
from pathlib import Path

import numpy as np

from yolo11.data.image_io import is_image_name, read_regular_file
from yolo11.data.schema import BadSampleSummary, DataSourceError
from yolo11.data.sources.checks import (
    MAX_BOXES_PER_IMAGE,
    as_id,
    check_box,
    image_cell,
    image_size,
    listed_file_exists,
    objects_row,
    posix_name,
)
from yolo11.data.sources.named_boxes import check_class_list, decode_text, read_list_file
from yolo11.data.sources.parallel import ordered_map
from yolo11.gate import MAX_CLASSES, FileRefusedError, check_class_names, read_json, read_yaml

SPLIT_KEYS = ("train", "val", "test")
MAX_LABEL_BYTES = 64 << 20  # a label file of a million boxes is ~40 MB; more is not a label file
MAX_LABEL_LINES = 100_000  # rows parsed at most (duplicates, dropped after parsing, count): ~0.3 s of parsing
MAX_LABEL_LINE_CHARS = 1 << 20  # a polygon of ~100,000 points
BOX_RANGE_SLACK = 0.01  # Ultralytics' tolerance on normalised cx, cy, w, h (1.01 at most, -0.01 at least)
MAX_LIST_BYTES = 256 << 20  # a txt list of image paths: COCO train2017's 118k paths are 5 MB


def names_coco_jsons(data: dict) -> bool:
    """Whether the YAML's splits are COCO jsons (``train: annotations/instances_train2017.json``)."""
    return any(isinstance(data.get(k), str) and data[k].endswith(".json") for k in SPLIT_KEYS)


def read_data_yaml(path: Path) -> dict:
    """The YAML as a dict with ``names`` as a list (``None`` for a YAML of COCO jsons without it: the jsons name
    the classes); raises ``DataSourceError`` for a file we cannot use. As Ultralytics reads it: a ``validation``
    key stands for ``val``, ``nc`` alone names the classes ``class_0``..., and ``nc`` may be written ``'10'``."""
    try:
        data = read_yaml(path, words_as_text=True)  # the gate: safe_load; a !!python tag, a syntax error refused
    except (OSError, FileRefusedError) as err:
        raise DataSourceError(f"cannot read the data YAML {err}") from None
    if not isinstance(data, dict):
        raise DataSourceError(f"{path}: a data YAML must be a mapping with path/train/val/names")
    if "val" not in data and "validation" in data:
        data["val"] = data.pop("validation")
    if "path" in data:
        data["path"] = _root_text(path, data["path"])
    names = data.get("names")
    if not names and names_coco_jsons(data):
        data["names"] = None
        return data
    count = _class_count(path, data["nc"]) if data.get("nc") is not None else None
    if not names and count is not None:
        names = [f"class_{k}" for k in range(count)]
    if not names:
        raise DataSourceError(f"{path}: no 'names' (class names, a list or a dict index -> name)")
    if isinstance(names, dict) and all(isinstance(k, str) and as_id(k) is not None for k in names):
        names = {as_id(k): v for k, v in names.items()}  # a data YAML written as JSON has string keys
    try:
        names = check_class_names(names, path)  # the gate: a list (not a string), bounded in count and size
    except FileRefusedError as err:
        raise DataSourceError(str(err)) from None
    if count is not None and count != len(names):  # Ultralytics rejects this too: which one is wrong is unknown
        raise DataSourceError(f"{path}: 'nc' is {count} but 'names' lists {len(names)} classes")
    data["names"] = check_class_list(names, os.fspath(path))  # a name twice: datasets' error would name no file
    return data


def _root_text(path: Path, root: object) -> str | None:
    """``path:`` as text: a folder YAML reads as a number or a date (``path: 2024``) is that folder's name."""
    if root is None or isinstance(root, str):
        return root
    if isinstance(root, int | float | datetime.date) and not isinstance(root, bool):
        return str(root)
    raise DataSourceError(f"{path}: 'path' is {str(root)[:60]!r}; it must be the dataset's folder")


def _class_count(path: Path, nc: object) -> int:
    """``nc`` as a class count: an integer, or an integer written as a float or a string (``10.0``, ``'10'``)."""
    try:
        count = int(float(nc)) if isinstance(nc, int | float | str) and not isinstance(nc, bool) else None
    except (ValueError, OverflowError):
        count = None
    if count is None or count != float(nc) or not 0 < count <= MAX_CLASSES:
        raise DataSourceError(f"{path}: 'nc' is {str(nc)[:40]!r}; it must be the number of classes, 1..{MAX_CLASSES}")
    return count


def dataset_root(yaml_path: Path, data: dict) -> Path:
    """``path`` resolved against the YAML's folder first, then the working directory (as Ultralytics does), then
    where Ultralytics keeps datasets: ``./datasets`` and the ``datasets_dir`` of its settings, so that a YAML
    written for it (``path: coco``) finds the data it downloaded."""
    root = Path(data.get("path") or "")
    if root.is_absolute():
        return root
    bases = [yaml_path.parent, Path.cwd()]
    if data.get("path"):  # no path: the YAML's folder is the root, as Ultralytics takes it
        bases += [Path.cwd() / "datasets", *ultralytics_datasets_dir()]
    for base in bases:
        if (base / root).exists():
            return (base / root).resolve()
    return (yaml_path.parent / root).resolve()


@functools.cache
def ultralytics_datasets_dir() -> tuple[Path, ...]:
    """The ``datasets_dir`` of Ultralytics' ``settings.json`` (its config folder: ``$YOLO_CONFIG_DIR``, else the
    platform's), when there is one; read through the gate, never written."""
    if os.environ.get("YOLO_CONFIG_DIR"):
        config = Path(os.environ["YOLO_CONFIG_DIR"]).expanduser()
    elif sys.platform == "win32":
        config = Path.home() / "AppData" / "Roaming"
    elif sys.platform == "darwin":
        config = Path.home() / "Library" / "Application Support"
    else:
        config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    try:
        settings = read_json(config / "Ultralytics" / "settings.json", max_bytes=1 << 20)
    except (OSError, FileRefusedError):
        return ()
    folder = settings.get("datasets_dir") if isinstance(settings, dict) else None
    return (Path(folder),) if isinstance(folder, str) and folder else ()


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
    """Image files of a split given as a folder, a txt of paths, or a list of either (``split_images``)."""
    return split_images(yaml_path, data, split)[0]


def split_images(yaml_path: Path, data: dict, split: str) -> tuple[list[Path], list[str]]:
    """``(image files, why each missing one is skipped)`` of a split given as a folder (searched as Ultralytics'
    glob does: symlinked folders followed, hidden files such as macOS's ``._x.jpg`` left out), a txt of paths, or
    a list of either. A txt naming files that do not exist has them skipped, with a message; none existing, or
    a split with no image at all, raises ``DataSourceError``."""
    if split not in data or not data[split]:
        raise DataSourceError(f"{yaml_path}: no '{split}' split (has {yaml_splits(data)})")
    images: list[Path] = []
    missing: list[str] = []
    for location in split_locations(yaml_path, data, split):
        if location.is_dir():
            images += [Path(path) for path in _folder_images(os.fspath(location))]
        elif location.is_file() and is_image_name(location.name):
            raise DataSourceError(f"{yaml_path}: '{split}' is the image {location}; a split names a folder of "
                                  "images or a txt list of image paths")
        elif location.is_file():  # any other file is a list of paths, as Ultralytics reads it: train.TXT, a.list
            listed, absent = _listed_images(location)
            if absent and not listed:
                raise DataSourceError(f"{location}: none of the {len(absent)} images it lists exists (first: "
                                      f"{absent[0]}); relative paths are read from the list's folder, then from "
                                      "the working folder")
            images += listed
            missing += [f"{path}: listed in {location} but no such file, image skipped" for path in absent]
        else:
            hint = (" (an export without a validation split: export one, or set 'val' to the training images)"
                    if split == "val" and "train" in data else "")
            raise DataSourceError(f"{yaml_path}: '{split}' image folder or list {os.path.normpath(location)} does "
                                  f"not exist{hint}")
    if not images:
        raise DataSourceError(f"{yaml_path}: no images found for '{split}' in {data[split]}")
    return images, missing


def _folder_images(root: str) -> list[str]:
    """Image files in ``root`` and below, in ``sorted(Path.rglob)`` order (by path parts)."""
    found = []
    for folder in _folders(root):
        with os.scandir(folder) as it:
            # a link loop is no folder: listed, and the conversion says what is wrong with it
            found += [entry.path for entry in it if is_image_name(entry.name) and not _is_folder(entry)]
    return sorted(found, key=lambda path: path.split(os.sep))


def _listed_images(list_file: Path) -> tuple[list[Path], list[str]]:
    """``(existing images, missing paths)`` of a txt list: one path per line (``read_list_file``: UTF-8 with or
    without a byte-order mark, or UTF-16), Windows separators accepted; a relative path is read from the list's
    folder, then (as Ultralytics reads one not starting with ``./``) from the working folder."""
    text = read_list_file(list_file, MAX_LIST_BYTES)
    images, missing = [], []
    for line in text.splitlines():
        entry = line.strip()
        if not entry:
            continue
        item = Path(posix_name(Path(), entry))
        candidates = [item] if item.is_absolute() else [list_file.parent / item, Path.cwd() / item]
        found = next((c for c in candidates if listed_file_exists(c, link_counts=True)), None)
        if found is None:
            missing.append(os.path.abspath(candidates[0]))
        else:  # abspath, not resolve: a symlinked image keeps the label beside its link, as Ultralytics reads it
            images.append(Path(os.path.abspath(found)))
    return images, missing


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
    or a file over ``MAX_LABEL_BYTES``. A byte-order mark is dropped (Windows editors write one, as Ultralytics
    reads ``utf-8-sig``); UTF-16 with its mark (Notepad's "Unicode") is read as such."""
    return decode_text(read_regular_file(path, MAX_LABEL_BYTES))


# a value past float32's range (1e308) becomes inf and its line is refused by the bounds: no numpy warning too
@np.errstate(over="ignore")
def parse_label_file(path: Path, width: int, height: int, num_classes: int, summary: BadSampleSummary,
                     keypoint_fields: int = 0) -> tuple[list[np.ndarray], list[int]]:
    """Valid boxes (``xyxy`` px) and classes of one label file; each bad line is skipped with a message.

    A line is ``class cx cy w h`` or, for segment labels, ``class x1 y1 x2 y2 ...`` (the polygon's extent is the
    box, as Ultralytics does); with ``keypoint_fields`` (a pose dataset's ``kpt_shape`` product) a line of
    ``5 + keypoint_fields`` fields is a box followed by keypoints, and the keypoints are dropped. The box is taken
    where Ultralytics takes it (``cx cy w h`` each within -0.01..1.01: a box may stick out of the image, as objects
    cut by the frame are labelled) and clipped to the image. Duplicate rows (equal values, however written) are
    dropped, counted in one message (Ultralytics' "duplicate labels removed"). ``ValueError`` when the file has
    lines but none is usable: its image has objects, so it is skipped rather than trained as a background
    (Ultralytics drops it too).
    """
    boxes, classes, seen, duplicates = [], [], set(), 0
    problems_before = len(summary.skipped_lines)
    lines = read_label_text(path).splitlines()
    rows = sum(1 for line in lines if line.strip())
    if rows > MAX_LABEL_LINES:  # before any line is parsed: bounded time, and no flood of messages
        raise ValueError(f"{rows:,} label lines, more than the {MAX_LABEL_LINES:,} a label file may have")
    for number, line in enumerate(lines, start=1):
        where = f"{path}:{number}"
        if len(line) > MAX_LABEL_LINE_CHARS:  # a polygon of ~100,000 points; split() would hold ~30x the line
            summary.skipped_lines.append(f"{where}: a line of {len(line):,} characters, more than the "
                                         f"{MAX_LABEL_LINE_CHARS:,} a label line may have")
            continue
        fields = line.split()
        if keypoint_fields and len(fields) == 5 + keypoint_fields:
            fields = fields[:5]
        if not fields:
            continue
        if len(fields) != 5 and (len(fields) < 7 or len(fields) % 2 == 0):
            summary.skipped_lines.append(f"{where}: expected 5 fields (class cx cy w h), got {len(fields)}")
            continue
        try:
            values = np.array([float(v) for v in fields], dtype=np.float64)
        except ValueError:
            summary.skipped_lines.append(f"{where}: non-numeric field in {_preview(line)}")
            continue
        key = values.astype(np.float32).tobytes()  # as Ultralytics compares rows: float32 values, not their text
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        if not np.isfinite(values).all():
            summary.skipped_lines.append(f"{where}: non-finite value (nan or inf) in {_preview(line)}")
            continue
        cls = values[0]
        if cls != int(cls) or not 0 <= cls < num_classes:
            summary.skipped_lines.append(f"{where}: class {fields[0][:20]} is not in 0..{num_classes - 1}")
            continue
        if len(fields) == 5:
            xywh = values[1:]
        else:
            xy = values[1:].reshape(-1, 2)
            low, high = xy.min(0), xy.max(0)
            xywh = np.concatenate([(low + high) / 2, high - low])
        if xywh[2] < 0 or xywh[3] < 0:
            summary.skipped_lines.append(f"{where}: negative width or height")
            continue
        as_read = xywh.astype(np.float32)  # Ultralytics' bounds (utils.verify_image_label) on its float32 values
        if as_read.min() < -BOX_RANGE_SLACK or as_read.max() > 1 + BOX_RANGE_SLACK:
            summary.skipped_lines.append(f"{where}: box {' '.join(f'{v:g}' for v in xywh)} (cx cy w h) is not within "
                                         f"-{BOX_RANGE_SLACK}..{1 + BOX_RANGE_SLACK} of the image, line skipped")
            continue
        (cx, cy, w, h), scale = xywh, np.array([width, height, width, height], np.float64)
        corners = np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]) * scale
        inside = np.clip(corners, 0.0, scale)  # the part in the frame (Ultralytics clips it when it augments)
        box, _, reason = check_box(inside, width, height)  # inside the image already: its clipping is ours
        if box is None:
            summary.skipped_lines.append(f"{where}: {reason}, line skipped")
            continue
        summary.clipped_boxes += bool(np.abs(inside - corners).max() > 0.5)
        boxes.append(box)
        classes.append(int(cls))
    if len(boxes) > MAX_BOXES_PER_IMAGE:
        raise ValueError(f"{len(boxes):,} objects, more than the {MAX_BOXES_PER_IMAGE:,} one image may have")
    if not boxes and len(summary.skipped_lines) > problems_before:
        bad = len(summary.skipped_lines) - problems_before
        raise ValueError("its only label line is unusable" if bad == 1 else f"none of its {bad} label lines is usable")
    if duplicates:
        summary.skipped_lines.append(f"{path}: {duplicates} duplicate line{'s' * (duplicates > 1)} dropped")
    return boxes, classes


def _preview(line: str, chars: int = 80) -> str:
    """A label line as a message quotes it: its first ``chars`` characters (a line may be megabytes long)."""
    line = line.strip()
    return repr(line) if len(line) <= chars else f"{line[:chars]!r}... ({len(line):,} characters)"


def keypoint_fields(data: dict) -> int:
    """Fields of keypoints after each box of a pose dataset (``kpt_shape: [17, 3]`` -> 51), else 0: a detector
    trained on a pose dataset reads its boxes, as Ultralytics does."""
    shape = data.get("kpt_shape")
    if isinstance(shape, list) and len(shape) == 2 and all(type(v) is int and v > 0 for v in shape):
        return shape[0] * shape[1]
    return 0


def check_image_and_labels(task: tuple[Path, Path, int, int]) -> tuple[tuple[int, int] | None, list, list,
                                                                         BadSampleSummary]:
    """One image's work, run in a worker: ``(size or None, boxes, classes, its own problems)``; ``task`` is
    ``(image, label file, number of classes, keypoint fields per line)``."""
    image, label, num_classes, keypoint_fields = task
    summary = BadSampleSummary()
    try:
        width, height = image_size(image)
    except (ValueError, OSError) as err:
        summary.skipped_images.append(f"{image}: {err}, image skipped")
        return None, [], [], summary
    try:  # exists, not is_file: a FIFO or device named .txt is refused with its reason, not read as "no labels"
        boxes, classes = parse_label_file(label, width, height, num_classes, summary,
                                          keypoint_fields) if label.exists() else ([], [])
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
    images, missing = split_images(yaml_path, data, split)
    labels = [label_path(image, labels_beside_images) for image in images]
    if not any(p.is_file() for p in labels):  # a few missing files are backgrounds; all missing is a wrong layout
        folders = sorted({os.fspath(p.parent) for p in labels})
        raise DataSourceError(f"{yaml_path}: no label file for any of the {len(images)} '{split}' images; expected "
                              f"YOLO txt labels in {', '.join(folders[:3])}{' ...' if len(folders) > 3 else ''}")
    stems = [as_id(p.stem) for p in images]  # numbered images (COCO's) keep their numbers as image ids
    use_stems = None not in stems and len(set(stems)) == len(images)
    tasks = [(image, label, len(names), keypoint_fields(data)) for image, label in zip(images, labels)]
    checked = ordered_map(check_image_and_labels, tasks, workers=workers, desc=f"converting {yaml_path.stem} {split}")
    summary, rows, next_object_id = BadSampleSummary(skipped_images=missing), [], 1
    for index, (image, (size, boxes, classes, problems)) in enumerate(zip(images, checked, strict=True)):
        summary.merge(problems)
        if size is None:
            continue
        summary.backgrounds += not boxes
        rows.append({"image_id": stems[index] if use_stems else index,
                     "image": image_cell(image), "width": size[0], "height": size[1],
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
        images += [path for path in _scan(folder, entries) if is_image_name(os.path.basename(path))]
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
    try:
        stat = path.stat()
    except OSError:  # a dangling link or a link loop: keyed by the link itself; the conversion reports it
        stat = path.lstat()
    return os.fspath(path), stat.st_size, stat.st_mtime_ns


def _folders(root: str) -> list[str]:
    """``root`` and every folder below it, as Ultralytics' recursive glob walks them: through symlinked folders
    (each real folder once, so a link to a parent does not loop), not into hidden ones (``.git``)."""
    folders, stack, seen = [], [root], set()
    while stack:
        folder = stack.pop()
        real = os.path.realpath(folder)
        if real in seen:
            continue
        seen.add(real)
        folders.append(folder)
        with os.scandir(folder) as it:
            stack += [entry.path for entry in it if not entry.name.startswith(".") and _is_folder(entry)]
    return folders


def _is_folder(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:  # a link loop
        return False


def _scan(folder: str, into: dict[str, os.stat_result]) -> list[str]:
    """The files of ``folder`` (symlinks followed, as ``Path.stat``; a dangling one by its own stat), their stats
    added to ``into``."""
    found = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if _is_folder(entry):
                    continue
                try:
                    into[entry.path] = entry.stat()
                except OSError:  # a dangling link or a link loop: the conversion reports it by name
                    into[entry.path] = entry.stat(follow_symlinks=False)
                found.append(entry.path)
    except FileNotFoundError:  # a labels folder that does not exist: no labels
        pass
    return found


def _label_string(image: str) -> str:
    """``label_path`` on strings: the last ``images`` folder becomes ``labels``, the suffix ``.txt``."""
    head, found, tail = (os.sep + image).rpartition(f"{os.sep}images{os.sep}")
    path = f"{head}{os.sep}labels{os.sep}{tail}"[1:] if found else image
    return os.path.splitext(path)[0] + ".txt"
