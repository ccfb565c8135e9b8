"""Roboflow's CSV and CreateML exports: boxes read back where the labels put them (pixels, or fractions in a CSV),
images the file does not name as backgrounds, and bad rows, names outside the folder and broken files named."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from helpers import user_data
from helpers.yolo_folders import write_image

from yolo11.data import DataSourceError, load_source
from yolo11.data.sources import same_data_warning


def _load(spec: Path, tmp_path: Path, split: str = "train"):
    return load_source(os.fspath(spec), split, cache_dir=tmp_path / "cache", workers=1)


@pytest.mark.parametrize("export", ["csv", "csv fractions", "createml"])
def test_boxes_read_back_where_the_labels_put_them(tmp_path: Path, export: str) -> None:
    make = {"csv": user_data.roboflow_csv, "createml": user_data.roboflow_createml,
            "csv fractions": lambda folder: user_data.roboflow_csv(folder, normalised=True)}[export]
    folder = make(tmp_path / "export")
    expected = {image.name: label for image, label in user_data.coco8_samples()}
    checked = 0
    for split in ("train", "val"):
        source = _load(folder, tmp_path, split)
        assert not source.summary.num_problems, source.summary
        for row in source.dataset:
            classes, boxes = user_data.label_boxes(expected[Path(row["image"]["path"]).name].read_text(),
                                                   row["width"], row["height"])
            x, y, w, h = np.array(row["objects"]["bbox"]).reshape(-1, 4).T
            order = np.lexsort(boxes.T[::-1])  # a CSV groups rows by image; compare the boxes as sets
            got = np.stack([x, y, x + w, y + h], 1)
            np.testing.assert_allclose(got[np.lexsort(got.T[::-1])], boxes[order], atol=1e-3)
            assert sorted(source.class_names[c] for c in row["objects"]["category"]) == \
                sorted(user_data.coco8_names()[c] for c in classes)
            checked += 1
    assert checked == 8


def test_bad_rows_unnamed_images_and_names_outside_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "export" / "train"
    for k, stem in enumerate(["a", "b", "c", "unnamed"]):
        write_image(folder / f"{stem}.jpg", seed=k, size=(60, 80))
    write_image(tmp_path / "outside.jpg", seed=9, size=(60, 80))
    (folder / "_annotations.csv").write_text(
        "filename,width,height,class,xmin,ymin,xmax,ymax\n"
        "a.jpg,80,60,cat,10,10,30,30\n"
        "a.jpg,80,60,dog,10,10,x,30\n"  # one bad row: its box skipped, the image kept
        "b.jpg,160,120,cat,10,10,30,30\n"  # labelled on a resized copy
        "c.jpg,80,60,cat,50,50,40,40\n"  # corners swapped: its only box, so the image is skipped
        "../outside.jpg,80,60,cat,1,1,9,9\n"
        "missing.jpg,80,60,cat,1,1,9,9\n")
    source = _load(tmp_path / "export", tmp_path)
    rows = {Path(row["image"]["path"]).name: row for row in source.dataset}
    assert sorted(rows) == ["a.jpg", "unnamed.jpg"] and source.summary.backgrounds == 1
    assert rows["a.jpg"]["objects"]["category"] == [0] and source.class_names == ["cat", "dog"]
    skipped = "\n".join(source.summary.skipped_images)
    csv_path = folder / "_annotations.csv"
    for needle in [f"{csv_path} (b.jpg): labelled for a 160x120 image, but its image is 80x60",
                   f"{csv_path} (c.jpg): none of its 1 objects is usable",
                   f"{csv_path}: names '../outside.jpg', which is not a file in {folder}",
                   f"{csv_path}: names 'missing.jpg', which is not a file"]:
        assert needle in skipped, (needle, skipped)
    assert any(f"{csv_path} (a.jpg): line 3 (dog): a size or corner is not a number" in line
               for line in source.summary.skipped_lines), source.summary.skipped_lines
    assert same_data_warning(_load(tmp_path / "export", tmp_path, "train"),
                             _load(tmp_path / "export", tmp_path, "val"))


@pytest.mark.parametrize("text, error", [
    ("name,x,y\na.jpg,1,2\n", "no filename|no width"),
    ("", "no filename"),
])
def test_a_csv_without_the_columns_is_refused_by_name(tmp_path: Path, text: str, error: str) -> None:
    folder = tmp_path / "export"
    write_image(folder / "a.jpg", size=(60, 80))
    (folder / "_annotations.csv").write_text(text)
    with pytest.raises(DataSourceError, match=error):
        _load(folder, tmp_path)


def test_createml_that_is_not_a_list_is_refused_by_name(tmp_path: Path) -> None:
    folder = tmp_path / "export"
    write_image(folder / "a.jpg", size=(60, 80))
    (folder / "_annotations.createml.json").write_text('{"image": "a.jpg"}')
    with pytest.raises(DataSourceError, match="_annotations.createml.json: a CreateML file is a list"):
        _load(folder, tmp_path)


@pytest.mark.parametrize("export", ["csv", "createml"])
def test_numbers_too_large_for_a_float_are_named_not_fatal(tmp_path: Path, export: str) -> None:
    """A CSV width of ``1e400`` or a CreateML coordinate of 400 digits is a bad row or box, named; Python's
    ``OverflowError`` does not stop the conversion."""
    folder = tmp_path / "export"
    for k, stem in enumerate(["a", "b"]):
        write_image(folder / f"{stem}.jpg", seed=k, size=(60, 80))
    if export == "csv":
        (folder / "_annotations.csv").write_text("filename,width,height,class,xmin,ymin,xmax,ymax\n"
                                                 "a.jpg,80,60,cat,10,10,30,30\nb.jpg,1e400,60,cat,10,10,30,30\n")
    else:
        (folder / "_annotations.createml.json").write_text(
            '[{"image": "a.jpg", "annotations": [{"label": "cat", "coordinates": {"x": 20, "y": 20, "width": 10, '
            '"height": 10}}]}, {"image": "b.jpg", "annotations": [{"label": "cat", "coordinates": {"x": 1'
            + "0" * 400 + ', "y": 20, "width": 10, "height": 10}}]}]')
    source = _load(folder, tmp_path)
    assert [Path(row["image"]["path"]).name for row in source.dataset] == ["a.jpg"]
    expected = {"csv": f"{folder / '_annotations.csv'} (b.jpg): line 3 (cat): a size or corner is not a number",
                "createml": f"{folder / '_annotations.createml.json'}: b.jpg object 1 (cat): coordinates need numbers"}
    assert expected[export] in source.summary.skipped_lines[0], source.summary.skipped_lines


def test_createml_annotations_that_are_not_a_list_skip_their_image_by_name(tmp_path: Path) -> None:
    folder = tmp_path / "export"
    for k, stem in enumerate(["a", "b", "c"]):
        write_image(folder / f"{stem}.jpg", seed=k, size=(60, 80))
    box = '{"label": "cat", "coordinates": {"x": 20, "y": 20, "width": 10, "height": 10}}'
    (folder / "_annotations.createml.json").write_text(
        f'[{{"image": "a.jpg", "annotations": [{box}]}}, {{"image": "b.jpg", "annotations": 5}}, '
        f'{{"image": "c.jpg", "annotations": {box}}}]')
    source = _load(folder, tmp_path)
    assert [Path(row["image"]["path"]).name for row in source.dataset] == ["a.jpg"]
    lines = "\n".join(source.summary.skipped_lines)
    for stem, kind in (("b", "int"), ("c", "dict")):
        assert f"{stem}.jpg (unnamed): 'annotations' is a {kind}, not a list" in lines, lines


def test_a_json_number_of_thousands_of_digits_is_refused_naming_the_file(tmp_path: Path) -> None:
    """Python's json refuses an integer of more than 4,300 digits with a bare ``ValueError``; the reader names the
    file, as for any other JSON it cannot parse."""
    folder = tmp_path / "export"
    write_image(folder / "a.jpg", size=(60, 80))
    (folder / "_annotations.createml.json").write_text('[{"image": "a.jpg", "annotations": [], "id": 1'
                                                       + "0" * 5000 + "}]")
    with pytest.raises(DataSourceError, match=r"_annotations\.createml\.json: .*not valid JSON .*4300 digits"):
        _load(folder, tmp_path)


def test_createml_entries_of_one_image_are_joined(tmp_path: Path) -> None:
    """Two entries naming one image (files concatenated) keep the boxes of both; the second did not replace the
    first."""
    folder = tmp_path / "export"
    write_image(folder / "a.jpg", size=(60, 80))
    box = '{{"label": "{}", "coordinates": {{"x": {}, "y": 20, "width": 10, "height": 10}}}}'
    (folder / "_annotations.createml.json").write_text(
        f'[{{"image": "a.jpg", "annotations": [{box.format("cat", 20)}]}}, '
        f'{{"image": "a.jpg", "annotations": [{box.format("dog", 50)}]}}]')
    source = _load(folder, tmp_path)
    assert source.class_names == ["cat", "dog"] and source.dataset[0]["objects"]["category"] == [0, 1]


def test_csv_rows_stating_different_sizes_for_one_image_skip_it_by_name(tmp_path: Path) -> None:
    """Rows that disagree on their image's size: one of them states another size than the image's, and such a row
    skips its image, as when every row states it."""
    folder = tmp_path / "export"
    for k, stem in enumerate(["a", "b"]):
        write_image(folder / f"{stem}.jpg", seed=k, size=(60, 80))
    (folder / "_annotations.csv").write_text("filename,width,height,class,xmin,ymin,xmax,ymax\n"
                                             "a.jpg,80,60,cat,10,10,30,30\n"
                                             "b.jpg,80,60,cat,10,10,30,30\nb.jpg,160,120,cat,20,20,60,60\n")
    source = _load(folder, tmp_path)
    assert [Path(row["image"]["path"]).name for row in source.dataset] == ["a.jpg"]
    assert f"{folder / '_annotations.csv'} (b.jpg): its rows state the image sizes 160x120 and 80x60" in \
        "\n".join(source.summary.skipped_images), source.summary.skipped_images


def test_a_csv_that_is_not_utf8_is_refused_naming_the_line(tmp_path: Path) -> None:
    """Excel on Windows saves CSV as cp1252: read with replacement characters, ``café`` and ``cafè`` would both
    become ``caf\ufffd``, one class. The file is refused, naming the line of the first byte that is not UTF-8."""
    folder = tmp_path / "export"
    write_image(folder / "a.jpg", size=(60, 80))
    (folder / "_annotations.csv").write_bytes("filename,width,height,class,xmin,ymin,xmax,ymax\n"
                                              "a.jpg,80,60,caf\u00e9,10,10,30,30\n"
                                              "a.jpg,80,60,caf\u00e8,40,10,60,30\n".encode("cp1252"))
    with pytest.raises(DataSourceError, match=r"_annotations\.csv: line 2: not UTF-8 text"):
        _load(folder, tmp_path)


def test_csv_line_endings_and_a_bad_field_named_by_line(tmp_path: Path) -> None:
    """Excel for Mac's "CSV (Macintosh)" ends lines with a bare carriage return: read as rows. A field past the
    csv module's 128 KB limit is refused naming its line."""
    folder = tmp_path / "export"
    write_image(folder / "a.jpg", size=(60, 80))
    rows = ["filename,width,height,class,xmin,ymin,xmax,ymax", "a.jpg,80,60,cat,10,10,30,30"]
    (folder / "_annotations.csv").write_text("\r".join(rows) + "\r", newline="")
    assert _load(folder, tmp_path).dataset[0]["objects"]["category"] == [0]
    (folder / "_annotations.csv").write_text("\n".join([*rows, "a.jpg,80,60," + "c" * 200_000 + ",1,1,9,9"]))
    with pytest.raises(DataSourceError, match=r"_annotations\.csv: line 3: .*field larger than field limit"):
        _load(folder, tmp_path)
