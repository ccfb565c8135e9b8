"""COCO jsons as users have them, converted through ``load_source`` with coco8's real images: crowd boxes,
polygons and RLE, category ids with gaps, backgrounds, broken annotations, sub-folders, header sizes that lie, the
Roboflow export's dataset category, and files too large or too deep to read."""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from pycocotools import mask as mask_utils

from yolo11.data import DataSourceError, load_source
from yolo11.data.sources import coco
from yolo11.gate import MAX_CLASSES

COCO8 = Path(__file__).resolve().parents[1] / "yolo11" / "assets" / "coco8" / "images" / "train"
SIZES = {9: (160, 120), 25: (160, 106), 30: (160, 107), 34: (160, 106)}  # coco8's train images, (width, height)


def copy_image(image_id: int, destination: Path) -> str:
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(COCO8 / f"{image_id:012d}.jpg", destination)
    return destination.name


def mask(height: int, width: int, rows: slice, columns: slice) -> np.ndarray:
    pixels = np.zeros((height, width), np.uint8, order="F")
    pixels[rows, columns] = 1
    return pixels


def uncompressed_rle(pixels: np.ndarray) -> dict:
    """COCO's uncompressed RLE: run lengths over the pixels in column-major order, starting with a run of 0s."""
    flat = pixels.flatten(order="F")
    edges = np.flatnonzero(np.diff(flat)) + 1
    runs = np.diff(np.concatenate([[0], edges, [flat.size]])).tolist()
    return {"counts": ([0] if flat[0] else []) + runs, "size": list(pixels.shape)}


def compressed_rle(pixels: np.ndarray) -> dict:
    rle = mask_utils.encode(pixels)
    return {"counts": rle["counts"].decode(), "size": rle["size"]}


def test_coco_json_variants_convert_exactly(tmp_path: Path) -> None:
    """One json with what users' files hold. Previously a missing ``bbox`` raised KeyError, ``[1, 2, 3]`` became
    the box ``[1, 2, 4, 5]`` (numpy broadcasting), ``"10"`` was read as 10 and an annotation of an image not in
    ``images`` vanished without a message. The sizes are the files' (the json's agree: see the test of resized
    images below)."""
    images = tmp_path / "images"
    copy_image(9, images / "000000000009.jpg")
    copy_image(25, images / "sub" / "dir" / "000000000025.jpg")
    copy_image(30, images / "000000000030.jpg")
    copy_image(34, images / "000000000034.jpg")
    ann = [  # image 9 is 160 wide and 120 high
        {"id": 1, "image_id": 9, "category_id": 1, "bbox": [10, 20, 30, 40], "area": 1200},  # no iscrowd
        {"id": 2, "image_id": 9, "category_id": 18, "bbox": [], "iscrowd": 0,
         "segmentation": [[50, 10, 70, 10, 70, 30], [60, 40, 55, 35]]},
        {"id": 3, "image_id": 9, "category_id": 90, "iscrowd": 0,
         "segmentation": uncompressed_rle(mask(120, 160, slice(5, 10), slice(100, 104)))},
        {"id": 4, "image_id": 9, "category_id": 1, "iscrowd": 0, "bbox": None,
         "segmentation": compressed_rle(mask(120, 160, slice(60, 80), slice(20, 50)))},
        {"id": 5, "image_id": 9, "category_id": 1, "iscrowd": 1, "bbox": [0, 0, 50, 50],
         "segmentation": uncompressed_rle(mask(120, 160, slice(0, 50), slice(0, 50)))},
        {"id": 6, "image_id": 9, "category_id": 1, "bbox": [1, 2, 3], "iscrowd": 0},
        {"id": 7, "image_id": 9, "category_id": 1, "bbox": ["10", 20, 30, 40], "iscrowd": 0},
        {"id": 8, "image_id": 9, "category_id": 1, "bbox": [math.nan, 1, 2, 3], "iscrowd": 0},
        {"id": 9, "image_id": 999, "category_id": 1, "bbox": [1, 1, 5, 5], "iscrowd": 0},
        {"id": 10, "image_id": 9, "category_id": 1, "bbox": [150, 100, 200, 100], "iscrowd": 0},  # far outside
        {"id": 11, "image_id": 9, "category_id": 18, "bbox": [1, 1, 5, 5], "iscrowd": 0,
         "segmentation": [[100, 100, 120, 100, 120, 110]]},  # bbox wins over the segmentation
        {"id": 12, "image_id": 25, "category_id": 18, "bbox": [0, 0, 160, 106], "iscrowd": 0},
        {"id": 13, "image_id": 34, "category_id": 90, "bbox": [5, 5, 20, 20], "iscrowd": 1},
    ]
    data = {"images": [{"id": 9, "file_name": "000000000009.jpg", "width": 160, "height": 120},
                       {"id": 25, "file_name": "sub/dir/000000000025.jpg", "width": 160, "height": 106},
                       {"id": 30, "file_name": "000000000030.jpg"},
                       {"id": 34, "file_name": "000000000034.jpg", "width": 160, "height": 106},
                       {"id": 9, "file_name": "again.jpg"}, {"file_name": "no_id.jpg"},
                       {"id": 2**63, "file_name": "000000000009.jpg"}],  # beyond the cache's int64
            "annotations": ann,
            "categories": [{"id": 90, "name": "toothbrush"}, {"id": 1, "name": "person"}, {"id": 18, "name": "dog"}]}
    json_path = tmp_path / "instances.json"
    json_path.write_text(json.dumps(data))  # writes NaN as the bare NaN token, as Python's json reads it
    source = load_source(os.fspath(json_path), cache_dir=tmp_path / "cache", images=images, workers=1)

    assert source.class_names == ["person", "dog", "toothbrush"]  # sorted ids 1, 18, 90 -> classes 0, 1, 2
    rows = source.dataset
    assert rows["image_id"] == [9, 25, 30, 34]
    assert [(r["width"], r["height"]) for r in rows] == [SIZES[i] for i in (9, 25, 30, 34)]  # the files win
    assert rows[0]["objects"]["bbox"] == [[10, 20, 30, 40], [50, 10, 20, 30], [100, 5, 4, 5], [20, 60, 30, 20],
                                          [1, 1, 5, 5]]
    assert rows[0]["objects"]["category"] == [0, 1, 2, 0, 1]
    assert rows[1]["objects"]["bbox"] == [[0, 0, 160, 106]] and rows[1]["objects"]["category"] == [1]
    assert rows[1]["image"]["bytes"] == (images / "sub" / "dir" / "000000000025.jpg").read_bytes()
    assert rows[2]["objects"]["bbox"] == rows[3]["objects"]["bbox"] == []  # no annotation; a crowd box only
    summary = source.summary
    assert summary.backgrounds == 2 and summary.clipped_boxes == 0
    assert summary.skipped_images == [
        f"{json_path}: image id 9 is listed again (again.jpg); skipped",
        f"{json_path}: images[5] needs an integer 'id' (within int64) and a 'file_name', got "
        "{'file_name': 'no_id.jpg'}; skipped",
        f"{json_path}: images[6] needs an integer 'id' (within int64) and a 'file_name', got "
        f"{{'id': {2**63}, 'file_name': '000000000009.jpg'}}; skipped"]
    assert summary.skipped_lines == [
        f"{json_path}: annotation 9: image 999 is not in 'images' (or was skipped); annotation skipped",
        f"{json_path}: annotation 6 of image 9: bbox [1, 2, 3] is not 4 numbers, skipped",
        f"{json_path}: annotation 7 of image 9: bbox ['10', 20, 30, 40] is not 4 numbers, skipped",
        f"{json_path}: annotation 8 of image 9: bbox [nan, 1, 2, 3] is not finite, skipped",
        f"{json_path}: annotation 10 of image 9: box 150.0,100.0,350.0,200.0 lies outside the 160x120 image, "
        "skipped"]


@pytest.mark.parametrize("segmentation, reason", [
    ([[1, 2, 3]], "segmentation [[1, 2, 3]] is not polygons of x, y numbers"),
    ({"counts": [5, 5], "size": [120, 160]}, "RLE counts are not run lengths adding up to 120 x 160 pixels"),
    ({"counts": "0", "size": [120]}, "RLE size [120] is not [height, width]"),
    ({"counts": [70000 * 70000], "size": [70000, 70000]},  # pycocotools' OverflowError before
     "RLE size 70000 x 70000 exceeds the 2^32 pixels an RLE mask may hold"),
    ("mask.png", "segmentation mask.png is neither polygons nor RLE"),
    (None, "no bbox and no segmentation"),
])
def test_unusable_segmentation_without_bbox_is_skipped_with_its_reason(tmp_path: Path, segmentation: object,
                                                                        reason: str) -> None:
    copy_image(9, tmp_path / "a.jpg")
    json_path = tmp_path / "a.json"
    json_path.write_text(json.dumps({
        "images": [{"id": 1, "file_name": "a.jpg"}], "categories": [{"id": 1, "name": "person"}],
        "annotations": [{"id": 4, "image_id": 1, "category_id": 1, "segmentation": segmentation},
                        {"id": 5, "image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4]}]}))
    source = load_source(os.fspath(json_path), cache_dir=tmp_path / "cache", workers=1)
    assert source.summary.skipped_lines == [f"{json_path}: annotation 4 of image 1: {reason}, skipped"]
    assert source.dataset[0]["objects"]["bbox"] == [[1, 2, 3, 4]]


def roboflow_export(root: Path, categories: list[dict]) -> Path:
    """A Roboflow COCO export's train split: ``_annotations.coco.json`` beside its images, Roboflow file names."""
    names = [copy_image(i, root / "train" / f"{i:012d}_jpg.rf.{i:04x}.jpg") for i in (9, 25, 30)]
    data = {"info": {"description": "Exported from roboflow.com"},
            "categories": categories,
            "images": [{"id": k, "file_name": name, "width": SIZES[i][0], "height": SIZES[i][1]}
                       for k, (i, name) in enumerate(zip((9, 25, 30), names, strict=True))],
            "annotations": [{"id": 0, "image_id": 0, "category_id": 1, "bbox": [10, 10, 20, 30], "area": 600,
                             "segmentation": [], "iscrowd": 0},
                            {"id": 1, "image_id": 1, "category_id": 2, "bbox": [40, 50, 10, 10], "area": 100,
                             "segmentation": [], "iscrowd": 0}]}
    json_path = root / "train" / "_annotations.coco.json"
    json_path.write_text(json.dumps(data))
    return json_path


ROBOFLOW = [{"id": 0, "name": "cells", "supercategory": "none"},
            {"id": 1, "name": "platelets", "supercategory": "cells"},
            {"id": 2, "name": "rbc", "supercategory": "cells"}]


def test_roboflow_dataset_category_is_dropped_with_one_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Previously 'cells' became class 0, a class with no boxes that the model still had to learn."""
    json_path = roboflow_export(tmp_path, ROBOFLOW)
    with caplog.at_level(logging.WARNING, logger="yolo11.data"):
        source = load_source(os.fspath(json_path), cache_dir=tmp_path / "cache", workers=1)  # images beside it
    assert source.class_names == ["platelets", "rbc"]
    assert [row["objects"]["category"] for row in source.dataset] == [[0], [1], []]
    assert [row["objects"]["bbox"] for row in source.dataset] == [[[10, 10, 20, 30]], [[40, 50, 10, 10]], []]
    assert source.summary.backgrounds == 1
    dropped = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert dropped == [f"{json_path}: category 0 'cells' dropped: it has no annotations and is the supercategory "
                       "of every other category (a Roboflow export names it after the dataset; it is not a class)"]


@pytest.mark.parametrize("categories", [
    [ROBOFLOW[0], ROBOFLOW[1], {**ROBOFLOW[2], "supercategory": "blood"}],  # not the parent of every category
    [{**ROBOFLOW[0], "id": 3}, ROBOFLOW[1], ROBOFLOW[2]],  # 'cells' is id 3: annotations of category 3 below
    [ROBOFLOW[1], ROBOFLOW[2]],  # no dataset category at all
])
def test_real_categories_are_kept(tmp_path: Path, categories: list[dict]) -> None:
    json_path = roboflow_export(tmp_path, categories)
    if categories[0]["id"] == 3:  # give the would-be dataset category an annotation: it is a class
        data = json.loads(json_path.read_text())
        data["annotations"].append({"id": 2, "image_id": 2, "category_id": 3, "bbox": [1, 1, 9, 9], "iscrowd": 0})
        json_path.write_text(json.dumps(data))
    source = load_source(os.fspath(json_path), cache_dir=tmp_path / "cache", workers=1)
    expected = [c["name"] for c in sorted(categories, key=lambda c: c["id"])]
    assert source.class_names == expected
    assert source.dataset[0]["objects"]["category"] == [expected.index("platelets")]


def one_image_json(tmp_path: Path, text: str) -> Path:
    copy_image(9, tmp_path / "a.jpg")
    json_path = tmp_path / "a.json"
    json_path.write_text(text)
    return json_path


def refusal(json_path: Path, tmp_path: Path) -> str:
    with pytest.raises(DataSourceError) as caught:
        load_source(os.fspath(json_path), cache_dir=tmp_path / "cache", workers=1)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(os.fspath(json_path))
    return message


def test_huge_json_is_refused_before_it_is_read(tmp_path: Path) -> None:
    json_path = one_image_json(tmp_path, "")
    with open(json_path, "wb") as file:
        file.truncate(5 << 30)  # a sparse 5 GB file: nothing written; reading it would need 5 GB of memory
    message = refusal(json_path, tmp_path)
    assert message == f"{json_path}: 5368709120 bytes: too large to read (at most {coco.MAX_COCO_JSON_BYTES} bytes)"


@pytest.mark.parametrize("what, text", [("objects", '{"images": [' + "{}," * 2000 + "{}]}"),
                                        ("values", '{"images": [' + "1," * 9000 + "1]}")])
def test_a_json_that_would_parse_into_too_much_is_refused_before_parsing(tmp_path: Path, monkeypatch, what,
                                                                        text) -> None:
    """300 MB of ``{},``, under the byte cap, parsed into 15 GB (the process died, or printed ``error: ``)."""
    monkeypatch.setattr(coco, "MAX_COCO_JSON_OBJECTS", 1000)
    monkeypatch.setattr(coco, "MAX_COCO_JSON_VALUES", 8000)
    json_path = one_image_json(tmp_path, text)
    assert f"JSON {what}, more than the" in refusal(json_path, tmp_path)


def test_a_huge_annotation_id_is_quoted_short() -> None:
    from yolo11.data.sources.coco_annotations import shown

    assert shown(7) == "7" and shown("a7") == "'a7'"
    assert shown("x" * 10**6) == "'" + "x" * 39 + "... (1,000,002 characters)"


def test_deeply_nested_json_is_refused(tmp_path: Path) -> None:
    json_path = one_image_json(tmp_path, '{"images": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert refusal(json_path, tmp_path) == f"{json_path}: JSON nested too deeply"


def test_category_count_is_capped(tmp_path: Path) -> None:
    categories = [{"id": i, "name": str(i)} for i in range(MAX_CLASSES + 1)]
    json_path = one_image_json(tmp_path, json.dumps({"images": [{"id": 1, "file_name": "a.jpg"}],
                                                     "categories": categories, "annotations": []}))
    assert refusal(json_path, tmp_path) == (f"{json_path}: {MAX_CLASSES + 1} categories, more than the {MAX_CLASSES} "
                                            "classes a model may have (yolo11.gate.MAX_CLASSES)")


@pytest.mark.parametrize("data, problem", [
    ({"images": {}, "categories": [{"id": 1, "name": "a"}]}, "not a COCO instances file (needs 'images' and "
                                                             "'categories' lists)"),
    ({"images": [], "categories": [{"id": 1, "name": "a"}], "annotations": {}}, "'annotations' is not a list"),
    ({"images": [], "categories": [{"id": "1", "name": "a"}]},
     "categories[0] needs an integer 'id' and a 'name', got {'id': '1', 'name': 'a'}"),
    ({"images": [], "categories": [{"id": 1, "name": "a"}, {"id": 1, "name": "b"}]},
     "category id 1 is listed more than once"),
])
def test_malformed_top_level_is_one_line(tmp_path: Path, data: dict, problem: str) -> None:
    json_path = one_image_json(tmp_path, json.dumps(data))
    assert refusal(json_path, tmp_path) == f"{json_path}: {problem}"


def test_images_resized_since_they_were_labelled_have_their_boxes_scaled(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    """A COCO set whose images were downscaled after labelling (the json still gives 640x480 for a 160x120 file):
    the boxes are scaled to the file, as Ultralytics' converter normalises them by the json's size; an image of
    another aspect than the json gives (another image, or one turned by EXIF) is skipped, named."""
    images = tmp_path / "images"
    copy_image(9, images / "000000000009.jpg")
    copy_image(25, images / "000000000025.jpg")
    data = {"images": [{"id": 9, "file_name": "000000000009.jpg", "width": 640, "height": 480},
                       {"id": 25, "file_name": "000000000025.jpg", "width": 106, "height": 160}],
            "annotations": [{"id": 1, "image_id": 9, "category_id": 1, "bbox": [40, 80, 120, 160], "iscrowd": 0},
                            {"id": 2, "image_id": 25, "category_id": 1, "bbox": [4, 4, 20, 20], "iscrowd": 0}],
            "categories": [{"id": 1, "name": "person"}]}
    json_path = tmp_path / "instances.json"
    json_path.write_text(json.dumps(data))
    source = load_source(os.fspath(json_path), cache_dir=tmp_path / "cache", images=images, workers=1)
    assert source.dataset["image_id"] == [9]
    assert source.dataset[0]["objects"]["bbox"] == [[10, 20, 30, 40]]
    assert source.summary.rescaled == 1
    assert source.summary.skipped_images == [f"{images / '000000000025.jpg'}: instances.json gives it as 106x160, "
                                             "but the image is 160x106 (turned by its EXIF orientation?), image "
                                             "skipped"]
    assert "1 images are another size than their annotations give" in caplog.text


def test_category_names_meet_the_bounds_of_every_source(tmp_path: Path) -> None:
    """A category name holding a line break is refused naming the json, as a data YAML's would be."""
    copy_image(9, tmp_path / "images" / "000000000009.jpg")
    json_path = tmp_path / "instances.json"
    json_path.write_text(json.dumps({
        "images": [{"id": 9, "file_name": "000000000009.jpg"}],
        "annotations": [{"id": 1, "image_id": 9, "category_id": 1, "bbox": [1, 1, 50, 50]}],
        "categories": [{"id": 1, "name": "traffic\nlight"}]}))
    with pytest.raises(DataSourceError, match=r"instances\.json: the name of class 0, 'traffic\\nlight', holds a "
                                              "control character"):
        load_source(os.fspath(json_path), cache_dir=tmp_path / "cache", images=tmp_path / "images", workers=1)
