"""CocoEvaluator: COCO stats, per-class AP, Ultralytics-style P/R, confusion matrix, distributed gathering."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.coco_cases import CLASS_NAMES, IMAGES, REFERENCE, hub_dataset, perfect_predictions, reference_dataset

from yolo11.evaluation import STAT_NAMES, CocoEvaluator, coco_ground_truth, gather_predictions

ROOT = Path(__file__).resolve().parents[1]


def test_ground_truth_ids_from_one_and_category_is_class_plus_one():
    gt = coco_ground_truth(hub_dataset(IMAGES), CLASS_NAMES)
    assert [a["id"] for a in gt["annotations"]] == list(range(1, 6))
    assert [a["category_id"] for a in gt["annotations"]] == [1, 2, 3, 1, 1]
    assert gt["annotations"][1]["area"] == pytest.approx(120 * 80)
    assert [c["id"] for c in gt["categories"]] == [1, 2, 3]
    assert {i["id"] for i in gt["images"]} == {7, 3, 11, 4}


@pytest.mark.parametrize("backend", ["fast", "pycocotools", "faster_coco_eval"])
def test_perfect_predictions_score_one(backend):
    evaluator = CocoEvaluator(hub_dataset(IMAGES), CLASS_NAMES, backend=backend)
    metrics = evaluator.compute(perfect_predictions(IMAGES))
    assert metrics["map50_95"] == pytest.approx(1.0)
    assert metrics["map50"] == pytest.approx(1.0)
    assert metrics["ar100"] == pytest.approx(1.0)
    assert metrics["per_class_ap50_95"] == pytest.approx([1.0, 1.0, 1.0])
    assert metrics["precision"] == pytest.approx(1.0) and metrics["recall"] == pytest.approx(1.0)
    confusion = np.asarray(metrics["confusion_matrix"])
    assert np.array_equal(confusion, np.diag([3, 1, 1, 0]))


def test_no_predictions_give_zeros():
    metrics = CocoEvaluator(hub_dataset(IMAGES), CLASS_NAMES).compute([])
    assert all(metrics[name] == 0.0 for name in STAT_NAMES)
    assert metrics["precision"] == 0.0 and metrics["recall"] == 0.0
    # every ground-truth box is a background false negative (last row)
    assert np.asarray(metrics["confusion_matrix"])[-1].tolist() == [3, 1, 1, 0]
    json.dumps(metrics)  # the engine writes it as JSON


def test_missed_class_halves_map_and_shows_in_per_class_ap():
    predictions = [(i, det[det[:, 5] != 1]) for i, det in perfect_predictions(IMAGES)]  # drop every dog
    metrics = CocoEvaluator(hub_dataset(IMAGES), CLASS_NAMES).compute(predictions)
    assert metrics["per_class_ap50_95"] == pytest.approx([1.0, 0.0, 1.0])
    assert metrics["map50_95"] == pytest.approx(2 / 3)
    assert metrics["recall"] == pytest.approx(2 / 3)


def test_precision_recall_at_best_f1_confidence():
    images = [(1, 200, 200, [[10, 10, 40, 40], [100, 100, 50, 50]], [0, 0])]
    predictions = [(1, torch.tensor([[10, 10, 50, 50, 0.9, 0], [0, 150, 20, 190, 0.8, 0]]))]  # one hit, one miss
    metrics = CocoEvaluator(hub_dataset(images), CLASS_NAMES).compute(predictions)
    # Curves are linear in the confidence between the two scores (np.interp, as Ultralytics): P goes from 0.5 at
    # 0.8 to 1 at 0.9 while R stays 0.5; above 0.9 R is 0. The smoothed F1 peaks between 0.8 and 0.9.
    confidence = metrics["f1_confidence"]
    assert 0.8 < confidence < 0.9
    assert metrics["recall"] == pytest.approx(0.5)
    assert metrics["precision"] == pytest.approx(0.5 + 5 * (confidence - 0.8), abs=1e-6)


def test_per_class_precision_recall_and_the_table():
    """Dropping every dog: the cat and bird rows keep P = R = 1, the dog row has R = 0; classes without ground
    truth have no row. The table (yolo11-val's and the end of training's) lists images and instances per class."""
    from yolo11.evaluation.table import format_table

    predictions = [(i, det[det[:, 5] != 1]) for i, det in perfect_predictions(IMAGES)]
    evaluator = CocoEvaluator(hub_dataset(IMAGES), CLASS_NAMES)
    metrics = evaluator.compute(predictions)
    assert metrics["per_class_precision"] == pytest.approx([1.0, 0.0, 1.0])
    assert metrics["per_class_recall"] == pytest.approx([1.0, 0.0, 1.0])
    rows = {line.split()[0]: line.split()[1:] for line in format_table(metrics, CLASS_NAMES,
                                                                       evaluator.ground_truth).splitlines()}
    assert rows["class"] == ["images", "instances", "P", "R", "mAP50", "mAP50-95"]
    assert rows["all"][:2] == ["4", "5"]
    assert rows["cat"] == ["2", "3", "1.0000", "1.0000", "1.0000", "1.0000"]
    assert rows["dog"] == ["1", "1", "0.0000", "0.0000", "0.0000", "0.0000"]
    assert rows["bird"][:2] == ["1", "1"]


def test_confusion_matrix_counts_class_swaps_and_background():
    images = [(1, 200, 200, [[10, 10, 40, 40], [100, 100, 50, 50]], [0, 1])]
    predictions = [(1, torch.tensor([[10, 10, 50, 50, 0.9, 2],  # the cat called a bird
                                     [0, 150, 20, 190, 0.8, 1],  # a dog where there is nothing
                                     [100, 100, 150, 150, 0.1, 1]]))]  # right dog, below the 0.25 threshold
    confusion = np.asarray(CocoEvaluator(hub_dataset(images), CLASS_NAMES).compute(predictions)["confusion_matrix"])
    expected = np.zeros((4, 4), dtype=int)
    expected[2, 0] = 1  # predicted bird, true cat
    expected[1, 3] = 1  # predicted dog, background
    expected[3, 1] = 1  # missed dog
    assert np.array_equal(confusion, expected)


def test_metrics_without_plot_data_are_the_same_numbers():
    """Training's epochs without plots skip the PR and F1/P/R curves and the confusion matrix, and nothing else."""
    predictions = [(i, det[det[:, 5] != 1]) for i, det in perfect_predictions(IMAGES)]
    evaluator = CocoEvaluator(hub_dataset(IMAGES), CLASS_NAMES)
    full, lean = evaluator.compute(predictions), evaluator.compute(predictions, plot_data=False)
    assert set(full) - set(lean) == {"pr_curve", "conf_curve", "confusion_matrix"}
    assert lean == {key: value for key, value in full.items() if key in lean}


def test_unknown_image_id_raises():
    with pytest.raises(ValueError, match="not in the ground truth"):
        CocoEvaluator(hub_dataset(IMAGES), CLASS_NAMES).compute([(999, torch.zeros(0, 6))])


@pytest.mark.skipif(not (REFERENCE / "coco128_instances.json").is_file(), reason="shared/data/reference absent")
@pytest.mark.parametrize("backend", ["fast", "pycocotools", "faster_coco_eval"])
def test_reproduces_pycocotools_on_ultralytics_predictions(backend):
    expected = json.loads((REFERENCE / "yolo11n_coco128_meta.json").read_text())[
        "pycocotools_on_ultralytics_predictions"]
    dataset, names = reference_dataset()
    per_image: dict[int, list[list[float]]] = {}
    for p in json.loads((REFERENCE / "yolo11n_coco128_predictions.json").read_text()):
        x, y, w, h = p["bbox"]
        per_image.setdefault(p["image_id"], []).append([x, y, x + w, y + h, p["score"], p["category_id"] - 1])
    predictions = [(i, torch.tensor(rows, dtype=torch.float64)) for i, rows in per_image.items()]
    metrics = CocoEvaluator(dataset, names, backend=backend).compute(predictions)
    assert metrics["map50_95"] == pytest.approx(expected["map50_95"], abs=1e-6)
    assert metrics["map50"] == pytest.approx(expected["map50"], abs=1e-6)
    assert 0.0 < metrics["recall"] < metrics["precision"] < 1.0  # a weak but non-trivial model


class _SingleProcess:
    num_processes = 1
    is_main_process = True


def test_gather_single_process_keeps_each_image_once():
    per_image = [(1, torch.ones(2, 6)), (2, torch.zeros(0, 6)), (1, torch.ones(2, 6))]
    gathered = gather_predictions(_SingleProcess(), per_image)
    assert [image_id for image_id, _ in gathered] == [1, 2]


DISTRIBUTED_SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    from accelerate import Accelerator
    from torch.utils.data import DataLoader
    sys.path.insert(0, {tests!r})
    from helpers.coco_cases import IMAGES, CLASS_NAMES, hub_dataset, perfect_predictions
    from yolo11.evaluation import CocoEvaluator, gather_predictions

    accelerator = Accelerator()
    assert accelerator.num_processes == 2, accelerator.state
    images = IMAGES + [(20 + i, 100, 100, [[10 * i, 5, 30, 30]], [i % 3]) for i in range(3)]  # 7 images
    predictions = dict(perfect_predictions(images, score=0.7))
    for i, (image_id, det) in enumerate(predictions.items()):  # some errors, so the metrics are not all ones
        if i % 2:
            det[:, :2] += 6.0
    evaluator = CocoEvaluator(hub_dataset(images), CLASS_NAMES)
    # batch 2 per rank: 7 images -> the last batch of rank 1 is padded with an image of the start
    loader = accelerator.prepare(DataLoader([im[0] for im in images], batch_size=2))
    per_image = [(int(i), predictions[int(i)]) for batch in loader for i in batch]
    gathered = gather_predictions(accelerator, per_image)
    metrics = evaluator.compute(gathered, accelerator)
    if accelerator.is_main_process:
        single = CocoEvaluator(hub_dataset(images), CLASS_NAMES).compute(list(predictions.items()))
        json.dump({{"distributed": metrics, "single": single, "local": len(per_image), "gathered": len(gathered)}},
                  open({out!r}, "w"))
    # the process group torn down before the interpreter: gloo's threads otherwise may abort a rank at exit
    accelerator.end_training()
""")


@pytest.mark.slow
def test_two_processes_equal_single_process(tmp_path):
    config = tmp_path / "2proc.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_machines: 1\n"
                      "num_processes: 2\nmachine_rank: 0\nmixed_precision: 'no'\nuse_cpu: false\n"
                      "main_process_port: 29517\n")
    out = tmp_path / "metrics.json"
    script = tmp_path / "gather.py"
    script.write_text(DISTRIBUTED_SCRIPT.format(tests=str(ROOT / "tests"), out=str(out)))
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config), str(script)]
    result = subprocess.run(launcher, env=env, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["local"] == 4 and report["gathered"] == 7  # rank 0: 4 images; 8 gathered minus 1 duplicate
    assert report["distributed"] == report["single"]
    assert 0.0 < report["single"]["map50_95"] < 1.0


def test_compute_with_predictions_forgets_earlier_epochs():
    evaluator = CocoEvaluator(hub_dataset(IMAGES), CLASS_NAMES)
    assert evaluator.compute(perfect_predictions(IMAGES))["map50_95"] == pytest.approx(1.0)
    # next epoch: only image 3 has a detection; the perfect boxes of the other images must not linger
    later = evaluator.compute([(3, perfect_predictions(IMAGES)[1][1])] + [(i, torch.zeros(0, 6)) for i in (7, 4, 11)])
    assert later["per_class_ap50_95"] == pytest.approx([0.0, 0.0, 1.0])
    evaluator.reset()
    evaluator.update([det for _, det in perfect_predictions(IMAGES)], [i for i, *_ in IMAGES])
    assert evaluator.compute()["map50"] == pytest.approx(1.0)


def test_a_small_set_scores_on_one_thread_and_gives_the_threads_back(monkeypatch):
    """Below ``GPU_EVALUATION_MIN_IMAGES`` images the scoring runs on ``SCORING_THREADS`` torch threads (waking one
    thread per core costs more than it saves at that size); the caller's thread count comes back after, also when
    the scoring fails."""
    from yolo11.evaluation import coco

    evaluator = CocoEvaluator(hub_dataset(IMAGES), CLASS_NAMES)
    seen = []
    compute = evaluator._compute
    monkeypatch.setattr(evaluator, "_compute", lambda *a: seen.append(torch.get_num_threads()) or compute(*a))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert evaluator.compute(perfect_predictions(IMAGES))["map50_95"] == pytest.approx(1.0)
        assert seen == [coco.SCORING_THREADS] and torch.get_num_threads() == 2
        with pytest.raises(ValueError, match="not in the ground truth"):
            evaluator.compute([(999, torch.zeros(0, 6))])
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
