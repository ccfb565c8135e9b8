"""The data users bring: every image format and the layouts other tools export convert whole, with the pixels
right and the boxes in the displayed frame, then train a step and validate on all of their images."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import user_data
from helpers.yolo_folders import write_image
from PIL import Image

from yolo11.data.dataset import decode_image
from yolo11.data.schema import DataSourceError
from yolo11.data.sources import load_source
from yolo11.data.sources.layouts import detect_layout

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[user_data.CorpusImage]]:
    return user_data.format_corpus(tmp_path_factory.mktemp("formats"))


def _rows_by_path(source) -> dict[str, dict]:
    """Rows by image file name (the Arrow cache keeps the bytes and the base name)."""
    return {Path(row["image"]["path"]).name: row for row in source.dataset}


def test_every_format_converts_with_its_displayed_size_boxes_and_pixels(corpus, tmp_path: Path) -> None:
    data_yaml, images = corpus
    rows = {}
    for split in ("train", "val"):
        source = load_source(os.fspath(data_yaml), split, cache_dir=tmp_path, workers=1)
        assert not source.summary.skipped_images, source.summary.skipped_images
        rows |= _rows_by_path(source)
    assert len(rows) == len(images) == len(user_data.VARIANTS)  # not one dropped as "corrupt"
    for image in images:
        row = rows[image.path.name]
        height, width = image.expected.shape[:2]
        assert (row["width"], row["height"]) == (width, height), image.variant.name
        classes, boxes = user_data.label_boxes(image.label_text, width, height)
        stored = np.array(row["objects"]["bbox"], dtype=np.float64).reshape(-1, 4)
        assert row["objects"]["category"] == classes.tolist(), image.variant.name
        np.testing.assert_allclose(stored[:, :2], boxes[:, :2], atol=1e-3, err_msg=image.variant.name)
        np.testing.assert_allclose(stored[:, :2] + stored[:, 2:], boxes[:, 2:], atol=1e-3, err_msg=image.variant.name)
        rgb = decode_image(row["image"])[..., ::-1]
        assert rgb.shape == image.expected.shape, image.variant.name
        error = np.abs(rgb.astype(int) - image.expected.astype(int))
        if image.variant.lossless:  # PNG 8/16 bit, palette, grey, alpha, BMP, TIFF, lossless WebP: exact
            assert error.max() == 0, image.variant.name
        else:  # JPEG (CMYK included) and lossy WebP: close, and the right way up (a turned image differs by ~60)
            assert error.mean() < 4, (image.variant.name, error.mean())


def test_rotated_16_bit_and_palette_images_keep_their_boxes_on_the_objects(corpus) -> None:
    """The boxes of an EXIF-rotated, a 16-bit and a palette image cut the same patch from the decoded pixels as
    from the displayed original: labels and pixels share one frame."""
    _, images = corpus
    for name in ("jpeg exif 6", "png exif 8", "tiff exif 6", "png 16 bit", "png palette"):
        image = next(i for i in images if i.variant.name == name)
        decoded = decode_image({"bytes": image.path.read_bytes(), "path": os.fspath(image.path)})[..., ::-1]
        height, width = image.expected.shape[:2]
        _, boxes = user_data.label_boxes(image.label_text, width, height)
        for x1, y1, x2, y2 in boxes.round().astype(int):
            patch, reference = decoded[y1:y2, x1:x2].astype(int), image.expected[y1:y2, x1:x2].astype(int)
            assert patch.shape == reference.shape and np.abs(patch - reference).mean() < 4, name


def test_corrupt_images_are_skipped_by_name_and_readable_oddities_are_not(tmp_path: Path) -> None:
    source_image, label = user_data.coco8_samples()[0]
    data = source_image.read_bytes()
    folder = tmp_path / "set"
    (folder / "images").mkdir(parents=True)
    (folder / "labels").mkdir()
    good = {"trailer.jpg": data + b"\x00samsung-trailer" * 8}  # bytes after the end marker (phone cameras do)
    png = Image.open(source_image)
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", "hello")
    png.save(folder / "images" / "text.png", pnginfo=info)
    raw = bytearray((folder / "images" / "text.png").read_bytes())
    chunk = raw.find(b"tEXt")
    raw[chunk + 4 + int.from_bytes(raw[chunk - 4:chunk], "big")] ^= 0xFF  # bad checksum of a text chunk: libpng
    good["text.png"] = bytes(raw)  # warns and reads it; PIL refuses to open it
    bad = {"truncated.jpg": data[: len(data) // 2], "garbage.png": b"\x89PNG\r\n\x1a\n" + b"\x00" * 64,
           "empty.webp": b""}
    for name, content in {**good, **bad}.items():
        (folder / "images" / name).write_bytes(content)
        (folder / "labels" / f"{Path(name).stem}.txt").write_text(label.read_text())
    os.mkfifo(folder / "images" / "fifo.jpg")  # would block a plain read forever
    (folder / "images" / "loop.jpg").symlink_to(folder / "images" / "loop.jpg")
    (folder / "data.yaml").write_text(f"path: .\ntrain: images\nval: images\nnames: {user_data.coco8_names()}\n")
    source = load_source(os.fspath(folder / "data.yaml"), "train", cache_dir=tmp_path / "cache", workers=1)
    kept = sorted(Path(row["image"]["path"]).name for row in source.dataset)
    assert kept == sorted(good)
    skipped = "\n".join(source.summary.skipped_images)
    for name in [*bad, "fifo.jpg", "loop.jpg"]:
        assert re.search(rf"{re.escape(name)}: .*image skipped", skipped), (name, skipped)
    assert "not a regular file" in skipped and "symbolic link loop" in skipped


def test_label_files_with_non_finite_values_or_special_files_are_named_not_fatal(tmp_path: Path) -> None:
    source_image, label = user_data.coco8_samples()[0]
    folder = tmp_path / "set"
    for name in ("a", "b", "c"):
        (folder / "images").mkdir(parents=True, exist_ok=True)
        (folder / "labels").mkdir(exist_ok=True)
        (folder / "images" / f"{name}.jpg").write_bytes(source_image.read_bytes())
    (folder / "labels" / "a.txt").write_text("nan 0.5 0.5 0.2 0.2\n0 inf 0.5 0.2 0.2\n0 0.5 0.5 0.2 0.2\n")
    (folder / "labels" / "b.txt").write_text(label.read_text())
    os.mkfifo(folder / "labels" / "c.txt")
    (folder / "data.yaml").write_text(f"path: .\ntrain: images\nval: images\nnames: {user_data.coco8_names()}\n")
    source = load_source(os.fspath(folder / "data.yaml"), "train", cache_dir=tmp_path / "cache", workers=1)
    rows = _rows_by_path(source)
    assert sorted(rows) == ["a.jpg", "b.jpg"]  # c: its label is a FIFO, so it is skipped
    assert rows["a.jpg"]["objects"]["category"] == [0]
    lines = "\n".join(source.summary.skipped_lines)
    assert "a.txt:1: non-finite value" in lines and "a.txt:2: non-finite value" in lines
    assert any("c.txt: a FIFO (named pipe), not a regular file" in line for line in source.summary.skipped_images)


# --- layouts -----------------------------------------------------------------------------------------------

LAYOUTS = {
    "roboflow yolo folder": (user_data.roboflow_yolo, "", {"train": 4, "val": 4}),
    "roboflow yolo data.yaml": (user_data.roboflow_yolo, "data.yaml", {"train": 4, "val": 4, "test": 2}),
    "label studio": (user_data.label_studio_yolo, "", {"train": 8, "val": 8}),
    "cvat yolo 1.1": (user_data.cvat_yolo_1_1, "", {"train": 6, "val": 2}),
    "labelimg": (user_data.labelimg_folder, "", {"train": 8, "val": 8}),
    "roboflow coco": (user_data.roboflow_coco, "", {"train": 5, "val": 3}),
    "voc devkit": (user_data.voc_devkit, "", {"train": 5, "val": 3}),
    "cvat voc": (user_data.cvat_voc, "", {"train": 8, "val": 8}),
    "roboflow voc": (user_data.roboflow_voc, "", {"train": 5, "val": 3}),
    "roboflow csv": (user_data.roboflow_csv, "", {"train": 5, "val": 3}),
    "roboflow createml": (user_data.roboflow_createml, "", {"train": 5, "val": 3}),
    "roboflow darknet": (user_data.roboflow_darknet, "", {"train": 5, "val": 3}),
    "labelme": (user_data.labelme_folder, "", {"train": 8, "val": 8}),
    "labelme apart": (lambda folder: user_data.labelme_folder(folder, apart=True), "", {"train": 8, "val": 8}),
    "kaggle voc": (user_data.kaggle_voc, "", {"train": 8, "val": 8}),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_exported_layouts_convert_without_flags(layout: str, tmp_path: Path) -> None:
    make, entry, counts = LAYOUTS[layout]
    folder = make(tmp_path / "export")
    spec = os.fspath(folder / entry) if entry else os.fspath(folder)
    expected = {os.fspath(image.name): label for image, label in user_data.coco8_samples()}
    for split, count in counts.items():
        source = load_source(spec, split, cache_dir=tmp_path / "cache", workers=1)
        names = source.class_names
        assert len(source.dataset) == count and set(names) <= set(user_data.coco8_names())
        used = {line.split()[0] for _, label in user_data.coco8_samples() for line in label.read_text().splitlines()}
        # COCO, VOC without a label map, CSV, CreateML and LabelMe name only the classes they use
        by_name = ("roboflow coco", "voc devkit", "roboflow voc", "roboflow csv", "roboflow createml", "labelme",
                   "labelme apart", "kaggle voc")
        assert len(names) == (len(used) if layout in by_name else 80)
        assert not source.summary.skipped_images and not source.summary.skipped_lines
        for row in source.dataset:  # each image with its own labels, read from the layout's label place
            image_name = Path(row["image"]["path"]).with_suffix(".jpg").name  # kaggle voc: the PNG of a JPEG
            classes, _ = user_data.label_boxes(expected[image_name].read_text(), 1, 1)
            coco8_classes = [user_data.coco8_names().index(names[c]) for c in row["objects"]["category"]]
            assert coco8_classes == classes.tolist()


def _beside_folder(folder: Path, suffix: str, other: dict[str, bytes], encoding: str = "utf-8") -> Path:
    """Two images, each with its VOC xml or LabelMe json beside it, and ``other`` files the tool did not write."""
    for k, stem in enumerate(["img1", "img2"]):
        write_image(folder / f"{stem}.jpg", seed=k, size=(60, 80))
        if suffix == ".xml":
            text = user_data.voc_xml(f"{stem}.jpg", 80, 60, [("cat", (10, 10, 30, 30))])
        else:
            text = user_data.labelme_json(f"{stem}.jpg", 80, 60, [{"label": "cat", "points": [[10, 10], [30, 30]],
                                                                   "shape_type": "rectangle"}])
        (folder / f"{stem}{suffix}").write_bytes(text.encode(encoding))
    for name, data in other.items():
        (folder / name).write_bytes(data)
    return folder


@pytest.mark.parametrize("case", ["utf-16 voc", "macos resource forks", "another json first", "another xml first"])
def test_beside_layouts_are_recognised_past_files_the_tool_did_not_write(case: str, tmp_path: Path) -> None:
    """The probe of a folder reads an annotation file named as one of its images, decoded as the reader decodes
    it: not the first file of the suffix, which may be macOS's ``._img1.xml`` (a resource fork copied beside it),
    a ``classes.json`` or a ``build.xml`` sorting first."""
    fork = b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        "
    folder = {"utf-16 voc": lambda: _beside_folder(tmp_path / "f", ".xml", {}, "utf-16"),
              "macos resource forks": lambda: _beside_folder(tmp_path / "f", ".xml", {"._img1.xml": fork,
                                                                                      "._img1.jpg": fork}),
              "another json first": lambda: _beside_folder(tmp_path / "f", ".json", {"classes.json": b'["cat"]'}),
              "another xml first": lambda: _beside_folder(tmp_path / "f", ".xml", {"build.xml": b"<project/>"}),
              }[case]()
    source = load_source(os.fspath(folder), "train", cache_dir=tmp_path / "cache", workers=1)
    assert len(source.dataset) == 2 and source.class_names == ["cat"], source.summary


@pytest.mark.parametrize("variant, counts", [("split valid", (5, 3)), ("split images, flat annotations", (5, 3)),
                                             ("Annotations", (8, 8)), ("val annotations missing", None)])
def test_kaggle_voc_variants_pair_each_split(tmp_path: Path, variant: str, counts) -> None:
    """``annotations/valid`` beside ``images/val`` was never paired (validation all background, its classes gone);
    a flat ``annotations/`` for split images listed the other split's files as skipped images; ``Annotations/``
    beside ``images/`` was taken for the devkit ("no JPEGImages/")."""
    folder = user_data.kaggle_voc(tmp_path / "export")
    images = sorted((folder / "images").iterdir())
    if variant == "Annotations":
        (folder / "annotations").rename(folder / "Annotations")
    else:
        for split, part in (("train", images[:5]), ("val", images[5:])):
            (folder / "images" / split).mkdir()
            if variant != "split images, flat annotations":
                (folder / "annotations" / ("valid" if split == "val" else split)).mkdir()
            for image in part:
                image.rename(folder / "images" / split / image.name)
                if variant != "split images, flat annotations":
                    xml = folder / "annotations" / f"{image.stem}.xml"
                    xml.rename(folder / "annotations" / ("valid" if split == "val" else split) / xml.name)
        if variant == "val annotations missing":
            for xml in (folder / "annotations" / "valid").iterdir():
                xml.unlink()
            (folder / "annotations" / "valid").rmdir()
    if counts is None:
        with pytest.raises(DataSourceError, match=r"annotations: no val folder for the images in .*images/val"):
            load_source(os.fspath(folder), "val", cache_dir=tmp_path / "cache", workers=1)
        return
    for split, count in zip(("train", "val"), counts, strict=True):
        source = load_source(os.fspath(folder), split, cache_dir=tmp_path / "cache", workers=1)
        assert len(source.dataset) == count and not source.summary.skipped_images, source.summary
        assert source.summary.backgrounds == 0


def test_a_folder_whose_every_annotation_is_refused_says_why(tmp_path: Path) -> None:
    """The error said only "no object names in any annotation, so no classes", none of the files' reasons."""
    folder = _beside_folder(tmp_path / "f", ".xml", {})
    for xml in folder.glob("*.xml"):
        xml.write_text('<!DOCTYPE lolz [<!ENTITY lol "lol">]>\n' + xml.read_text())
    with pytest.raises(DataSourceError, match=r"no object names in any annotation, so no classes \(2 annotation "
                                              r"files unusable, the first: .*img1.xml: declares a DOCTYPE"):
        load_source(os.fspath(folder), "train", cache_dir=tmp_path / "cache", workers=1)


def test_a_bad_object_name_names_the_file_it_is_in(tmp_path: Path) -> None:
    """The error named only the folders the names were gathered from."""
    folder = _beside_folder(tmp_path / "f", ".json", {})
    text = (folder / "img2.json").read_text().replace('"label": "cat"', '"label": "ca\\tt"')
    (folder / "img2.json").write_text(text)
    with pytest.raises(DataSourceError, match=r"holds a control character .* \(first in .*img2.json\)"):
        load_source(os.fspath(folder), "train", cache_dir=tmp_path / "cache", workers=1)


@pytest.mark.parametrize("other", ["config.json", "pom.xml"])
def test_a_folder_of_images_and_another_tools_file_is_not_taken_for_annotations(other: str, tmp_path: Path) -> None:
    """A ``config.json`` with a ``shapes`` key, or a ``pom.xml`` naming an ``<annotation>``, beside unlabelled
    images annotates none of them: the folder is left to ``datasets``, not read as LabelMe or VOC."""
    write_image(tmp_path / "f" / "a.jpg", size=(60, 80))
    (tmp_path / "f" / other).write_text('{"shapes": [[1, 3, 64, 64]]}' if other == "config.json" else
                                        "<project><annotation>x</annotation></project>")
    assert detect_layout(tmp_path / "f") is None


def test_a_names_file_naming_a_class_twice_is_refused_by_name(tmp_path: Path) -> None:
    """``classes.txt`` with a name twice (or two names that a cp1252 file's bytes made alike) cannot number the
    classes: an error naming the file, not the ``datasets`` error that names nothing."""
    folder = user_data.labelimg_folder(tmp_path / "labelimg")
    (folder / "classes.txt").write_text("person\nbicycle\nperson\n")
    with pytest.raises(DataSourceError, match=r"classes\.txt: the class name 'person' is listed twice"):
        load_source(os.fspath(folder), "train", cache_dir=tmp_path / "cache", workers=1)


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_a_names_file_written_with_a_byte_order_mark_names_its_first_class_without_it(encoding: str,
                                                                                     tmp_path: Path) -> None:
    """Windows tools save ``classes.txt`` as "UTF-8 with BOM" or (Notepad's "Unicode") UTF-16: the mark is not part
    of the first class's name (it would print as 'person' and match no 'person' elsewhere)."""
    folder = user_data.labelimg_folder(tmp_path / "labelimg")
    names = (folder / "classes.txt").read_text().splitlines()
    (folder / "classes.txt").write_bytes("\r\n".join(names + [""]).encode(encoding))
    source = load_source(os.fspath(folder), "train", cache_dir=tmp_path / "cache", workers=1)
    assert source.class_names == names and not source.class_names[0].startswith("\ufeff")


@pytest.mark.parametrize("variant", ["no path, folder list", "path, txt list, dict names", "nc and names"])
def test_data_yaml_variants(variant: str, tmp_path: Path) -> None:
    path = user_data.yaml_variants(tmp_path / "set")[variant]
    train = load_source(os.fspath(path), "train", cache_dir=tmp_path / "cache", workers=1)
    val = load_source(os.fspath(path), "val", cache_dir=tmp_path / "cache", workers=1)
    assert len(train.dataset) == (3 if variant == "nc and names" else 6) and len(val.dataset) == 2
    assert train.class_names == user_data.coco8_names()


def test_a_folder_with_two_data_yamls_says_which_it_used(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = user_data.roboflow_yolo(tmp_path / "export")
    (folder / "other.yaml").write_text((folder / "data.yaml").read_text())
    load_source(os.fspath(folder), "train", cache_dir=tmp_path / "cache", workers=1)
    assert "2 data YAMLs (data.yaml, other.yaml), using data.yaml" in caplog.text


def test_format_corpus_trains_a_step_and_validates_on_every_image(corpus, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    from yolo11 import train

    data_yaml, images = corpus
    assert train.main(["--data", os.fspath(data_yaml), "--imgsz", "64", "--epochs", "1", "--batch-size", "4",
                       "--nominal-batch", "4", "--workers", "0", "--plots", "false", "--val-images", "0",
                       "--optimizer", "SGD", "--warmup-epochs", "0", "--cache-dir", os.fspath(tmp_path / "cache"),
                       "--output-dir", os.fspath(tmp_path / "runs"), "--name", "formats"]) == 0
    out = capsys.readouterr().out
    val = [i for i in images if i.path.parent.name == "val"]
    assert f"| {len(images) - len(val)} train / {len(val)} val images |" in out, out[-3000:]
    instances = sum(len(user_data.label_boxes(i.label_text, 1, 1)[0]) for i in val)
    assert re.search(rf"^\s+all\s+{len(val)}\s+{instances}\s", out, re.M), out[-3000:]  # scored on every val image


@pytest.mark.parametrize("layout", ["roboflow yolo folder", "label studio", "cvat yolo 1.1", "labelimg",
                                    "roboflow coco", "voc devkit", "cvat voc", "roboflow voc", "roboflow csv",
                                    "roboflow createml", "roboflow darknet", "labelme"])
def test_exported_layouts_train_a_step_and_validate_on_every_image(layout: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    """``--data <the export folder>`` as the tool wrote it: one optimizer step (one batch holds the training split),
    then validation on every image of the validation split."""
    from yolo11 import train

    make, _, counts = LAYOUTS[layout]
    folder = make(tmp_path / "export")
    assert train.main(["--data", os.fspath(folder), "--imgsz", "64", "--epochs", "1", "--batch-size", "8",
                       "--nominal-batch", "8", "--workers", "0", "--plots", "false", "--val-images", "0",
                       "--optimizer", "SGD", "--warmup-epochs", "0", "--cache-dir", os.fspath(tmp_path / "cache"),
                       "--output-dir", os.fspath(tmp_path / "runs"), "--name", "x"]) == 0
    out = capsys.readouterr().out
    assert f"| {counts['train']} train / {counts['val']} val images |" in out, out[-3000:]
    assert re.search(rf"^\s+all\s+{counts['val']}\s+\d+\s", out, re.M), out[-3000:]
    assert "epoch 1/1 batch 1/1 step 1" in out or "step 1 |" in out, out[-3000:]


def test_data_without_a_labelled_object_is_said_to_train_only_background(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    """Every label file empty (a labelling tool's export before anyone labelled): trained as it is, with a warning
    (Ultralytics: "No labels found"); data with labels gets none."""
    folder = user_data.roboflow_yolo(tmp_path / "export")
    load_source(os.fspath(folder), "train", cache_dir=tmp_path / "cache", workers=1)
    assert "has a labelled object" not in caplog.text
    labels = sorted(folder.rglob("labels/*.txt"))
    assert labels
    for label in labels:
        label.write_text("")
    source = load_source(os.fspath(folder), "train", cache_dir=tmp_path / "cache", workers=1)
    assert len(source.dataset) > 0
    assert f"none of its {len(source.dataset)} images has a labelled object" in caplog.text


def test_a_data_yaml_path_that_yaml_reads_as_a_number_names_its_folder(tmp_path: Path) -> None:
    """``path: 2024`` is the folder 2024 (YAML reads it as an integer); a list there is refused naming the file."""
    user_data.roboflow_yolo(tmp_path / "2024")
    names = json.dumps(user_data.coco8_names())
    (tmp_path / "data.yaml").write_text(f"path: 2024\ntrain: train/images\nval: valid/images\nnames: {names}\n")
    source = load_source(os.fspath(tmp_path / "data.yaml"), "train", cache_dir=tmp_path / "cache", workers=1)
    assert len(source.dataset) == 4
    (tmp_path / "data.yaml").write_text(f"path: [2024]\ntrain: train/images\nval: valid/images\nnames: {names}\n")
    with pytest.raises(DataSourceError, match=r"data\.yaml: 'path' is .*it must be the dataset's folder"):
        load_source(os.fspath(tmp_path / "data.yaml"), "train", cache_dir=tmp_path / "cache", workers=1)


def test_an_image_with_more_objects_than_one_image_may_have_is_skipped_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A label file of more than ``MAX_BOXES_PER_IMAGE`` objects (lowered here to 3) skips its image, named;
    duplicates do not count (Ultralytics drops them first). One of more than ``MAX_LABEL_LINES`` rows (lowered to 6)
    is refused before its lines are parsed: a million-line file once reached training and ran it out of memory."""
    from yolo11.data.sources import yolo

    monkeypatch.setattr(yolo, "MAX_BOXES_PER_IMAGE", 3)
    monkeypatch.setattr(yolo, "MAX_LABEL_LINES", 6)
    folder = user_data.roboflow_yolo(tmp_path / "export")
    first, second, third = sorted((folder / "train" / "labels").glob("*.txt"))[:3]
    first.write_text("\n".join(f"1 0.{k} 0.5 0.1 0.1" for k in range(2, 6)) + "\n")  # 4 objects
    second.write_text("0 0.5 0.5 0.1 0.1\n0 0.50 0.500 0.1 1e-1\n1 0.2 0.5 0.1 0.1\n1 0.3 0.5 0.1 0.1\n")  # 3 + 1
    third.write_text("0 0.5 0.5 0.1 0.1\n" * 7)
    source = load_source(os.fspath(folder), "train", cache_dir=tmp_path / "cache", workers=1)
    assert len(source.dataset) == 2
    assert source.summary.skipped_images == [
        f"{first}: 4 objects, more than the 3 one image may have, image skipped",
        f"{third}: 7 label lines, more than the 6 a label file may have, image skipped"]
    assert f"{second}: 1 duplicate line dropped" in source.summary.skipped_lines


def test_label_lines_keep_boxes_cut_by_the_frame_and_drop_duplicate_values(tmp_path: Path) -> None:
    """Boxes Ultralytics keeps (``cx cy w h`` within -0.01..1.01) though they stick out of the image, an object cut
    by the frame, are kept and clipped to it, not dropped (the image would train the object as background); rows
    equal in value however written are one box; a megabyte-long bad line is quoted by its start only."""
    from yolo11.data.schema import BadSampleSummary
    from yolo11.data.sources.yolo import parse_label_file

    label = tmp_path / "a.txt"
    label.write_text("0 0.95 0.5 0.2 0.2\n0 0.1 0.5 0.4 0.2\n0 0.5 0.93 0.3 0.2\n"
                     "1 0.5 0.5 0.2 0.25\n1 0.50 0.500 0.20 0.250\n1.0 5e-1 5e-1 2e-1 2.5e-1\n"
                     "0 0.5 0.5 1.01 0.2\n" + "0 x " + "1 " * 300_001 + "\n")
    summary = BadSampleSummary()
    boxes, classes = parse_label_file(label, 100, 80, 2, summary)
    assert classes == [0, 0, 0, 1, 0]
    assert [box.round(3).tolist() for box in boxes] == [[85.0, 32.0, 100.0, 48.0], [0.0, 32.0, 30.0, 48.0],
                                                        [35.0, 66.4, 65.0, 80.0], [40.0, 30.0, 60.0, 50.0],
                                                        [0.0, 32.0, 100.0, 48.0]]
    assert summary.clipped_boxes == 4
    assert summary.skipped_lines[-1] == f"{label}: 2 duplicate lines dropped"
    (bad,) = summary.skipped_lines[:-1]
    assert bad.startswith(f"{label}:8: non-numeric field in '0 x 1 1 1") and bad.endswith("(600,005 characters)")
    assert len(bad) < 200 + len(str(label))


def test_a_label_line_longer_than_a_label_line_may_be_is_skipped_unparsed(tmp_path: Path, monkeypatch) -> None:
    """A line over ``MAX_LABEL_LINE_CHARS`` (lowered to 100 here; a polygon of ~100,000 points) is skipped before it
    is split: a 60 MB polygon line once took 2.6 GB to parse."""
    from yolo11.data.schema import BadSampleSummary
    from yolo11.data.sources import yolo

    monkeypatch.setattr(yolo, "MAX_LABEL_LINE_CHARS", 100)
    label = tmp_path / "a.txt"
    label.write_text("0 0.5 0.5 0.2 0.2\n1 " + "0.1 0.2 0.3 0.2 0.3 0.4 " * 10 + "\n")
    summary = BadSampleSummary()
    boxes, classes = yolo.parse_label_file(label, 100, 80, 2, summary)
    assert classes == [0]
    assert summary.skipped_lines == [f"{label}:2: a line of 242 characters, more than the 100 a label line may have"]


@pytest.mark.parametrize("top", ["", "project-3/"])
def test_an_export_zip_is_read_as_handed_out_unpacked_once(tmp_path: Path, top: str) -> None:
    """``--data export.zip`` (Roboflow, CVAT and Label Studio hand out zips; Ultralytics reads one) was "no such
    file or folder"; the zip is unpacked once into the cache, its members checked."""
    import zipfile

    folder = user_data.roboflow_yolo(tmp_path / "export")
    archive = tmp_path / "rf.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.rglob("*")):
            zf.write(path, top + path.relative_to(folder).as_posix())
    for split, count in (("train", 4), ("val", 4)):
        assert len(load_source(os.fspath(archive), split, cache_dir=tmp_path / "cache", workers=1).dataset) == count
    assert len(list((tmp_path / "cache" / "unzipped").iterdir())) == 2  # one folder and its lock: unpacked once
    with zipfile.ZipFile(tmp_path / "evil.zip", "w") as zf:
        zf.writestr("../outside.txt", "x")
    with pytest.raises(DataSourceError, match="evil.zip: holds '../outside.txt', a link or a path outside"):
        load_source(os.fspath(tmp_path / "evil.zip"), "train", cache_dir=tmp_path / "cache", workers=1)
    assert not (tmp_path / "cache" / "outside.txt").exists()


def test_an_encrypted_zip_is_one_line_naming_it(tmp_path: Path) -> None:
    """A password-protected (or damaged, or Deflate64) zip was a traceback that named no zip."""
    import zipfile

    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("data.yaml", "names: [a]\n")
    data = bytearray(archive.read_bytes())
    for signature, flag_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # the encrypted bit, local and central
        at = data.index(signature) + flag_at
        data[at] |= 1
    archive.write_bytes(bytes(data))
    with pytest.raises(DataSourceError, match=r"export.zip: cannot unpack it \(RuntimeError: .*encrypted"):
        load_source(os.fspath(archive), "train", cache_dir=tmp_path / "cache", workers=1)


def test_an_export_unzipped_into_a_folder_of_its_own_is_read_one_folder_down(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``--data DIR`` where DIR holds only ``project-3/`` (the export, as a zip often unpacks): read there, said in
    one line; beside a second entry DIR is not guessed at."""
    user_data.roboflow_yolo(tmp_path / "download" / "project-3")
    source = load_source(os.fspath(tmp_path / "download"), "train", cache_dir=tmp_path / "cache", workers=1)
    assert len(source.dataset) == 4
    assert f"{tmp_path / 'download'}: the data lies one folder down, in project-3" in caplog.text
    (tmp_path / "download" / "project-4").mkdir()
    assert detect_layout(tmp_path / "download") is None
