"""Hub datasets and local dataset folders: load, pick the split, normalise columns and boxes to our schema."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets.data_files import get_data_patterns
from huggingface_hub import constants as hub_constants
from PIL import Image

from yolo11.data.schema import LOGGER, BadSampleSummary, DataSourceError, detection_features
from yolo11.data.sources.box_format import box_array, object_field, resolve_bbox_format
from yolo11.data.sources.checks import MAX_BOXES_PER_IMAGE, as_id, check_boxes, oriented_size
from yolo11.data.sources.hub_classes import find_classes, is_text
from yolo11.data.sources.hub_columns import ObjectColumns, find_columns, object_features
from yolo11.data.sources.splits import choose_split
from yolo11.gate import check_regular_file, read_json

CROWD_NAME = "iscrowd"  # COCO's flag for a region of many objects: skipped, as for a COCO json


def load_hub(repo_id: str) -> datasets.DatasetDict:
    """``datasets.load_dataset(repo_id)``, every split (the Hub's builders prepare them all whichever is asked for),
    with a clear error when the Hub cannot be reached: at once where its endpoint does not answer (datasets retries
    for ~25 s first), saying so too where ``repo_id`` could have been meant as a local folder."""
    from yolo11.weights.resolve import hub_endpoint, hub_reachable

    reason = "HF_HUB_OFFLINE is set" if hub_constants.HF_HUB_OFFLINE else None
    if reason is None and not hub_reachable():
        reason = f"{hub_endpoint()} does not answer"
        if (Path(datasets.config.HF_DATASETS_CACHE) / repo_id.replace("/", "___")).is_dir():
            # datasets falls back to its cached copy after its retries; HF_HUB_OFFLINE=1 goes there at once
            LOGGER.warning("%s: %s; reading the cached copy (HF_HUB_OFFLINE=1 skips datasets' retries)", repo_id,
                           reason)
            reason = None
    if reason is None or hub_constants.HF_HUB_OFFLINE:
        try:
            return datasets.load_dataset(repo_id)
        except Exception as err:  # connection errors come as many types (ConnectionError, HfHubHTTPError...)
            reason = "HF_HUB_OFFLINE is set" if hub_constants.HF_HUB_OFFLINE else f"{type(err).__name__}: {err}"
    folder = Path(repo_id).expanduser().absolute()
    local = f"; no local folder {folder} either" if folder.parent.is_dir() and folder.parent != Path.cwd() else ""
    raise DataSourceError(
        f"could not load {repo_id!r} from the Hugging Face Hub ({reason}){local}. To use a local copy, save it "
        f"once with datasets.load_dataset({repo_id!r}).save_to_disk('DIR') on a machine with network and pass "
        "--data DIR, or pass a COCO json or an Ultralytics data YAML.") from None


def load_disk(folder: Path) -> datasets.Dataset | datasets.DatasetDict:
    """A ``save_to_disk`` folder (a Dataset or a DatasetDict), else a folder of data files such as a clone of a Hub
    dataset repository or an ``imagefolder`` (``datasets.load_dataset(folder)``: parquet, images with
    ``metadata.jsonl``... split by file or folder name). Where ``datasets`` cannot read the splits together (an
    ``imagefolder`` whose ``test/`` has no metadata file, or whose metadata files differ in type), each split is
    read on its own."""
    saved = (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()
    try:
        return datasets.load_from_disk(os.fspath(folder)) if saved else datasets.load_dataset(os.fspath(folder))
    except Exception as err:
        together = err
    if not saved:
        _refuse_config_choice(folder)
    apart = _load_saved_splits_apart(folder) if saved else _load_splits_apart(folder)
    if apart is None:
        raise DataSourceError(f"{folder}: neither a save_to_disk dataset folder nor a folder of dataset files "
                              f"({type(together).__name__}: {together})") from None
    return apart


def _load_saved_splits_apart(folder: Path) -> datasets.DatasetDict | None:
    """The splits of a saved DatasetDict that load alone, where ``load_from_disk`` fails on the whole (datasets 5
    raises IndexError for an empty split); each one left out is named. None when none loads."""
    try:
        names = read_json(folder / "dataset_dict.json", max_bytes=1 << 20)["splits"]
    except Exception:  # a saved Dataset (state.json), or no readable split list: the error of the load says more
        return None
    splits, left_out = {}, []
    for name in names if isinstance(names, list) else []:
        try:
            splits[name] = datasets.load_from_disk(os.fspath(folder / str(name)))
        except Exception as err:
            left_out.append(f"'{name}' ({type(err).__name__}: {err or 'empty?'})")
    if not splits:
        return None
    if left_out:
        LOGGER.warning("%s: split(s) %s cannot be read, left out", folder, ", ".join(left_out))
    return datasets.DatasetDict(splits)


def _refuse_config_choice(folder: Path) -> None:
    """``DataSourceError`` where ``folder``'s README names several dataset configs and none is the default:
    ``datasets`` asks for one, and reading the files split by split would merge them all."""
    try:
        names = datasets.get_dataset_config_names(os.fspath(folder))
    except Exception:  # no README configs, or none datasets can read: the other errors say more
        return
    if len(names) > 1:
        raise DataSourceError(
            f"{folder}: its README names {len(names)} dataset configs ({', '.join(map(repr, names))}) and none is "
            "the default; save the one to train on with datasets.load_dataset(FOLDER, NAME).save_to_disk('DIR') and "
            "pass --data DIR, or pass the folder of its files")


def _load_splits_apart(folder: Path) -> datasets.DatasetDict | None:
    """Each split ``datasets`` finds in ``folder`` loaded alone; ``None`` when it finds fewer than two (reading
    apart then changes nothing); a split that fails alone is an error naming it."""
    try:
        patterns = get_data_patterns(os.fspath(folder))
    except Exception:  # datasets' EmptyDatasetError and the like: the error of the load together says more
        return None
    if len(patterns) < 2:
        return None
    splits = {}
    for split, split_patterns in patterns.items():
        try:
            splits[str(split)] = datasets.load_dataset(os.fspath(folder), data_files={split: split_patterns})[split]
        except Exception as err:
            raise DataSourceError(f"{folder}: its {split!r} split cannot be read ({type(err).__name__}: {err})") \
                from None
    return datasets.DatasetDict(splits)


def pick_split(loaded: datasets.Dataset | datasets.DatasetDict, split: str, fallbacks: Sequence[str],
               flag: str | None, where: str) -> tuple[datasets.Dataset, str, str]:
    """``(dataset, split used, note)``: the split of a DatasetDict (``choose_split``'s fallbacks); a single
    Dataset serves every split."""
    if not isinstance(loaded, datasets.DatasetDict):
        return loaded, split, ""
    chosen, note = choose_split(list(loaded), split, fallbacks, flag, where)
    return loaded[chosen], chosen, note


def other_splits(loaded: datasets.Dataset | datasets.DatasetDict, chosen: str) -> list[datasets.Dataset]:
    """The splits of a DatasetDict besides ``chosen`` (their classes are numbered with it)."""
    return [dataset for name, dataset in loaded.items() if name != chosen] \
        if isinstance(loaded, datasets.DatasetDict) else []


def image_sizes(dataset: datasets.Dataset) -> tuple[np.ndarray, dict[int, str]]:
    """``((rows, 2) width and height of every image, {row: why its image cannot be read})``: the columns where
    they are given, else the image headers (with the EXIF orientation applied, as OpenCV decodes them); an
    unreadable image's size is 0. A row without an image, or whose image is a path to no file, is unreadable
    whether or not its size is given (the loader would meet it mid-run)."""
    sizes, unreadable = np.zeros((len(dataset), 2), np.int64), {}
    header_rows = np.arange(len(dataset))
    if "width" in dataset.column_names and "height" in dataset.column_names:
        given = [pc.fill_null(dataset.data.column(c), 0).to_numpy(zero_copy_only=False) for c in ("width", "height")]
        sizes = np.stack(given, 1).astype(np.int64)
        header_rows = np.flatnonzero((sizes <= 0).any(1))  # a missing size: read from the image's header
    images = dataset.select_columns(["image"]).cast_column("image", datasets.Image(decode=False))
    if len(header_rows) < len(dataset):  # sizes given: the images are not opened, but must be there (Arrow only)
        column = images.data.column("image")
        no_bytes = pc.is_null(pc.struct_field(column, "bytes")).to_numpy(zero_copy_only=False) | \
            pc.is_null(column).to_numpy(zero_copy_only=False)
        paths = pc.struct_field(column, "path").to_pylist()
        for index in np.flatnonzero(no_bytes).tolist():
            path = paths[index]
            if not path:
                unreadable[index] = f"row {index}: no image"
            elif not os.path.isfile(path):
                unreadable[index] = (f"row {index}: no such file {path} (a path relative to the dataset folder? "
                                     "paths are read from the working folder: give absolute ones or embed the images)")
    for index in header_rows.tolist():  # row by row: the column at once would hold every image in memory
        image = images[index]["image"]
        if not image or not (image.get("bytes") or image.get("path")):
            unreadable[index] = f"row {index}: no image"
            continue
        try:
            # a path is checked to be a regular file first: PIL would block for ever on a FIFO named as an image
            source = io.BytesIO(image["bytes"]) if image.get("bytes") else check_regular_file(image["path"])
            with Image.open(source) as im:
                sizes[index] = oriented_size(im)
        except (OSError, ValueError, TypeError, Image.DecompressionBombError) as err:
            unreadable[index] = (f"row {index}: cannot read the image {image.get('path') or ''} "
                                 f"({type(err).__name__}: {err})")
    return sizes, unreadable


@dataclass(frozen=True)
class ObjectArrays:
    """Every object of a dataset, flat in row order: ``boxes`` ``(N, 4)`` float64 as stored, ``rows`` ``(N,)`` the
    row of each, ``category`` ``(N,)`` the stored class (an int64 id, or a name where classes are text), ``ids``
    ``(N,)`` int64 (the dataset's, else the object's position in its row), ``crowd`` ``(N,)`` bool; ``offsets``
    ``(rows + 1,)`` where each row's objects start."""

    boxes: np.ndarray
    rows: np.ndarray
    category: np.ndarray
    ids: np.ndarray
    crowd: np.ndarray
    offsets: np.ndarray


def object_arrays(dataset: datasets.Dataset, columns: ObjectColumns, where: str) -> ObjectArrays:
    """The objects of ``dataset`` as ``ObjectArrays``, read through Arrow; a row whose class (or crowd flag) count
    differs from its box count is an error naming it."""
    boxes, rows = box_array(dataset, columns.objects, columns.bbox, where)
    counts = np.bincount(rows, minlength=len(dataset))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    positions = np.arange(len(rows)) - offsets[rows]
    inner = columns.features(dataset)

    def per_object(field: str, lenient: bool = False) -> pa.Array | None:
        """``field`` of each object; ``None`` where ``lenient`` and its counts are not the boxes'."""
        values, field_counts = object_field(dataset, columns.objects, field)
        if not columns.objects and isinstance(inner[field], datasets.ClassLabel | datasets.Value):
            return values.take(pa.array(rows))  # one value per image, for each of its boxes
        bad = np.flatnonzero(field_counts != counts)
        if len(bad) and not lenient:
            raise DataSourceError(f"{where}: row {bad[0]}: {columns.path(field)} has {field_counts[bad[0]]} values "
                                  f"for the {counts[bad[0]]} boxes of {columns.path(columns.bbox)}")
        return None if len(bad) else values

    def per_object_list(field: str) -> bool:
        # at the top level a scalar id or iscrowd describes the image, not its objects
        return field in inner and (bool(columns.objects) or not isinstance(inner[field], datasets.ClassLabel
                                                                             | datasets.Value))

    stored = per_object(columns.category)
    category = stored.to_numpy(zero_copy_only=False).astype(object) if is_text(stored.type) else _as_int(stored, -1)
    crowd = _as_int(per_object(CROWD_NAME), 0) == 1 if per_object_list(CROWD_NAME) else np.zeros(len(rows), bool)
    given = per_object("id", lenient=True) if per_object_list("id") else None
    ids = positions
    if given is not None and pa.types.is_integer(given.type):  # a row with an id missing keeps positions
        missing = np.bincount(rows[given.is_null().to_numpy(zero_copy_only=False)], minlength=len(dataset)) > 0
        ids = np.where(missing[rows], positions, _as_int(given, 0))
    return ObjectArrays(boxes, rows, category, ids, crowd, offsets)


def _as_int(values: pa.Array, null: int) -> np.ndarray:
    """``(N,)`` int64, ``null`` where a value is missing."""
    if not len(values):
        return np.zeros(0, np.int64)
    return pc.fill_null(pc.cast(values, "int64"), null).to_numpy(zero_copy_only=False)


class Normalised(NamedTuple):
    """What ``normalise`` gives: the dataset in our schema, its class names, a note for the log (what ``auto``
    chose, where guessed names came from) and what was skipped or clipped."""

    dataset: datasets.Dataset
    class_names: list[str]
    note: str
    summary: BadSampleSummary


def screen_objects(objects: ObjectArrays, sizes: np.ndarray, unreadable: dict[int, str], bbox_format: str,
                   field: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, BadSampleSummary]:
    """``(boxes (N, 4) COCO xywh pixels, objects kept (N,), rows kept, summary)``, as the file sources judge them
    (``checks.check_boxes``): a box a little outside its image is clipped, one further out or of no size is
    dropped and named (crowd objects are dropped unjudged), and a row is skipped when its image cannot be read or
    none of its boxes is usable (trained as a background, its objects would be taught as absent)."""
    rows, stored = objects.rows, objects.boxes
    corners = stored.copy()
    if bbox_format == "xywh":
        corners[:, 2:] += corners[:, :2]
    clipped_corners, usable, clipped, reasons = check_boxes(corners, sizes[rows])
    xywh = stored.copy() if bbox_format == "xywh" else _xywh(corners)  # stored xywh as is: x + w - x may round
    xywh[clipped] = _xywh(clipped_corners[clipped])
    readable = np.ones(len(sizes), bool)
    readable[list(unreadable)] = False
    judged = readable[rows] & ~objects.crowd
    keep = judged & usable
    position = np.arange(len(rows)) - objects.offsets[rows]
    summary = BadSampleSummary(clipped_boxes=int((keep & clipped).sum()))
    summary.skipped_lines = [f"row {rows[k]}: object {position[k]}: {field} {_box_text(stored[k])}: {reasons[k]}, "
                             "dropped" for k in np.flatnonzero(judged & ~usable)]
    wanted, kept = (np.bincount(rows[mask], minlength=len(sizes)) for mask in (judged, keep))
    skipped = ~readable | ((wanted > 0) & (kept == 0))
    summary.skipped_images = [unreadable.get(r) or f"row {r}: none of its {wanted[r]} boxes is usable, image skipped"
                              for r in np.flatnonzero(skipped).tolist()]
    rows_kept = np.flatnonzero(~skipped)
    summary.backgrounds = int((kept[rows_kept] == 0).sum())
    return xywh, keep, rows_kept, summary


def _xywh(corners: np.ndarray) -> np.ndarray:
    return np.concatenate([corners[:, :2], corners[:, 2:] - corners[:, :2]], 1)


def _box_text(box: np.ndarray) -> str:
    return "[" + ", ".join(f"{v:g}" for v in box) + "]"


def image_id_column(dataset: datasets.Dataset, where: str) -> tuple[list[int] | None, str]:
    """The dataset's ``image_id``s where every one is a decimal id (an int, or digits) that fits int64 and none
    repeats, else None (the rows are numbered instead: the evaluation tells images apart by id, and two images
    of one id were scored as one), with a note saying why when ids were given."""
    if "image_id" not in dataset.column_names:
        return None, ""
    values = dataset.data.column("image_id").to_pylist()
    ids = [as_id(str(value)) for value in values]
    if None in ids:
        bad = values[ids.index(None)]
        return None, f"{where}: image_id {bad!r} is not a whole number within int64: the rows are numbered instead"
    seen: dict[int, int] = {}
    for row, image_id in enumerate(ids):
        if seen.setdefault(image_id, row) != row:
            return None, (f"{where}: image_id {image_id} is given to rows {seen[image_id]} and {row}: the rows are "
                          "numbered instead (the evaluation tells images apart by id)")
    return ids, ""


def normalise(dataset: datasets.Dataset, where: str, bbox_format: str = "auto", names: Sequence[str] | None = None,
              other_splits: Sequence[datasets.Dataset] = ()) -> Normalised:
    """The dataset in our schema (``Normalised``): columns found (``hub_columns``), image not decoded (an ``Image``
    feature, decoded or not, or a path string), boxes made COCO ``xywh`` from ``bbox_format`` (``auto``: read from
    the data, see ``box_format``) and screened (``screen_objects``). Class names are ``names`` when given, else
    found by ``hub_classes.find_classes`` (over ``other_splits`` too). Raises ``DataSourceError`` when no row is
    usable."""
    dataset, columns = find_columns(dataset, where)
    classes = find_classes(dataset, columns, object_features(columns.features(dataset)[columns.category]), names,
                           where, other_splits)
    features = detection_features(classes.names)
    sizes, unreadable = image_sizes(dataset)
    objects = object_arrays(dataset, columns, where)
    for row in np.flatnonzero(np.diff(objects.offsets) > MAX_BOXES_PER_IMAGE).tolist():  # the file sources' bound
        unreadable[row] = (f"row {row}: {int(objects.offsets[row + 1] - objects.offsets[row]):,} objects, more than "
                           f"the {MAX_BOXES_PER_IMAGE:,} one image may have")
    readable = ~np.isin(objects.rows, list(unreadable))
    field = columns.path(columns.bbox)
    bbox_format, box_note = resolve_bbox_format(bbox_format, objects.boxes[readable], sizes[objects.rows[readable]],
                                               where, field)
    xywh, keep, rows_kept, summary = screen_objects(objects, sizes, unreadable, bbox_format, field)
    if len(dataset) and not len(rows_kept):
        more = f"; {len(dataset) - 1} more rows skipped" if len(dataset) > 1 else ""
        raise DataSourceError(f"{where}: no usable image ({summary.skipped_images[0]}{more})")
    image_ids, id_note = image_id_column(dataset, where)
    note = "\n".join(n for n in (classes.note, box_note, id_note) if n)
    if dataset.features == features and bbox_format == "xywh" and keep.all() and len(rows_kept) == len(dataset) \
            and not summary.clipped_boxes and image_ids is not None:
        return Normalised(dataset, classes.names, note, summary)
    category, offsets, ids = classes.index_of(objects.category), objects.offsets, objects.ids
    used = [c for c in ("image", "image_id") if c in dataset.column_names]
    dataset = dataset.select_columns(used).cast_column("image", datasets.Image(decode=False))
    if len(rows_kept) < len(dataset):
        dataset = dataset.select(rows_kept)

    def to_schema(row: dict, index: int) -> dict:
        source_row = int(rows_kept[index])
        mine = slice(offsets[source_row], offsets[source_row + 1])
        kept = keep[mine]
        boxes = xywh[mine][kept]
        width, height = (int(v) for v in sizes[source_row])
        return {"image_id": source_row if image_ids is None else image_ids[source_row], "image": row["image"],
                "width": width, "height": height,
                "objects": {"id": ids[mine][kept].tolist(), "area": (boxes[:, 2] * boxes[:, 3]).tolist(),
                            "bbox": boxes.tolist(), "category": category[mine][kept].tolist()}}

    converted = dataset.map(to_schema, with_indices=True, features=features, remove_columns=used,
                            desc=f"normalising {where}")
    return Normalised(converted, classes.names, note, summary)
