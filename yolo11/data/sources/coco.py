"""COCO ``instances`` json + image folder -> rows of the Hub schema (contiguous classes in sorted id order).

The json's categories and annotations are read by ``coco_annotations``; this module finds the image folder, checks
the images (their sizes come from the files, whatever the json's ``width``/``height`` say) and builds the rows.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from yolo11.data.schema import BadSampleSummary, DataSourceError
from yolo11.data.sources.checks import (
    IMAGE_SUFFIXES,
    MAX_BOXES_PER_IMAGE,
    image_cell,
    image_size,
    listed_file_exists,
    objects_row,
    posix_name,
)
from yolo11.data.sources.coco_annotations import annotations_by_image, class_map, image_objects, usable_images
from yolo11.data.sources.parallel import ordered_map
from yolo11.gate import FileRefusedError, read_json

# COCO's instances_train2017.json is 0.45 GB and LVIS v1's train json 1.1 GB; json.loads holds several times the
# file's size in Python objects, so a larger file is refused before it is read rather than exhausting memory.
MAX_COCO_JSON_BYTES = 2 << 30
# What the parse builds is bounded too: a file of empty objects under the byte cap parsed into 15 GB. COCO's
# train2017 holds ~1M objects and ~50M values (its polygons), LVIS v1's train ~1.3M and ~150M.
MAX_COCO_JSON_OBJECTS = 20_000_000
MAX_COCO_JSON_VALUES = 250_000_000


def read_coco(json_path: Path) -> dict:
    """The json's top level, checked: ``images`` and ``categories`` lists (at least one category), ``annotations``
    a list when present. Refused in one line when larger than ``MAX_COCO_JSON_BYTES``, of more objects or values
    than ``MAX_COCO_JSON_OBJECTS`` / ``MAX_COCO_JSON_VALUES``, or not JSON."""
    try:
        data = read_json(json_path, max_bytes=MAX_COCO_JSON_BYTES, max_values=MAX_COCO_JSON_VALUES,
                         max_objects=MAX_COCO_JSON_OBJECTS)
    except FileRefusedError as err:
        raise DataSourceError(str(err)) from None
    except OSError as err:
        raise DataSourceError(f"{json_path}: cannot read the COCO json ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list) \
            or not isinstance(data.get("categories"), list):
        raise DataSourceError(f"{json_path}: not a COCO instances file (needs 'images' and 'categories' lists)")
    if not data["categories"]:
        raise DataSourceError(f"{json_path}: no categories (class names)")
    if not isinstance(data.get("annotations", []), list):
        raise DataSourceError(f"{json_path}: 'annotations' is not a list")
    return data


def checked_size(path: Path) -> tuple[int, int] | str:
    """``(width, height)`` of one image, or why it is skipped; run in a worker."""
    try:
        return image_size(path)
    except (ValueError, OSError) as err:
        return f"{path}: {err}, image skipped"


def layout_candidates(json_path: Path) -> list[Path]:
    """Folders a json's file names may be relative to, in order: beside the json, then FiftyOne's ``data/`` beside
    it (its COCO export: ``labels.json`` and ``data/``), then the standard COCO layouts
    ``<root>/annotations/instances_val2017.json`` with ``<root>/images/val2017`` or ``<root>/val2017``, then
    ``<root>/images`` (one image folder for a single json: CVAT's ``instances_default.json``)."""
    folders = [json_path.parent, json_path.parent / "data"]
    prefix, _, tag = json_path.stem.rpartition("_")  # instances_val2017 -> val2017
    if prefix and tag:
        root = json_path.parent.parent
        folders += [root / "images" / tag, root / tag, root / "images"]
    return folders


def holds_images(folder: Path, nested: bool = True) -> bool:
    """Whether ``folder`` has an image file, directly or (``nested``) one folder down (file names such as
    ``val2017/1.jpg``)."""
    if not folder.is_dir():
        return False
    for entry in folder.iterdir():
        if entry.suffix.lower() in IMAGE_SUFFIXES and entry.is_file():
            return True
        if nested and entry.is_dir() and any(p.suffix.lower() in IMAGE_SUFFIXES for p in entry.iterdir()):
            return True
    return False


def image_folder(json_path: Path, images: Path | None) -> tuple[Path, str]:
    """``(folder, note)``: the folder the json's ``file_name``s are relative to, ``images`` when given, else the
    first of ``layout_candidates`` with images in it, else the first with images one folder down (Label Studio's
    ``images/x.jpg`` names; not before: FiftyOne's ``data/`` is one folder down from its json and holds the
    images its names name); ``note`` says which folder was guessed, for the log."""
    if images is not None:
        if not images.is_dir():
            raise DataSourceError(f"{json_path}: image folder {images} does not exist (--images)")
        return images, ""
    candidates = layout_candidates(json_path)
    for nested in (False, True):
        folder = next((c for c in candidates if holds_images(c, nested)), None)
        if folder is not None:
            note = "" if folder == json_path.parent else (
                f"{json_path.name}: images from {folder} (none beside the json: the standard COCO layout; "
                "--images names the folder)")
            return folder, note
    raise DataSourceError(f"{json_path}: no image folder found (looked in {', '.join(map(str, candidates))}); pass "
                          "--images DIR, with {split} for one folder per split (--images images/{split}2017)")


def found_by_name(images_dir: Path, file_names: list[str]) -> tuple[list[str], int]:
    """``(file names, how many were replaced)``: each name that is no file in ``images_dir`` but whose base name
    is, there or in its ``images/``, replaced by that. Label Studio's COCO export names each image by where its
    server kept it (``../../label-studio/media/upload/3/1a2b-x.jpg``) and exports the images flat into
    ``images/``; no folder the user can pass makes those paths work. Only base names that no other listed image
    shares, so two images never meet in one file."""
    bases = [name.rsplit("/", 1)[-1] for name in file_names]
    counts = Counter(bases)
    resolved, replaced = list(file_names), 0
    for i, (name, base) in enumerate(zip(file_names, bases, strict=True)):
        if base == name or counts[base] > 1 or listed_file_exists(images_dir / name):
            continue
        found = next((place for place in (base, f"images/{base}") if listed_file_exists(images_dir / place)), None)
        if found is not None:
            resolved[i], replaced = found, replaced + 1
    return resolved, replaced


def missing_images(json_path: Path, images_dir: Path, file_names: list[str]) -> dict[int, str]:
    """Index -> message for each listed image that is not a file. Raises ``DataSourceError`` when none is there
    (a wrong folder, not a few lost files)."""
    paths = [images_dir / name for name in file_names]
    missing = [i for i, path in enumerate(paths) if not listed_file_exists(path)]
    if not missing:
        return {}
    first = ", ".join(file_names[i] for i in missing[:3])
    if len(missing) == len(paths):
        raise DataSourceError(f"{json_path}: none of its {len(paths)} images is in {images_dir} (first missing: "
                              f"{first}); pass --images DIR naming the folder its file_names are relative to")
    messages = {i: f"{paths[i]}: no such file, image skipped" for i in missing}
    messages[missing[0]] += (f" ({len(missing)} of the {len(paths)} images listed in {json_path.name} are missing "
                             f"from {images_dir}, first: {first}; --images names the image folder)")
    return messages


def coco_rows(json_path: Path, images_dir: Path, bbox_format: str = "xywh",
              workers: int | None = None) -> tuple[list[dict], list[str], BadSampleSummary]:
    """Rows of a COCO file whose ``file_name``s are relative to ``images_dir``; ``iscrowd`` boxes are skipped (as
    Ultralytics' converter does), not counted as bad. ``bbox_format`` ``xyxy`` reads files that break the COCO
    ``[x, y, width, height]`` rule. Images without annotations are kept as backgrounds (counted); an image whose
    every annotation is unusable is skipped, as a YOLO image whose every label line is. An image resized since it
    was labelled (its ``width``/``height`` in the json another size of the same aspect) has its boxes scaled;
    one of another aspect is skipped, named (``size_scale``).

    The image checks run in ``workers`` processes (all cores when ``None``); the rows do not depend on it. A
    dropped Roboflow dataset category is logged here, by the process that converts (``class_map``).
    """
    data = read_coco(json_path)
    summary = BadSampleSummary()
    annotations = data.get("annotations", [])
    class_of, class_names = class_map(json_path, data["categories"], annotations)
    images = usable_images(json_path, data["images"], summary.skipped_images)
    by_image = annotations_by_image(json_path, annotations, {info["id"] for info in images}, summary.skipped_lines)
    file_names, summary.found_by_name = found_by_name(
        images_dir, [posix_name(images_dir, info["file_name"]) for info in images])
    paths = [images_dir / name for name in file_names]
    missing = missing_images(json_path, images_dir, file_names)
    present = [path for i, path in enumerate(paths) if i not in missing]
    sizes = iter(ordered_map(checked_size, present, workers=workers, desc=f"converting {json_path.stem}"))
    rows, next_object_id = [], 1
    for index, (info, path) in enumerate(zip(images, paths, strict=True)):
        size = missing[index] if index in missing else next(sizes)
        if isinstance(size, str):
            summary.skipped_images.append(size)
            continue
        scale = size_scale(info, size)
        if isinstance(scale, str):
            summary.skipped_images.append(f"{path}: {json_path.name} {scale}, image skipped")
            continue
        summary.rescaled += scale is not None
        annotations = by_image.get(info["id"], [])
        if len(annotations) > MAX_BOXES_PER_IMAGE:
            summary.skipped_images.append(f"{path}: {len(annotations):,} annotations, more than the "
                                          f"{MAX_BOXES_PER_IMAGE:,} objects one image may have, skipped")
            continue
        problems_before = len(summary.skipped_lines)
        boxes, classes = image_objects(json_path, info["id"], annotations, class_of, size, bbox_format == "xyxy",
                                       summary, scale)
        bad = len(summary.skipped_lines) - problems_before  # image_objects names each unusable annotation
        if bad and not boxes:  # as a YOLO image whose every label line is bad: not a background
            summary.skipped_images.append(f"{path}: none of its {bad} annotations can be used, "
                                          "skipped: its objects would be trained as background")
            continue
        summary.backgrounds += not boxes
        rows.append({"image_id": info["id"], "image": image_cell(path),
                     "width": size[0], "height": size[1], "objects": objects_row(boxes, classes, next_object_id)})
        next_object_id += len(boxes)
    return rows, class_names, summary


# A file resized since it was labelled keeps its aspect ratio to this fraction (rounding to whole pixels)
RESIZED_ASPECT_TOLERANCE = 0.02


def size_scale(info: dict, size: tuple[int, int]) -> tuple[float, float] | None | str:
    """How the json's pixels map to the file's: None where the ``images`` entry gives no size (some tools write
    0 or omit it) or the file's; ``(sx, sy)`` for a copy resized since it was labelled (the aspect ratio kept),
    whose boxes are scaled, as Ultralytics' converter normalises them by the json's size; else why not (another
    image, or one its EXIF orientation turns)."""
    values = info.get("width"), info.get("height")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in values):
        return None
    (width, height), (file_width, file_height) = values, size
    if (width, height) == (file_width, file_height):
        return None
    sx, sy = file_width / width, file_height / height
    if abs(sx / sy - 1) <= RESIZED_ASPECT_TOLERANCE:
        return sx, sy
    turned = " (turned by its EXIF orientation?)" if (width, height) == (file_height, file_width) else ""
    return f"gives it as {width:g}x{height:g}, but the image is {file_width}x{file_height}{turned}"


def coco_fingerprint_files(json_path: Path, images_dir: Path) -> list[Path]:
    """The files whose change converts again: the json, the files in ``images_dir``, and the images one folder down
    (``file_name``s such as ``images/x.jpg``, as ``holds_images`` finds them: Label Studio, ``val2017/x.jpg``),
    without reading the json (hundreds of MB for COCO's train split) or walking deeper (a run folder there)."""
    files = []
    for entry in images_dir.iterdir():
        if entry.is_file():
            files.append(entry)
        elif entry.is_dir():
            files += [p for p in entry.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()]
    return [json_path, *sorted(files)]
