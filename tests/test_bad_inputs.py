"""Bad inputs: each is skipped (or repaired) with a message naming the file and line, or stops before training."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import cv2
import datasets
import numpy as np
import pytest
from helpers.yolo_folders import corrupt_middle, make_dataset, write_image
from PIL import Image

from yolo11.data import DataSourceError, LoaderConfig, build_dataloader, load_source
from yolo11.data.schema import DetectionSource, detection_features

NAMES = ["a", "b", "c"]


@pytest.mark.parametrize("line, message", [
    ("0 0.5 0.5 0.2", r"bad\.txt:2: expected 5 fields \(class cx cy w h\), got 4"),
    ("0 0.5 0.5 0.2 0.2 0.1", r"bad\.txt:2: expected 5 fields"),
    ("7 0.5 0.5 0.2 0.2", r"bad\.txt:2: class 7 is not in 0\.\.2"),
    ("-1 0.5 0.5 0.2 0.2", r"bad\.txt:2: class -1 is not in 0\.\.2"),
    ("1.5 0.5 0.5 0.2 0.2", r"bad\.txt:2: class 1\.5 is not in 0\.\.2"),
    ("0 x 0.5 0.2 0.2", r"bad\.txt:2: non-numeric field"),
    ("0 1.4 0.5 0.2 0.2", r"bad\.txt:2: box 1\.4 0\.5 0\.2 0\.2 \(cx cy w h\) is not within -0\.01\.\.1\.01 of the "
                          r"image, line skipped"),
    ("0 0.5 -0.3 0.2 0.2", r"bad\.txt:2: box .* is not within -0\.01\.\.1\.01 of the image, line skipped"),
    ("0 0.5 0.5 0 0.2", r"bad\.txt:2: zero-area box, line skipped"),
    ("0 0.5 0.5 -0.1 0.2", r"bad\.txt:2: negative width or height"),
    ("0 nan 0.5 0.1 0.2", r"bad\.txt:2: non-finite value"),
])
def test_bad_label_line_is_skipped_with_file_and_line(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                      line: str, message: str) -> None:
    yaml_path = make_dataset(tmp_path, {"good": "1 0.5 0.5 0.4 0.4\n", "bad": f"2 0.3 0.3 0.2 0.2\n{line}\n"})
    with caplog.at_level(logging.WARNING, logger="yolo11.data"):
        source = load_source(os.fspath(yaml_path), cache_dir=tmp_path / "cache")
    assert len(source.dataset) == 2  # the image stays, with its good line
    assert len(source.summary.skipped_lines) == 1 and not source.summary.skipped_images
    assert re.search(message, source.summary.skipped_lines[0])
    assert str(tmp_path / "labels" / "train" / "bad.txt") in source.summary.skipped_lines[0]
    objects = {r["image_id"]: r["objects"]["category"] for r in source.dataset}
    assert sorted(objects.values()) == [[1], [2]]
    assert caplog.text.count(source.summary.skipped_lines[0]) == 1  # logged once, at conversion


def test_slightly_outside_boxes_are_clipped_and_counted(tmp_path: Path) -> None:
    yaml_path = make_dataset(tmp_path, {"edge": "0 0.99 0.5 0.04 0.2\n0 0.5 0.5 0.2 0.2\n"})
    source = load_source(os.fspath(yaml_path), cache_dir=tmp_path / "cache")
    boxes = np.array(source.dataset[0]["objects"]["bbox"])
    assert source.summary.clipped_boxes == 1 and not source.summary.skipped_lines
    x, _, w, _ = boxes[0]
    assert x + w == pytest.approx(80) and w == pytest.approx(0.03 * 80, abs=1e-3)  # right edge 81.6 -> 80


def test_duplicate_lines_and_segment_labels(tmp_path: Path) -> None:
    line = "0 0.5 0.5 0.2 0.2"
    yaml_path = make_dataset(tmp_path, {"dup": f"{line}\n{line}\n1 0.1 0.1 0.3 0.1 0.2 0.4\n"})
    source = load_source(os.fspath(yaml_path), cache_dir=tmp_path / "cache")
    objects = source.dataset[0]["objects"]
    assert objects["category"] == [0, 1]  # the duplicate dropped; the polygon's extent is its box
    assert source.summary.skipped_lines == [f"{tmp_path / 'labels' / 'train' / 'dup.txt'}: 1 duplicate line dropped"]
    np.testing.assert_allclose(objects["bbox"][1], [8, 6, 16, 18], atol=1e-4)


def pcx_bytes() -> bytes:
    """A PCX image (named .jpg below): PIL reads it, OpenCV, the loader's decoder, does not."""
    buffer = io.BytesIO()
    Image.new("RGB", (80, 60), (10, 200, 30)).save(buffer, format="PCX")
    return buffer.getvalue()


def png_claiming(width: int, height: int, bad_text_checksum: bool) -> bytes:
    """A few bytes whose PNG header claims ``width`` x ``height`` pixels; ``bad_text_checksum``: a text chunk with
    a wrong checksum before the pixels, where PIL stops reading the header and libpng decodes on."""
    def chunk(kind: bytes, body: bytes, bad: bool = False) -> bytes:
        checksum = zlib.crc32(kind + body) ^ int(bad)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", checksum)
    text = chunk(b"tEXt", b"Comment\0x", bad=True) if bad_text_checksum else b""
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) + text
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


@pytest.mark.parametrize("kind, message", [
    ("random_bytes", "unreadable or corrupt image"),
    ("bomb", "more than 178956970 pixels (a decompression bomb?)"),
    ("bomb_unread_header", "15000x15000: more than 178956970 pixels"),  # PIL cannot read its header
    ("truncated_jpeg", "truncated JPEG"),
    ("empty_file", "empty file"),
    ("corrupt_middle", "corrupt image data (Corrupt JPEG data"),
    ("pil_only", "a PCX image OpenCV cannot decode"),
])
def test_bad_image_is_skipped(tmp_path: Path, capfd: pytest.CaptureFixture, kind: str, message: str) -> None:
    yaml_path = make_dataset(tmp_path, {"good": "0 0.5 0.5 0.2 0.2\n", "broken": "0 0.5 0.5 0.2 0.2\n"})
    broken = tmp_path / "images" / "train" / "broken.jpg"
    data = broken.read_bytes()
    broken.write_bytes({"random_bytes": os.urandom(500), "truncated_jpeg": data[: len(data) // 2],
                        "empty_file": b"", "corrupt_middle": corrupt_middle(data), "pil_only": pcx_bytes(),
                        "bomb": png_claiming(15000, 15000, False),
                        "bomb_unread_header": png_claiming(15000, 15000, True)}[kind])
    source = load_source(os.fspath(yaml_path), cache_dir=tmp_path / "cache")
    assert len(source.dataset) == 1 and len(source.summary.skipped_images) == 1
    assert str(broken) in source.summary.skipped_images[0] and message in source.summary.skipped_images[0]
    assert "Corrupt JPEG data" not in capfd.readouterr().err  # libjpeg's own line, without the file, stays hidden


def test_every_decode_of_the_process_is_bounded_as_the_conversion_bounds_images() -> None:
    """``import yolo11`` gives OpenCV, which reads it once as it loads, the conversion's pixel limit (its own is
    2^30 pixels, 3 GB decoded) unless the user set one: the loader's and predict's decodes are bounded too."""
    from yolo11 import MAX_IMAGE_PIXELS

    code = ("import os, yolo11, cv2, numpy\n"
            "print(os.environ['OPENCV_IO_MAX_IMAGE_PIXELS'])\n"
            "from yolo11.data.image_io import decode_bgr\n"
            f"print(decode_bgr({png_claiming(15000, 15000, True)!r}) is None)")
    env = {k: v for k, v in os.environ.items() if k != "OPENCV_IO_MAX_IMAGE_PIXELS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.split() == [str(MAX_IMAGE_PIXELS), "True"], out.stderr
    env["OPENCV_IO_MAX_IMAGE_PIXELS"] = "1000000000"  # the user's own limit stands
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.split()[0] == "1000000000", out.stderr


def test_image_only_pil_decodes_at_training_time_is_logged_once_and_replaced(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A Hub or save_to_disk dataset is not decoded before training: a bad image there is replaced by the next
    sample, every epoch the same way, and named (stored path and image id) once, not every time it is drawn."""
    good = cv2.imencode(".jpg", np.full((64, 64, 3), 200, np.uint8))[1].tobytes()
    rows = [{"image_id": i, "image": {"bytes": pcx_bytes() if i == 1 else good, "path": f"/data/photos/img{i}.jpg"},
             "width": 64, "height": 64,
             "objects": {"id": [i + 1], "area": [100.0], "bbox": [[10, 10, 10, 10]], "category": [i]}}
            for i in range(3)]
    source = DetectionSource(datasets.Dataset.from_list(rows, features=detection_features(NAMES)), NAMES, "hub")
    loader = build_dataloader(source, "val", LoaderConfig(imgsz=64, batch_size=3, workers=0))
    with caplog.at_level(logging.WARNING, logger="yolo11.data"):
        batches = [next(iter(loader)) for _ in range(2)]
    # validation scores each image once: the bad one blank under its own id, not the next one twice
    assert [batch["image_ids"] for batch in batches] == [[0, 1, 2]] * 2
    assert loader.dataset.decode_failures == 2
    assert caplog.text.count("cannot decode image /data/photos/img1.jpg (image_id 1)") == 1


def test_missing_label_file_is_a_background(tmp_path: Path) -> None:
    yaml_path = make_dataset(tmp_path, {"labelled": "0 0.5 0.5 0.2 0.2\n", "background": None, "empty": ""})
    source = load_source(os.fspath(yaml_path), cache_dir=tmp_path / "cache")
    assert len(source.dataset) == 3 and source.summary.backgrounds == 2 and source.summary.num_problems == 0


@pytest.mark.parametrize("labels_folder", ["missing", "empty"])
def test_split_without_any_label_file_raises(tmp_path: Path, labels_folder: str) -> None:
    """Not a dataset of backgrounds: the labels are elsewhere (or not there yet), so training would learn nothing."""
    yaml_path = make_dataset(tmp_path, {"a": None, "b": None})
    if labels_folder == "empty":
        (tmp_path / "labels" / "train").mkdir(parents=True)
    with pytest.raises(DataSourceError, match="no label file for any of the 2 'train' images") as info:
        load_source(os.fspath(yaml_path), cache_dir=tmp_path / "cache")
    assert str(tmp_path / "labels" / "train") in str(info.value) and str(yaml_path) in str(info.value)


@pytest.mark.parametrize("yaml_extra, message", [
    ("", r"no 'names'"),
    ("names: {0: a, 2: c}\n", r"'names' keys must be the class ids 0\.\.1"),
    ("nc: 80\nnames: [a, b]\n", r"'nc' is 80 but 'names' lists 2 classes"),
])
def test_unusable_yaml_raises_before_training(tmp_path: Path, yaml_extra: str, message: str) -> None:
    yaml_path = make_dataset(tmp_path, {"x": "0 0.5 0.5 0.2 0.2\n"}, yaml_extra=yaml_extra)
    with pytest.raises(DataSourceError, match=message) as info:
        load_source(os.fspath(yaml_path), cache_dir=tmp_path / "cache")
    assert str(yaml_path) in str(info.value)


def test_missing_image_folder_raises(tmp_path: Path) -> None:
    yaml_path = tmp_path / "data.yaml"
    yaml_path.write_text(f"path: {tmp_path}\ntrain: images/nowhere\nnames: [a]\n")
    with pytest.raises(DataSourceError, match=r"image folder or list .*nowhere does not exist"):
        load_source(os.fspath(yaml_path), cache_dir=tmp_path / "cache")
    with pytest.raises(DataSourceError, match=r"no 'val' split"):
        load_source(os.fspath(yaml_path), "val", cache_dir=tmp_path / "cache")
    with pytest.raises(DataSourceError, match="no such file or folder"):
        load_source(os.fspath(tmp_path / "missing.yaml"), cache_dir=tmp_path / "cache")


def test_an_export_without_its_val_folder_says_what_to_do(tmp_path: Path) -> None:
    """Roboflow's YOLO export of a training split alone: the path was shown as written (``x/../valid/images``)."""
    (tmp_path / "export" / "train" / "images").mkdir(parents=True)
    (tmp_path / "export" / "data.yaml").write_text("train: ../train/images\nval: ../valid/images\nnames: [a]\n")
    with pytest.raises(DataSourceError, match=rf"'val' image folder or list {tmp_path / 'valid' / 'images'} does not "
                                              r"exist \(an export without a validation split: export one"):
        load_source(os.fspath(tmp_path / "export" / "data.yaml"), "val", cache_dir=tmp_path / "cache")


def test_a_data_path_that_is_a_fifo_or_a_device_is_named_by_kind(tmp_path: Path) -> None:
    """It was "no such file or folder", for a file that is there."""
    os.mkfifo(tmp_path / "data.yaml")
    with pytest.raises(DataSourceError, match=r"data.yaml: a FIFO .named pipe., not a regular file"):
        load_source(os.fspath(tmp_path / "data.yaml"), cache_dir=tmp_path / "cache")
    with pytest.raises(DataSourceError, match=r"^/dev/zero: a character device, not a regular file"):
        load_source("/dev/zero", cache_dir=tmp_path / "cache")


def test_coco_json_problems(tmp_path: Path) -> None:
    write_image(tmp_path / "images" / "1.jpg")
    coco = {"images": [{"id": 1, "file_name": "1.jpg", "width": 80, "height": 60},
                       {"id": 2, "file_name": "gone.jpg", "width": 80, "height": 60}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 5, "bbox": [1, 1, 10, 10], "iscrowd": 0},
                            {"id": 2, "image_id": 1, "category_id": 9, "bbox": [1, 1, 10, 10], "iscrowd": 0},
                            {"id": 3, "image_id": 1, "category_id": 5, "bbox": [1, 1, 0, 10], "iscrowd": 0}],
            "categories": [{"id": 5, "name": "five"}]}
    json_path = tmp_path / "ann.json"
    json_path.write_text(json.dumps(coco))
    source = load_source(os.fspath(json_path), cache_dir=tmp_path / "cache", images=tmp_path / "images")
    assert len(source.dataset) == 1 and source.dataset[0]["objects"]["category"] == [0]
    assert "gone.jpg" in source.summary.skipped_images[0]
    assert any("annotation 2 of image 1: category 9" in m for m in source.summary.skipped_lines)
    assert any("annotation 3 of image 1: zero-area box" in m for m in source.summary.skipped_lines)
    with pytest.raises(DataSourceError, match="image folder .* does not exist"):
        load_source(os.fspath(json_path), cache_dir=tmp_path / "cache", images=tmp_path / "nope")


def test_undecodable_image_in_a_worker_falls_back_deterministically(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """An image that passed conversion but fails to decode later: the next sample is used, and counted."""
    good = cv2.imencode(".png", np.full((64, 64, 3), 200, np.uint8))[1].tobytes()
    rows = [{"image_id": i, "image": {"bytes": b"garbage" if i == 1 else good, "path": f"img{i}.png"},
             "width": 64, "height": 64,
             "objects": {"id": [i + 1], "area": [100.0], "bbox": [[10, 10, 10, 10]], "category": [i]}}
            for i in range(3)]
    dataset = datasets.Dataset.from_list(rows, features=detection_features(NAMES))
    source = DetectionSource(dataset, NAMES, "corrupt")
    loader = build_dataloader(source, "val", LoaderConfig(imgsz=64, batch_size=3, workers=0))
    with caplog.at_level(logging.WARNING, logger="yolo11.data"):
        batch = next(iter(loader))
    assert batch["image_ids"] == [0, 1, 2]  # validated: sample 1 blank, under its own id
    assert loader.dataset.decode_failures == 1 and "img1.png" in caplog.text
    assert (batch["images"][1] == 114).all() and not (batch["images"][0] == 114).all()
    train = build_dataloader(source, "train", LoaderConfig(imgsz=64, batch_size=3, workers=0, augment=False))
    assert train.dataset._load(1)[2] == 2  # trained: sample 1 replaced by sample 2


def test_a_file_name_that_is_not_utf8_trains_its_image_and_boxes(tmp_path: Path) -> None:
    """A Latin-1 name (a zip made on Windows unpacks 'café' as the byte 0xe9): the image and its label file are
    read, the name shown with U+FFFD; it stopped the conversion ('surrogates not allowed') before."""
    yaml_path = make_dataset(tmp_path, {"plain": "0 0.5 0.5 0.2 0.2\n", "cafe": "1 0.25 0.25 0.2 0.2\n"})
    latin = os.fsdecode(b"caf\xe9")
    for folder, suffix in (("images", ".jpg"), ("labels", ".txt")):
        (tmp_path / folder / "train" / f"cafe{suffix}").rename(tmp_path / folder / "train" / f"{latin}{suffix}")
    source = load_source(os.fspath(yaml_path), cache_dir=tmp_path / "cache")
    rows = {Path(row["image"]["path"]).name: row for row in source.dataset}
    assert set(rows) == {"plain.jpg", "caf\ufffd.jpg"} and not source.summary.skipped_images
    row = rows["caf\ufffd.jpg"]
    assert row["objects"]["category"] == [1]
    assert row["image"]["bytes"] == (tmp_path / "images" / "train" / f"{latin}.jpg").read_bytes()


@pytest.mark.parametrize("stems", [["20240101123045123451", "20240101123045123452"], ["\u00b2", "\u00b3"]],
                         ids=["timestamps beyond int64", "unicode digits"])
def test_image_names_that_look_numbered_but_are_no_int64_are_numbered_by_row(tmp_path: Path, stems) -> None:
    """Numbered images keep their numbers as ids; a 20-digit timestamp (beyond the cache's int64) or a digit
    ``str.isdigit`` takes ('²') stopped the conversion: such images are numbered by row, as other names are."""
    yaml_path = make_dataset(tmp_path, {stem: "0 0.5 0.5 0.2 0.2\n" for stem in stems})
    source = load_source(os.fspath(yaml_path), cache_dir=tmp_path / "cache")
    assert sorted(source.dataset["image_id"]) == [0, 1]
    numbered = make_dataset(tmp_path / "numbered", {"000000000042": "0 0.5 0.5 0.2 0.2\n"})
    assert load_source(os.fspath(numbered), cache_dir=tmp_path / "cache").dataset["image_id"] == [42]


def test_a_listed_name_longer_than_the_system_allows_is_a_missing_image(tmp_path: Path) -> None:
    """A txt list's line or a COCO file_name of 300 characters (ENAMETOOLONG, which pathlib raises): missing,
    named and skipped like any other, where it stopped the run as 'cannot write ... File name too long'."""
    make_dataset(tmp_path, {"a": "0 0.5 0.5 0.2 0.2\n", "b": "0 0.5 0.5 0.2 0.2\n"})
    long_name = "images/train/" + "y" * 300 + ".jpg"
    (tmp_path / "train.txt").write_text(f"images/train/a.jpg\n{long_name}\nimages/train/b.jpg\n")
    (tmp_path / "list.yaml").write_text(f"path: {tmp_path}\ntrain: train.txt\nval: train.txt\nnames: [a, b, c]\n")
    source = load_source(os.fspath(tmp_path / "list.yaml"), cache_dir=tmp_path / "cache")
    assert len(source.dataset) == 2 and len(source.summary.skipped_images) == 1
    assert "y" * 300 in source.summary.skipped_images[0]
    coco = {"images": [{"id": 1, "file_name": "a.jpg", "width": 80, "height": 60},
                       {"id": 2, "file_name": "y" * 300 + ".jpg", "width": 80, "height": 60}],
            "annotations": [], "categories": [{"id": 1, "name": "a"}]}
    (tmp_path / "images" / "train" / "labels.json").write_text(json.dumps(coco))
    source = load_source(os.fspath(tmp_path / "images" / "train" / "labels.json"), cache_dir=tmp_path / "cache")
    assert len(source.dataset) == 1 and "y" * 300 in source.summary.skipped_images[0]


@pytest.mark.parametrize("list_name", ["train.TXT", "train.list", "train"])
def test_a_split_list_is_read_whatever_its_suffix(tmp_path: Path, list_name: str) -> None:
    """Ultralytics reads any file a split names as a list of paths; 'train.TXT' was refused as not existing. A
    split naming one image is told apart."""
    make_dataset(tmp_path, {"a": "0 0.5 0.5 0.2 0.2\n", "b": "1 0.5 0.5 0.2 0.2\n"})
    (tmp_path / list_name).write_text("images/train/a.jpg\nimages/train/b.jpg\n")
    (tmp_path / "list.yaml").write_text(f"path: {tmp_path}\ntrain: {list_name}\nval: {list_name}\nnames: [a, b]\n")
    assert len(load_source(os.fspath(tmp_path / "list.yaml"), cache_dir=tmp_path / "cache").dataset) == 2
    (tmp_path / "one.yaml").write_text(f"path: {tmp_path}\ntrain: images/train/a.jpg\nval: images/train/a.jpg\n"
                                       "names: [a, b]\n")
    with pytest.raises(DataSourceError, match=r"'train' is the image .*a\.jpg; a split names a folder"):
        load_source(os.fspath(tmp_path / "one.yaml"), cache_dir=tmp_path / "cache")
