"""Dataset folders as Hugging Face users bring them to ``--data``, read through ``load_source`` (what the trainer
calls): an ``imagefolder`` with ``metadata.jsonl`` or ``metadata.csv`` as the ``datasets`` docs write object
detection, the parquet files ``push_to_hub`` writes, ``save_to_disk`` folders, and the object fields popular Hub
datasets use; bad rows are skipped with a message rather than stopping the run."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import cv2
import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.engine_helpers import describe, launch

from yolo11.data import DataSourceError, load_source
from yolo11.data.sources import VAL_FALLBACKS

WIDTH, HEIGHT = 80, 60
BOX = [50.0, 10.0, 20.0, 30.0]  # COCO xywh; read as [x1, y1, x2, y2] its x2 < x1, so --bbox-format auto reads xywh


@pytest.fixture(autouse=True)
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``datasets.load_dataset`` writes its Arrow copy of a folder here, not in ~/.cache."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")


def encoded(suffix: str, seed: int = 0) -> bytes:
    image = np.random.default_rng(seed).integers(0, 255, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    return cv2.imencode(suffix, image)[1].tobytes()


def load(spec: Path, tmp_path: Path, split: str = "train", **kwargs):
    """One split as the trainer asks for it: ``val`` falls back to ``validation``/``valid``/``test``."""
    fallbacks = VAL_FALLBACKS if split == "val" else ()
    flag = "--val-split" if split == "val" else "--train-split"
    return load_source(os.fspath(spec), split, cache_dir=tmp_path / "cache", fallback_splits=fallbacks,
                       split_flag=flag, **kwargs)


def image_folder(root: Path, splits: dict[str, list[dict]], metadata: str = "jsonl") -> Path:
    """An ``imagefolder``: per split folder (``""``: the root itself) the images named by ``file_name`` and a
    ``metadata.jsonl``, or a ``metadata.csv`` whose nested values are JSON text (``csv``) or Python's repr, as
    ``pandas.DataFrame.to_csv`` writes dicts and lists (``csv-repr``)."""
    for split, rows in splits.items():
        folder = root / split
        folder.mkdir(parents=True, exist_ok=True)
        for k, row in enumerate(rows):
            (folder / row["file_name"]).write_bytes(encoded(Path(row["file_name"]).suffix, k))
        if metadata == "jsonl":
            (folder / "metadata.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        else:
            text = json.dumps if metadata == "csv" else repr
            with open(folder / "metadata.csv", "w", newline="") as file:
                writer = csv.writer(file)
                writer.writerow(rows[0])
                writer.writerows([v if isinstance(v, str) else text(v) for v in row.values()] for row in rows)
    return root


def doc_rows(count: int, field: str = "categories", first: int = 0) -> list[dict]:
    """Rows as the ``datasets`` docs' object-detection example writes them, PNG and JPEG images in turn."""
    return [{"file_name": f"{i:04d}{'.png' if i % 2 else '.jpg'}", "objects": {"bbox": [BOX], field: [i % 2]}}
            for i in range(first, first + count)]


def boxes_and_classes(source) -> tuple[list, list]:
    return [r["objects"]["bbox"] for r in source.dataset], [r["objects"]["category"] for r in source.dataset]


# --- imagefolder with metadata ---------------------------------------------------------------------------------

@pytest.mark.parametrize("field", ["categories", "category"])
@pytest.mark.parametrize("val_folder", ["validation", "test"])
def test_imagefolder_metadata_jsonl_with_splits(tmp_path: Path, field: str, val_folder: str) -> None:
    root = image_folder(tmp_path / "ds", {"train": doc_rows(3, field), val_folder: doc_rows(2, field, first=10)})
    train = load(root, tmp_path)
    assert boxes_and_classes(train) == ([[BOX]] * 3, [[0], [1], [0]])
    assert train.class_names == ["0", "1"]
    assert [Path(r["image"]["path"]).name for r in train.dataset] == ["0000.jpg", "0001.png", "0002.jpg"]
    assert [(r["width"], r["height"]) for r in train.dataset] == [(WIDTH, HEIGHT)] * 3
    val = load(root, tmp_path, "val")
    assert val.name == f"ds-{val_folder}" and len(val.dataset) == 2
    assert Path(val.dataset[0]["image"]["path"]).name == "0010.jpg"


def test_imagefolder_of_one_folder_trains_and_names_the_val_flag(tmp_path: Path) -> None:
    """No split folders: ``datasets`` calls it ``train``; validation has no stand-in, and the error says which
    flag picks one (``--val-split train`` validates on the training images)."""
    root = image_folder(tmp_path / "ds", {"": doc_rows(3)})
    assert len(load(root, tmp_path).dataset) == 3
    with pytest.raises(DataSourceError, match=r"no 'val' split .*\(it has \['train'\]\); choose one with --val-split"):
        load(root, tmp_path, "val")


@pytest.mark.parametrize("metadata", ["csv", "csv-repr"])
def test_imagefolder_metadata_csv(tmp_path: Path, metadata: str) -> None:
    """CSV holds text only: ``objects`` arrives as a string (JSON, or a dict's repr from pandas) and is parsed."""
    root = image_folder(tmp_path / "ds", {"train": doc_rows(3), "validation": doc_rows(1)}, metadata)
    source = load(root, tmp_path)
    assert boxes_and_classes(source) == ([[BOX]] * 3, [[0], [1], [0]])
    assert source.class_names == ["0", "1"]
    assert load(root, tmp_path, "val").name == "ds-validation"


def test_csv_text_that_is_not_a_value_is_an_error_naming_the_column(tmp_path: Path) -> None:
    rows = doc_rows(2)
    root = image_folder(tmp_path / "ds", {"train": rows}, "csv")
    text = (root / "train" / "metadata.csv").read_text().replace('[[50.0', '[[50.0 oops', 1)
    (root / "train" / "metadata.csv").write_text(text)
    with pytest.raises(DataSourceError, match=r"ds\[train\]: row 0: column 'objects' holds text that is neither "
                                              r"JSON nor a Python literal: '\{\"bbox\": \[\[50.0 oops"):
        load(root, tmp_path)


def test_imagefolder_with_an_unlabelled_test_folder(tmp_path: Path) -> None:
    """Test images without a metadata file (as competitions ship them): ``datasets`` refuses to read the folder
    at once, so each split is read on its own."""
    root = image_folder(tmp_path / "ds", {"train": doc_rows(2), "validation": doc_rows(1)})
    (root / "test").mkdir()
    (root / "test" / "0.png").write_bytes(encoded(".png"))
    assert len(load(root, tmp_path).dataset) == 2 and load(root, tmp_path, "val").name == "ds-validation"
    with pytest.raises(DataSourceError, match=r"ds\[test\]: no objects column"):
        load(root, tmp_path, "test")


def test_imagefolder_whose_metadata_files_differ_in_type(tmp_path: Path) -> None:
    """Whole-number boxes written as integers in one split's file and as floats in the other's."""
    rows = doc_rows(2, first=10)
    for row in rows:
        row["objects"]["bbox"] = [[int(v) for v in BOX]]
    root = image_folder(tmp_path / "ds", {"train": doc_rows(2), "validation": rows})
    assert boxes_and_classes(load(root, tmp_path, "val")) == ([[BOX], [BOX]], [[0], [1]])
    assert load(root, tmp_path).class_names == ["0", "1"]


def test_metadata_beside_the_split_folders_is_named_in_the_error(tmp_path: Path) -> None:
    """One ``metadata.jsonl`` above ``train/`` and ``validation/``: ``datasets`` reads only the files inside each
    split folder, finds no metadata there and labels the images by folder name, as for classification."""
    rows = {split: doc_rows(2) for split in ("train", "validation")}
    root = image_folder(tmp_path / "ds", rows)
    for split in rows:
        (root / split / "metadata.jsonl").unlink()
    (root / "metadata.jsonl").write_text("".join(json.dumps({**row, "file_name": f"{split}/{row['file_name']}"})
                                                 + "\n" for split in rows for row in rows[split]))
    with pytest.raises(DataSourceError, match=r"found \['image', 'label'\]\): datasets read it as images labelled "
                                              r"by folder name; put a metadata.jsonl \(or metadata.csv\) with the "
                                              r"objects in each split folder, beside its images"):
        load(root, tmp_path)



def test_a_folder_of_bare_images_says_what_a_detection_folder_holds(tmp_path: Path) -> None:
    """Images with no labels of any kind: the error lists what would make them a dataset, not only the columns
    ``datasets`` found."""
    root = tmp_path / "photos"
    root.mkdir()
    for k in range(2):
        (root / f"{k}.png").write_bytes(encoded(".png"))
    with pytest.raises(DataSourceError, match=r"found \['image'\]\): images without annotations that yolo11 "
                                              r"recognises; a detection folder holds a data YAML"):
        load(root, tmp_path)

# --- push_to_hub parquet files and save_to_disk folders --------------------------------------------------------

CLASSES = ["helmet", "vest"]
HUB_FEATURES = datasets.Features({  # cppe-5's schema
    "image_id": datasets.Value("int64"), "image": datasets.Image(),
    "width": datasets.Value("int32"), "height": datasets.Value("int32"),
    "objects": datasets.Sequence({"id": datasets.Value("int64"), "area": datasets.Value("int64"),
                                  "bbox": datasets.Sequence(datasets.Value("float32"), length=4),
                                  "category": datasets.ClassLabel(names=CLASSES)}),
})


def hub_rows(count: int, first: int = 0) -> list[dict]:
    return [{"image_id": first + i, "image": {"bytes": encoded(".png", i), "path": f"{first + i}.png"},
             "width": WIDTH, "height": HEIGHT,
             "objects": {"id": [first + i], "area": [600], "bbox": [BOX], "category": [i % 2]}}
            for i in range(count)]


def hub_dict() -> datasets.DatasetDict:
    return datasets.DatasetDict({split: datasets.Dataset.from_list(hub_rows(2, first), features=HUB_FEATURES)
                                 for split, first in (("train", 0), ("validation", 10), ("test", 20))})


def test_push_to_hub_parquet_folder(tmp_path: Path) -> None:
    """``push_to_hub``'s files: ``data/<split>-00000-of-00001.parquet``, the features in the parquet schema."""
    (tmp_path / "repo" / "data").mkdir(parents=True)
    for split, dataset in hub_dict().items():
        dataset.to_parquet(os.fspath(tmp_path / "repo" / "data" / f"{split}-00000-of-00001.parquet"))
    train, val = load(tmp_path / "repo", tmp_path), load(tmp_path / "repo", tmp_path, "val")
    assert train.class_names == val.class_names == CLASSES
    assert train.dataset["image_id"] == [0, 1] and val.dataset["image_id"] == [10, 11]
    assert val.dataset[0]["image"]["bytes"] == encoded(".png", 0)
    assert boxes_and_classes(train) == ([[BOX]] * 2, [[0], [1]])


def test_parquet_without_datasets_features(tmp_path: Path) -> None:
    """Parquet written by pyarrow or pandas: the image a plain ``{bytes, path}`` struct, no ClassLabel."""
    (tmp_path / "repo" / "data").mkdir(parents=True)
    for split in ("train", "validation"):
        table = pa.table({"image": [{"bytes": encoded(".jpg", i), "path": f"{i}.jpg"} for i in range(2)],
                          "objects": [{"bbox": [BOX], "category": [i]} for i in range(2)]})
        pq.write_table(table, tmp_path / "repo" / "data" / f"{split}-00000-of-00001.parquet")
    source = load(tmp_path / "repo", tmp_path, "val")
    assert source.name == "repo-validation" and source.class_names == ["0", "1"]
    assert [(r["width"], r["height"]) for r in source.dataset] == [(WIDTH, HEIGHT)] * 2


def test_save_to_disk_dataset_dict(tmp_path: Path) -> None:
    hub_dict().save_to_disk(os.fspath(tmp_path / "saved"))
    assert load(tmp_path / "saved", tmp_path, "val").dataset["image_id"] == [10, 11]
    assert load(tmp_path / "saved", tmp_path, "test").dataset["image_id"] == [20, 21]
    assert load(tmp_path / "saved", tmp_path).class_names == CLASSES


# --- object fields as Hub datasets name them -------------------------------------------------------------------

@pytest.mark.parametrize("field", ["label", "labels", "category", "categories"])
def test_objects_fields_with_id_and_area(tmp_path: Path, field: str) -> None:
    features = datasets.Features({"image": datasets.Image(), "objects": datasets.Sequence({
        "id": datasets.Value("int64"), "area": datasets.Value("float32"), "bbox": datasets.Sequence(
            datasets.Value("float32"), length=4), field: datasets.ClassLabel(names=CLASSES)})})
    rows = [{"image": {"bytes": encoded(".png", i), "path": None},
             "objects": {"id": [7 + i], "area": [1.0], "bbox": [BOX], field: [1]}} for i in range(2)]
    datasets.Dataset.from_list(rows, features=features).save_to_disk(os.fspath(tmp_path / "ds"))
    source = load(tmp_path / "ds", tmp_path)
    assert source.class_names == CLASSES
    assert [r["objects"] for r in source.dataset] == [
        {"id": [7 + i], "area": [600.0], "bbox": [BOX], "category": [1]} for i in range(2)]


def test_image_column_named_img(tmp_path: Path) -> None:
    features = datasets.Features({"img": datasets.Image(), "objects": datasets.Sequence(
        {"bbox": datasets.List(datasets.Value("float32")), "category": datasets.ClassLabel(names=CLASSES)})})
    rows = [{"img": {"bytes": encoded(".jpg", i), "path": None}, "objects": {"bbox": [BOX], "category": [0]}}
            for i in range(2)]
    datasets.Dataset.from_list(rows, features=features).save_to_disk(os.fspath(tmp_path / "ds"))
    source = load(tmp_path / "ds", tmp_path)
    assert source.dataset[1]["image"]["bytes"] == encoded(".jpg", 1)
    assert source.dataset[0]["width"] == WIDTH and source.class_names == CLASSES


def test_top_level_box_and_class_columns(tmp_path: Path) -> None:
    """No ``objects``: per-image ``bboxes`` and ``category`` lists beside ``image_id``, ``width`` and ``height``
    (parquet as pyarrow writes it)."""
    (tmp_path / "repo" / "data").mkdir(parents=True)
    table = pa.table({"image_id": [5, 6, 7], "image": [{"bytes": encoded(".png", i), "path": None} for i in range(3)],
                      "width": [WIDTH] * 3, "height": [HEIGHT] * 3, "bboxes": [[BOX], [BOX, BOX], []],
                      "category": [[2], [0, 1], []]})
    pq.write_table(table, tmp_path / "repo" / "data" / "train-00000-of-00001.parquet")
    source = load(tmp_path / "repo", tmp_path)
    assert source.dataset["image_id"] == [5, 6, 7] and source.class_names == ["0", "1", "2"]
    assert boxes_and_classes(source) == ([[BOX], [BOX, BOX], []], [[2], [0, 1], []])
    assert source.dataset[1]["objects"]["id"] == [0, 1]


def test_top_level_columns_in_imagefolder_metadata(tmp_path: Path) -> None:
    """``bbox`` and ``categories`` beside ``file_name``: a class list named ``categories``, not COCO's
    ``{id, name}`` table of that name."""
    rows = [{"file_name": f"{i}.png", "bbox": [BOX], "categories": [i]} for i in range(2)]
    source = load(image_folder(tmp_path / "ds", {"train": rows}), tmp_path)
    assert boxes_and_classes(source) == ([[BOX], [BOX]], [[0], [1]])


def test_one_class_per_image_is_every_box_class(tmp_path: Path) -> None:
    """A per-image ClassLabel beside a list of boxes: all the image's boxes are of its class."""
    features = datasets.Features({"image": datasets.Image(), "bbox": datasets.List(datasets.List(
        datasets.Value("float64"))), "label": datasets.ClassLabel(names=CLASSES)})
    rows = [{"image": {"bytes": encoded(".png", i), "path": None}, "bbox": [BOX] * (i + 1), "label": i}
            for i in range(2)]
    datasets.Dataset.from_list(rows, features=features).save_to_disk(os.fspath(tmp_path / "ds"))
    source = load(tmp_path / "ds", tmp_path)
    assert boxes_and_classes(source) == ([[BOX], [BOX, BOX]], [[0], [1, 1]]) and source.class_names == CLASSES


def test_top_level_class_label_lists(tmp_path: Path) -> None:
    """``bboxes`` beside ``labels``, a ``Sequence(ClassLabel)``: the names come from the ClassLabel."""
    features = datasets.Features({"img": datasets.Image(), "bboxes": datasets.List(datasets.List(
        datasets.Value("float32"), length=4)), "labels": datasets.List(datasets.ClassLabel(names=CLASSES))})
    rows = [{"img": {"bytes": encoded(".png", i), "path": None}, "bboxes": [BOX, BOX], "labels": [1, i]}
            for i in range(2)]
    datasets.Dataset.from_list(rows, features=features).save_to_disk(os.fspath(tmp_path / "ds"))
    source = load(tmp_path / "ds", tmp_path)
    assert source.class_names == CLASSES and boxes_and_classes(source)[1] == [[1, 0], [1, 1]]


def test_box_and_class_counts_that_differ_are_an_error_naming_the_row(tmp_path: Path) -> None:
    rows = [{"file_name": f"{i}.png", "bbox": [BOX, BOX], "category": [0, 0][: i + 1]} for i in range(2)]
    with pytest.raises(DataSourceError, match=r"ds\[train\]: row 0: category has 1 values for the 2 boxes of "
                                              r"bbox"):
        load(image_folder(tmp_path / "ds", {"train": rows}), tmp_path)


def test_no_objects_anywhere_names_what_was_looked_for(tmp_path: Path) -> None:
    rows = [{"file_name": "0.png", "caption": "a cat"}]
    with pytest.raises(DataSourceError, match=r"no objects column \(looked for \('objects', 'annotations'\), or "
                                              r"box columns \('bbox', 'bboxes', 'boxes'\) beside a class column"):
        load(image_folder(tmp_path / "ds", {"train": rows}), tmp_path)


# --- class names ----------------------------------------------------------------------------------------------

def named_rows(names: list[str], first: int = 0, field: str = "categories") -> list[dict]:
    return [{"file_name": f"{first + i}.png", "objects": {"bbox": [BOX], field: [name]}}
            for i, name in enumerate(names)]


def test_class_names_as_text_are_numbered_alike_in_every_split(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                                                ) -> None:
    """``categories: ["helmet"]`` as many metadata files write it; validation sees only some classes, in another
    order, and must still number them as training does."""
    root = image_folder(tmp_path / "ds", {"train": named_rows(["vest", "helmet", "person"]),
                                          "validation": named_rows(["person", "vest"], first=10)})
    with caplog.at_level("WARNING", logger="yolo11.data"):
        train, val = load(root, tmp_path), load(root, tmp_path, "val")
    assert train.class_names == val.class_names == ["helmet", "person", "vest"]
    assert boxes_and_classes(train)[1] == [[2], [0], [1]] and boxes_and_classes(val)[1] == [[1], [2]]
    assert "objects.categories holds class names as text: classes numbered in sorted order (helmet, person, vest)" \
        in caplog.text


def test_one_class_name_per_image_in_a_top_level_column(tmp_path: Path) -> None:
    """A list of boxes per image beside one ``category`` string for all of them."""
    (tmp_path / "repo" / "data").mkdir(parents=True)
    for split, names in (("train", ["ship", "plane"]), ("test", ["plane"])):
        table = pa.table({"image": [{"bytes": encoded(".png", i), "path": None} for i in range(len(names))],
                          "bbox": [[BOX, BOX]] * len(names), "area": [[600.0, 600.0]] * len(names),
                          "category": names})
        pq.write_table(table, tmp_path / "repo" / "data" / f"{split}-00000-of-00001.parquet")
    train, val = load(tmp_path / "repo", tmp_path), load(tmp_path / "repo", tmp_path, "val")
    assert train.class_names == val.class_names == ["plane", "ship"]
    assert boxes_and_classes(train)[1] == [[1, 1], [0, 0]] and boxes_and_classes(val)[1] == [[0, 0]]


def test_classes_named_by_id_count_every_split(tmp_path: Path) -> None:
    """Plain ids without names: training has ids 0..2, validation only 0..1; both get the three classes."""
    root = image_folder(tmp_path / "ds", {"train": [{"file_name": f"{i}.png", "objects": {"bbox": [BOX],
                                                                                          "category": [i]}}
                                                    for i in range(3)],
                                          "validation": doc_rows(2, "category")})
    assert load(root, tmp_path).class_names == load(root, tmp_path, "val").class_names == ["0", "1", "2"]


def test_hub_id_numbers_classes_over_its_splits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    features = datasets.Features({"image": datasets.Image(), "objects": datasets.Sequence(
        {"bbox": datasets.List(datasets.Value("float32")), "label": datasets.Value("string")})})

    def split(names: list[str]) -> datasets.Dataset:
        return datasets.Dataset.from_list([{"image": {"bytes": encoded(".png"), "path": None},
                                            "objects": {"bbox": [BOX], "label": [name]}} for name in names],
                                          features=features)

    monkeypatch.setattr("yolo11.weights.resolve.hub_reachable", lambda timeout=None: True)  # as online
    monkeypatch.setattr(datasets, "load_dataset", lambda repo_id: datasets.DatasetDict(
        {"train": split(["b", "c"]), "test": split(["a"])}))
    for which in ("train", "val"):
        source = load_source("owner/name", which, cache_dir=tmp_path / "cache", fallback_splits=VAL_FALLBACKS)
        assert source.class_names == ["a", "b", "c"]


def test_class_name_text_outside_given_names_is_an_error() -> None:
    from yolo11.data.sources.hub import normalise

    features = datasets.Features({"image": datasets.Image(), "objects": datasets.Sequence(
        {"bbox": datasets.List(datasets.Value("float32")), "label": datasets.Value("string")})})
    rows = [{"image": {"bytes": encoded(".png"), "path": None}, "objects": {"bbox": [BOX], "label": ["cat"]}}]
    dataset = datasets.Dataset.from_list(rows, features=features)
    assert normalise(dataset, "mine", "xywh", names=["dog", "cat"])[0][0]["objects"]["category"] == [1]
    with pytest.raises(DataSourceError, match=r"^mine: objects.label holds class 'cat', not one of the 1 names "
                                              r"given \(1 objects\)$"):
        normalise(dataset, "mine", "xywh", names=["dog"])


# --- bad input -------------------------------------------------------------------------------------------------

def test_empty_objects_make_background_images(tmp_path: Path) -> None:
    rows = doc_rows(3)
    rows[1]["objects"] = {"bbox": [], "categories": []}
    source = load(image_folder(tmp_path / "ds", {"train": rows}), tmp_path)
    assert boxes_and_classes(source) == ([[BOX], [], [BOX]], [[0], [], [0]])


def test_bad_boxes_are_dropped_with_a_message(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A box of negative or zero size, or far outside its image, is dropped and named; one a pixel outside is
    clipped; an image none of whose boxes is usable is skipped (trained as a background, its objects would be
    taught as absent)."""
    rows = [{"file_name": f"{i}.png", "objects": {"bbox": boxes, "categories": [0] * len(boxes)}}
            for i, boxes in enumerate([[BOX, [50.0, 10.0, -20.0, 30.0], [50.0, 10.0, 20.0, 0.0]],
                                       [[70.0, 10.0, 11.0, 30.0]], [[70.0, 10.0, 50.0, 30.0]], []])]
    with caplog.at_level("WARNING", logger="yolo11.data"):
        source = load(image_folder(tmp_path / "ds", {"train": rows}), tmp_path, bbox_format="xywh")
    assert [Path(r["image"]["path"]).name for r in source.dataset] == ["0.png", "1.png", "3.png"]
    assert boxes_and_classes(source) == ([[BOX], [[70.0, 10.0, 10.0, 30.0]], []], [[0], [0], []])
    assert source.summary.skipped_lines == [
        "row 0: object 1: objects.bbox [50, 10, -20, 30]: box 50.0,10.0,30.0,40.0 has a negative width or height, "
        "dropped",
        "row 0: object 2: objects.bbox [50, 10, 20, 0]: zero-area box, dropped",
        "row 2: object 0: objects.bbox [70, 10, 50, 30]: box 70.0,10.0,120.0,40.0 lies outside the 80x60 image, "
        "dropped"]
    assert source.summary.skipped_images == ["row 2: none of its 1 boxes is usable, image skipped"]
    assert (source.summary.clipped_boxes, source.summary.backgrounds) == (1, 1)
    assert "ds-train: row 0: object 1: objects.bbox [50, 10, -20, 30]: box 50.0,10.0,30.0,40.0 has a negative" \
        in caplog.text


def test_vectorised_box_check_agrees_with_the_per_box_check() -> None:
    from yolo11.data.sources.checks import check_box, check_boxes

    rng = np.random.default_rng(0)
    boxes = np.concatenate([rng.uniform(-10, 90, (500, 4)), [[np.nan, 0, 1, 1], [5, 5, 5, 9], [0, 0, 81, 61]]])
    sizes = np.tile([WIDTH, HEIGHT], (len(boxes), 1))
    clipped_boxes, usable, clipped, reasons = check_boxes(boxes, sizes)
    for k, box in enumerate(boxes):
        expected, was_clipped, reason = check_box(box, WIDTH, HEIGHT)
        assert usable[k] == (expected is not None) and reasons.get(k, "") == reason
        if expected is not None:
            np.testing.assert_array_equal(clipped_boxes[k], expected)
            assert clipped[k] == was_clipped


@pytest.mark.parametrize("bbox_format", ["auto", "xywh", "xyxy"])
def test_normalised_boxes_stop_with_an_error_naming_the_flag(tmp_path: Path, bbox_format: str) -> None:
    """Boxes in 0..1 read as pixels would be 80x smaller than the objects, and train silently on nothing."""
    rows = [{"file_name": f"{i}.png", "objects": {"bbox": [[0.625, 0.1667, 0.25, 0.5]], "categories": [0]}}
            for i in range(2)]
    with pytest.raises(DataSourceError, match=r"ds\[train\]: objects.bbox looks normalised to 0..1 \(every coordinate "
                                              r"of the 2 boxes lies in 0..1, in images of 80x60 pixels or more\); "
                                              r"boxes must be in pixels: --bbox-format .*"):
        load(image_folder(tmp_path / "ds", {"train": rows}), tmp_path, bbox_format=bbox_format)


def test_undecodable_image_in_parquet_is_skipped_with_a_message(tmp_path: Path) -> None:
    """Without width and height columns every image header is read at load: one that is not an image skips its
    row instead of refusing the dataset."""
    (tmp_path / "repo" / "data").mkdir(parents=True)
    images = [{"bytes": encoded(".png", 0), "path": "0.png"}, {"bytes": b"not an image", "path": "1.png"},
              {"bytes": encoded(".jpg", 2), "path": "2.jpg"}]
    table = pa.table({"image": images, "objects": [{"bbox": [BOX], "category": [0]}] * 3})
    pq.write_table(table, tmp_path / "repo" / "data" / "train-00000-of-00001.parquet")
    source = load(tmp_path / "repo", tmp_path)
    assert [r["image"]["path"] for r in source.dataset] == ["0.png", "2.jpg"]
    assert len(source.summary.skipped_images) == 1
    assert source.summary.skipped_images[0].startswith("row 1: cannot read the image 1.png (UnidentifiedImageError")
    pq.write_table(table.slice(1, 1), tmp_path / "repo" / "data" / "train-00000-of-00001.parquet")
    with pytest.raises(DataSourceError, match=r"repo\[train\]: no usable image \(row 0: cannot read the image 1.png"):
        load(tmp_path / "repo", tmp_path)


def test_class_id_outside_the_names_is_an_error_naming_the_field(tmp_path: Path) -> None:
    rows = hub_rows(2)
    rows[1]["objects"]["category"] = [-1]  # ClassLabel's "no label"
    datasets.Dataset.from_list(rows, features=HUB_FEATURES).save_to_disk(os.fspath(tmp_path / "ds"))
    with pytest.raises(DataSourceError, match=r"ds: objects.category holds class id -1, outside 0..1 \(1 objects\)"):
        load(tmp_path / "ds", tmp_path)


# --- a training run ----------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_imagefolder_trains_an_epoch_through_accelerate_launch(tmp_path: Path) -> None:
    """The docs' layout with what users' data holds: class names as text, a box of no size, an image whose data
    is cut short (its header intact: it fails only when the loader decodes it, mid-epoch)."""
    train = named_rows(["helmet", "vest", "helmet", "vest", "helmet", "vest"])
    train[2]["objects"] = {"bbox": [[50.0, 10.0, 0.0, 30.0]], "categories": ["helmet"]}
    root = image_folder(tmp_path / "ds", {"train": train, "validation": named_rows(["vest", "helmet"], first=10)})
    (root / "train" / "4.png").write_bytes((root / "train" / "4.png").read_bytes()[:200])
    result = launch(["--data", os.fspath(root), "--imgsz", "64", "--epochs", "1", "--batch-size", "4",
                     "--workers", "0", "--plots", "false", "--cache-images", "false",
                     "--output-dir", os.fspath(tmp_path / "runs"), "--cache-dir", os.fspath(tmp_path / "cache")],
                    env={"HF_DATASETS_CACHE": os.fspath(tmp_path / "hf")})
    output = result.stdout + result.stderr
    assert result.returncode == 0, describe(result)
    assert "| 5 train / 2 val images |" in output, describe(result)
    assert "ds-train: row 2: object 0: objects.bbox [50, 10, 0, 30]: zero-area box, dropped" in output
    assert "cannot decode image" in output and "4.png" in output, describe(result)
    assert "helmet" in result.stdout and "vest" in result.stdout  # the per-class table names them


def test_a_repository_of_several_configs_without_a_default_asks_for_one(tmp_path: Path) -> None:
    """A clone whose README names configs 'full' and 'mini' (no default): every file of both was read as one
    dataset (5 rows of two configs); it is an error naming them, and the folder of one config loads alone."""
    cv2.imwrite(os.fspath(tmp_path / "a.png"), np.full((48, 64, 3), 90, np.uint8))
    features = datasets.Features({
        "image": datasets.Image(),
        "objects": datasets.Sequence({"bbox": datasets.Sequence(datasets.Value("float32"), length=4),
                                      "category": datasets.ClassLabel(names=["cat", "dog"])})})

    def parquet(rows: int, category: int, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        row = {"image": os.fspath(tmp_path / "a.png"), "objects": {"bbox": [[30, 5, 20, 30]], "category": [category]}}
        datasets.Dataset.from_list([row] * rows, features=features).to_parquet(os.fspath(path))

    repo = tmp_path / "repo"
    parquet(4, 0, repo / "full" / "train.parquet")
    parquet(2, 0, repo / "full" / "test.parquet")
    parquet(1, 1, repo / "mini" / "train.parquet")
    (repo / "README.md").write_text("---\nconfigs:\n- config_name: full\n  data_files:\n"
                                    "  - {split: train, path: full/train.parquet}\n"
                                    "  - {split: test, path: full/test.parquet}\n- config_name: mini\n  data_files:\n"
                                    "  - {split: train, path: mini/train.parquet}\n---\n")
    with pytest.raises(DataSourceError, match=r"names 2 dataset configs \('full', 'mini'\) and none is the default"):
        load_source(os.fspath(repo), "train", cache_dir=tmp_path / "cache")
    assert len(load_source(os.fspath(repo / "full"), "train", cache_dir=tmp_path / "cache").dataset) == 4


def test_a_saved_dataset_dict_with_an_empty_split_loads_its_other_splits(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """datasets' load_from_disk fails on the whole (IndexError) when one split is empty: the folder was called
    'neither a save_to_disk dataset folder nor a folder of dataset files'. The readable splits load; the empty one
    is named."""
    cv2.imwrite(os.fspath(tmp_path / "a.png"), np.full((48, 64, 3), 90, np.uint8))
    features = datasets.Features({
        "image": datasets.Image(),
        "objects": datasets.Sequence({"bbox": datasets.Sequence(datasets.Value("float32"), length=4),
                                      "category": datasets.ClassLabel(names=["cat"])})})
    row = {"image": os.fspath(tmp_path / "a.png"), "objects": {"bbox": [[30, 5, 20, 30]], "category": [0]}}
    train = datasets.Dataset.from_list([row] * 4, features=features)
    datasets.DatasetDict(train=train, validation=train.select([])).save_to_disk(os.fspath(tmp_path / "saved"))
    with caplog.at_level("WARNING", logger="yolo11.data"):
        assert len(load_source(os.fspath(tmp_path / "saved"), "train", cache_dir=tmp_path / "cache").dataset) == 4
    assert "split(s) 'validation'" in caplog.text and "cannot be read, left out" in caplog.text
    with pytest.raises(DataSourceError, match=r"no 'val' split .*choose one with --val-split"):
        load_source(os.fspath(tmp_path / "saved"), "val", cache_dir=tmp_path / "cache", split_flag="--val-split")
