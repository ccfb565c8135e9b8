"""A dataset folder as other tools export it, recognised without flags: ``--data DIR`` for

- a folder holding a data YAML (Ultralytics, Roboflow's YOLO export, CVAT's "Ultralytics YOLO" export): the YAML;
- Roboflow's COCO export: ``train/``, ``valid/``, ``test/``, each with ``_annotations.coco.json`` beside its images
  (FiftyOne's COCO export likewise, ``labels.json`` beside ``data/``, in split folders or alone);
  its "Tensorflow Object Detection CSV" and "CreateML JSON" exports likewise (``_annotations.csv``,
  ``_annotations.createml.json``), also as one folder;
- COCO jsons in ``annotations/`` (``instances_val2017.json``, CVAT's ``instances_default.json``), Label Studio's
  ``result.json`` or FiftyOne's ``labels.json``;
- Pascal VOC in the devkit's layout (``Annotations/``, ``JPEGImages/``, ``ImageSets/Main/<split>.txt``: the devkit,
  CVAT's "PASCAL VOC 1.1" export), the folder itself or the VOC folders in it (``VOCdevkit/VOC2007``, ``VOC2012``);
- a YOLO folder without a YAML, names in ``classes.txt`` or ``labels.txt`` (Label Studio, LabelImg, makesense.ai),
  ``obj.names`` (CVAT "YOLO 1.1", darknet) or ``_darknet.labels`` (Roboflow's "YOLO Darknet" export, in each
  split folder): images in ``images/`` with ``labels/`` beside, or each label beside its image
  (``obj_train_data/``, or the folder itself), split into ``train``/``val`` sub-folders when it has them;
- Pascal VOC xml (LabelImg, Roboflow's "Pascal VOC" export) or a LabelMe json beside each image, in
  ``train``/``valid``/``test`` sub-folders when it has them, or in ``annotations/`` apart from ``images/``
  (Kaggle's VOC datasets, LabelMe's ``--output``).

Anything else (a ``save_to_disk`` folder, a folder of parquet files) is left to ``datasets``. Where the choice is
not the only possible one, ``note`` says which was taken and how to take another.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from yolo11.data.image_io import is_image_file, is_image_name
from yolo11.data.schema import DataSourceError
from yolo11.data.sources.annotation_files import ANNOTATION_FILES
from yolo11.data.sources.labelme import is_labelme
from yolo11.data.sources.named_boxes import check_class_list, read_list_file
from yolo11.data.sources.per_image import ImageFileSplit
from yolo11.data.sources.voc import is_voc, read_split_list
from yolo11.gate import FileRefusedError, open_regular, read_yaml

ROBOFLOW_COCO_JSON = "_annotations.coco.json"
FIFTYONE_COCO_JSON = "labels.json"  # FiftyOne's COCODetectionDataset export: labels.json beside data/
# one class name per line, the class id = line number; Roboflow's darknet export has one in each split folder
NAMES_FILES = ("classes.txt", "obj.names", "labels.txt", "_darknet.labels")
# split -> its folder's names, in any case (Train/, Valid/ as some tools and Windows users write them)
SPLIT_FOLDERS = {"train": ("train", "training"), "val": ("val", "valid", "validation"), "test": ("test", "testing")}
CVAT_SPLIT_FOLDERS = {"train": "obj_train_data", "val": "obj_valid_data", "test": "obj_test_data"}
MAX_NAMES_BYTES = 8 << 20
TRAIN_FOR_VAL = "no val/ or valid/ folder, so validation uses the training images"
VOC_LABEL_MAP = "labelmap.txt"  # CVAT's VOC export: the classes in its order
# kind -> (suffix, a test of the file's first 4 KB, what the log calls it)
BESIDE_KINDS = {"voc": (".xml", is_voc, "Pascal VOC xml"),
                "labelme": (".json", is_labelme, "LabelMe json")}


@dataclass(frozen=True)
class Layout:
    """What a folder holds: ``kind`` ``yaml`` (``path`` is the YAML), ``coco`` (``split_files``: split -> json,
    images beside each), ``table`` (``split_files``: split -> a Roboflow CSV or CreateML file, images beside each),
    ``yolo`` (``data``: a data-YAML dict read as one, ``path`` the names file) or ``per_image`` (VOC xml or LabelMe
    json per image: ``image_splits``, the classes in ``label_map`` when there is one, ``path`` the folder)."""

    kind: str
    path: Path
    note: str = ""
    data: dict = field(default_factory=dict)
    split_files: dict[str, Path] = field(default_factory=dict)
    labels_beside_images: bool = False
    image_splits: dict[str, ImageFileSplit] = field(default_factory=dict)
    label_map: Path | None = None


def detect_layout(folder: Path) -> Layout | None:
    """The layout of ``folder``, or ``None`` for one ``datasets`` should read (saved Arrow, parquet...)."""
    return _layout_here(folder) or _one_folder_down(folder)


def _layout_here(folder: Path) -> Layout | None:
    if (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file():
        return None
    return (_yaml_layout(folder) or _split_coco_layout(folder) or _roboflow_table_layout(folder)
            or _coco_folder_layout(folder) or _voc_devkit_layout(folder) or _yolo_layout(folder)
            or _beside_layout(folder) or _apart_layout(folder))


def _one_folder_down(folder: Path) -> Layout | None:
    """An export unzipped into a folder of its own (``DIR/project-3/data.yaml``, ``--data DIR``): the one folder
    ``folder`` holds, read when it is all ``folder`` holds and has a layout itself (one level: a link to itself
    cannot loop)."""
    entries = [entry for entry in folder.iterdir() if not entry.name.startswith(".")]
    if len(entries) != 1 or not entries[0].is_dir():
        return None
    inner = _layout_here(entries[0])
    if inner is None:
        return None
    note = f"{folder}: the data lies one folder down, in {entries[0].name}; reading it there"
    return dataclasses.replace(inner, note="; ".join(filter(None, [note, inner.note])))


def _yaml_layout(folder: Path) -> Layout | None:
    candidates = sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()
                        and _is_data_yaml(p))
    if not candidates:
        return None
    chosen = next((p for p in candidates if p.stem == "data"), candidates[0])
    note = "" if len(candidates) == 1 else (
        f"{folder}: {len(candidates)} data YAMLs ({', '.join(p.name for p in candidates)}), using {chosen.name}; "
        "pass another to --data to use it")
    return Layout("yaml", chosen, note)


def _is_data_yaml(path: Path) -> bool:
    try:
        data = read_yaml(path, words_as_text=True)
    except (OSError, FileRefusedError):
        return False
    return isinstance(data, dict) and bool(data.get("names") or data.get("nc")) and bool(data.get("train"))


def _split_dirs(folder: Path) -> dict[str, Path]:
    """``{split: its sub-folder}`` for the conventional split folders ``folder`` has, names in any case, the first
    of ``SPLIT_FOLDERS``' names winning (``val/`` over ``valid/``)."""
    try:
        present = {p.name.lower(): p for p in sorted(folder.iterdir()) if not p.name.startswith(".") and p.is_dir()}
    except OSError:
        return {}
    found = {}
    for split, names in SPLIT_FOLDERS.items():
        name = next((name for name in names if name in present), None)
        if name is not None:
            found[split] = present[name]
    return found


def _split_coco_json(place: Path) -> Path | None:
    """A split folder's COCO json: Roboflow's ``_annotations.coco.json``, or FiftyOne's ``labels.json`` beside its
    ``data/``."""
    if (place / ROBOFLOW_COCO_JSON).is_file():
        return place / ROBOFLOW_COCO_JSON
    if (place / FIFTYONE_COCO_JSON).is_file() and (place / "data").is_dir():
        return place / FIFTYONE_COCO_JSON
    return None


def _split_coco_layout(folder: Path) -> Layout | None:
    """A COCO json in each split folder: Roboflow's COCO export, FiftyOne's per split."""
    jsons = {split: json for split, place in _split_dirs(folder).items()
             if (json := _split_coco_json(place)) is not None}
    if not jsons:
        return None
    jsons, alone = _train_for_val(jsons)
    return Layout("coco", folder, f"{folder}: {TRAIN_FOR_VAL}" if alone else "", split_files=jsons)


def _train_for_val(splits: dict) -> tuple[dict, bool]:
    """``(splits, whether train now serves val)``: a folder of its training split alone (no valid/ or test/)
    validates on the training images, which the caller says aloud (Ultralytics would refuse it)."""
    if "train" not in splits or "val" in splits or "test" in splits:
        return splits, False
    return {**splits, "val": splits["train"]}, True


def _roboflow_table_layout(folder: Path) -> Layout | None:
    """Roboflow's CSV or CreateML export: the file in each split folder, or in ``folder`` itself (then serving
    training and validation)."""
    places = _split_dirs(folder)
    for file_name in ANNOTATION_FILES:
        found = {split: place / file_name for split, place in places.items() if (place / file_name).is_file()}
        if not found and (folder / file_name).is_file():
            found = {"train": folder / file_name}
        if found:
            found, alone = _train_for_val(found)
            return Layout("table", folder, f"{folder}: {TRAIN_FOR_VAL}" if alone else "", split_files=found)
    return None


def _coco_folder_layout(folder: Path) -> Layout | None:
    """COCO jsons named as COCO, CVAT and datumaro name them (``annotations/instances_<split>.json``, CVAT's
    ``instances_default.json``), as Label Studio does (``result.json`` beside ``images/``) or as FiftyOne does
    (``labels.json`` beside ``data/``); without this the folder went to ``datasets``, which read it as a folder of
    unlabelled images."""
    jsons = sorted((folder / "annotations").glob("instances_*.json")) if (folder / "annotations").is_dir() else []
    if not jsons and (folder / "result.json").is_file():
        jsons = [folder / "result.json"]
    if not jsons and (fiftyone := _split_coco_json(folder)) is not None:
        jsons = [fiftyone]
    if not jsons:
        return None
    splits = {}
    for json_path in jsons:
        tag = json_path.stem.removeprefix("instances_").lower()
        split = next((k for k, names in SPLIT_FOLDERS.items() if tag.rstrip("0123456789") in names), None)
        if split is not None:
            splits.setdefault(split, json_path)
    note = ""
    if not splits:  # one json of no split name (CVAT's "default", Label Studio's result.json): it serves every split
        splits = {"train": jsons[0], "val": jsons[0]}
        note = (f"{folder}: one COCO json, {jsons[0].relative_to(folder)}, for training and validation (pass a "
                "json per split to --data, with {split} in its name, to choose)")
    return Layout("coco", folder, note, split_files=splits)


def _names_file(folder: Path) -> Path | None:
    """The class names file in ``folder``, or in its first split folder that has one (Roboflow's darknet export)."""
    places = [folder, *_split_dirs(folder).values()]
    return next((place / name for place in places for name in NAMES_FILES if (place / name).is_file()), None)


def read_names_file(path: Path) -> list[str]:
    """Class names, one per line (blank lines ignored), as darknet, CVAT and Label Studio write them."""
    names = [line.strip() for line in read_list_file(path, MAX_NAMES_BYTES).splitlines() if line.strip()]
    if not names:
        raise DataSourceError(f"{path}: no class names (one per line)")
    return check_class_list(names, os.fspath(path))


def _yolo_layout(folder: Path) -> Layout | None:
    names_file = _names_file(folder)
    if names_file is None:
        return None
    names = read_names_file(names_file)
    splits, beside = _yolo_splits(folder)
    if not splits:
        raise DataSourceError(f"{folder}: {names_file.name} names {len(names)} classes but no images were found "
                              "(looked for images/, obj_train_data/, train/ and val/ folders, and images beside it)")
    note = (f"{folder}: a YOLO folder without a data YAML: classes from {names_file.name}, splits "
            f"{', '.join(f'{k}={v}' for k, v in splits.items())}")
    splits, alone = _train_for_val(splits)
    if alone:
        note += f"; {TRAIN_FOR_VAL} (pass a data YAML to choose)"
    data = {"path": os.fspath(folder.resolve()), "names": names, **splits}
    return Layout("yolo", names_file, note, data=data, labels_beside_images=beside)


def _yolo_splits(folder: Path) -> tuple[dict[str, str], bool]:
    """``({split: folder relative to ``folder``}, labels beside images)``."""
    if (folder / "images").is_dir():  # images/ + labels/, with or without train/val sub-folders
        sub = _split_folders(folder / "images", "images/")
        return sub or {"train": "images"}, False
    cvat = {split: name for split, name in CVAT_SPLIT_FOLDERS.items() if (folder / name).is_dir()}
    if cvat:
        return cvat, True
    sub = _split_folders(folder, "")
    if sub:
        return sub, not (folder / sub["train" if "train" in sub else next(iter(sub))] / "images").is_dir()
    if any(is_image_file(p) for p in folder.iterdir()):
        return {"train": "."}, True  # LabelImg: images, their txt labels and classes.txt in one folder
    return {}, False


def _split_folders(folder: Path, prefix: str) -> dict[str, str]:
    """``{split: prefix + sub-folder}`` for the conventional split folders ``folder`` has (``valid`` for val...)."""
    return {split: prefix + place.name for split, place in _split_dirs(folder).items()}


def _is_voc_root(folder: Path) -> bool:
    """The devkit's ``Annotations/``; beside ``images/`` (not ``JPEGImages/``) it is the layout apart instead."""
    return (folder / "Annotations").is_dir() and not (
        (folder / "images").is_dir() and not (folder / "JPEGImages").is_dir())


def _voc_devkit_layout(folder: Path) -> Layout | None:
    """``folder`` in the VOC devkit's layout, or the devkit folders in it (``VOCdevkit/VOC2007``, ``VOC2012``),
    their splits joined by name (VOC2007's and VOC2012's ``train`` lists make one training split)."""
    roots = [folder] if _is_voc_root(folder) else sorted(
        p for p in folder.iterdir() if not p.name.startswith(".") and p.is_dir() and _is_voc_root(p))
    if not roots:
        return None
    joined: dict[str, list] = {}
    lists: dict[str, list[Path]] = {}
    single = []
    for root in roots:
        splits, one_list = _voc_root_splits(root)
        if one_list:
            single.append(root.name)
        for split, (pairs, list_file) in splits.items():
            joined.setdefault(split, []).extend(pairs)
            lists.setdefault(split, []).extend([list_file] if list_file else [])
    voc = {}
    for split, pairs in joined.items():
        same = next((v for v in voc.values() if v.pairs == tuple(pairs)), None)  # one list serving two splits
        voc[split] = same or ImageFileSplit(f"{folder.name}-{split}", tuple(pairs), tuple(lists[split]))
    which = "" if roots == [folder] else f" ({', '.join(single)})"
    note = f"{folder}: " + ("a Pascal VOC folder" if roots == [folder] else
                            f"Pascal VOC folders {', '.join(r.name for r in roots)}")
    if single:
        note += f"; no train/val lists in ImageSets/Main{which}, so one split serves training and validation"
    return _image_files_layout(folder, voc, note, [*roots, folder])


def _voc_root_splits(root: Path) -> tuple[dict[str, tuple[list, Path | None]], bool]:
    """``({split: (pairs, list file)}, one list only)`` of one devkit folder: the ``ImageSets/Main`` lists named
    as splits (``trainval`` for training when there is no ``train``; class lists such as ``cat_train.txt`` are
    not splits), else the first list (CVAT's ``default.txt``), else every xml in ``Annotations/``."""
    if not (root / "JPEGImages").is_dir():
        raise DataSourceError(f"{root}: Annotations/ but no JPEGImages/ folder (export the images with the "
                              "annotations)")
    images = {}
    for path in sorted((root / "JPEGImages").rglob("*")):
        if is_image_name(path.name):
            images.setdefault(path.relative_to(root / "JPEGImages").with_suffix("").as_posix(), path)
    sets = root / "ImageSets" / "Main"
    lists = sorted(p for p in sets.glob("*.txt") if "_" not in p.stem) if sets.is_dir() else []
    by_split = {}
    for list_file in lists:
        split = next((k for k, names in SPLIT_FOLDERS.items() if list_file.stem.lower() in names), None)
        if split is not None or list_file.stem.lower() == "trainval":
            by_split.setdefault(split or "trainval", list_file)
    if "train" not in by_split and "trainval" in by_split:
        by_split["train"] = by_split["trainval"]
    by_split.pop("trainval", None)

    def pairs(ids: list[str]) -> list:
        return [(images.get(i), root / "Annotations" / f"{i}.xml") for i in ids]

    if by_split:
        return {split: (pairs(read_split_list(path)), path) for split, path in by_split.items()}, False
    if lists:
        ids, list_file = read_split_list(lists[0]), lists[0]
    else:
        # hidden files left out: macOS's ._x.xml resource forks are not annotations
        ids = sorted(p.stem for p in (root / "Annotations").glob("*.xml") if not p.name.startswith("."))
        list_file = None
    both = (pairs(ids), list_file)
    return {"train": both, "val": both}, True


def _beside_layout(folder: Path) -> Layout | None:
    """Each image's annotation file beside it, Pascal VOC xml (LabelImg, Roboflow's "Pascal VOC" export) or a
    LabelMe json, in the conventional split folders when there are some, else in ``folder`` itself."""
    places = _split_dirs(folder) or {"train": folder}
    kind = next((kind for kind in BESIDE_KINDS if any(_holds(place, kind) for place in places.values())), None)
    if kind is None:
        return None
    suffix, _, what = BESIDE_KINDS[kind]
    splits = {split: ImageFileSplit(f"{folder.name}-{split}", tuple(_pairs(place, place, suffix)))
              for split, place in places.items()}
    note = f"{folder}: {what} beside the images, splits {', '.join(f'{k}={v.name}' for k, v in places.items())}"
    splits, alone = _train_for_val(splits)
    if alone:
        note += f"; {TRAIN_FOR_VAL}"
    return _image_files_layout(folder, splits, note, [folder])


ANNOTATION_FOLDERS = ("annotations", "Annotations")


def _apart_layout(folder: Path) -> Layout | None:
    """Pascal VOC xml or LabelMe json in ``annotations/``, the images in ``images/``, paired by file name: Kaggle's
    VOC datasets (face masks, car plates, road signs), LabelMe's ``--output annotations/``. Split sub-folders in
    both when there are some, matched by split (``val/`` with ``valid/``), or flat annotations for split images."""
    images, annotations = folder / "images", next(
        (folder / name for name in ANNOTATION_FOLDERS if (folder / name).is_dir()), None)
    if not images.is_dir() or annotations is None:
        return None
    image_places = _split_dirs(images) or {"train": images}
    note_places = _split_dirs(annotations)  # by split, as the images' (val/ with valid/, any case), or one flat folder
    places = {}
    for split, place in image_places.items():
        notes = note_places.get(split) if note_places and place != images else annotations
        if notes is None:  # its images would all train (or score) as backgrounds
            raise DataSourceError(f"{annotations}: no {split} folder for the images in {place} (has "
                                  f"{', '.join(p.name for p in note_places.values())})")
        places[split] = (place, notes)
    kind = next((kind for kind in BESIDE_KINDS if any(_holds(notes, kind, pics) for pics, notes in places.values())),
                None)
    if kind is None:
        return None
    suffix, _, what = BESIDE_KINDS[kind]
    shared = len(places) > 1 and not note_places  # one flat folder for every split: the others' files are theirs
    splits = {split: ImageFileSplit(f"{folder.name}-{split}", tuple(_pairs(pics, notes, suffix, unmatched=not shared)))
              for split, (pics, notes) in places.items()}
    note = (f"{folder}: {what} in {annotations.name}/ for the images in images/, splits "
            f"{', '.join(f'{k}={v[0].relative_to(folder)}' for k, v in places.items())}")
    splits, alone = _train_for_val(splits)
    if alone:
        note += f"; {TRAIN_FOR_VAL}"
    return _image_files_layout(folder, splits, note, [folder, annotations])


def _holds(folder: Path, kind: str, images: Path | None = None) -> bool:
    """Whether the first file of ``folder`` with the kind's suffix and the name of an image (of ``images``; by
    default of ``folder`` itself, the files beside their images) starts as that kind does (its first 4 KB). Not
    merely the first of the suffix: that may be another tool's (``build.xml``, ``classes.json``, a ``config.json``
    beside unlabelled images) or macOS's resource fork (``._img1.xml``)."""
    suffix, looks_like, _ = BESIDE_KINDS[kind]
    if not folder.is_dir():
        return False
    entries = list(folder.iterdir())
    stems = {p.stem for p in (entries if images is None else images.iterdir()) if is_image_name(p.name)}
    first = min((p for p in entries if p.suffix.lower() == suffix and p.stem in stems and not p.name.startswith(".")
                 and p.is_file()), default=None)
    if first is None:
        return False
    try:
        with open_regular(first) as f:
            return looks_like(f.read(4096))
    except (OSError, FileRefusedError):
        return False


def _pairs(images: Path, annotations: Path, suffix: str,
           unmatched: bool = True) -> list[tuple[Path | None, Path | None]]:
    """``(image, its annotation file or None)`` for each image of ``images``, then (``unmatched``) ``(None, file)``
    for each file of ``annotations`` (the same folder, or one apart) without one."""
    images_here = [p for p in sorted(images.iterdir()) if is_image_name(p.name) and p.is_file()]
    # any entry but a folder: a FIFO or a broken link named as an image's file is refused by name when read,
    # costing its image, rather than left out, which would train the image as a background
    files = sorted(annotations.iterdir()) if annotations.is_dir() else []
    found = {p.stem: p for p in files if p.suffix.lower() == suffix and not p.name.startswith(".") and not p.is_dir()}
    pairs = [(image, found.pop(image.stem, None)) for image in images_here]
    return pairs + ([(None, file) for file in found.values()] if unmatched else [])


def _image_files_layout(folder: Path, splits: dict[str, ImageFileSplit], note: str,
                        label_map_places: list[Path]) -> Layout:
    label_map = next((p / VOC_LABEL_MAP for p in label_map_places if (p / VOC_LABEL_MAP).is_file()), None)
    note += f"; classes from {label_map}" if label_map else "; classes: the object names in its files, sorted"
    return Layout("per_image", folder, note, image_splits=splits, label_map=label_map)
