"""Sources: YAML, COCO json, save_to_disk and synthetic give the same samples in the Hub schema; the cache is reused."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import cv2
import datasets
import numpy as np
import pytest
import torch
from PIL import Image

from yolo11.data import DataSourceError, LoaderConfig, build_dataloader, class_names_of, load_source
from yolo11.data.dataset import decode_image
from yolo11.data.schema import detection_features
from yolo11.data.sources import CONVERSIONS

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
needs_data = pytest.mark.skipif(not (DATA / "coco8.yaml").is_file(), reason=f"test data not found in {DATA}")


def samples_by_id(dataset: datasets.Dataset) -> dict[int, tuple[np.ndarray, list[int], tuple[int, int]]]:
    """image_id -> (boxes sorted, categories in the same order, (w, h)), independent of row and object order."""
    result = {}
    for row in dataset.select_columns(["image_id", "width", "height", "objects"]):
        boxes = np.asarray(row["objects"]["bbox"], np.float64).reshape(-1, 4)
        cats = np.asarray(row["objects"]["category"])
        order = np.lexsort((*boxes.T, cats))
        result[row["image_id"]] = (boxes[order], cats[order].tolist(), (row["width"], row["height"]))
    return result


def write_coco_json(dataset: datasets.Dataset, class_names: list[str], path: Path) -> None:
    """COCO instances with category ids 10, 20, ... (not contiguous), so the remapping is exercised."""
    images, annotations = [], []
    for row in dataset:
        images.append({"id": row["image_id"], "file_name": Path(row["image"]["path"]).name,
                       "width": row["width"], "height": row["height"]})
        for bbox, cat in zip(row["objects"]["bbox"], row["objects"]["category"], strict=True):
            annotations.append({"id": len(annotations) + 1, "image_id": row["image_id"], "bbox": bbox,
                                "category_id": 10 * (cat + 1), "area": bbox[2] * bbox[3], "iscrowd": 0})
    annotations.append({"id": len(annotations) + 1, "image_id": images[0]["id"], "bbox": [0, 0, 50, 50],
                        "category_id": 10, "area": 2500, "iscrowd": 1})  # crowd boxes are skipped
    categories = [{"id": 10 * (k + 1), "name": name} for k, name in enumerate(class_names)]
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))


def assert_same_samples(a: datasets.Dataset, b: datasets.Dataset) -> None:
    left, right = samples_by_id(a), samples_by_id(b)
    assert left.keys() == right.keys()
    for image_id, (boxes, cats, size) in left.items():
        other_boxes, other_cats, other_size = right[image_id]
        assert size == other_size and cats == other_cats, image_id
        np.testing.assert_allclose(boxes, other_boxes, atol=1e-3)


@needs_data
@pytest.mark.parametrize("name, image_folder", [("coco8", "images/train"), ("coco128", "images/train2017")])
def test_yaml_coco_and_disk_sources_agree(tmp_path: Path, name: str, image_folder: str) -> None:
    yaml_source = load_source(os.fspath(DATA / f"{name}.yaml"), "train", cache_dir=tmp_path / "cache")
    assert len(yaml_source.dataset) == len(list((DATA / name / image_folder).iterdir()))
    assert yaml_source.dataset.features == detection_features(yaml_source.class_names)
    assert yaml_source.class_names[:3] == ["person", "bicycle", "car"] and len(yaml_source.class_names) == 80

    json_path = tmp_path / "instances.json"
    write_coco_json(yaml_source.dataset, yaml_source.class_names, json_path)
    coco_source = load_source(os.fspath(json_path), cache_dir=tmp_path / "cache", images=DATA / name / image_folder)
    assert coco_source.class_names == yaml_source.class_names
    assert_same_samples(yaml_source.dataset, coco_source.dataset)
    json_path.rename(tmp_path / "instances_train.json")  # one json per split, chosen by name
    templated = load_source(os.fspath(tmp_path / "instances_{split}.json"), "train", cache_dir=tmp_path / "cache",
                            images=DATA / name / image_folder)
    assert_same_samples(coco_source.dataset, templated.dataset)

    yaml_source.dataset.save_to_disk(os.fspath(tmp_path / "flat"))
    datasets.DatasetDict({"train": yaml_source.dataset}).save_to_disk(os.fspath(tmp_path / "dict"))
    for folder in ("flat", "dict"):
        disk_source = load_source(os.fspath(tmp_path / folder), "train", cache_dir=tmp_path / "cache")
        assert disk_source.class_names == yaml_source.class_names
        assert_same_samples(yaml_source.dataset, disk_source.dataset)


@needs_data
def test_reference_coco128_json_matches_yaml(tmp_path: Path) -> None:
    """Ultralytics' own coco128 ground truth (image id = file stem, category = class + 1) equals our YAML reading."""
    yaml_source = load_source(os.fspath(DATA / "coco128.yaml"), cache_dir=tmp_path)
    coco_source = load_source(os.fspath(DATA / "reference" / "coco128_instances.json"), cache_dir=tmp_path,
                              images=DATA / "coco128" / "images" / "train2017")
    assert coco_source.class_names == yaml_source.class_names
    assert_same_samples(yaml_source.dataset, coco_source.dataset)


@needs_data
def test_cache_is_reused_and_invalidated(tmp_path: Path) -> None:
    shutil.copytree(DATA / "coco8", tmp_path / "coco8")
    shutil.copy(DATA / "coco8.yaml", tmp_path / "coco8.yaml")
    spec, cache = os.fspath(tmp_path / "coco8.yaml"), tmp_path / "cache"
    before = CONVERSIONS["yolo"]
    first = load_source(spec, "val", cache_dir=cache)
    second = load_source(spec, "val", cache_dir=cache)
    assert CONVERSIONS["yolo"] == before + 1  # the second load read the Arrow cache
    assert_same_samples(first.dataset, second.dataset)

    label = max((tmp_path / "coco8" / "labels" / "val").glob("*.txt"), key=lambda p: len(p.read_text().split()))
    label.write_text(label.read_text().splitlines()[0] + "\n")  # keep one box of that image
    third = load_source(spec, "val", cache_dir=cache)
    assert CONVERSIONS["yolo"] == before + 2
    image_id = int(label.stem)
    assert len(samples_by_id(third.dataset)[image_id][0]) == 1 < len(samples_by_id(first.dataset)[image_id][0])


def test_synthetic_is_deterministic_and_val_differs(tmp_path: Path) -> None:
    a = load_source("synthetic:num_images=8,num_val=4,imgsz=96", "train", cache_dir=tmp_path / "a")
    b = load_source("synthetic", "train", cache_dir=tmp_path / "b", num_images=8, num_val=4, imgsz=96)
    val = load_source("synthetic:num_images=8,num_val=4,imgsz=96", "val", cache_dir=tmp_path / "a")
    assert len(a.dataset) == 8 and len(val.dataset) == 4
    assert a.class_names == class_names_of(a.dataset) and len(a.class_names) >= 4
    assert a.dataset["image"] == b.dataset["image"] and a.dataset["objects"] == b.dataset["objects"]
    assert {r["bytes"] for r in val.dataset["image"]}.isdisjoint(r["bytes"] for r in a.dataset["image"])
    for row in a.dataset:
        boxes = np.asarray(row["objects"]["bbox"]).reshape(-1, 4)
        assert 1 <= len(boxes) <= 4
        assert (boxes[:, 2:] >= 0.2 * 96).all(), "objects must be large enough to learn quickly"


def test_synthetic_rejects_unknown_options(tmp_path: Path) -> None:
    with pytest.raises(DataSourceError, match="unknown option 'colour'"):
        load_source("synthetic:colour=3", cache_dir=tmp_path)
    with pytest.raises(DataSourceError, match="min_objects"):
        load_source("synthetic", cache_dir=tmp_path, min_objects=5, max_objects=2)


def test_hub_style_columns_are_normalised(tmp_path: Path) -> None:
    """A save_to_disk copy of a Hub dataset with other column names (bboxes/categories, no width/height)."""
    import cv2

    png = cv2.imencode(".png", np.zeros((40, 60, 3), np.uint8))[1].tobytes()
    features = datasets.Features({
        "image": datasets.Image(),
        "objects": datasets.Sequence({"bboxes": datasets.Sequence(datasets.Value("float32"), length=4),
                                      "categories": datasets.ClassLabel(names=["cat", "dog"])}),
    })
    rows = [{"image": {"bytes": png, "path": None}, "objects": {"bboxes": [[1, 2, 10, 20]], "categories": [1]}}]
    datasets.Dataset.from_list(rows, features=features).save_to_disk(os.fspath(tmp_path / "hub"))
    source = load_source(os.fspath(tmp_path / "hub"), cache_dir=tmp_path, bbox_format="xywh")
    assert source.class_names == ["cat", "dog"]
    row = source.dataset[0]
    assert (row["image_id"], row["width"], row["height"]) == (0, 60, 40)
    assert row["objects"]["bbox"] == [[1, 2, 10, 20]] and row["objects"]["category"] == [1]
    assert source.dataset.features == detection_features(["cat", "dog"])


def test_hub_offline_gives_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    with pytest.raises(DataSourceError, match="could not load 'some-org/no-such-dataset' from the Hugging Face Hub"
                                              r".*save_to_disk"):
        load_source("some-org/no-such-dataset", cache_dir=tmp_path)


def test_hub_id_loads_the_split_and_normalises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Hub id goes through ``datasets.load_dataset(id, split=...)`` (mocked: no network in tests)."""
    import cv2

    png = cv2.imencode(".png", np.zeros((30, 50, 3), np.uint8))[1].tobytes()
    features = datasets.Features({
        "image_id": datasets.Value("int64"), "image": datasets.Image(),
        "width": datasets.Value("int32"), "height": datasets.Value("int32"),
        "objects": datasets.Sequence({"id": datasets.Value("int64"), "area": datasets.Value("int64"),
                                      "bbox": datasets.Sequence(datasets.Value("float32"), length=4),
                                      "category": datasets.ClassLabel(names=["Coverall", "Face_Shield"])}),
    })
    rows = [{"image_id": 7, "image": {"bytes": png, "path": None}, "width": 50, "height": 30,
             "objects": {"id": [3], "area": [20], "bbox": [[1, 2, 4, 5]], "category": [1]}}]
    calls = []

    def fake_load_dataset(repo_id: str):
        calls.append(repo_id)
        return datasets.DatasetDict({"train": datasets.Dataset.from_list(rows * 2, features=features),
                                     "test": datasets.Dataset.from_list(rows, features=features)})

    monkeypatch.setattr("yolo11.weights.resolve.hub_reachable", lambda timeout=None: True)  # as online
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    source = load_source("cppe-5", "test", cache_dir=tmp_path, bbox_format="xywh")
    assert calls == ["cppe-5"]
    assert source.class_names == ["Coverall", "Face_Shield"]
    assert source.dataset.features == detection_features(source.class_names)
    assert source.dataset[0]["image_id"] == 7 and source.dataset[0]["objects"]["bbox"] == [[1, 2, 4, 5]]
    assert source.dataset[0]["image"]["bytes"] == png  # not decoded


def write_patch_dataset(root: Path, pixels_rgb: np.ndarray, label: str, exif: Image.Exif | None) -> Path:
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    Image.fromarray(pixels_rgb).save(root / "images" / "0.jpg", quality=100, **({"exif": exif} if exif else {}))
    (root / "labels" / "0.txt").write_text(label)
    (root / "data.yaml").write_text(f"path: {root}\ntrain: images\nval: images\nnames: [patch]\n")
    return root / "data.yaml"


def test_exif_rotated_jpeg_is_sized_and_labelled_as_displayed(tmp_path: Path) -> None:
    """A phone photo stored 80x48 with EXIF orientation 6 is shown (and decoded by OpenCV) 48 wide, 80 high; its
    YOLO label is normalised to that displayed image, as for Ultralytics' ``exif_size``."""
    stored = np.full((48, 80, 3), 30, np.uint8)
    stored[4:20, 50:76] = 230  # a bright patch near the top right
    displayed = cv2.rotate(stored, cv2.ROTATE_90_CLOCKWISE)  # what orientation 6 shows: (80, 48)
    ys, xs = np.nonzero(displayed[..., 0] > 128)
    x1, y1, x2, y2 = xs.min(), ys.min(), xs.max() + 1, ys.max() + 1
    label = f"0 {(x1 + x2) / 2 / 48} {(y1 + y2) / 2 / 80} {(x2 - x1) / 48} {(y2 - y1) / 80}\n"
    exif = Image.Exif()
    exif[274] = 6
    rotated = write_patch_dataset(tmp_path / "rotated", stored, label, exif)
    upright = write_patch_dataset(tmp_path / "upright", displayed, label, None)  # rotated by hand, no EXIF

    image_file = tmp_path / "rotated" / "images" / "0.jpg"
    for encoded in ({"bytes": None, "path": os.fspath(image_file)}, {"bytes": image_file.read_bytes(), "path": None}):
        assert decode_image(encoded).shape == (80, 48, 3)  # cv2.imread and cv2.imdecode both apply the EXIF

    batches = []
    for spec in (rotated, upright):
        source = load_source(os.fspath(spec), cache_dir=tmp_path / "cache")
        row = source.dataset[0]
        assert (row["width"], row["height"]) == (48, 80)
        np.testing.assert_allclose(row["objects"]["bbox"], [[x1, y1, x2 - x1, y2 - y1]], atol=1e-3)
        loader = build_dataloader(source, "val", LoaderConfig(imgsz=96, batch_size=1, workers=0))
        batches.append(next(iter(loader)))
    for batch in batches:
        bx1, by1, bx2, by2 = batch["boxes"][0, 0].round().int().tolist()
        image = batch["images"][0].float().mean(0)
        assert image[by1:by2, bx1:bx2].mean() > 200 and image.mean() < 100  # the box lies on the patch
    torch.testing.assert_close(batches[0]["boxes"], batches[1]["boxes"])
    assert (batches[0]["images"].int() - batches[1]["images"].int()).abs().float().mean() < 3  # JPEG noise


def test_hub_rows_without_size_get_the_exif_rotated_size(tmp_path: Path) -> None:
    exif = Image.Exif()
    exif[274] = 8
    buffer = io.BytesIO()
    Image.new("RGB", (80, 48)).save(buffer, format="JPEG", exif=exif)
    features = datasets.Features({
        "image": datasets.Image(),
        "objects": datasets.Sequence({"bbox": datasets.Sequence(datasets.Value("float32"), length=4),
                                      "category": datasets.ClassLabel(names=["cat"])}),
    })
    rows = [{"image": {"bytes": buffer.getvalue(), "path": None}, "objects": {"bbox": [[1, 2, 10, 20]],
                                                                             "category": [0]}}]
    datasets.Dataset.from_list(rows, features=features).save_to_disk(os.fspath(tmp_path / "hub"))
    row = load_source(os.fspath(tmp_path / "hub"), cache_dir=tmp_path, bbox_format="xywh").dataset[0]
    assert (row["width"], row["height"]) == (48, 80)


def test_yolo_fingerprint_scan_equals_the_per_file_stats(tmp_path):
    """The directory scan gives exactly the per-file list (same files, order, sizes, times): same cache keys."""
    from yolo11.data.sources.yolo import _stat, yolo_fingerprint_files, yolo_fingerprint_stats

    for sub in ("images/train/a", "images/train/b-c", "labels/train/a", "flat"):
        (tmp_path / sub).mkdir(parents=True)
    for name in ("images/train/x.jpg", "images/train/a/y.PNG", "images/train/b-c/z.jpg", "images/train/a.jpg",
                 "labels/train/x.txt", "labels/train/a/y.txt", "labels/train/extra.txt", "images/train/notes.md",
                 "flat/p.jpg", "flat/p.txt", "flat/q.jpg"):
        (tmp_path / name).write_bytes(b"0" * len(name))
    (tmp_path / "images/train/link.jpg").symlink_to(tmp_path / "flat/q.jpg")
    for train in ("images/train", "flat"):
        yaml_path = tmp_path / f"{train.replace('/', '_')}.yaml"
        yaml_path.write_text(f"path: {tmp_path}\ntrain: {train}\nval: {train}\nnames:\n  0: a\n")
        expected = [_stat(path) for path in yolo_fingerprint_files(yaml_path, "train")]
        assert yolo_fingerprint_stats(yaml_path, "train") == expected
        assert len(expected) > 3


def test_a_hub_id_fails_at_once_where_the_hub_does_not_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """Without network, datasets retried for ~25 s before failing; a path meant as a local folder whose parent
    exists is told apart; a dataset in datasets' cache is still read from it (after its retries), said."""
    asked = []

    def load_dataset(repo_id, *args, **kwargs):
        asked.append(repo_id)
        raise ConnectionError("no network")

    monkeypatch.setattr("yolo11.weights.resolve.hub_reachable", lambda timeout=None: False)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    with pytest.raises(DataSourceError, match=r"could not load 'data/my_ds' from the Hugging Face Hub \(.* does not "
                                              r"answer\); no local folder .*data/my_ds either"):
        load_source("data/my_ds", cache_dir=tmp_path / "cache")
    assert asked == []
    (tmp_path / "hf" / "owner___cached").mkdir(parents=True)
    with caplog.at_level("WARNING", logger="yolo11.data"), pytest.raises(DataSourceError, match="no network"):
        load_source("owner/cached", cache_dir=tmp_path / "cache")
    assert asked == ["owner/cached"] and "reading the cached copy" in caplog.text
