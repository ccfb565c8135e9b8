"""FastCocoEval: pycocotools' bbox stats and precision array, on the CPU and on CUDA."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers.coco_cases import REFERENCE, hub_dataset, reference_dataset
from pycocotools.cocoeval import Params

from yolo11.evaluation import CocoEvaluator
from yolo11.evaluation.coco import _per_class_ap, coco_results, run_cocoeval
from yolo11.evaluation.fast_coco import AREA_RANGES, IOU_THRESHOLDS, MAX_DETS, RECALL_THRESHOLDS, FastCocoEval

NUM_CLASSES = 5
SIDES = (12.0, 50.0, 150.0)  # small, medium and large boxes


def random_case(seed: int, num_images: int = 60, crowd: bool = False, duplicate_gt: bool = False):
    """Ground truth and predictions that hit pycocotools' corner cases: images without ground truth or without
    detections, a class without ground truth (the last), detections at one decimal (score ties), exact duplicate
    detections, one image with more than 100 detections of a class, boxes in all three area ranges."""
    rng = np.random.default_rng(seed)
    images, annotations, predictions = [], [], {}
    for i in range(num_images):
        image_id = 100 + 3 * i
        images.append({"id": image_id, "width": 640, "height": 480})
        boxes = []
        for _ in range(int(rng.integers(0, 8)) if i % 7 else 0):
            side = rng.choice(SIDES) * rng.uniform(0.5, 1.5)
            w, h = side * rng.uniform(0.6, 1.4), side * rng.uniform(0.6, 1.4)
            x, y, cls = rng.uniform(0, 500), rng.uniform(0, 400), int(rng.integers(0, NUM_CLASSES - 1))
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": cls + 1,
                                "bbox": [x, y, w, h], "area": w * h, "iscrowd": int(crowd and rng.random() < 0.1)})
            boxes.append((x, y, w, h, cls))
        if i % 5 == 4:
            continue  # no detections
        rows = []
        for _ in range(150 if i % 11 == 0 else int(rng.integers(1, 40))):
            if boxes and rng.random() < 0.6:  # near a ground-truth box, sometimes with the wrong class
                x, y, w, h, cls = boxes[rng.integers(len(boxes))]
                noise = rng.normal(0, 0.1, 4) * np.array([w, h, w, h])
                box = [x + noise[0], y + noise[1], x + w + noise[2], y + h + noise[3]]
                cls = int(rng.integers(0, NUM_CLASSES)) if rng.random() < 0.2 else cls
            else:
                side, x, y = rng.choice(SIDES), rng.uniform(0, 500), rng.uniform(0, 400)
                box, cls = [x, y, x + side, y + side * rng.uniform(0.5, 2)], int(rng.integers(0, NUM_CLASSES - 1))
            rows.append(box + [round(rng.uniform(0, 1), 1), cls])
        if i % 11 == 0:
            rows = [row[:5] + [0] for row in rows]  # 150 detections of one class
        if i % 13 == 0:
            rows += rows[:5]
        predictions[image_id] = torch.tensor(rows, dtype=torch.float32)
    if duplicate_gt:  # equal IoUs with several ground-truth boxes: pycocotools' tie rule decides
        annotations += [dict(a, id=len(annotations) + j + 1) for j, a in enumerate(annotations[::4])]
    categories = [{"id": k + 1, "name": f"c{k}"} for k in range(NUM_CLASSES)]
    return {"images": images, "annotations": annotations, "categories": categories}, predictions


@pytest.mark.parametrize(("seed", "crowd"), [(4, False), (5, True)])
def test_headline_mode_equals_pycocotools_where_it_computes(seed, crowd):
    """headline=True (what a training epoch logs): area "all" at 100 detections equal to pycocotools', the other
    entries -1 (CocoEvaluator.compute(all_stats=False): test_evaluator_backends_agree_on_random_detections)."""
    from yolo11.evaluation.fast_coco import HEADLINE_STATS

    ground_truth, predictions = random_case(seed, crowd=crowd, duplicate_gt=True)
    expected_stats, expected_precision = run_cocoeval(ground_truth, coco_results(predictions))
    stats, precision = FastCocoEval(ground_truth).evaluate(predictions, headline=True)
    np.testing.assert_allclose(stats[list(HEADLINE_STATS)], expected_stats[list(HEADLINE_STATS)], rtol=0, atol=1e-6)
    np.testing.assert_allclose(precision[..., 0, -1], expected_precision[..., 0, -1], rtol=0, atol=1e-9)
    assert (np.delete(stats, HEADLINE_STATS) == -1).all() and (precision[..., 1:, :] == -1).all()
    assert (precision[..., :2] == -1).all() and (expected_precision[..., 0, -1] > 0).any()
    assert _per_class_ap(precision) == _per_class_ap(expected_precision)


def test_parameters_are_pycocotools_defaults():
    params = Params(iouType="bbox")
    assert np.array_equal(IOU_THRESHOLDS, params.iouThrs) and np.array_equal(RECALL_THRESHOLDS, params.recThrs)
    assert list(MAX_DETS) == params.maxDets and [list(r) for r in AREA_RANGES] == params.areaRng


@pytest.mark.parametrize(("seed", "crowd", "duplicate_gt", "chunk_elements"),
                         [(0, False, False, 1 << 22), (1, False, True, 1 << 22), (2, True, True, 1 << 22),
                          (3, False, True, 300)])  # 300: one group per chunk
def test_equals_pycocotools_on_random_detections(seed, crowd, duplicate_gt, chunk_elements):
    ground_truth, predictions = random_case(seed, crowd=crowd, duplicate_gt=duplicate_gt)
    expected_stats, expected_precision = run_cocoeval(ground_truth, coco_results(predictions))
    stats, precision = FastCocoEval(ground_truth, chunk_elements=chunk_elements).evaluate(predictions)
    np.testing.assert_allclose(stats, expected_stats, rtol=0, atol=1e-6)
    np.testing.assert_allclose(precision, expected_precision, rtol=0, atol=1e-9)
    assert (expected_precision[:, :, NUM_CLASSES - 1] == -1).all()  # the class without ground truth
    ours, theirs = _per_class_ap(precision), _per_class_ap(expected_precision)
    for a, b in zip(ours, theirs, strict=True):
        assert [x is None for x in a] == [x is None for x in b]
        np.testing.assert_allclose([x for x in a if x is not None], [x for x in b if x is not None], atol=1e-6)


def test_evaluator_backends_agree_on_random_detections():
    ground_truth, predictions = random_case(4)
    images = []
    for image in ground_truth["images"]:
        anns = [a for a in ground_truth["annotations"] if a["image_id"] == image["id"]]
        images.append((image["id"], 640, 480, [a["bbox"] for a in anns], [a["category_id"] - 1 for a in anns]))
    names = [f"c{k}" for k in range(NUM_CLASSES)]
    dataset = hub_dataset(images, class_names=names)
    fast = CocoEvaluator(dataset, names, backend="fast").compute(list(predictions.items()))
    slow = CocoEvaluator(dataset, names, backend="pycocotools").compute(list(predictions.items()))
    for key, value in slow.items():
        if key.startswith("per_class"):
            assert [v is None for v in fast[key]] == [v is None for v in value]
            np.testing.assert_allclose([v or 0 for v in fast[key]], [v or 0 for v in value], atol=1e-6)
        elif isinstance(value, float):
            assert fast[key] == pytest.approx(value, abs=1e-6), key
        else:
            assert fast[key] == value, key
    # a training epoch's headline metrics: the same values, and no stat that was not computed
    headline = CocoEvaluator(dataset, names, backend="fast").compute(list(predictions.items()), all_stats=False)
    assert {"map_small", "ar1", "ar_large"}.isdisjoint(headline) and headline["map75"] == fast["map75"]
    assert {k: v for k, v in fast.items() if k in headline} == headline


@pytest.mark.skipif(not (REFERENCE / "coco128_instances.json").is_file(), reason="shared/data/reference absent")
def test_equals_pycocotools_on_reference_coco128_predictions():
    dataset, names = reference_dataset()
    results = json.loads((REFERENCE / "yolo11n_coco128_predictions.json").read_text())
    per_image: dict[int, list[list[float]]] = {}
    for p in results:
        x, y, w, h = p["bbox"]
        per_image.setdefault(p["image_id"], []).append([x, y, x + w, y + h, p["score"], p["category_id"] - 1])
    predictions = [(i, torch.tensor(rows, dtype=torch.float64)) for i, rows in per_image.items()]
    fast = CocoEvaluator(dataset, names, backend="fast")
    stats, precision = fast._fast.evaluate({i: det.float() for i, det in predictions})
    expected_stats, expected_precision = run_cocoeval(
        fast.ground_truth, coco_results({i: det.float() for i, det in predictions}))
    np.testing.assert_allclose(stats, expected_stats, rtol=0, atol=1e-6)
    np.testing.assert_allclose(precision, expected_precision, rtol=0, atol=1e-9)
    metrics = fast.compute(predictions)
    expected = json.loads((REFERENCE / "yolo11n_coco128_meta.json").read_text())[
        "pycocotools_on_ultralytics_predictions"]
    assert metrics["map50_95"] == pytest.approx(expected["map50_95"], abs=1e-6)
    assert metrics["map50"] == pytest.approx(expected["map50"], abs=1e-6)


def test_no_detections_and_unknown_classes():
    ground_truth, predictions = random_case(5, num_images=10)
    empty = {i: torch.zeros(0, 6) for i in predictions}
    stats, precision = FastCocoEval(ground_truth).evaluate(empty)
    # pycocotools with detections only of a class outside the categories: the same as no detections
    outside = {i: torch.tensor([[0.0, 0.0, 10.0, 10.0, 0.5, 99.0]]) for i in predictions}
    np.testing.assert_array_equal(stats, run_cocoeval(ground_truth, coco_results(outside))[0])
    assert ((precision == 0) | (precision == -1)).all()
    with pytest.raises(ValueError, match="not in the ground truth"):
        FastCocoEval(ground_truth).evaluate({12345: torch.zeros(1, 6)})


def test_area_range_without_ground_truth_is_minus_one():
    ground_truth, predictions = random_case(7, num_images=20)
    ground_truth["annotations"] = [a for a in ground_truth["annotations"] if a["area"] < 96.0**2]
    expected = run_cocoeval(ground_truth, coco_results(predictions))[0]
    stats = FastCocoEval(ground_truth).evaluate(predictions)[0]
    assert stats[5] == expected[5] == -1 and stats[11] == expected[11] == -1  # AP and AR large
    np.testing.assert_allclose(stats, expected, rtol=0, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_equals_cpu():
    ground_truth, predictions = random_case(6, duplicate_gt=True)
    cpu = FastCocoEval(ground_truth).evaluate(predictions)
    cuda = FastCocoEval(ground_truth, device="cuda").evaluate(predictions)
    np.testing.assert_allclose(cuda[0], cpu[0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(cuda[1], cpu[1], rtol=0, atol=1e-12)


def test_the_fast_backend_goes_to_the_gpu_for_large_validation_sets_only():
    from yolo11.evaluation.coco import GPU_EVALUATION_MIN_IMAGES, evaluation_device

    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert evaluation_device(cuda, GPU_EVALUATION_MIN_IMAGES) == cuda
    assert evaluation_device(cuda, GPU_EVALUATION_MIN_IMAGES - 1) == cpu  # coco128: launches would dominate
    assert evaluation_device(cpu, 10**6) == cpu
