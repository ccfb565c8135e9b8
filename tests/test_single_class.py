"""``single_cls`` (Ultralytics' key, ``--single-cls``): every object trained and scored as one class, 'item'."""

from __future__ import annotations

import re

import datasets
import pyarrow as pa
import pytest
from helpers.engine_helpers import TINY_FLAGS, reset_accelerate_state

from yolo11.data import load_source
from yolo11.data.schema import DetectionSource, class_names_of, detection_features, single_class
from yolo11.engine.config import parse_config
from yolo11.preflight import SAMPLE_DATA


def test_every_object_becomes_class_0_named_item_and_nothing_else_changes():
    source = load_source(str(SAMPLE_DATA["coco8.yaml"]), split="train")
    one = single_class(source)
    assert one.class_names == ["item"] == class_names_of(one.dataset) and one.origin != source.origin
    before, after = source.dataset.to_dict(), one.dataset.to_dict()
    assert {c for objects in before["objects"] for c in objects["category"]} != {0}  # coco8 has several classes
    assert all(set(objects["category"]) <= {0} for objects in after["objects"])
    for key in ("image_id", "image", "width", "height"):
        assert after[key] == before[key], key
    assert [o["bbox"] for o in after["objects"]] == [o["bbox"] for o in before["objects"]]
    assert [len(o["category"]) for o in after["objects"]] == [len(o["category"]) for o in before["objects"]]


def test_a_sliced_table_of_several_chunks_keeps_each_row_its_boxes():
    """Arrow chunks and a selection (indices) as datasets leaves them after concatenation and select."""
    rows = [{"image_id": i, "image": {"bytes": b"x", "path": None}, "width": 8, "height": 8,
             "objects": {"id": list(range(i % 3)), "area": [1.0] * (i % 3), "bbox": [[0, 0, i + 1, 1]] * (i % 3),
                         "category": [i % 2] * (i % 3)}} for i in range(6)]
    features = detection_features(["a", "b"])
    parts = [datasets.Dataset.from_list(rows[:3], features=features), datasets.Dataset.from_list(rows[3:],
                                                                                                 features=features)]
    dataset = datasets.concatenate_datasets(parts).select([5, 1, 2, 4])
    assert isinstance(dataset.data.column("objects"), pa.ChunkedArray)
    one = single_class(DetectionSource(dataset, ["a", "b"], "t"))
    objects = one.dataset.to_dict()["objects"]
    assert [o["bbox"] for o in objects] == [o["bbox"] for o in dataset.to_dict()["objects"]]
    assert [o["category"] for o in objects] == [[0, 0], [0], [0, 0], [0]]


def test_the_ultralytics_key_and_the_flag():
    assert parse_config(["single_cls=True"]).data.single_cls is True
    assert parse_config(["--single-cls", "true"]).data.single_cls is True
    assert parse_config([]).data.single_cls is False


@pytest.mark.slow
def test_a_run_trains_one_class_named_item(tmp_path, capsys):
    from yolo11.engine.trainer import train
    from yolo11.weights import load_weights

    config = parse_config([*TINY_FLAGS, "--batch-size", "4", "--epochs", "1", "--output-dir", str(tmp_path),
                           "single_cls=True"])
    try:
        assert train(config) == 0
    finally:
        reset_accelerate_state()
    out = capsys.readouterr().out
    assert "single_cls: the 6 classes of" in out and "trained and scored as one, 'item'" in out
    model = load_weights(tmp_path / "exp" / "weights" / "last.safetensors")
    assert (model.num_classes, model.names) == (1, ["item"])


@pytest.mark.slow
def test_val_and_the_api_score_a_single_class_run_as_it_trained(tmp_path, capsys, monkeypatch):
    """``yolo11 val best.safetensors`` reads single_cls from the run (it was "predicts 1 classes; --data has 80"),
    ``single_cls=false`` says how to score it; the API's train-then-val and val() agree with the run's last
    validation."""
    from yolo11 import YOLO
    from yolo11.tools import val

    monkeypatch.chdir(tmp_path)
    model = YOLO("yolo11n")
    trained = model.train(data="coco8.yaml", imgsz=64, epochs=1, batch=4, workers=0, single_cls=True)
    reset_accelerate_state()
    assert model.names == {0: "item"}
    assert model.val(workers=0).map50_95 == trained.map50_95
    reset_accelerate_state()
    capsys.readouterr()
    assert val.main([str(trained.best), "workers=0"]) == 0
    assert "single_cls True from" in capsys.readouterr().err
    reset_accelerate_state()
    assert val.main([str(trained.best), "workers=0", "single_cls=false"]) != 0
    assert re.search(r"predicts 1 class \(item\).*single_cls=True scores its classes as one", capsys.readouterr().err)
