"""One annotation file per split, its images beside it: Roboflow's "Tensorflow Object Detection CSV" export
(``_annotations.csv``: ``filename,width,height,class,xmin,ymin,xmax,ymax``, a row per box) and its "CreateML JSON"
export (``_annotations.createml.json``: per image, ``label`` and ``coordinates`` centre ``x, y, width, height``).

CSV corners are pixels, or fractions of the image where every corner of the file is at most 1 (other CSV writers
normalise them). Classes are the object names of every split's file, sorted, so that each split numbers them alike.
An image in the folder that the file does not name is a background: a CSV has rows only for boxes.
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path

from yolo11.data.image_io import is_image_name, read_regular_file
from yolo11.data.schema import BadSampleSummary, DataSourceError
from yolo11.data.sources.coco import checked_size
from yolo11.data.sources.named_boxes import ImageAnnotation, NamedBox, annotated_rows, class_names
from yolo11.data.sources.parallel import ordered_map
from yolo11.gate import FileRefusedError, read_json

CSV_FILE = "_annotations.csv"
CREATEML_FILE = "_annotations.createml.json"
ANNOTATION_FILES = (CSV_FILE, CREATEML_FILE)
# ~2.5 million boxes as CSV; read whole, a file holds several times its size in Python objects (as a COCO json)
MAX_ANNOTATION_FILE_BYTES = 256 << 20
CSV_COLUMNS = ("filename", "width", "height", "class", "xmin", "ymin", "xmax", "ymax")


def read_annotation_file(path: Path) -> dict[str, ImageAnnotation | str]:
    """``{image file name: its annotation, or why its image is skipped}`` of a CSV or CreateML file;
    ``DataSourceError`` for a file that is neither. Rows or entries that cannot be used become objects with a
    problem, reported by the row checks."""
    return read_createml(path) if path.name.endswith(".json") else read_tfod_csv(path)


def read_tfod_csv(path: Path) -> dict[str, ImageAnnotation | str]:
    try:
        data = read_regular_file(path, MAX_ANNOTATION_FILE_BYTES)
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:  # replacement characters would merge names (café and cafè): refused
        line = data.count(b"\n", 0, err.start) + 1
        raise DataSourceError(f"{path}: line {line}: not UTF-8 text (byte 0x{data[err.start]:02x}); save it as "
                              "UTF-8") from None
    except (ValueError, OSError) as err:
        raise DataSourceError(f"{path}: cannot read it as CSV ({err})") from None
    reader = csv.reader(io.StringIO(text, newline=""))  # newline="": \r\n, \n and Excel for Mac's bare \r end rows
    try:
        rows = list(reader)
    except csv.Error as err:
        raise DataSourceError(f"{path}: line {reader.line_num}: cannot read it as CSV ({err})") from None
    header = [cell.strip().lower() for cell in rows[0]] if rows else []
    missing = [column for column in CSV_COLUMNS if column not in header]
    if missing:
        raise DataSourceError(f"{path}: no {', '.join(missing)} column(s); expected the header "
                              f"{','.join(CSV_COLUMNS)}")
    at = {column: header.index(column) for column in CSV_COLUMNS}
    parsed = []  # (line, file name, stated size or None, name, corners or None, problem)
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) < len(header):
            parsed.append((line, row[at["filename"]].strip() if len(row) > at["filename"] else "", None, "", None,
                           f"{len(row)} fields, the header has {len(header)}"))
            continue
        name = row[at["class"]].strip()
        try:
            size = int(float(row[at["width"]])), int(float(row[at["height"]]))
            corners = tuple(float(row[at[key]]) for key in ("xmin", "ymin", "xmax", "ymax"))
        except (ValueError, OverflowError):  # OverflowError: "1e400" is infinity to float, which int refuses
            parsed.append((line, row[at["filename"]].strip(), None, name, None, "a size or corner is not a number"))
            continue
        parsed.append((line, row[at["filename"]].strip(), size if min(size) > 0 else None, name, corners, ""))
    fractions = all(max(map(abs, corners)) <= 1 for *_, corners, _ in parsed if corners is not None)
    by_image: dict[str, list] = {}
    for line, file_name, size, name, corners, problem in parsed:
        if corners is not None and fractions:
            if size is None:
                corners, problem = None, "corners given as fractions, but no image size"
            else:
                corners = (corners[0] * size[0], corners[1] * size[1], corners[2] * size[0], corners[3] * size[1])
        box = _named_box(name, corners, problem, f"line {line}")
        by_image.setdefault(file_name, []).append((size, box))
    found = {}
    for file_name, entries in by_image.items():
        sizes = sorted({size for size, _ in entries if size is not None}, reverse=True)
        source = f"{path} ({file_name})"
        if len(sizes) > 1:  # one of them is not the image's: its rows were made for another copy of the image
            stated = " and ".join(f"{width}x{height}" for width, height in sizes)
            found[file_name] = f"{source}: its rows state the image sizes {stated}"
        else:
            found[file_name] = ImageAnnotation(source, sizes[0] if sizes else None, tuple(box for _, box in entries))
    found.pop("", None)
    return found


def read_createml(path: Path) -> dict[str, ImageAnnotation]:
    try:
        data = read_json(path, max_bytes=MAX_ANNOTATION_FILE_BYTES)
    except (OSError, FileRefusedError) as err:
        raise DataSourceError(str(err)) from None
    if not isinstance(data, list):
        raise DataSourceError(f"{path}: a CreateML file is a list of {{image, annotations}} entries")
    found: dict[str, list[NamedBox]] = {}
    for index, entry in enumerate(data):
        if not isinstance(entry, dict) or not isinstance(entry.get("image"), str):
            raise DataSourceError(f"{path}: entry {index} has no image name ({str(entry)[:80]})")
        boxes = found.setdefault(entry["image"], [])  # entries naming one image (files joined) add up
        annotations = entry.get("annotations") or []
        if not isinstance(annotations, list):
            annotations = []
            boxes.append(NamedBox("", None, f"'annotations' is a {type(entry['annotations']).__name__}, not a list",
                                  where=entry["image"]))
        for number, annotation in enumerate(annotations, start=len(boxes) + 1):
            where = f"{entry['image']} object {number}"
            if not isinstance(annotation, dict):
                boxes.append(NamedBox("", None, "not an {label, coordinates} object", where=where))
                continue
            name, box = str(annotation.get("label") or "").strip(), annotation.get("coordinates")
            try:
                x, y, width, height = (float(box[key]) for key in ("x", "y", "width", "height"))
            except (TypeError, KeyError, ValueError, OverflowError):  # OverflowError: an integer of 309+ digits
                boxes.append(NamedBox(name, None, "coordinates need numbers x, y, width and height", where=where))
                continue
            corners = (x - width / 2, y - height / 2, x + width / 2, y + height / 2)  # x, y: the box's centre
            boxes.append(_named_box(name, corners, "", where))
    return {image: ImageAnnotation(os.fspath(path), None, tuple(boxes)) for image, boxes in found.items()}


def _named_box(name: str, corners: tuple[float, ...] | None, problem: str, where: str) -> NamedBox:
    if corners is not None and not problem:
        if not all(map(math.isfinite, corners)):
            return NamedBox(name, None, "non-finite coordinates", where=where)
        if corners[2] < corners[0] or corners[3] < corners[1]:
            return NamedBox(name, None, "xmax/ymax before xmin/ymin", where=where)
        return NamedBox(name, corners, where=where)
    return NamedBox(name, None, problem or "no box", where=where)


def annotation_file_rows(files: dict[str, Path], split: str,
                         workers: int | None = None) -> tuple[list[dict], list[str], BadSampleSummary]:
    """Rows of one split's file, its images beside it; classes from every split's file."""
    # each file read once: a file serving train and val (a folder of one split) is one set of annotations
    annotations = {path: read_annotation_file(path) for path in dict.fromkeys(files.values())}
    names = class_names((a for per_file in annotations.values() for a in per_file.values()),
                        ", ".join(os.fspath(p) for p in annotations))
    path = files[split]
    listed = annotations[path]
    folder = path.parent
    beside = sorted(p.name for p in folder.iterdir() if is_image_name(p.name) and p.is_file())
    order = sorted(listed) + [name for name in beside if name not in listed]  # unnamed images: backgrounds
    # a name with folders in it (../x.jpg, /etc/x) is not an image beside the file: never read outside the folder
    problems = {name: f"{path}: names {name!r}, which is not a file in {folder}, skipped" for name in order
                if Path(name).name != name or not (folder / name).is_file()}
    present = [folder / name for name in order if name not in problems]
    sizes = dict(zip(present, ordered_map(checked_size, present, workers=workers, desc=f"converting {folder.name}"),
                     strict=True))
    items = [(folder / name, problems.get(name) or sizes[folder / name], listed.get(name)) for name in order]
    rows, summary = annotated_rows(items, names, "the class names")
    return rows, names, summary
