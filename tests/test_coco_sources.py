"""COCO json sources: one json per split, the image folder (--images or the standard COCO layout), a data YAML that
names the jsons, missing images, and train/val reading the same file."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import cv2
import numpy as np
import pytest

from yolo11.data import DataSourceError, load_source
from yolo11.data.sources import CONVERSIONS, VAL_FALLBACKS, report_same_data, same_data_warning

SPLITS = {"train": [1, 2, 3], "val": [7, 8]}  # image ids of each split


def write_split(root: Path, split: str, image_folder: str | None, ids: list[int] | None = None,
                json_name: str = "instances_{split}2017.json") -> Path:
    """``root/annotations/instances_<split>2017.json`` and (unless ``image_folder`` is None) its 64-px images in
    ``root/<image_folder>`` (``{split}`` replaced); one box of class 'b' per image, its x growing with the id."""
    ids = SPLITS[split] if ids is None else ids
    if image_folder is not None:
        folder = root / image_folder.replace("{split}", split)
        folder.mkdir(parents=True, exist_ok=True)
        for image_id in ids:
            shade = (40 * image_id + 9 * len(os.fspath(folder))) % 255  # tells the folders apart
            cv2.imwrite(os.fspath(folder / f"{image_id:012d}.jpg"), np.full((48, 64, 3), shade, np.uint8))
    coco = {"images": [{"id": i, "file_name": f"{i:012d}.jpg", "width": 64, "height": 48} for i in ids],
            "annotations": [{"id": k + 1, "image_id": i, "category_id": 3, "bbox": [i, 4, 20, 10], "iscrowd": 0}
                            for k, i in enumerate(ids)],
            "categories": [{"id": 1, "name": "a"}, {"id": 3, "name": "b"}]}
    path = root / "annotations" / json_name.replace("{split}", split)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(coco))
    return path


def read_from(row: dict, folder: Path) -> bool:
    """Whether the row's image is the file of that name in ``folder`` (the cache embeds the image bytes)."""
    return row["image"]["bytes"] == (folder / Path(row["image"]["path"]).name).read_bytes()


@pytest.mark.parametrize("layout", ["images/{split}2017", "{split}2017"])
def test_standard_coco_layout_with_one_json_per_split(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                      layout: str) -> None:
    root = tmp_path / "coco"
    for split in SPLITS:
        write_split(root, split, layout)
    spec = os.fspath(root / "annotations" / "instances_{split}2017.json")
    with caplog.at_level(logging.WARNING, logger="yolo11.data"):
        sources = {split: load_source(spec, split, cache_dir=tmp_path / "cache", workers=1) for split in SPLITS}
    for split, source in sources.items():
        assert source.dataset["image_id"] == SPLITS[split] and source.class_names == ["a", "b"]
        assert source.dataset[0]["objects"]["bbox"] == [[SPLITS[split][0], 4, 20, 10]]
        assert source.dataset[0]["objects"]["category"] == [1]
        folder = root / layout.replace("{split}", split)
        assert read_from(source.dataset[0], folder)
        assert f"instances_{split}2017.json: images from {folder} (none beside the json: the standard COCO " \
               "layout; --images names the folder)" in caplog.text
    assert same_data_warning(sources["train"], sources["val"]) == ""


def test_images_flag_with_split_template(tmp_path: Path) -> None:
    """Jsons and images in unrelated places: --images names the folder, with {split} for one per split."""
    for split in SPLITS:
        write_split(tmp_path / "labels", split, None)
        write_split(tmp_path / "pictures", split, "{split}")
    spec = os.fspath(tmp_path / "labels" / "annotations" / "instances_{split}2017.json")
    with pytest.raises(DataSourceError, match=r"no image folder found \(looked in .*labels/annotations, "
                                              r".*labels/images/val2017, .*labels/val2017, .*labels/images\); "
                                              r"pass --images DIR"):
        load_source(spec, "val", cache_dir=tmp_path / "cache")
    for split in SPLITS:
        source = load_source(spec, split, cache_dir=tmp_path / "cache", images=tmp_path / "pictures" / "{split}",
                             workers=1)
        assert source.dataset["image_id"] == SPLITS[split]
        assert read_from(source.dataset[0], tmp_path / "pictures" / split)
    with pytest.raises(DataSourceError, match=r"instances_test2017.json: no such file or folder \(.*instances_"
                                              r"\{split\}2017.json for split 'test'; --val-split names the split\)"):
        load_source(spec, "test", cache_dir=tmp_path / "cache", split_flag="--val-split")


def test_missing_images_are_an_error_naming_the_json_the_files_and_the_flag(tmp_path: Path) -> None:
    """The json's images are in no folder it names: previously an empty conversion crashed in datasets with
    'Keys mismatch'; now a DataSourceError says what is missing and which flag to set."""
    json_path = write_split(tmp_path, "val", None)
    write_split(tmp_path, "val", "elsewhere", ids=[99], json_name="other.json")  # images, but not the json's
    with pytest.raises(DataSourceError, match=r"instances_val2017.json: none of its 2 images is in .*elsewhere "
                                              r"\(first missing: 000000000007.jpg, 000000000008.jpg\); pass --images"):
        load_source(os.fspath(json_path), "val", cache_dir=tmp_path / "cache", images=tmp_path / "elsewhere")


def test_some_missing_images_are_skipped_and_counted(tmp_path: Path) -> None:
    json_path = write_split(tmp_path, "train", "images/{split}2017")
    (tmp_path / "images" / "train2017" / "000000000002.jpg").unlink()
    source = load_source(os.fspath(json_path), "train", cache_dir=tmp_path / "cache", workers=1)
    assert source.dataset["image_id"] == [1, 3]
    assert source.summary.skipped_images == [
        f"{tmp_path / 'images' / 'train2017' / '000000000002.jpg'}: no such file, image skipped (1 of the 3 images "
        f"listed in instances_train2017.json are missing from {tmp_path / 'images' / 'train2017'}, first: "
        "000000000002.jpg; --images names the image folder)"]


def test_an_image_whose_every_annotation_is_unusable_is_skipped_not_kept_as_background(tmp_path: Path) -> None:
    """Image 2's one box has a negative width: trained as a background, its object would teach the model to miss
    it. It is skipped, as a YOLO image whose every label line is bad; a crowd-only image stays a background."""
    json_path = write_split(tmp_path, "train", "images/{split}2017")
    coco = json.loads(json_path.read_text())
    coco["annotations"][1]["bbox"] = [30, 4, -20, 10]  # image 2
    coco["annotations"][2]["iscrowd"] = 1  # image 3: a crowd region only
    json_path.write_text(json.dumps(coco))
    source = load_source(os.fspath(json_path), "train", cache_dir=tmp_path / "cache", workers=1)
    assert source.dataset["image_id"] == [1, 3] and source.summary.backgrounds == 1
    assert source.summary.skipped_lines == [f"{json_path}: annotation 2 of image 2: box 30.0,4.0,10.0,14.0 has a "
                                            "negative width or height, skipped"]
    assert source.summary.skipped_images == [f"{tmp_path / 'images' / 'train2017' / '000000000002.jpg'}: none of "
                                             "its 1 annotations can be used, skipped: its objects would be trained "
                                             "as background"]


def test_an_image_with_more_annotations_than_one_image_may_have_is_skipped_named(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch):
    from yolo11.data.sources import coco

    monkeypatch.setattr(coco, "MAX_BOXES_PER_IMAGE", 2)
    json_path = write_split(tmp_path, "train", "images/{split}2017")
    data = json.loads(json_path.read_text())
    data["annotations"] += [dict(data["annotations"][0], id=10 + k) for k in range(2)]  # image 1: three boxes
    json_path.write_text(json.dumps(data))
    source = load_source(os.fspath(json_path), "train", cache_dir=tmp_path / "cache", workers=1)
    assert source.dataset["image_id"] == [2, 3]
    assert source.summary.skipped_images == [f"{tmp_path / 'images' / 'train2017' / '000000000001.jpg'}: 3 "
                                             "annotations, more than the 2 objects one image may have, skipped"]


def test_every_image_unusable_is_an_error_not_a_datasets_crash(tmp_path: Path) -> None:
    """All images present but undecodable: an empty conversion is cached and reported, not 'Keys mismatch'."""
    json_path = write_split(tmp_path, "val", "images/{split}2017")
    for image in (tmp_path / "images" / "val2017").iterdir():
        image.write_bytes(b"not an image")
    with pytest.raises(DataSourceError, match="instances_val2017.json: no usable images"):
        load_source(os.fspath(json_path), "val", cache_dir=tmp_path / "cache", workers=1)


def test_data_yaml_naming_the_jsons(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for split in SPLITS:
        write_split(tmp_path / "coco", split, "pics/{split}")
    (tmp_path / "one_folder.yaml").write_text(
        "path: coco\ntrain: annotations/instances_train2017.json\nval: annotations/instances_val2017.json\n"
        "images: pics/{split}\n")
    (tmp_path / "per_split.yaml").write_text(
        "path: coco\ntrain: annotations/instances_train2017.json\ntest: annotations/instances_val2017.json\n"
        "images: {train: pics/train, test: pics/val}\n")
    for split in SPLITS:
        source = load_source(os.fspath(tmp_path / "one_folder.yaml"), split, cache_dir=tmp_path / "cache", workers=1)
        assert source.dataset["image_id"] == SPLITS[split] and source.class_names == ["a", "b"]
    with caplog.at_level(logging.WARNING, logger="yolo11.data"):  # Ultralytics also validates on 'test'
        val = load_source(os.fspath(tmp_path / "per_split.yaml"), "val", cache_dir=tmp_path / "cache", workers=1,
                          fallback_splits=VAL_FALLBACKS, split_flag="--val-split")
    assert val.dataset["image_id"] == SPLITS["val"]
    assert read_from(val.dataset[0], tmp_path / "coco" / "pics" / "val")
    assert "no 'val' split, using 'test' in its place (--val-split chooses another)" in caplog.text
    (tmp_path / "broken.yaml").write_text("path: coco\ntrain: annotations/instances_nope.json\n")
    with pytest.raises(DataSourceError, match="the 'train' json .*instances_nope.json does not exist"):
        load_source(os.fspath(tmp_path / "broken.yaml"), "train", cache_dir=tmp_path / "cache")


def test_one_json_for_train_and_val_is_allowed_with_a_warning(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    json_path = write_split(tmp_path, "train", "images/{split}2017")
    train, val = (load_source(os.fspath(json_path), split, cache_dir=tmp_path / "cache", workers=1)
                  for split in ("train", "val"))
    assert train.dataset["image_id"] == val.dataset["image_id"] == SPLITS["train"]
    with caplog.at_level(logging.WARNING, logger="yolo11.data"):
        report_same_data(train, val)
    assert f"training and validation use the same data ({json_path})" in caplog.text


def test_image_folder_and_box_format_are_part_of_the_cache_key(tmp_path: Path) -> None:
    json_path = write_split(tmp_path, "train", "first")
    write_split(tmp_path, "train", "second")
    spec, cache = os.fspath(json_path), tmp_path / "cache"
    before = CONVERSIONS["coco"]
    first = load_source(spec, cache_dir=cache, images=tmp_path / "first", workers=1)
    assert load_source(spec, cache_dir=cache, images=tmp_path / "first", workers=1).dataset[0] == first.dataset[0]
    assert CONVERSIONS["coco"] == before + 1
    second = load_source(spec, cache_dir=cache, images=tmp_path / "second", workers=1)
    assert CONVERSIONS["coco"] == before + 2
    assert read_from(second.dataset[0], tmp_path / "second") and not read_from(first.dataset[0], tmp_path / "second")
    corners = load_source(spec, cache_dir=cache, images=tmp_path / "second", bbox_format="xyxy", workers=1)
    assert CONVERSIONS["coco"] == before + 3
    assert second.dataset[0]["objects"]["bbox"] == [[1, 4, 20, 10]]
    assert corners.dataset[0]["objects"]["bbox"] == [[1, 4, 19, 6]]  # [1, 4, 20, 10] read as x1 y1 x2 y2


def test_an_image_changed_one_folder_down_converts_again(tmp_path: Path) -> None:
    """Label Studio's layout: the json beside ``images/``, its ``file_name``s ``images/x.jpg``. A changed image
    there is part of the cache key, as one beside the json is: the cache never keeps the old image's boxes."""
    json_path = write_split(tmp_path, "train", "images")
    coco = json.loads(json_path.read_text())
    for info in coco["images"]:
        info["file_name"] = f"images/{info['file_name']}"
    labelled = tmp_path / "result.json"
    labelled.write_text(json.dumps(coco))
    spec, cache = os.fspath(labelled), tmp_path / "cache"
    before = CONVERSIONS["coco"]
    assert len(load_source(spec, cache_dir=cache, workers=1).dataset) == 3
    image = tmp_path / "images" / "000000000002.jpg"
    cv2.imwrite(os.fspath(image), np.zeros((64, 48, 3), np.uint8))  # turned: the json's 64x48 no longer holds
    source = load_source(spec, cache_dir=cache, workers=1)
    assert CONVERSIONS["coco"] == before + 2
    assert len(source.dataset) == 2 and "000000000002.jpg" in source.summary.skipped_images[0]


def test_file_names_written_on_windows_are_read(tmp_path: Path) -> None:
    """``images\\x.jpg``: every image was missing ('none of its 3 images is in ...'), --images did not help."""
    json_path = write_split(tmp_path, "train", "images")
    coco = json.loads(json_path.read_text())
    for info in coco["images"]:
        info["file_name"] = f"images\\{info['file_name']}"
    (tmp_path / "result.json").write_text(json.dumps(coco))
    source = load_source(os.fspath(tmp_path / "result.json"), cache_dir=tmp_path / "cache", workers=1)
    assert len(source.dataset) == 3 and not source.summary.skipped_images
    assert read_from(source.dataset[0], tmp_path / "images")


def test_trainer_flags_reach_the_sources(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--data with {split} and --images go through locate_inputs: train and val from their own files."""
    from accelerate import PartialState

    from yolo11.engine.config import parse_config
    from yolo11.engine.trainer import locate_inputs
    from yolo11.train import main

    for split in SPLITS:
        write_split(tmp_path / "labels", split, None)
        write_split(tmp_path / "coco", split, "images/{split}2017")
    common = ["--cache-dir", os.fspath(tmp_path / "cache"), "--output-dir", os.fspath(tmp_path / "runs")]
    config = parse_config(["--data", os.fspath(tmp_path / "labels" / "annotations" / "instances_{split}2017.json"),
                           "--images", os.fspath(tmp_path / "coco" / "images" / "{split}2017"), *common])
    assert (config.data.images, config.data.bbox_format) == (os.fspath(tmp_path / "coco/images/{split}2017"), "auto")
    _, train, val = locate_inputs(config, PartialState(cpu=True))
    assert train.dataset["image_id"] == SPLITS["train"] and val.dataset["image_id"] == SPLITS["val"]
    assert read_from(val.dataset[0], tmp_path / "coco" / "images" / "val2017")

    with pytest.raises(SystemExit):  # argparse's choices
        parse_config(["--bbox-format", "cxcywh"])
    (tmp_path / "defaults.yaml").write_text("bbox_format: corners\n")
    with pytest.raises(SystemExit):  # a --config value skips argparse's choices: the dataclass checks it
        parse_config(["--config", os.fspath(tmp_path / "defaults.yaml")])
    assert "--bbox-format must be auto, xywh or xyxy, got 'corners'" in capsys.readouterr().err

    spec = os.fspath(tmp_path / "coco" / "annotations" / "instances_{split}2017.json")
    assert main(["--data", spec, "--val-split", "holdout", *common]) == 2
    assert "instances_holdout2017.json: no such file or folder" in capsys.readouterr().err
    assert main(["--data", spec, "--bbox-format", "xyxy", "--images", os.fspath(tmp_path / "nowhere"), *common]) == 2
    assert f"image folder {tmp_path / 'nowhere'} does not exist (--images)" in capsys.readouterr().err


def test_a_json_written_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """Windows tools may write UTF-8 with a byte-order mark, which ``json.loads`` refuses: the annotations are
    read as without it."""
    root = tmp_path / "coco"
    path = write_split(root, "train", "images/{split}2017")
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    source = load_source(os.fspath(path), "train", cache_dir=tmp_path / "cache", workers=1)
    assert source.dataset["image_id"] == SPLITS["train"] and source.class_names == ["a", "b"]
