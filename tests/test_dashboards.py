"""The W&B and TensorBoard dashboards (``yolo11.engine.dashboards``): a real offline W&B + TensorBoard run in a
child process, its ``.wandb`` stream parsed to list what was logged (the W&B "screenshot" of the issue)."""

from __future__ import annotations

import json
import textwrap

import pytest
from helpers.tracked_child import run_child

RUN_SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    import numpy as np
    import torch
    from tracked_child import start_offline_run, validation_sample
    from yolo11 import create_model
    from yolo11.engine import dashboards
    from yolo11.evaluation import plots

    run_dir = Path(sys.argv[1])
    accelerator, _ = start_offline_run(run_dir)
    names = ["cat", "dog"]
    model = create_model("yolo11n", num_classes=2, names=names)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    dashboards.log_model_info(accelerator, model.train(), 64)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # no forward through it
    sample = validation_sample()
    accelerator.log({"metrics/mAP50(B)": 0.5}, step=3)
    dashboards.log_prediction_table(accelerator, [sample, sample], names, epoch=0, step=3)
    grid = np.linspace(0, 1, 1000)
    metrics = {"precision": 0.6, "recall": 0.5, "map50": 0.5, "map50_95": 0.3, "per_class_ap50": [None, 0.5],
               "per_class_ap50_95": [None, 0.3], "per_class_precision": [None, 0.6], "per_class_recall": [None, 0.5],
               "pr_curve": {"recall": grid.tolist(), "precision": [(1 - grid).tolist()], "classes": [1]},
               "conf_curve": {"confidence": grid.tolist(), "precision": [grid.tolist()],
                              "recall": [(1 - grid).tolist()], "classes": [1]},
               "confusion_matrix": [[0, 0, 0], [0, 2, 1], [0, 1, 0]]}
    plots.save_validation_plots(run_dir, metrics, [sample], names)
    ground_truth = {"images": [{"id": 1}, {"id": 2}],
                    "annotations": [{"image_id": 1, "category_id": 2}, {"image_id": 2, "category_id": 2}]}
    dashboards.log_final_validation(accelerator, metrics, metrics, names, ground_truth, run_dir, step=4)
    accelerator.end_training()
""")


def test_offline_run_lists_curves_tables_confusion_matrix_plots_and_model_info(tmp_path):
    from helpers import wandb_reader

    result = run_child(RUN_SCRIPT, tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    stream = wandb_reader.find_stream(tmp_path / "run" / "wandb")
    rows = wandb_reader.history(stream)
    logged = {key.split("/_type")[0]: value for row in rows for key, value in row.items() if key.endswith("_type")}
    print("W&B objects logged:", json.dumps(logged, indent=1, sort_keys=True))  # the listing the README quotes
    assert logged["val/predictions"] == "table-file"
    # W&B charts (line plots, the confusion-matrix chart) log their data as "<key>_table"
    assert {logged[f"curves/{k}_table"] for k in ("PR", "F1", "P", "R")} == {"table-file"}
    assert logged["val/confusion_matrix_table"] == "table-file" and logged["val/per_class"] == "table-file"
    assert {k for k in logged if k.startswith("plots/")} >= {
        "plots/BoxPR_curve", "plots/BoxF1_curve", "plots/confusion_matrix", "plots/confusion_matrix_normalized",
        "plots/val_batch0_pred"}
    files = stream.parent / "files"
    table = next(r for r in rows if "val/predictions/_type" in r)
    content = json.loads((files / table["val/predictions/path"]).read_text())
    assert content["columns"] == ["epoch", "image", "ground truth boxes", "predicted boxes", "best score"]
    assert [row[2:] for row in content["data"]] == [[1, 1, pytest.approx(0.8)]] * 2  # the 0.01 box is not drawn
    per_class = json.loads((files / next(r for r in rows if "val/per_class/_type" in r)["val/per_class/path"])
                           .read_text())
    assert per_class["data"] == [["all", 2, 2, 0.6, 0.5, 0.5, 0.3], ["dog", 2, 2, 0.6, 0.5, 0.5, 0.3]]
    confusion = json.loads((files / next(r for r in rows if "val/confusion_matrix_table/_type" in r)
                            ["val/confusion_matrix_table/path"]).read_text())
    assert sorted(confusion["data"]) == [["background", "dog", 1], ["dog", "background", 1], ["dog", "dog", 2]]
    configs = {item.key: json.loads(item.value_json) for record in wandb_reader.read_records(stream)
               if record.WhichOneof("record_type") == "config" for item in record.config.update}
    from yolo11 import create_model
    from yolo11.models.flops import summary_gflops

    model = create_model("yolo11n", num_classes=2)
    assert configs["model/parameters"] == sum(p.numel() for p in model.parameters())
    # counted on a meta-device copy: the same as on the real model
    assert configs["model/GFLOPs"] == round(summary_gflops(model.eval(), 64, 64), 3) > 0

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = (tmp_path / "run" / "yolo11-test").glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    assert {"plots/BoxPR_curve", "plots/confusion_matrix"} <= set(accumulator.Tags()["images"])
    assert {"model/text_summary", "val/per_class/text_summary"} <= set(accumulator.Tags()["tensors"])


def test_nothing_is_computed_without_a_tracker(monkeypatch):
    from accelerate import Accelerator

    from yolo11.engine import dashboards

    monkeypatch.setattr(dashboards, "model_info", lambda *a: 1 / 0)
    dashboards.log_model_info(Accelerator(cpu=True), None, 64)  # no tracker: returns before counting
