"""LabelMe json beside each image: rectangles from either corner, polygons and circles as boxes where the shapes
are, shapes that mark no area and broken or oversized files named, never fatal."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
from helpers import user_data
from helpers.yolo_folders import write_image

from yolo11.data import load_source
from yolo11.data.sources.labelme import MAX_LABELME_JSON_BYTES, MAX_LABELME_VALUES


def _load(spec: Path, tmp_path: Path, split: str = "train"):
    return load_source(os.fspath(spec), split, cache_dir=tmp_path / "cache", workers=1)


def _shape(label: str, kind: str, points: list) -> dict:
    return {"label": label, "points": points, "group_id": None, "shape_type": kind, "flags": {}}


def test_boxes_read_back_where_the_labels_put_them(tmp_path: Path) -> None:
    folder = user_data.labelme_folder(tmp_path / "labelme")
    expected = {image.name: label for image, label in user_data.coco8_samples()}
    source = _load(folder, tmp_path)
    assert len(source.dataset) == 8 and not source.summary.num_problems
    for row in source.dataset:
        classes, boxes = user_data.label_boxes(expected[Path(row["image"]["path"]).name].read_text(), row["width"],
                                               row["height"])
        x, y, w, h = np.array(row["objects"]["bbox"]).reshape(-1, 4).T
        np.testing.assert_allclose(np.stack([x, y, x + w, y + h], 1), boxes, atol=1e-6)
        assert [source.class_names[c] for c in row["objects"]["category"]] == \
            [user_data.coco8_names()[c] for c in classes]


def test_shapes_as_boxes_and_shapes_without_area_named(tmp_path: Path) -> None:
    folder = tmp_path / "labelme"
    write_image(folder / "a.jpg", size=(60, 80))
    shapes = [_shape("cat", "polygon", [[10, 20], [30, 5], [25, 40]]),
              _shape("ball", "circle", [[40, 30], [40, 40]]),
              _shape("dot", "point", [[5, 5]]),
              _shape("edge", "line", [[1, 1], [9, 9]]),
              _shape("cat", "rectangle", [[70, 50], ["x", 1]])]
    (folder / "a.json").write_text(user_data.labelme_json("a.jpg", 80, 60, shapes))
    source = _load(folder, tmp_path)
    objects = source.dataset[0]["objects"]
    assert source.class_names == ["ball", "cat", "dot", "edge"]
    assert [source.class_names[c] for c in objects["category"]] == ["cat", "ball"]
    np.testing.assert_allclose(objects["bbox"], [[10, 5, 20, 35], [30, 20, 20, 20]])
    lines = "\n".join(source.summary.skipped_lines)
    for needle in ["object 3 (dot): a point marks no area", "object 4 (edge): a line marks no area",
                   "object 5 (cat): points are not [x, y] pairs"]:
        assert f"{folder / 'a.json'}: {needle}" in lines, lines


def test_broken_resized_and_oversized_files_skip_their_images_by_name(tmp_path: Path) -> None:
    folder = tmp_path / "labelme"
    good = [_shape("cat", "rectangle", [[10, 10], [30, 30]])]
    files = {"good": user_data.labelme_json("good.jpg", 80, 60, good),
             "resized": user_data.labelme_json("resized.jpg", 160, 120, good),
             "broken": '{"shapes": [',
             "other": json.dumps({"shapes": "none", "imagePath": "other.jpg"}),
             "huge": json.dumps({"shapes": [], "imageData": "A" * MAX_LABELME_JSON_BYTES})}
    for k, (stem, text) in enumerate(files.items()):
        write_image(folder / f"{stem}.jpg", seed=k, size=(60, 80))
        (folder / f"{stem}.json").write_text(text)
    source = _load(folder, tmp_path)
    assert [Path(row["image"]["path"]).name for row in source.dataset] == ["good.jpg"]
    skipped = "\n".join(source.summary.skipped_images)
    for stem, why in [("resized", "labelled for a 160x120 image, but its image is 80x60"),
                      ("broken", "not valid JSON"), ("other", "not a LabelMe file"), ("huge", "bytes")]:
        assert f"{folder / stem}.json: " in skipped and why in skipped, (stem, skipped)


def test_numbers_too_large_for_a_float_are_named_not_fatal(tmp_path: Path) -> None:
    """``imageWidth: 1e400`` (infinity to Python's json) is no stated size, and a 400-digit coordinate no point:
    each is named, where ``int``/``float`` would stop the conversion with an ``OverflowError``."""
    folder = tmp_path / "labelme"
    for k, stem in enumerate(["size", "points"]):
        write_image(folder / f"{stem}.jpg", seed=k, size=(60, 80))
    good = [_shape("cat", "rectangle", [[10, 10], [30, 30]])]
    (folder / "size.json").write_text(user_data.labelme_json("size.jpg", 80, 60, good)
                                      .replace('"imageWidth": 80', '"imageWidth": 1e400'))
    (folder / "points.json").write_text(user_data.labelme_json("points.jpg", 80, 60, good)
                                        .replace("30", "3" + "0" * 400, 1))
    source = _load(folder, tmp_path)
    assert [Path(row["image"]["path"]).name for row in source.dataset] == ["size.jpg"]
    assert f"{folder / 'points.json'}: object 1 (cat): points are not [x, y] pairs" in source.summary.skipped_lines[0]


def test_a_json_of_millions_of_points_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    """The 128 MB cap is for the embedded image; a json of points that size would parse into ~6 GB of Python
    objects in each worker. Arrays, objects and commas are counted first: past ``MAX_LABELME_VALUES`` the file
    costs its image, named, in a fraction of a second."""
    folder = tmp_path / "labelme"
    write_image(folder / "a.jpg", size=(60, 80))
    points = ",".join(["[10,20]"] * (MAX_LABELME_VALUES // 3 + 1))
    (folder / "a.json").write_text('{"shapes": [{"label": "cat", "shape_type": "polygon", "points": [' + points
                                   + "]}], \"imageWidth\": 80, \"imageHeight\": 60}")
    write_image(folder / "b.jpg", size=(60, 80))
    (folder / "b.json").write_text(user_data.labelme_json("b.jpg", 80, 60, [_shape("cat", "rectangle",
                                                                                   [[10, 10], [30, 30]])]))
    started = time.monotonic()
    source = _load(folder, tmp_path)
    assert time.monotonic() - started < 10
    assert [Path(row["image"]["path"]).name for row in source.dataset] == ["b.jpg"]
    assert f"{folder / 'a.json'}: " in source.summary.skipped_images[0]
    assert "JSON values, more than" in source.summary.skipped_images[0], source.summary.skipped_images


def test_points_that_are_not_pairs_of_numbers_are_named(tmp_path: Path) -> None:
    """``["12", "34"]`` unpacked as characters would be the points (1, 2) and (3, 4), and ``true`` a 1: a point
    is a list of two numbers, anything else is named."""
    folder = tmp_path / "labelme"
    write_image(folder / "a.jpg", size=(60, 80))
    shapes = [_shape("cat", "rectangle", [[10, 10], [30, 30]]),
              _shape("cat", "rectangle", ["12", "34"]),
              _shape("cat", "rectangle", [[True, 10], [30, 30]]),
              _shape("cat", "rectangle", [["10", "10"], ["30", "30"]])]
    (folder / "a.json").write_text(user_data.labelme_json("a.jpg", 80, 60, shapes))
    source = _load(folder, tmp_path)
    assert source.dataset[0]["objects"]["bbox"] == [[10, 10, 20, 20]]
    lines = "\n".join(source.summary.skipped_lines)
    for number in (2, 3, 4):
        assert f"{folder / 'a.json'}: object {number} (cat): points are not [x, y] pairs" in lines, lines
