"""Pascal VOC xml as the devkit, CVAT, LabelImg and Roboflow write it: the boxes read back where the objects are,
the classes numbered alike in every split, and hostile or broken files named and skipped, never fatal."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import user_data
from helpers.yolo_folders import write_image

from yolo11.data import DataSourceError, load_source
from yolo11.data.sources import CONVERSIONS, same_data_warning
from yolo11.data.sources.voc import MAX_VOC_XML_BYTES

BILLION_LAUGHS = ('<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol">'
                  + "".join(f'<!ENTITY lol{k} "{("&lol" + (str(k - 1) if k > 1 else "") + ";") * 10}">'
                            for k in range(1, 10))
                  + "]>\n<annotation><object><name>&lol9;</name></object></annotation>\n")


def _load(spec: Path, tmp_path: Path, split: str = "train", **kwargs):
    return load_source(os.fspath(spec), split, cache_dir=tmp_path / "cache", workers=1, **kwargs)


def _by_name(source) -> dict[str, dict]:
    return {Path(row["image"]["path"]).name: row for row in source.dataset}


@pytest.mark.parametrize("layout, tolerance", [("voc devkit", 0.5), ("cvat voc", 0.005), ("roboflow voc", 0.5)])
def test_boxes_read_back_where_the_yolo_labels_put_them(tmp_path: Path, layout: str, tolerance: float) -> None:
    """Written from coco8's labels as 1-based corners (whole pixels, or CVAT's two decimals): read back within the
    writer's rounding, each box with its class name."""
    make = {"voc devkit": user_data.voc_devkit, "cvat voc": user_data.cvat_voc,
            "roboflow voc": user_data.roboflow_voc}[layout]
    folder = make(tmp_path / "export")
    expected = {image.name: (image, label) for image, label in user_data.coco8_samples()}
    checked = 0
    for split in ("train", "val"):
        source = _load(folder, tmp_path, split)
        assert not source.summary.skipped_images and not source.summary.skipped_lines
        for name, row in _by_name(source).items():
            image, label = expected[name]
            classes, boxes = user_data.label_boxes(label.read_text(), row["width"], row["height"])
            x, y, w, h = np.array(row["objects"]["bbox"]).reshape(-1, 4).T
            np.testing.assert_allclose(np.stack([x, y, x + w, y + h], 1), boxes, atol=tolerance + 1e-9)
            assert [source.class_names[c] for c in row["objects"]["category"]] == \
                [user_data.coco8_names()[c] for c in classes]
            checked += 1
    assert checked == (16 if layout == "cvat voc" else 8)


def test_one_based_corners_difficult_objects_and_a_zero_based_tool(tmp_path: Path) -> None:
    """``xmin=1, xmax=W`` is the whole image; ``xmin=0`` (a 0-based tool) stays at the edge instead of leaving the
    image; a ``difficult`` object is left out, as Ultralytics' VOC converter leaves it out."""
    folder = tmp_path / "voc"
    write_image(folder / "a.jpg", size=(60, 80))  # height 60, width 80
    objects = [("cat", (0, 0, 80, 60)), ("dog", (-1, 9, 20, 30)), ("cat", (10, 10, 20, 20))]
    (folder / "a.xml").write_text(user_data.voc_xml("a.jpg", 80, 60, objects, difficult=(2,)))
    source = _load(folder, tmp_path)
    objects = source.dataset[0]["objects"]
    assert source.class_names == ["cat", "dog"] and objects["category"] == [0, 1]
    np.testing.assert_allclose(objects["bbox"], [[0, 0, 80, 60], [0, 9, 20, 21]])
    assert source.summary.clipped_boxes == 0 and not source.summary.skipped_lines


def test_classes_come_from_every_split_and_devkit_folders_join(tmp_path: Path) -> None:
    """VOCdevkit with VOC2007 and VOC2012: each split joins both folders' lists; a class seen only in validation
    has the same number in training (the names are read from every split's files)."""
    devkit = tmp_path / "VOCdevkit"
    for year, (train_class, val_class) in {"VOC2007": ("dog", "zebra"), "VOC2012": ("ant", "dog")}.items():
        root = devkit / year
        for split, name in (("train", train_class), ("val", val_class)):
            stem = f"{year}_{split}"
            write_image(root / "JPEGImages" / f"{stem}.png", size=(40, 50))
            (root / "Annotations").mkdir(parents=True, exist_ok=True)
            (root / "Annotations" / f"{stem}.xml").write_text(
                user_data.voc_xml(f"{stem}.png", 50, 40, [(name, (5, 5, 25, 25))]))
            (root / "ImageSets" / "Main").mkdir(parents=True, exist_ok=True)
            (root / "ImageSets" / "Main" / f"{split}.txt").write_text(f"{stem}\n")
    train, val = _load(devkit, tmp_path, "train"), _load(devkit, tmp_path, "val")
    assert train.class_names == val.class_names == ["ant", "dog", "zebra"]
    assert sorted(_by_name(train)) == ["VOC2007_train.png", "VOC2012_train.png"]
    assert {n: r["objects"]["category"] for n, r in _by_name(val).items()} == \
        {"VOC2007_val.png": [2], "VOC2012_val.png": [1]}
    assert same_data_warning(train, val) == ""


def test_a_single_list_serves_both_splits_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """CVAT's ``default.txt``: training and validation read the same images, with the note and the same-data
    warning; ``labelmap.txt`` gives the classes in its order, ``background`` left out."""
    folder = user_data.cvat_voc(tmp_path / "cvat")
    train, val = _load(folder, tmp_path, "train"), _load(folder, tmp_path, "val")
    assert train.class_names == user_data.coco8_names() and len(train.dataset) == len(val.dataset) == 8
    assert "one split serves training and validation" in caplog.text
    assert f"classes from {folder / 'labelmap.txt'}" in caplog.text
    assert same_data_warning(train, val)


def test_broken_and_hostile_files_are_named_and_skipped(tmp_path: Path) -> None:
    """Each bad file costs its own image, with a message naming it; the run goes on with the others. An entity
    bomb is refused before it expands (the test would exhaust memory otherwise), a file over the size bound is
    not read, and nesting stops the parse before it builds a deep tree."""
    folder = tmp_path / "voc"
    good = [("cat", (10, 10, 30, 30))]
    files = {
        "good": user_data.voc_xml("good.jpg", 80, 60, good),
        "bomb": BILLION_LAUGHS,
        "garbage": "\x00\x01not xml at all",
        "cvat_images": '<annotations><version>1.1</version></annotations>',
        "resized": user_data.voc_xml("resized.jpg", 160, 120, good),
        "bad_objects": user_data.voc_xml("bad_objects.jpg", 80, 60, good).replace(
            "<ymax>30</ymax>", "<ymax>thirty</ymax>"),
        "one_bad_object": user_data.voc_xml("one_bad_object.jpg", 80, 60, [*good, ("dog", (70, 50, 300, 300))]),
        "huge": "<annotation>" + " " * MAX_VOC_XML_BYTES + "</annotation>",
        "nested": "<annotation>" + "<a>" * 100_000 + "</a>" * 100_000 + "</annotation>",  # a tree of ~100 MB
    }
    for k, (stem, text) in enumerate(files.items()):
        write_image(folder / f"{stem}.jpg", seed=k, size=(60, 80))
        (folder / f"{stem}.xml").write_text(text)
    write_image(folder / "background.jpg", seed=20, size=(60, 80))  # no xml: an image without objects
    (folder / "orphan.xml").write_text(user_data.voc_xml("orphan.jpg", 80, 60, good))
    started = time.monotonic()
    source = _load(folder, tmp_path)
    assert time.monotonic() - started < 60
    assert sorted(_by_name(source)) == ["background.jpg", "good.jpg", "one_bad_object.jpg"]
    assert source.summary.backgrounds == 1
    skipped = "\n".join(source.summary.skipped_images)
    for stem, why in [("bomb", "declares a DOCTYPE or entities"), ("garbage", "not XML"),
                      ("cvat_images", "its root element is <annotations>"),
                      ("resized", "labelled for a 160x120 image, but its image is 80x60"),
                      ("bad_objects", "none of its 1 objects is usable"), ("huge", "bytes"),
                      ("nested", "more than 32 levels"),
                      ("orphan", "no image of this name")]:
        assert f"{folder / stem}.xml: " in skipped and why in skipped, (stem, skipped)
    lines = "\n".join(source.summary.skipped_lines)
    assert f"{folder / 'one_bad_object.xml'}: object 2 (dog): box" in lines, lines


def test_text_encodings_windows_tools_write(tmp_path: Path) -> None:
    """UTF-16 with its byte-order mark, UTF-8 with one, and ISO-8859-1 as its declaration says."""
    folder = tmp_path / "voc"
    for k, (stem, encoding) in enumerate([("utf16", "utf-16"), ("bom", "utf-8-sig"), ("latin", "iso-8859-1")]):
        write_image(folder / f"{stem}.jpg", seed=k, size=(60, 80))
        text = user_data.voc_xml(f"{stem}.jpg", 80, 60, [("caf\u00e9", (10, 10, 30, 30))])
        if encoding == "iso-8859-1":
            text = '<?xml version="1.0" encoding="ISO-8859-1"?>\n' + text
        (folder / f"{stem}.xml").write_bytes(text.encode(encoding))
    source = _load(folder, tmp_path)
    assert source.class_names == ["caf\u00e9"] and len(source.dataset) == 3, source.summary


def test_labelmap_names_the_classes_and_an_unknown_object_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "cvat"
    write_image(root / "JPEGImages" / "a.jpg", size=(60, 80))
    (root / "Annotations").mkdir()
    (root / "Annotations" / "a.xml").write_text(
        user_data.voc_xml("a.jpg", 80, 60, [("car", (1, 1, 9, 9)), ("boat", (2, 2, 9, 9))]))
    (root / "labelmap.txt").write_text("# label:color_rgb:parts:actions\nbackground:0,0,0::\nperson:1,2,3::\n"
                                       "car:4,5,6::\n")
    source = _load(root, tmp_path)
    assert source.class_names == ["person", "car"] and source.dataset[0]["objects"]["category"] == [1]
    assert any("object 2 (boat): class 'boat' is not in labelmap.txt" in line for line in source.summary.skipped_lines)


def test_listed_ids_without_files_are_named(tmp_path: Path) -> None:
    root = tmp_path / "VOC2007"
    write_image(root / "JPEGImages" / "a.jpg", size=(60, 80))
    write_image(root / "JPEGImages" / "c.jpg", size=(60, 80))
    (root / "Annotations").mkdir()
    for stem in ("a", "b"):
        (root / "Annotations" / f"{stem}.xml").write_text(user_data.voc_xml(f"{stem}.jpg", 80, 60,
                                                                            [("cat", (1, 1, 9, 9))]))
    (root / "ImageSets" / "Main").mkdir(parents=True)
    (root / "ImageSets" / "Main" / "train.txt").write_text("a\nb\nc\n")
    source = _load(root, tmp_path)
    assert sorted(_by_name(source)) == ["a.jpg"]
    skipped = "\n".join(source.summary.skipped_images)
    assert f"{root / 'Annotations' / 'b.xml'}: no image of this name" in skipped, skipped
    assert f"{root / 'Annotations' / 'c.xml'}: " in skipped and "image skipped" in skipped, skipped


def test_converted_once_and_again_when_an_xml_changes(tmp_path: Path) -> None:
    folder = user_data.roboflow_voc(tmp_path / "export")
    before = CONVERSIONS["images"]
    _load(folder, tmp_path)
    _load(folder, tmp_path)
    assert CONVERSIONS["images"] == before + 1
    xml = sorted((folder / "train").glob("*.xml"))[0]
    xml.write_text(xml.read_text().replace("<difficult>0</difficult>", "<difficult>1</difficult>", 1))
    _load(folder, tmp_path)
    assert CONVERSIONS["images"] == before + 2


def test_bbox_format_and_a_devkit_without_images_are_refused_by_name(tmp_path: Path) -> None:
    folder = user_data.roboflow_voc(tmp_path / "export")
    with pytest.raises(DataSourceError, match="--bbox-format applies to .*Pascal VOC and LabelMe files state"):
        _load(folder, tmp_path, bbox_format="xyxy")
    (tmp_path / "bare" / "Annotations").mkdir(parents=True)
    with pytest.raises(DataSourceError, match="Annotations/ but no JPEGImages/"):
        _load(tmp_path / "bare", tmp_path)


def test_numbers_too_large_for_a_float_are_named_not_fatal(tmp_path: Path) -> None:
    """A ``<size>`` of ``1e400`` is no size (the image's own is used) and such a corner no box: the conversion
    goes on instead of stopping at Python's ``OverflowError``."""
    folder = tmp_path / "voc"
    for k, stem in enumerate(["size", "corner"]):
        write_image(folder / f"{stem}.jpg", seed=k, size=(60, 80))
    (folder / "size.xml").write_text(user_data.voc_xml("size.jpg", 80, 60, [("cat", (10, 10, 30, 30))])
                                     .replace("<width>80</width>", "<width>1e400</width>"))
    (folder / "corner.xml").write_text(user_data.voc_xml("corner.jpg", 80, 60, [("cat", (10, 10, 30, 30))])
                                       .replace("<xmax>30</xmax>", "<xmax>1e400</xmax>"))
    source = _load(folder, tmp_path)
    assert sorted(_by_name(source)) == ["size.jpg"]
    assert f"{folder / 'corner.xml'}: object 1 (cat): non-finite coordinates" in source.summary.skipped_lines[0]


def test_utf16_without_a_byte_order_mark_is_read_and_its_doctype_refused(tmp_path: Path) -> None:
    """XML may be UTF-16 without a byte-order mark (the parser tells it by ``<?`` as two-byte characters): such a
    file is read, and a DOCTYPE in it is refused as in UTF-8, not seen past because the text check read the bytes
    as UTF-8."""
    folder = tmp_path / "voc"
    declared = '<?xml version="1.0" encoding="UTF-16"?>\n'
    entity = declared + '<!DOCTYPE annotation [<!ENTITY c "cat">]>\n'
    for k, (stem, head, encoding) in enumerate([("a", "", "utf-8"), ("le", declared, "utf-16-le"),
                                                ("be", declared, "utf-16-be"),
                                                ("entity_le", entity, "utf-16-le"),
                                                ("entity_be", entity, "utf-16-be")]):
        write_image(folder / f"{stem}.jpg", seed=k, size=(60, 80))
        name = "&c;" if stem.startswith("entity") else "cat"
        text = head + user_data.voc_xml(f"{stem}.jpg", 80, 60, [(name, (10, 10, 30, 30))])
        (folder / f"{stem}.xml").write_bytes(text.encode(encoding))
    source = _load(folder, tmp_path)
    assert sorted(_by_name(source)) == ["a.jpg", "be.jpg", "le.jpg"] and source.class_names == ["cat"]
    skipped = "\n".join(source.summary.skipped_images)
    for stem in ("entity_le", "entity_be"):
        assert f"{folder / stem}.xml: declares a DOCTYPE or entities" in skipped, skipped


def test_an_xml_that_is_not_a_regular_file_skips_its_image_by_name(tmp_path: Path) -> None:
    """A FIFO, a dangling link or a link loop named as an image's xml costs that image, named: it is never opened
    for reading (a FIFO would block), and the image is not trained as a background, as if it had no objects."""
    folder = tmp_path / "voc"
    for k, stem in enumerate(["a", "fifo", "dangling", "loop"]):
        write_image(folder / f"{stem}.jpg", seed=k, size=(60, 80))
    (folder / "a.xml").write_text(user_data.voc_xml("a.jpg", 80, 60, [("cat", (10, 10, 30, 30))]))
    os.mkfifo(folder / "fifo.xml")
    (folder / "dangling.xml").symlink_to(tmp_path / "nowhere.xml")
    (folder / "loop.xml").symlink_to(folder / "loop.xml")
    started = time.monotonic()
    source = _load(folder, tmp_path)
    assert time.monotonic() - started < 60
    assert sorted(_by_name(source)) == ["a.jpg"] and source.summary.backgrounds == 0
    skipped = "\n".join(source.summary.skipped_images)
    for stem, why in [("fifo", "a FIFO (named pipe)"), ("dangling", "no such file"), ("loop", "symbolic link loop")]:
        assert f"{folder / stem}.xml: " in skipped and why in skipped, (stem, skipped)


@pytest.mark.parametrize("listed", ["../../outside", "{outside}"])
def test_a_listed_id_that_leaves_the_folder_is_refused_by_line(tmp_path: Path, listed: str) -> None:
    """An ``ImageSets`` line is an id inside ``Annotations/``: ``../../outside`` or an absolute path is refused,
    naming the list and its line, before any xml outside the folder is read (its names would become classes)."""
    root = tmp_path / "data" / "VOC2007"
    write_image(root / "JPEGImages" / "a.jpg", size=(60, 80))
    (root / "Annotations").mkdir()
    (root / "Annotations" / "a.xml").write_text(user_data.voc_xml("a.jpg", 80, 60, [("cat", (1, 1, 9, 9))]))
    (tmp_path / "outside.xml").write_text(user_data.voc_xml("a.jpg", 80, 60, [("secret", (1, 1, 9, 9))]))
    (root / "ImageSets" / "Main").mkdir(parents=True)
    (root / "ImageSets" / "Main" / "train.txt").write_text(f"a\n{listed.format(outside=tmp_path / 'outside')}\n")
    with pytest.raises(DataSourceError, match=r"train\.txt: line 2: .*outside.* is not an image id"):
        _load(root, tmp_path)


def test_a_labelmap_naming_a_class_twice_is_refused_by_name(tmp_path: Path) -> None:
    root = tmp_path / "cvat"
    write_image(root / "JPEGImages" / "a.jpg", size=(60, 80))
    (root / "Annotations").mkdir()
    (root / "Annotations" / "a.xml").write_text(user_data.voc_xml("a.jpg", 80, 60, [("car", (1, 1, 9, 9))]))
    (root / "labelmap.txt").write_text("background:0,0,0::\ncar:4,5,6::\nbus:1,2,3::\ncar:7,8,9::\n")
    with pytest.raises(DataSourceError, match=r"labelmap\.txt: the class name 'car' is listed twice \(classes 0 and 2"):
        _load(root, tmp_path)


def test_macos_resource_forks_in_a_devkit_are_not_annotations(tmp_path: Path) -> None:
    """A devkit copied through a macOS share holds ``Annotations/._a.xml`` beside ``a.xml``: left out, as hidden
    files are everywhere else, not read and reported as an xml without its image."""
    root = tmp_path / "cvat"
    write_image(root / "JPEGImages" / "a.jpg", size=(60, 80))
    (root / "Annotations").mkdir()
    (root / "Annotations" / "a.xml").write_text(user_data.voc_xml("a.jpg", 80, 60, [("car", (1, 1, 9, 9))]))
    (root / "Annotations" / "._a.xml").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        ")
    source = _load(root, tmp_path)
    assert len(source.dataset) == 1 and not source.summary.num_problems, source.summary


def test_class_names_are_bounded_in_characters_across_files(tmp_path: Path) -> None:
    """Each file is bounded, but the names of many add up: three 3-million-character names pass each file's
    bound and would be copied into the model's config, the plots and every log line; refused by the gate's bound."""
    folder = tmp_path / "voc"
    for k in range(3):
        write_image(folder / f"{k}.jpg", seed=k, size=(60, 80))
        (folder / f"{k}.xml").write_text(user_data.voc_xml(f"{k}.jpg", 80, 60, [(str(k) * 3_000_000, (1, 1, 9, 9))]))
    with pytest.raises(DataSourceError, match="MAX_NAMES_CHARS"):
        _load(folder, tmp_path)

