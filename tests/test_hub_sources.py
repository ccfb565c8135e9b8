"""Hub datasets and dataset folders: which split is read (and the fallback for validation), and the box format."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import cv2
import datasets
import numpy as np
import pytest

from yolo11.data import DataSourceError, load_source
from yolo11.data.sources import VAL_FALLBACKS

CLASSES = ["Coverall", "Face_Shield"]
FEATURES = datasets.Features({  # cppe-5's schema: COCO xywh pixels under objects.bbox
    "image_id": datasets.Value("int64"), "image": datasets.Image(),
    "width": datasets.Value("int32"), "height": datasets.Value("int32"),
    "objects": datasets.Sequence({"id": datasets.Value("int64"), "area": datasets.Value("int64"),
                                  "bbox": datasets.Sequence(datasets.Value("float32"), length=4),
                                  "category": datasets.ClassLabel(names=CLASSES)}),
})
PNG = cv2.imencode(".png", np.zeros((60, 80, 3), np.uint8))[1].tobytes()  # 80 wide, 60 high


def hub_split(boxes_per_image: list[list[list[float]]], first_id: int = 0) -> datasets.Dataset:
    rows = [{"image_id": first_id + i, "image": {"bytes": PNG, "path": None}, "width": 80, "height": 60,
             "objects": {"id": list(range(len(boxes))), "area": [0] * len(boxes), "bbox": boxes,
                         "category": [0] * len(boxes)}}
            for i, boxes in enumerate(boxes_per_image)]
    return datasets.Dataset.from_list(rows, features=FEATURES)


XYWH = [[[50, 10, 20, 30]], [[5, 5, 10, 10]]]  # as xyxy the first would have x2 < x1: only xywh fits
XYXY = [[[50, 10, 70, 40]], [[5, 5, 15, 15]]]  # the same boxes as corners; as xywh the first leaves the image
AMBIGUOUS = [[[1, 2, 10, 20]]]  # fits the 80x60 image read either way


def save_dict(folder: Path, splits: dict[str, list]) -> str:
    datasets.DatasetDict({name: hub_split(boxes, 100 * k) for k, (name, boxes) in enumerate(splits.items())}) \
        .save_to_disk(os.fspath(folder))
    return os.fspath(folder)


@pytest.mark.parametrize("splits, expected", [(("train", "test"), "test"),
                                              (("train", "validation", "test"), "validation"),
                                              (("train", "valid"), "valid")])
def test_val_falls_back_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture, splits: tuple[str, ...],
                                    expected: str) -> None:
    folder = save_dict(tmp_path / "ds", {name: XYWH for name in splits})
    with caplog.at_level(logging.WARNING, logger="yolo11.data"):
        source = load_source(folder, "val", cache_dir=tmp_path, fallback_splits=VAL_FALLBACKS,
                             split_flag="--val-split")
    first_id = 100 * splits.index(expected)
    assert source.dataset["image_id"] == [first_id, first_id + 1] and source.name == f"ds-{expected}"
    notes = [r.getMessage() for r in caplog.records if "in its place" in r.getMessage()]
    assert notes == [f"{folder}: no 'val' split, using {expected!r} in its place (--val-split chooses another)"]


def test_missing_split_lists_the_splits_and_names_the_flag(tmp_path: Path) -> None:
    folder = save_dict(tmp_path / "ds", {"training": XYWH, "holdout": XYWH})
    with pytest.raises(DataSourceError, match=r"no 'val' split nor 'validation' / 'valid' / 'test' \(it has "
                                              r"\['holdout', 'training'\]\); choose one with --val-split"):
        load_source(folder, "val", cache_dir=tmp_path, fallback_splits=VAL_FALLBACKS, split_flag="--val-split")
    with pytest.raises(DataSourceError, match=r"no 'train' split \(it has \['holdout', 'training'\]\); choose one "
                                              "with --train-split"):
        load_source(folder, "train", cache_dir=tmp_path, split_flag="--train-split")
    save_dict(tmp_path / "tt", {"train": XYWH, "test": XYWH})
    with pytest.raises(DataSourceError, match=r"no 'dev' split \(it has \['test', 'train'\]\)"):  # named: no guess
        load_source(os.fspath(tmp_path / "tt"), "dev", cache_dir=tmp_path, fallback_splits=VAL_FALLBACKS)
    assert len(load_source(folder, "holdout", cache_dir=tmp_path).dataset) == 2


def test_hub_id_reads_its_splits_and_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """The Hub path is ``datasets.load_dataset(repo_id)`` (mocked: no network); cppe-5 has train and test only."""
    calls = []

    def fake_load_dataset(repo_id: str) -> datasets.DatasetDict:
        calls.append(repo_id)
        return datasets.DatasetDict({"train": hub_split(XYWH), "test": hub_split(XYWH[:1], first_id=50)})

    monkeypatch.setattr("yolo11.weights.resolve.hub_reachable", lambda timeout=None: True)  # as online
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    with caplog.at_level(logging.WARNING, logger="yolo11.data"):
        source = load_source("cppe-5", "val", cache_dir=tmp_path, fallback_splits=VAL_FALLBACKS,
                             split_flag="--val-split")
    assert calls == ["cppe-5"] and source.dataset["image_id"] == [50] and source.name == "cppe-5-test"
    assert "Hub dataset cppe-5: no 'val' split, using 'test' in its place" in caplog.text
    assert "objects.bbox read as xywh" in caplog.text


@pytest.mark.parametrize("boxes, expected", [(XYWH, "xywh"), (XYXY, "xyxy")])
def test_auto_reads_the_box_format_from_the_boxes(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                  boxes: list, expected: str) -> None:
    hub_split(boxes).save_to_disk(os.fspath(tmp_path / "ds"))
    with caplog.at_level(logging.WARNING, logger="yolo11.data"):
        source = load_source(os.fspath(tmp_path / "ds"), cache_dir=tmp_path)
    assert f"objects.bbox read as {expected} (as {'xyxy' if expected == 'xywh' else 'xywh'}, 1 of 2 boxes" \
        in caplog.text
    np.testing.assert_allclose(source.dataset[0]["objects"]["bbox"], [[50, 10, 20, 30]])  # xywh either way
    np.testing.assert_allclose(source.dataset[1]["objects"]["bbox"], [[5, 5, 10, 10]])
    assert source.dataset[0]["objects"]["area"] == [600]


def test_undecidable_box_format_is_an_error_naming_the_flag(tmp_path: Path) -> None:
    hub_split(AMBIGUOUS).save_to_disk(os.fspath(tmp_path / "ds"))
    with pytest.raises(DataSourceError, match=r"cannot tell whether objects.bbox is \[x, y, width, height\] or "
                                              r"\[x1, y1, x2, y2\]: all 1 boxes fit .* --bbox-format xywh .* "
                                              "--bbox-format xyxy"):
        load_source(os.fspath(tmp_path / "ds"), cache_dir=tmp_path)
    hub_split([[[70, 50, 20, 20]], [[50, 10, 40, 5]]]).save_to_disk(os.fspath(tmp_path / "bad"))  # misfit both ways
    with pytest.raises(DataSourceError, match="fits neither box format"):
        load_source(os.fspath(tmp_path / "bad"), cache_dir=tmp_path)


def test_stated_box_format_is_used_and_not_served_stale(tmp_path: Path) -> None:
    """The same folder read as xywh, then as xyxy: datasets' map cache must not hand back the first reading."""
    hub_split(AMBIGUOUS).save_to_disk(os.fspath(tmp_path / "ds"))
    spec = os.fspath(tmp_path / "ds")
    as_xywh = load_source(spec, cache_dir=tmp_path, bbox_format="xywh").dataset[0]["objects"]["bbox"]
    as_xyxy = load_source(spec, cache_dir=tmp_path, bbox_format="xyxy").dataset[0]["objects"]["bbox"]
    assert as_xywh == [[1, 2, 10, 20]] and as_xyxy == [[1, 2, 9, 18]]
    assert load_source(spec, cache_dir=tmp_path, bbox_format="xywh").dataset[0]["objects"]["bbox"] == as_xywh
    with pytest.raises(DataSourceError, match="--bbox-format must be one of"):
        load_source(spec, cache_dir=tmp_path, bbox_format="cxcywh")
    with pytest.raises(DataSourceError, match="--images applies to a COCO json"):  # not silently unused
        load_source(spec, cache_dir=tmp_path, bbox_format="xywh", images=tmp_path)


def test_list_of_object_dicts_box_format_is_read(tmp_path: Path) -> None:
    """Objects stored as a list of per-object dicts (``List({...})``) are read for ``auto`` as well."""
    features = datasets.Features({
        "image": datasets.Image(),
        "objects": datasets.List({"bbox": datasets.List(datasets.Value("float32")),
                                  "category": datasets.ClassLabel(names=CLASSES)}),
    })
    rows = [{"image": {"bytes": PNG, "path": None}, "objects": [{"bbox": b, "category": 1} for b in boxes]}
            for boxes in XYXY]
    datasets.Dataset.from_list(rows, features=features).save_to_disk(os.fspath(tmp_path / "ds"))
    source = load_source(os.fspath(tmp_path / "ds"), cache_dir=tmp_path)
    np.testing.assert_allclose(source.dataset[0]["objects"]["bbox"], [[50, 10, 20, 30]])
    assert (source.dataset[0]["width"], source.dataset[0]["height"]) == (80, 60)


def test_folder_of_dataset_files_is_read_with_its_splits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clone of a Hub dataset repository (parquet per split, not save_to_disk) goes through load_dataset."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")  # its Arrow copy: not in ~/.cache
    (tmp_path / "repo" / "data").mkdir(parents=True)
    hub_split(XYWH).to_parquet(os.fspath(tmp_path / "repo" / "data" / "train-00000-of-00001.parquet"))
    hub_split(XYWH[:1], first_id=9).to_parquet(os.fspath(tmp_path / "repo" / "data" / "test-00000-of-00001.parquet"))
    source = load_source(os.fspath(tmp_path / "repo"), "val", cache_dir=tmp_path, fallback_splits=VAL_FALLBACKS)
    assert source.dataset["image_id"] == [9] and source.class_names == CLASSES


def test_hub_class_names_are_checked_as_every_class_list() -> None:
    """A Hub dataset's class names pass the same check as a names file's: one name twice is refused with both
    class ids, and names past the gate's bound on their characters are refused (the Hub check knew neither)."""
    from yolo11.data.sources.hub_classes import Classes, check_classes

    with pytest.raises(DataSourceError, match=r"my/data: the class name 'car' is listed twice \(classes 0 and 2\)"):
        check_classes(Classes(["car", "bus", "car"]), np.array([0, 1]), "objects.category", "my/data")
    with pytest.raises(DataSourceError, match="my/data"):
        check_classes(Classes(["car", "x" * 8_000_001]), np.array([0]), "objects.category", "my/data")
    check_classes(Classes(["car", "bus"]), np.array([0, 1]), "objects.category", "my/data")  # a valid list passes


def _rows_as(dataset: datasets.Dataset, folder: Path, **changes) -> str:
    """``dataset`` with the columns of its rows changed (``changes``: column -> one value per row), saved."""
    rows = dataset.to_list()
    for column, values in changes.items():
        for row, value in zip(rows, values, strict=True):
            row[column] = value
    features = FEATURES.copy()
    if "image" in changes:
        features["image"] = datasets.Image(decode=False)
    datasets.Dataset.from_list(rows, features=features).save_to_disk(os.fspath(folder))
    return os.fspath(folder)


def test_rows_without_an_image_or_a_size_or_of_too_many_objects_are_skipped_by_name(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A null image (with its size given: it failed mid-run; without: a traceback at load), a path to no file, a
    null width (its header is read instead: it was a TypeError) and a row of 300,000 boxes (9 GB in training;
    the file sources' bound is 10,000 objects an image)."""
    from yolo11.data.sources.checks import MAX_BOXES_PER_IMAGE

    base = hub_split([[[5, 5, 10, 10]]] * 4 + [[[1, 1, 2, 2]] * (MAX_BOXES_PER_IMAGE + 1)])
    image = {"bytes": PNG, "path": None}
    folder = _rows_as(base, tmp_path / "d", image=[None, image, image, image, image], width=[80, 80, None, 80, 80])
    with caplog.at_level(logging.WARNING, logger="yolo11.data"):
        source = load_source(folder, split="train", bbox_format="xywh")
    assert source.dataset["width"] == [80, 80, 80]  # the null width read from its header
    log = caplog.text
    assert "row 0: no image" in log
    assert f"row 4: {MAX_BOXES_PER_IMAGE + 1:,} objects, more than the {MAX_BOXES_PER_IMAGE:,}" in log


def test_an_image_path_to_no_file_is_skipped_at_load_not_mid_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """Paths relative to a dataset repository, read from another working folder: with width and height given no
    image was opened at load, and training stopped on '16 consecutive images failed to decode'."""
    (tmp_path / "here.png").write_bytes(PNG)
    rows = [{"image": path, "width": 80, "height": 60, "objects": {"bbox": [[5, 5, 10, 10]], "category": [0]}}
            for path in ("here.png", "images/gone.png")]
    datasets.Dataset.from_list(rows).save_to_disk(os.fspath(tmp_path / "d"))
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="yolo11.data"):
        source = load_source(os.fspath(tmp_path / "d"), split="train", bbox_format="xywh")
    assert len(source.dataset) == 1
    assert "row 1: no such file images/gone.png (a path relative to the dataset folder?" in caplog.text


def test_a_null_box_among_boxes_is_an_error_naming_its_row(tmp_path: Path) -> None:
    """Arrow's flatten drops a null box: every later box shifted to another object; it was 'cannot convert float
    NaN to integer'."""
    folder = _rows_as(hub_split([[[5, 5, 10, 10]], [[5, 5, 10, 10], [1, 1, 2, 2]]]), tmp_path / "d",
                      objects=[{"id": [0], "area": [0], "bbox": [[5, 5, 10, 10]], "category": [0]},
                               {"id": [0, 1], "area": [0, 0], "bbox": [None, [1, 1, 2, 2]], "category": [0, 0]}])
    with pytest.raises(DataSourceError, match=r"row 1: objects.bbox holds a null box \(None\) among its boxes"):
        load_source(folder, split="train")


def test_boxes_follow_the_rows_size_onto_a_resized_image_and_another_aspect_is_replaced(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A Hub row's width and height are its boxes' frame. Its image shrunk since (a thumbnail of the same aspect):
    the boxes are scaled onto it (they were placed as if in the image's pixels: twice as far). Of another aspect
    (another image, or one its EXIF orientation turns): replaced by the next sample, named."""
    from yolo11.data.augment_params import AugmentParams
    from yolo11.data.dataset import DetectionDataset

    half = cv2.imencode(".png", np.zeros((30, 40, 3), np.uint8))[1].tobytes()  # the 80x60 image at half size
    turned = cv2.imencode(".png", np.zeros((80, 60, 3), np.uint8))[1].tobytes()
    base = hub_split([[[40, 30, 20, 15]], [[0, 0, 80, 60]], [[10, 10, 8, 6]]])
    folder = _rows_as(base, tmp_path / "d", image=[{"bytes": half, "path": "half.png"},
                                                   {"bytes": turned, "path": "turned.png"},
                                                   {"bytes": PNG, "path": "same.png"}])
    dataset = DetectionDataset(load_source(folder, split="train").dataset, 64, augment=False, params=AugmentParams())
    image, target, used = dataset._load(0)
    assert image.shape[:2] == (48, 64) and used == 0
    np.testing.assert_allclose(target["boxes"], [[32, 24, 48, 36]])  # (40, 30, 60, 45) in 80x60 -> 64x48
    with caplog.at_level(logging.WARNING, logger="yolo11.data"):
        _, _, used = dataset._load(1)
    assert used == 2
    sample = dataset[1]  # validation scores each image once: the turned one blank under its own id
    assert sample["image_id"] == 1 and (sample["image"] == 114).all() and sample["orig_size"] == (60, 80)
    assert "image turned.png is 60x80 (EXIF orientation applied) where its row says 80x60, of another aspect" \
        in caplog.text


@pytest.mark.parametrize("classes", [[0, 1], ["cat", "dog"]])
def test_a_split_of_backgrounds_only_takes_the_classes_of_the_others(tmp_path: Path, classes: list) -> None:
    """An imagefolder whose validation metadata lists no object anywhere: Arrow types its lists as null, which was
    refused ('holds null, not integer class ids or class names'); its classes are the training split's."""
    import json

    for split, boxes in (("train", [[5, 5, 10, 10], [20, 20, 10, 10]]), ("validation", [])):
        (tmp_path / split).mkdir()
        lines = []
        for k in range(2):
            cv2.imwrite(os.fspath(tmp_path / split / f"{k}.png"), np.zeros((60, 80, 3), np.uint8))
            objects = {"bbox": boxes, "categories": classes if boxes else []}
            lines.append(json.dumps({"file_name": f"{k}.png", "objects": objects}))
        (tmp_path / split / "metadata.jsonl").write_text("\n".join(lines) + "\n")
    train = load_source(os.fspath(tmp_path), split="train", bbox_format="xywh")
    val = load_source(os.fspath(tmp_path), split="val", fallback_splits=VAL_FALLBACKS, bbox_format="xywh")
    assert val.class_names == train.class_names == [str(c) for c in classes]
    assert len(val.dataset) == 2 and all(not o["bbox"] for o in val.dataset["objects"])
