"""A dataset folder as other tools export it, recognised without flags: ``--data DIR`` for

- a folder holding a data YAML (Ultralytics, Roboflow's YOLO export, CVAT's "Ultralytics YOLO" export): the YAML;
- Roboflow's COCO export: ``train/``, ``valid/``, ``test/``, each with ``_annotations.coco.json`` beside its images;
- COCO jsons in ``annotations/`` (``instances_val2017.json``, CVAT's ``instances_default.json``) or Label Studio's
  ``result.json``;
- a YOLO folder without a YAML, names in ``classes.txt`` (Label Studio, LabelImg, makesense.ai) or ``obj.names``
  (CVAT "YOLO 1.1", darknet): images in ``images/`` with ``labels/`` beside, or each label beside its image
  (``obj_train_data/``, or the folder itself), split into ``train``/``val`` sub-folders when it has them.

Anything else (a ``save_to_disk`` folder, a folder of parquet files) is left to ``datasets``. Where the choice is
not the only possible one, ``note`` says which was taken and how to take another.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from yolo11.data.image_io import is_image_file
from yolo11.data.schema import DataSourceError
from yolo11.gate import FileRefusedError, read_yaml

ROBOFLOW_COCO_JSON = "_annotations.coco.json"
NAMES_FILES = ("classes.txt", "obj.names", "labels.txt")  # one class name per line, the class id = line number
SPLIT_FOLDERS = {"train": ("train",), "val": ("val", "valid", "validation"), "test": ("test",)}
CVAT_SPLIT_FOLDERS = {"train": "obj_train_data", "val": "obj_valid_data", "test": "obj_test_data"}
MAX_NAMES_BYTES = 8 << 20


@dataclass(frozen=True)
class Layout:
    """What a folder holds: ``kind`` ``yaml`` (``path`` is the YAML), ``coco`` (``coco_jsons``: split -> json,
    images beside each) or ``yolo`` (``data``: a data-YAML dict read as one, ``path`` the names file)."""

    kind: str
    path: Path
    note: str = ""
    data: dict = field(default_factory=dict)
    coco_jsons: dict[str, Path] = field(default_factory=dict)
    labels_beside_images: bool = False


def detect_layout(folder: Path) -> Layout | None:
    """The layout of ``folder``, or ``None`` for one ``datasets`` should read (saved Arrow, parquet...)."""
    if (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file():
        return None
    return _yaml_layout(folder) or _roboflow_coco_layout(folder) or _coco_folder_layout(folder) or _yolo_layout(folder)


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
        data = read_yaml(path)
    except (OSError, FileRefusedError):
        return False
    return isinstance(data, dict) and bool(data.get("names") or data.get("nc")) and bool(data.get("train"))


def _roboflow_coco_layout(folder: Path) -> Layout | None:
    jsons = {}
    for split, names in SPLIT_FOLDERS.items():
        found = next((folder / name / ROBOFLOW_COCO_JSON for name in names
                      if (folder / name / ROBOFLOW_COCO_JSON).is_file()), None)
        if found is not None:
            jsons[split] = found
    return Layout("coco", folder, coco_jsons=jsons) if jsons else None


def _coco_folder_layout(folder: Path) -> Layout | None:
    """COCO jsons named as COCO, CVAT and datumaro name them (``annotations/instances_<split>.json``, CVAT's
    ``instances_default.json``) or as Label Studio does (``result.json`` beside ``images/``); without this the
    folder went to ``datasets``, which read it as a folder of unlabelled images."""
    jsons = sorted((folder / "annotations").glob("instances_*.json")) if (folder / "annotations").is_dir() else []
    if not jsons and (folder / "result.json").is_file():
        jsons = [folder / "result.json"]
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
    return Layout("coco", folder, note, coco_jsons=splits)


def _names_file(folder: Path) -> Path | None:
    return next((folder / name for name in NAMES_FILES if (folder / name).is_file()), None)


def read_names_file(path: Path) -> list[str]:
    """Class names, one per line (blank lines ignored), as darknet, CVAT and Label Studio write them."""
    if path.stat().st_size > MAX_NAMES_BYTES:
        raise DataSourceError(f"{path}: {path.stat().st_size} bytes, too large for a class-names file")
    names = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    if not names:
        raise DataSourceError(f"{path}: no class names (one per line)")
    return names


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
    if "val" not in splits and "test" not in splits:  # one split: Ultralytics would refuse; say what we do
        splits["val"] = splits["train"]
        note += "; no val/ or valid/ folder, so validation uses the training images (pass a data YAML to choose)"
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
    found = {}
    for split, names in SPLIT_FOLDERS.items():
        name = next((name for name in names if (folder / name).is_dir()), None)
        if name is not None:
            found[split] = prefix + name
    return found
