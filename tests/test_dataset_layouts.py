"""Datasets as users' tools and editors leave them, read as Ultralytics reads them: label and list files with a
byte-order mark, CRLF or UTF-16, data YAMLs in their other spellings, txt image lists, symlinked and hidden files,
pose labels, and the image formats Ultralytics lists beyond the common ones."""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.yolo_folders import make_dataset, write_image
from PIL import Image

from yolo11.data import DataSourceError, load_source


def _load(spec: Path, tmp_path: Path, split: str = "train", **kwargs):
    return load_source(os.fspath(spec), split, cache_dir=tmp_path / "cache", workers=1, **kwargs)


def _by_name(source) -> dict[str, dict]:
    return {Path(row["image"]["path"]).name: row for row in source.dataset}


# --- label files ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("encoding", ["utf-8-sig", "crlf", "utf-16"])
def test_label_files_from_windows_editors_read_every_line(tmp_path: Path, encoding: str) -> None:
    """A byte-order mark (Ultralytics reads labels as ``utf-8-sig``) used to make the first line non-numeric."""
    yaml_path = make_dataset(tmp_path, {"x": ""})
    text = "2 0.5 0.5 0.2 0.2\n1 0.25 0.25 0.1 0.1\n"
    data = text.replace("\n", "\r\n").encode() if encoding == "crlf" else text.encode(encoding)
    (tmp_path / "labels" / "train" / "x.txt").write_bytes(data)
    source = _load(yaml_path, tmp_path)
    assert source.summary.num_problems == 0, source.summary
    objects = source.dataset[0]["objects"]
    assert objects["category"] == [2, 1]
    np.testing.assert_allclose(objects["bbox"], [[32, 24, 16, 12], [16, 12, 8, 6]], atol=1e-4)


def test_a_label_file_with_no_usable_line_skips_its_image(tmp_path: Path) -> None:
    """Its image shows objects: trained as a background it would teach the model they are not there."""
    yaml_path = make_dataset(tmp_path, {"good": "0 0.5 0.5 0.2 0.2\n", "commas": "0,0.5,0.5,0.2,0.2\n",
                                        "classes": "7 0.5 0.5 0.2 0.2\n9 0.5 0.5 0.1 0.1\n", "empty": ""})
    source = _load(yaml_path, tmp_path)
    assert sorted(_by_name(source)) == ["empty.jpg", "good.jpg"] and source.summary.backgrounds == 1
    skipped = "\n".join(source.summary.skipped_images)
    assert "commas.txt: its only label line is unusable, image skipped" in skipped, skipped
    assert "classes.txt: none of its 2 label lines is usable, image skipped" in skipped, skipped
    assert any("commas.txt:1: expected 5 fields" in line for line in source.summary.skipped_lines)


@pytest.mark.parametrize("kpt_shape", [[3, 2], [17, 3]])
def test_pose_labels_give_their_boxes(tmp_path: Path, kpt_shape: list[int]) -> None:
    """A pose dataset's line is a box then keypoints (``kpt_shape``): 3 points of (x, y) make 11 fields, which
    would otherwise read as a polygon, 17 of (x, y, v) 56, which would be skipped."""
    points = " ".join(["0.9 0.9 2" if kpt_shape[1] == 3 else "0.9 0.9"] * kpt_shape[0])
    yaml_path = make_dataset(tmp_path, {"pose": f"0 0.5 0.5 0.2 0.2 {points}\n"},
                             yaml_extra=f"kpt_shape: {kpt_shape}\nnames: [person]\n")
    source = _load(yaml_path, tmp_path)
    assert source.summary.num_problems == 0, source.summary
    np.testing.assert_allclose(source.dataset[0]["objects"]["bbox"], [[32, 24, 16, 12]], atol=1e-4)


# --- data YAMLs ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant, expected_names", [
    ("validation: images/val\nnames: [a, b]\n", ["a", "b"]),
    ("val: images/val\nnc: 2\n", ["class_0", "class_1"]),
    ("val: images/val\nnc: '2'\nnames:\n  1: b\n  0: a\n", ["a", "b"]),
    ("json", ["a", "b"]),
])
def test_data_yaml_spellings_ultralytics_accepts(tmp_path: Path, variant: str, expected_names: list[str]) -> None:
    """``validation:`` for ``val``, ``nc`` alone, ``nc`` as a string, a YAML written as JSON (string keys)."""
    make_dataset(tmp_path, {"t0": "0 0.5 0.5 0.2 0.2\n", "t1": "1 0.5 0.5 0.2 0.2\n"})
    for k in range(3):
        write_image(tmp_path / "images" / "val" / f"v{k}.jpg", seed=10 + k)
        (tmp_path / "labels" / "val").mkdir(parents=True, exist_ok=True)
        (tmp_path / "labels" / "val" / f"v{k}.txt").write_text(f"{k % 2} 0.5 0.5 0.2 0.2\n")
    yaml_path = tmp_path / "variant.yaml"
    yaml_path.write_text(json.dumps({"path": os.fspath(tmp_path), "train": "images/train", "val": "images/val",
                                     "names": {"0": "a", "1": "b"}}) if variant == "json"
                         else f"path: {tmp_path}\ntrain: images/train\n{variant}")
    val = _load(yaml_path, tmp_path, "val")
    assert len(val.dataset) == 3 and val.class_names == expected_names
    assert sorted(c for row in val.dataset for c in row["objects"]["category"]) == [0, 0, 1]


@pytest.mark.parametrize("where", ["./datasets", "ultralytics settings"])
def test_a_relative_path_is_found_where_ultralytics_keeps_datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   where: str) -> None:
    """``path: mydata`` in a YAML written for Ultralytics: its data under ``./datasets`` (Ultralytics' default
    datasets_dir) or under the ``datasets_dir`` of its settings.json (``$YOLO_CONFIG_DIR/Ultralytics``)."""
    from yolo11.data.sources.yolo import ultralytics_datasets_dir

    work, config = tmp_path / "work", tmp_path / "config"
    datasets = work / "datasets" if where == "./datasets" else tmp_path / "elsewhere"
    make_dataset(datasets / "mydata", {"a": "0 0.5 0.5 0.2 0.2\n"})
    (config / "Ultralytics").mkdir(parents=True)
    (config / "Ultralytics" / "settings.json").write_text(json.dumps(
        {"settings_version": "0.0.6", "datasets_dir": os.fspath(tmp_path / "elsewhere")}))
    yaml_path = tmp_path / "yamls" / "mydata.yaml"
    yaml_path.parent.mkdir()
    yaml_path.write_text("path: mydata\ntrain: images/train\nval: images/train\nnames: [a, b, c]\n")
    work.mkdir(exist_ok=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("YOLO_CONFIG_DIR", os.fspath(config))
    ultralytics_datasets_dir.cache_clear()
    try:
        source = _load(yaml_path, tmp_path)
    finally:
        ultralytics_datasets_dir.cache_clear()
    assert len(source.dataset) == 1
    assert source.origin == f"yolo:{(datasets / 'mydata' / 'images' / 'train').resolve()}", source.origin


def test_a_class_named_twice_in_a_data_yaml_is_refused_by_name(tmp_path: Path) -> None:
    """A list numbers the classes by position: two of one name cannot both be classes of the model (the error came
    from datasets' ClassLabel, naming no file)."""
    yaml_path = make_dataset(tmp_path, {"x": "0 0.5 0.5 0.2 0.2\n"}, yaml_extra="names: [car, bus, car]\n")
    with pytest.raises(DataSourceError) as caught:
        _load(yaml_path, tmp_path)
    assert f"{yaml_path}: the class name 'car' is listed twice (classes 0 and 2)" in str(caught.value)


def test_a_class_name_holding_a_line_break_is_refused_by_name(tmp_path: Path) -> None:
    """A name of two lines would split every row of the per-class table and of results printed per class."""
    yaml_path = make_dataset(tmp_path, {"x": "0 0.5 0.5 0.2 0.2\n"}, yaml_extra='names: [car, "traffic\\nlight"]\n')
    with pytest.raises(DataSourceError) as caught:
        _load(yaml_path, tmp_path)
    assert f"{yaml_path}: the name of class 1, 'traffic\\nlight', holds a control character" in str(caught.value)


@pytest.mark.parametrize("nc", ["'ten'", "2.5", "0"])
def test_nc_that_is_not_a_class_count_is_refused_by_name(tmp_path: Path, nc: str) -> None:
    yaml_path = make_dataset(tmp_path, {"x": "0 0.5 0.5 0.2 0.2\n"}, yaml_extra=f"nc: {nc}\n")
    with pytest.raises(DataSourceError, match=r"'nc' is .*it must be the number of classes") as info:
        _load(yaml_path, tmp_path)
    assert str(yaml_path) in str(info.value)


# --- txt image lists -----------------------------------------------------------------------------------------

def _list_dataset(root: Path, list_text: str, encoding: str = "utf-8") -> Path:
    make_dataset(root, {f"t{k}": f"{k % 3} 0.5 0.5 0.2 0.2\n" for k in range(3)})
    (root / "lists").mkdir()
    (root / "lists" / "train.txt").write_bytes(list_text.encode(encoding))
    yaml_path = root / "list.yaml"
    yaml_path.write_text(f"path: {root}\ntrain: lists/train.txt\nval: lists/train.txt\nnames: [a, b, c]\n")
    return yaml_path


def test_image_list_with_bom_crlf_windows_separators_and_a_missing_file(tmp_path: Path) -> None:
    """A missing listed image used to end the conversion in a raw ``FileNotFoundError`` traceback."""
    text = "../images/train/t0.jpg\r\n..\\images\\train\\t1.jpg\r\n../images/train/gone.jpg\r\n\r\n"
    yaml_path = _list_dataset(tmp_path, text, "utf-8-sig")
    source = _load(yaml_path, tmp_path)
    assert sorted(_by_name(source)) == ["t0.jpg", "t1.jpg"]
    assert [row["objects"]["category"] for row in source.dataset] == [[0], [1]]
    assert source.summary.skipped_images == [
        f"{tmp_path / 'images' / 'train' / 'gone.jpg'}: listed in {tmp_path / 'lists' / 'train.txt'} but no such "
        "file, image skipped"]


def test_image_list_paths_relative_to_the_working_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ultralytics reads a line not starting with ``./`` from the working folder (darknet's ``data/obj/x.jpg``)."""
    yaml_path = _list_dataset(tmp_path, "images/train/t0.jpg\nimages/train/t2.jpg\n")
    with pytest.raises(DataSourceError, match=r"train\.txt: none of the 2 images it lists exists") as info:
        _load(yaml_path, tmp_path)
    assert "lists/images/train/t0.jpg" in str(info.value)
    monkeypatch.chdir(tmp_path)
    source = _load(yaml_path, tmp_path)
    assert [row["objects"]["category"] for row in source.dataset] == [[0], [2]]


# --- folders -------------------------------------------------------------------------------------------------

def test_folders_follow_symlinks_and_skip_hidden_files_as_ultralytics_glob(tmp_path: Path) -> None:
    """A symlinked sub-folder of images (and of labels) is read; macOS's ``._x.jpg`` and hidden folders are not;
    a link back to a parent does not loop. The fast fingerprint scan lists exactly the same files."""
    from yolo11.data.sources.yolo import _stat, yolo_fingerprint_files, yolo_fingerprint_stats

    root = tmp_path / "set"
    yaml_path = make_dataset(root, {"a": "0 0.5 0.5 0.2 0.2\n"})
    external = tmp_path / "external"
    write_image(external / "images" / "b.jpg", seed=1)
    (external / "labels").mkdir()
    (external / "labels" / "b.txt").write_text("1 0.5 0.5 0.2 0.2\n")
    (root / "images" / "train" / "linked").symlink_to(external / "images")
    (root / "labels" / "train" / "linked").symlink_to(external / "labels")
    (root / "images" / "train" / "._a.jpg").write_bytes(b"\x00\x05\x16\x07" + bytes(60))  # AppleDouble
    write_image(root / "images" / "train" / ".ipynb_checkpoints" / "a-checkpoint.jpg", seed=2)
    (root / "images" / "train" / "up").symlink_to(root / "images")
    source = _load(yaml_path, tmp_path)
    assert source.summary.num_problems == 0, source.summary
    rows = _by_name(source)
    assert sorted(rows) == ["a.jpg", "b.jpg"] and rows["b.jpg"]["objects"]["category"] == [1]
    expected = [_stat(path) for path in yolo_fingerprint_files(yaml_path, "train")]
    assert yolo_fingerprint_stats(yaml_path, "train") == expected and len(expected) == 5


def _encoded(fmt: str, **save) -> bytes:
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (60, 80, 3), dtype=np.uint8))
    buffer = io.BytesIO()
    image.save(buffer, fmt, **save)
    return buffer.getvalue()


def test_mpo_jp2_are_read_and_heic_is_named(tmp_path: Path) -> None:
    """Formats Ultralytics lists: .mpo and .jp2 decode (they used to be left out without a word); .heic, which
    OpenCV cannot decode, is skipped by name with what to do."""
    yaml_path = make_dataset(tmp_path, {"jpeg": "0 0.5 0.5 0.2 0.2\n"})
    files = {"stereo.MPO": _encoded("MPO", save_all=True, append_images=[Image.new("RGB", (80, 60))]),
             "scan.jp2": _encoded("JPEG2000"), "phone.heic": b"\0\0\0\x18ftypheic" + bytes(64)}
    for name, data in files.items():
        (tmp_path / "images" / "train" / name).write_bytes(data)
        (tmp_path / "labels" / "train" / f"{Path(name).stem}.txt").write_text("1 0.5 0.5 0.2 0.2\n")
    source = _load(yaml_path, tmp_path)
    rows = _by_name(source)
    assert sorted(rows) == ["jpeg.jpg", "scan.jp2", "stereo.MPO"]
    assert all((row["width"], row["height"]) == (80, 60) for row in rows.values())
    assert source.summary.skipped_images == [f"{tmp_path / 'images' / 'train' / 'phone.heic'}: OpenCV cannot "
                                             "decode .heic images; convert them to JPEG or PNG, image skipped"]


# --- COCO folders --------------------------------------------------------------------------------------------

def _coco_json(path: Path, image_folder: Path, prefix: str, count: int, seed: int) -> None:
    """A COCO json of ``count`` 80x60 images written into ``image_folder``, named ``prefix + file`` in the json,
    one box of category 3 ("cat") each."""
    images, annotations = [], []
    for k in range(count):
        write_image(image_folder / f"{seed}-{k}.jpg", seed=seed + k)
        images.append({"id": k + 1, "file_name": f"{prefix}{seed}-{k}.jpg", "width": 80, "height": 60})
        annotations.append({"id": k + 1, "image_id": k + 1, "category_id": 3, "bbox": [10, 10, 20, 20],
                            "area": 400, "iscrowd": 0, "segmentation": []})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"images": images, "annotations": annotations,
                                "categories": [{"id": 3, "name": "cat", "supercategory": ""}]}))


@pytest.mark.parametrize("layout", ["cvat coco", "coco 2017", "label studio coco", "label studio uploads",
                                    "fiftyone coco", "fiftyone splits"])
def test_coco_export_folders_are_recognised(tmp_path: Path, layout: str,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """``--data DIR`` for a COCO export used to reach ``datasets``, which read it as unlabelled images ("no objects
    column"). A single json (CVAT's ``instances_default.json``, Label Studio's ``result.json``, FiftyOne's
    ``labels.json``) serves both splits. Label Studio names each image by its server's upload path
    (``../../label-studio/media/upload/3/x.jpg``), which no ``--images`` could make work: found by file name."""
    caplog.set_level(logging.INFO)
    root = tmp_path / "export"
    splits = 2 if layout in ("coco 2017", "fiftyone splits") else 1
    if layout == "label studio uploads":
        _coco_json(root / "result.json", root / "images", "../../label-studio/media/upload/3/", 3, 0)
    elif layout == "fiftyone coco":
        _coco_json(root / "labels.json", root / "data", "", 3, 0)
    elif layout == "fiftyone splits":
        _coco_json(root / "train" / "labels.json", root / "train" / "data", "", 3, 0)
        _coco_json(root / "validation" / "labels.json", root / "validation" / "data", "", 2, 10)
    elif layout == "cvat coco":
        _coco_json(root / "annotations" / "instances_default.json", root / "images", "", 3, 0)
    elif layout == "coco 2017":
        _coco_json(root / "annotations" / "instances_train2017.json", root / "images" / "train2017", "", 3, 0)
        _coco_json(root / "annotations" / "instances_val2017.json", root / "images" / "val2017", "", 2, 10)
    else:
        _coco_json(root / "result.json", root / "images", "images/", 3, 0)
    train, val = (load_source(os.fspath(root), split, cache_dir=tmp_path / "cache", workers=1,
                              fallback_splits=("val", "test")) for split in ("train", "val"))
    assert (len(train.dataset), len(val.dataset)) == ((3, 2) if splits == 2 else (3, 3))
    assert train.class_names == val.class_names == ["cat"]
    assert all(row["objects"]["category"] == [0] for row in [*train.dataset, *val.dataset])
    assert ("one COCO json" in caplog.text) == (splits == 1)
    assert ("3 images were not where their file_name says" in caplog.text) == (layout == "label studio uploads")


@pytest.mark.parametrize("make, renames", [
    ("roboflow_coco", {"train": "Train", "valid": "Valid"}),
    ("roboflow_voc", {"train": "training", "valid": "Validation"}),
    ("roboflow_darknet", {"train": "TRAIN", "valid": "VAL"}),
])
def test_split_folders_named_in_another_case_or_word(tmp_path: Path, make: str, renames: dict[str, str]) -> None:
    """``Train/``/``Valid/`` (Windows users, some tools), ``training/``/``testing/`` (KITTI's words): the same
    splits as ``train/``/``valid/``, on a case-sensitive file system too."""
    from helpers import user_data

    folder = getattr(user_data, make)(tmp_path / "export")
    for old, new in renames.items():
        (folder / old).rename(folder / new)
    train, val = _load(folder, tmp_path, "train"), _load(folder, tmp_path, "val")
    assert (len(train.dataset), len(val.dataset)) == (5, 3)
    assert not train.summary.num_problems and not val.summary.num_problems


@pytest.mark.parametrize("make", ["roboflow_coco", "roboflow_csv", "roboflow_createml"])
def test_an_export_of_the_training_split_alone_validates_on_it_and_says_so(tmp_path: Path, make: str,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    from helpers import user_data

    from yolo11.data.sources import same_data_warning

    folder = getattr(user_data, make)(tmp_path / "export")
    shutil.rmtree(folder / "valid")
    train, val = _load(folder, tmp_path, "train"), _load(folder, tmp_path, "val")
    assert len(train.dataset) == len(val.dataset) == 5 and same_data_warning(train, val)
    assert "so validation uses the training images" in caplog.text

