"""Hub detection datasets in the schemas in use, through ``load_source`` on a saved folder (``hub.normalise``):
``objects`` with ``category`` or ``label``, as a dict of lists or a list of dicts, COCO-style ``annotations`` whose
``category_id`` is a plain int (names from a ``categories`` column, a ClassLabel elsewhere, the caller, or the ids),
crowd objects, and images as decoded or undecoded ``Image`` features or path strings. coco8's real images."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import datasets
import pytest

from yolo11.data import DataSourceError, load_source
from yolo11.data.sources.hub import normalise

COCO8 = Path(__file__).resolve().parents[1] / "yolo11" / "assets" / "coco8" / "images" / "train"
SIZES = {9: (160, 120), 25: (160, 106)}  # (width, height) of coco8's images 9 and 25
# per image: (xywh box in pixels, COCO category id, iscrowd); as xyxy the last box of image 9 has x2 < x1, and as
# corners ([100, 50, 160, 70]) it would leave the image read as xywh: the format can be read from either storage
OBJECTS = {9: [([10, 20, 30, 40], 18, 0), ([0, 0, 50, 50], 1, 1), ([100, 50, 60, 20], 1, 0)],
           25: [([5, 5, 20, 10], 1, 0)]}
EXPECTED_BOXES = [[[10, 20, 30, 40], [100, 50, 60, 20]], [[5, 5, 20, 10]]]  # xywh, crowd dropped
NAMES = ["person", "dog"]  # a ClassLabel's names; COCO ids 1 and 18
CLASS = {1: 0, 18: 1}
BY_ID = [f"unused{i}" for i in range(19)]  # ClassLabel names must be unique
BY_ID[1], BY_ID[18] = "person", "dog"

FLOATS = datasets.List(datasets.Value("float32"))


def image_bytes(image_id: int) -> bytes:
    return (COCO8 / f"{image_id:012d}.jpg").read_bytes()


def stored(box: list[float], xyxy: bool) -> list[float]:
    x, y, w, h = box
    return [x, y, x + w, y + h] if xyxy else box


def objects(image_id: int, xyxy: bool, crowd: bool) -> list[tuple[list[float], int, int]]:
    """The image's objects as stored (crowd ones only where the schema has ``iscrowd``)."""
    return [(stored(box, xyxy), category, iscrowd) for box, category, iscrowd in OBJECTS[image_id]
            if crowd or not iscrowd]


def cppe5(xyxy: bool) -> datasets.Dataset:
    """cppe-5: ``objects`` a dict of lists, ``category`` a ClassLabel, width and height columns."""
    features = datasets.Features({
        "image_id": datasets.Value("int64"), "image": datasets.Image(), "width": datasets.Value("int32"),
        "height": datasets.Value("int32"),
        "objects": datasets.Sequence({"id": datasets.Value("int64"), "area": datasets.Value("int64"),
                                      "bbox": datasets.Sequence(datasets.Value("float32"), length=4),
                                      "category": datasets.ClassLabel(names=NAMES)})})
    rows = [{"image_id": i, "image": {"bytes": image_bytes(i), "path": None}, "width": SIZES[i][0],
             "height": SIZES[i][1],
             "objects": {"id": list(range(len(objs))), "area": [0] * len(objs), "bbox": [b for b, _, _ in objs],
                         "category": [CLASS[c] for _, c, _ in objs]}}
            for i in OBJECTS for objs in [objects(i, xyxy, crowd=False)]]
    return datasets.Dataset.from_list(rows, features=features)


def label_dict(xyxy: bool) -> datasets.Dataset:
    """``objects`` a dict of lists with ``label`` (ClassLabel) and ``iscrowd``; no width, height or image_id."""
    features = datasets.Features({
        "image": datasets.Image(),
        "objects": datasets.Sequence({"bbox": FLOATS, "label": datasets.ClassLabel(names=NAMES),
                                      "iscrowd": datasets.Value("int8")})})
    rows = [{"image": {"bytes": image_bytes(i), "path": None},
             "objects": {"bbox": [b for b, _, _ in objs], "label": [CLASS[c] for _, c, _ in objs],
                         "iscrowd": [k for _, _, k in objs]}}
            for i in OBJECTS for objs in [objects(i, xyxy, crowd=True)]]
    return datasets.Dataset.from_list(rows, features=features)


def object_list(xyxy: bool) -> datasets.Dataset:
    """``objects`` a list of per-object dicts, ``category`` a ClassLabel, ``iscrowd`` per object."""
    features = datasets.Features({
        "image": datasets.Image(),
        "objects": datasets.List({"bbox": FLOATS, "category": datasets.ClassLabel(names=NAMES),
                                  "iscrowd": datasets.Value("int64")})})
    rows = [{"image": {"bytes": image_bytes(i), "path": None},
             "objects": [{"bbox": b, "category": CLASS[c], "iscrowd": k} for b, c, k in objects(i, xyxy, True)]}
            for i in OBJECTS]
    return datasets.Dataset.from_list(rows, features=features)


def coco_style(xyxy: bool, extra: str = "") -> datasets.Dataset:
    """COCO-style ``annotations`` (``category_id`` a plain int) per image; ``extra`` adds where the names are:
    ``categories`` (a COCO categories column) or ``classlabel`` (a ClassLabel column covering the ids)."""
    annotation = {"id": datasets.Value("int64"), "image_id": datasets.Value("int64"), "bbox": FLOATS,
                  "category_id": datasets.Value("int64"), "area": datasets.Value("float32"),
                  "iscrowd": datasets.Value("int64"), "segmentation": datasets.List(FLOATS)}
    columns = {"image_id": datasets.Value("int64"), "image": datasets.Image(),
               "annotations": datasets.List(annotation)}
    if extra == "categories":
        columns["categories"] = datasets.List({"id": datasets.Value("int64"), "name": datasets.Value("string"),
                                               "supercategory": datasets.Value("string")})
    if extra == "classlabel":
        columns["present"] = datasets.List(datasets.ClassLabel(names=BY_ID))
    rows = []
    for i in OBJECTS:
        annotations = [{"id": 100 * i + k, "image_id": i, "bbox": b, "category_id": c, "area": 1.0, "iscrowd": crowd,
                        "segmentation": [[b[0], b[1], b[0] + 1, b[1], b[0], b[1] + 1]]}
                       for k, (b, c, crowd) in enumerate(objects(i, xyxy, crowd=True))]
        row = {"image_id": i, "image": {"bytes": image_bytes(i), "path": None}, "annotations": annotations}
        if extra == "categories":  # not sorted by id, as some exports write them
            row["categories"] = [{"id": 18, "name": "dog", "supercategory": "animal"},
                                 {"id": 1, "name": "person", "supercategory": "person"}]
        if extra == "classlabel":
            row["present"] = sorted({c for _, c, _ in OBJECTS[i]})
        rows.append(row)
    return datasets.Dataset.from_list(rows, features=datasets.Features(columns))


SCHEMAS = {  # name: (builder, class names, image ids, class of each expected box)
    "cppe5": (cppe5, NAMES, [9, 25], [[1, 0], [0]]),
    "label_dict": (label_dict, NAMES, [0, 1], [[1, 0], [0]]),
    "object_list": (object_list, NAMES, [0, 1], [[1, 0], [0]]),
    "coco_categories": (lambda xyxy: coco_style(xyxy, "categories"), NAMES, [9, 25], [[1, 0], [0]]),
    "coco_classlabel": (lambda xyxy: coco_style(xyxy, "classlabel"), BY_ID, [9, 25], [[18, 1], [1]]),
    "coco_ids_only": (coco_style, [str(i) for i in range(19)], [9, 25], [[18, 1], [1]]),
}


@pytest.mark.parametrize("xyxy", [False, True], ids=["xywh", "xyxy"])
@pytest.mark.parametrize("schema", SCHEMAS)
def test_schema_converts_exactly(tmp_path: Path, caplog: pytest.LogCaptureFixture, schema: str, xyxy: bool) -> None:
    build, names, image_ids, classes = SCHEMAS[schema]
    build(xyxy).save_to_disk(os.fspath(tmp_path / "ds"))
    with caplog.at_level(logging.WARNING, logger="yolo11.data"):
        source = load_source(os.fspath(tmp_path / "ds"), cache_dir=tmp_path / "cache")
    assert source.class_names == names
    rows = source.dataset
    assert rows["image_id"] == image_ids
    assert [(r["width"], r["height"]) for r in rows] == [SIZES[9], SIZES[25]]
    assert [r["objects"]["bbox"] for r in rows] == EXPECTED_BOXES
    assert [r["objects"]["category"] for r in rows] == classes
    assert rows[0]["image"]["bytes"] == image_bytes(9)
    assert f"read as {'xyxy' if xyxy else 'xywh'}" in caplog.text  # auto: read from the boxes
    plain_ids = "holds plain class ids with no names" in caplog.text
    assert plain_ids == (schema == "coco_ids_only")
    if plain_ids:
        assert "classes are named by their ids '0'..'18'. To name them, store the field as " \
               "datasets.ClassLabel(names=[...])" in caplog.text
    if schema == "coco_classlabel":
        assert "annotations.category_id holds plain ids; class names taken from the ClassLabel present" in caplog.text


@pytest.mark.parametrize("ids, note", [
    ([7, 7], "image_id 7 is given to rows 0 and 1: the rows are numbered instead"),
    (["20240101123045123451", "5"], "image_id '20240101123045123451' is not a whole number within int64"),
])
def test_image_ids_that_cannot_tell_the_images_apart_are_replaced_by_row_numbers(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, ids: list, note: str) -> None:
    """The evaluation keys images by id: two images of one id were scored as one (mAP 0.14 for perfect
    predictions); an id beyond int64 stopped the conversion. Our own schema, already converted, included."""
    dataset = cppe5(False)
    if isinstance(ids[0], str):
        dataset = dataset.cast_column("image_id", datasets.Value("string"))
    dataset = dataset.map(lambda row, k: {"image_id": ids[k]}, with_indices=True)
    dataset.save_to_disk(os.fspath(tmp_path / "ds"))
    with caplog.at_level(logging.INFO, logger="yolo11.data"):
        source = load_source(os.fspath(tmp_path / "ds"), cache_dir=tmp_path / "cache")
    assert source.dataset["image_id"] == [0, 1] and note in caplog.text
    assert [r["objects"]["bbox"] for r in source.dataset] == EXPECTED_BOXES


def test_coco_style_ids_keep_their_object_ids(tmp_path: Path) -> None:
    coco_style(False, "categories").save_to_disk(os.fspath(tmp_path / "ds"))
    source = load_source(os.fspath(tmp_path / "ds"), cache_dir=tmp_path / "cache")
    assert [r["objects"]["id"] for r in source.dataset] == [[900, 902], [2500]]  # crowd 901 dropped
    assert source.dataset[0]["objects"]["area"] == [1200, 1200]  # recomputed from the boxes


def test_names_given_to_normalise_and_checked_against_the_ids() -> None:
    names = ["background", "person", *(f"c{i}" for i in range(2, 18)), "dog"]
    dataset, class_names, note, _ = normalise(coco_style(False), "mine", names=names)
    assert class_names == names and "plain class ids" not in note
    assert [r["objects"]["category"] for r in dataset] == [[18, 1], [1]]
    with pytest.raises(DataSourceError, match=r"^mine: annotations.category_id holds class id 18, outside 0..1 "
                                              r"\(1 objects\)$"):
        normalise(coco_style(False), "mine", names=NAMES)


def test_category_ids_missing_from_categories_are_an_error(tmp_path: Path) -> None:
    dataset = coco_style(False, "categories")
    rows = dataset.to_list()
    for row in rows:
        row["categories"] = row["categories"][:1]  # dog only
    datasets.Dataset.from_list(rows, features=dataset.features).save_to_disk(os.fspath(tmp_path / "ds"))
    with pytest.raises(DataSourceError, match=r"annotations.category_id holds class id 1, outside the 'categories' ids "
                                              r"\(3 objects\)"):
        load_source(os.fspath(tmp_path / "ds"), cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("image_feature", ["decoded", "undecoded", "path"])
def test_image_column_forms(tmp_path: Path, image_feature: str) -> None:
    """``Image()`` (decoded on access), ``Image(decode=False)``, or a path string; no width/height columns, so the
    sizes are read from the images themselves."""
    for i in OBJECTS:
        shutil.copyfile(COCO8 / f"{i:012d}.jpg", tmp_path / f"{i}.jpg")
    if image_feature == "path":
        feature, images = datasets.Value("string"), [os.fspath(tmp_path / f"{i}.jpg") for i in OBJECTS]
    else:
        feature = datasets.Image(decode=image_feature == "decoded")
        images = [{"bytes": image_bytes(i), "path": None} for i in OBJECTS]
    features = datasets.Features({"image": feature, "objects": datasets.Sequence(
        {"bbox": FLOATS, "category": datasets.ClassLabel(names=NAMES)})})
    rows = [{"image": image, "objects": {"bbox": [b for b, _, _ in objs], "category": [CLASS[c] for _, c, _ in objs]}}
            for image, i in zip(images, OBJECTS, strict=True) for objs in [objects(i, False, crowd=False)]]
    datasets.Dataset.from_list(rows, features=features).save_to_disk(os.fspath(tmp_path / "ds"))
    source = load_source(os.fspath(tmp_path / "ds"), cache_dir=tmp_path / "cache")
    assert [(r["width"], r["height"]) for r in source.dataset] == [SIZES[9], SIZES[25]]
    assert [r["objects"]["bbox"] for r in source.dataset] == EXPECTED_BOXES
    first = source.dataset[0]["image"]
    if image_feature == "path":
        assert first == {"bytes": None, "path": os.fspath(tmp_path / "9.jpg")}
    else:
        assert first["bytes"] == image_bytes(9)


@pytest.mark.parametrize("kind, why", [("gone", "FileNotFoundError"), ("fifo", "FileRefusedError: .*FIFO"),
                                       ("bomb", "DecompressionBombError")])
def test_unreadable_image_path_is_an_error_naming_the_row(tmp_path: Path, kind: str, why: str) -> None:
    """A row whose path names nothing, a FIFO (PIL blocked on it for ever: a run that never started) or a
    decompression bomb (its error escaped as a traceback)."""
    from test_bad_inputs import png_claiming

    image = tmp_path / f"{kind}.jpg"
    if kind == "fifo":
        os.mkfifo(image)
    elif kind == "bomb":
        image.write_bytes(png_claiming(50_000, 50_000, False))
    features = datasets.Features({"image": datasets.Value("string"), "objects": datasets.Sequence(
        {"bbox": FLOATS, "category": datasets.ClassLabel(names=NAMES)})})
    rows = [{"image": os.fspath(image), "objects": {"bbox": [[1, 2, 3, 4]], "category": [0]}}]
    datasets.Dataset.from_list(rows, features=features).save_to_disk(os.fspath(tmp_path / "ds"))
    with pytest.raises(DataSourceError, match=rf"ds: no usable image \(row 0: cannot read the image .*{kind}.jpg "
                                              rf"\({why}"):
        load_source(os.fspath(tmp_path / "ds"), cache_dir=tmp_path / "cache", bbox_format="xywh")


@pytest.mark.parametrize("category, feature, problem", [
    (10**9, datasets.Value("int64"), "annotations.category_id holds class id 1000000000, past the 100000 classes a "
                                     "model may have (yolo11.gate.MAX_CLASSES)"),
    (1.0, datasets.Value("float32"), "annotations.category_id holds float, not integer class ids or class names"),
])
def test_unusable_class_ids_are_one_line_errors(category: object, feature: datasets.Value, problem: str) -> None:
    """A plain id of 1e9 would otherwise name a billion classes (the cap is checked before the list is built)."""
    features = datasets.Features({"image": datasets.Image(), "annotations": datasets.List(
        {"bbox": FLOATS, "category_id": feature})})
    rows = [{"image": {"bytes": image_bytes(9), "path": None},
             "annotations": [{"bbox": [100, 50, 60, 20], "category_id": category}]}]
    with pytest.raises(DataSourceError) as caught:
        normalise(datasets.Dataset.from_list(rows, features=features), "mine")
    assert str(caught.value) == f"mine: {problem}"
