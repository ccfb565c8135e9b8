"""Post-processing: decode and NMS against Ultralytics' outputs; NMS rules; letterbox inversion."""

from pathlib import Path

import numpy as np
import pytest
import torch

from yolo11.geometry import scale_boxes
from yolo11.postprocess import Postprocessor, decode, non_max_suppression

REFERENCE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "reference" / "yolo11n_coco128_outputs.npz"
VAL = dict(conf=0.001, iou=0.7, max_det=300, multi_label=True)
PREDICT = dict(conf=0.25, iou=0.7, max_det=300, multi_label=False)


@pytest.fixture(scope="module")
def reference():
    if not REFERENCE.exists():
        pytest.skip(f"reference outputs not found at {REFERENCE}")
    data = np.load(REFERENCE)
    return [torch.from_numpy(data[f"raw_p{level}"]) for level in (3, 4, 5)], data


def test_decode_matches_ultralytics(reference):
    feats, data = reference
    decoded = decode(feats)
    expected = torch.from_numpy(data["decoded"])
    assert decoded.shape == expected.shape == (2, 84, 8400)
    # boxes: float32 rounding of the grid-cell values times the stride (a few ulp at ~500 px)
    torch.testing.assert_close(decoded[:, :4], expected[:, :4], rtol=0, atol=5e-4)
    torch.testing.assert_close(decoded[:, 4:], expected[:, 4:], rtol=0, atol=1e-6)


@pytest.mark.parametrize("setting", ["val", "pred"])
@pytest.mark.parametrize("source", ["reference_decoded", "our_decode"])
def test_nms_matches_ultralytics(reference, setting, source):
    feats, data = reference
    decoded = torch.from_numpy(data["decoded"]) if source == "reference_decoded" else decode(feats)
    detections = non_max_suppression(decoded, **(VAL if setting == "val" else PREDICT))
    atol = 1e-5 if source == "reference_decoded" else 5e-4  # see test_decode_matches_ultralytics
    for image, det in enumerate(detections):
        expected = torch.from_numpy(data[f"det_{setting}_{image}"])
        assert det.shape == expected.shape
        # same order too: both sort by decreasing score and the scores here have no ties
        torch.testing.assert_close(det[:, :4], expected[:, :4], rtol=0, atol=atol)
        torch.testing.assert_close(det[:, 4], expected[:, 4], rtol=0, atol=1e-6)
        assert torch.equal(det[:, 5], expected[:, 5])
    if setting == "val":
        assert len(detections[0]) == 300  # the max_det cap is reached


def test_nms_equals_live_ultralytics_with_tied_scores_and_the_max_nms_cap():
    """Bit-equal to Ultralytics' NMS where the order among equal scores decides (skips without Ultralytics)."""
    import importlib.util

    if importlib.util.find_spec("ultralytics") is None:
        pytest.skip("ultralytics is not importable (PYTHONPATH=/work/ultra)")
    from ultralytics.utils.nms import non_max_suppression as ultralytics_nms

    # Ultralytics takes torchvision's NMS (a stable sort, as ours) only where torchvision is imported, as it is in
    # its trainer and validator; alone, its nms module falls back to a Python NMS whose unstable argsort orders
    # tied scores otherwise (and runs into its time limit on a busy machine)
    pytest.importorskip("torchvision")
    generator = torch.Generator().manual_seed(0)
    xy, wh = torch.rand(2, 2, 8400, generator=generator) * 640, torch.rand(2, 2, 8400, generator=generator) * 99 + 1
    # float32 powers of uniforms: hundreds of thousands of candidates above 0.001, many of them tied
    scores = torch.rand(2, 80, 8400, generator=generator) ** 30
    decoded = torch.cat((xy, wh, scores), 1)
    ours = non_max_suppression(decoded.clone(), **VAL)
    theirs = ultralytics_nms(decoded.clone(), 0.001, 0.7, multi_label=True, max_det=300)
    assert (scores > 0.001).sum() > 2 * 30000  # the max_nms cap is reached
    for det, expected in zip(ours, theirs, strict=True):
        assert torch.equal(det, expected)


def decoded_from(boxes_xyxy: list[list[float]], scores: list[list[float]]) -> torch.Tensor:
    """A one-image ``(1, 4 + C, A)`` decoded tensor from xyxy boxes and per-class scores."""
    boxes = torch.tensor(boxes_xyxy)
    xywh = torch.cat(((boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2]), 1)
    return torch.cat((xywh, torch.tensor(scores)), 1).T[None]


def test_nms_suppresses_within_a_class_only():
    boxes = [[0, 0, 10, 10], [1, 0, 11, 10], [0, 0, 10, 10], [50, 50, 60, 60]]
    scores = [[0.9, 0.0], [0.8, 0.0], [0.0, 0.7], [0.6, 0.0]]  # box 1 overlaps box 0 (IoU 0.82), box 2 another class
    det = non_max_suppression(decoded_from(boxes, scores), conf=0.5, iou=0.7)[0]
    assert det[:, 4].tolist() == pytest.approx([0.9, 0.7, 0.6])
    assert det[:, 5].tolist() == [0, 1, 0]
    agnostic = non_max_suppression(decoded_from(boxes, scores), conf=0.5, iou=0.7, agnostic=True)[0]
    assert agnostic[:, 4].tolist() == pytest.approx([0.9, 0.6])


def test_multi_label_conf_and_caps():
    boxes = [[0, 0, 10, 10], [20, 20, 30, 30], [40, 40, 50, 50]]
    scores = [[0.9, 0.6], [0.5, 0.2], [0.3, 0.1]]
    decoded = decoded_from(boxes, scores)
    multi = non_max_suppression(decoded, conf=0.3, multi_label=True)[0]
    assert multi[:, 4].tolist() == pytest.approx([0.9, 0.6, 0.5])  # 0.3 is not strictly above conf
    assert multi[:, 5].tolist() == [0, 1, 0]
    single = non_max_suppression(decoded, conf=0.3, multi_label=False)[0]
    assert single[:, 4].tolist() == pytest.approx([0.9, 0.5])
    assert len(non_max_suppression(decoded, conf=0.0, max_det=2)[0]) == 2
    assert non_max_suppression(decoded, conf=0.0, max_nms=1)[0][:, 4].tolist() == pytest.approx([0.9])
    assert non_max_suppression(decoded, conf=0.95)[0].shape == (0, 6)


def test_postprocessor_maps_to_original_pixels(reference):
    feats, _ = reference
    ratio_pad = torch.tensor([[0.5, 0.5, 80.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    orig_sizes = torch.tensor([[960, 1280], [640, 640]])
    post = Postprocessor(**VAL)
    in_input = post(feats)
    in_original = post(feats, ratio_pad, orig_sizes)
    for det, det_orig, pad, size in zip(in_input, in_original, ratio_pad, orig_sizes, strict=True):
        torch.testing.assert_close(det_orig[:, :4], scale_boxes(det[:, :4], pad, size))
        assert torch.equal(det_orig[:, 4:], det[:, 4:])
    assert in_original[0][:, 2].max() > 640  # really rescaled (gain 0.5)


@pytest.mark.parametrize("suppression", ["torchvision", "batched", "batched-chunks"])
@pytest.mark.parametrize("group_budget", [1 << 20, 700], ids=["whole-batch", "groups"])
@pytest.mark.parametrize("multi_label", [True, False])
def test_batched_nms_equals_one_image_at_a_time(multi_label, group_budget, suppression, monkeypatch):
    """The candidates of several images are thresholded at once (in groups of at most ``MAX_GROUP_CANDIDATES``);
    each image's detections must still be bitwise those of that image alone, also under the max_nms cap, with
    tied scores and with an image without candidates. "batched": the suppression of CUDA runs
    (``batched_greedy_nms``, taken here on the CPU), for the whole group or in chunks of a few images."""
    monkeypatch.setattr("yolo11.postprocess.MAX_GROUP_CANDIDATES", group_budget)
    if suppression != "torchvision":
        def batchable(candidates, counts, max_nms):
            return max(counts, default=0) <= max_nms
        monkeypatch.setattr("yolo11.postprocess._batchable", batchable)
    if suppression == "batched-chunks":
        monkeypatch.setattr("yolo11.postprocess.MAX_PAIR_ENTRIES", 300 * 300)
    torch.manual_seed(0)
    images, anchors, classes = 4, 600, 6
    decoded = torch.cat((torch.rand(images, 2, anchors) * 600, torch.rand(images, 2, anchors) * 80 + 1,
                         torch.rand(images, classes, anchors) ** 3), dim=1)
    decoded[:, 4:, :40] = 0.5  # ties decide the order kept by the cap
    decoded[2, 4:] = 0.0  # no candidate in the third image
    settings = dict(conf=0.01, iou=0.6, max_det=120, multi_label=multi_label, max_nms=300)
    batched = non_max_suppression(decoded, **settings)
    assert len(batched) == images and len(batched[2]) == 0 and len(batched[0]) == 120
    monkeypatch.undo()  # each image alone through torchvision's NMS
    for image, det in enumerate(batched):
        (alone,) = non_max_suppression(decoded[image:image + 1], **settings)
        assert torch.equal(det, alone)


def _crowded_candidates(seed: int, device: str = "cpu"):
    """Several images' candidates, one image after another: clusters of boxes overlapping each other (chains of
    suppression), integer corners (exactly tied IoUs), scores in tenths (ties), an image without any."""
    generator = torch.Generator().manual_seed(seed)
    counts = [int(c) for c in torch.randint(0, 400, (5,), generator=generator)]
    counts[3] = 0
    total = sum(counts)
    centres = torch.rand(total, 1, 2, generator=generator) * 40 + torch.randint(0, 3, (total, 1, 2),
                                                                               generator=generator) * 200
    sizes = torch.rand(total, 1, 2, generator=generator) * 60 + 4
    boxes = torch.cat((centres - sizes / 2, centres + sizes / 2), dim=2).flatten(1)
    if seed % 2:
        boxes = boxes.round()
    scores = (torch.rand(total, generator=generator) * 10).round() / 10 + 0.01
    return boxes.to(device), scores.to(device), counts


def _torchvision_per_image(boxes, scores, counts, iou, max_det) -> list[torch.Tensor]:
    """The reference: torchvision's NMS on each image's candidates alone, as indices into ``boxes``."""
    from yolo11.postprocess import nms

    expected, start = [], 0
    for count in counts:
        expected.append(nms(boxes[start:start + count], scores[start:start + count], iou)[:max_det] + start)
        start += count
    return expected


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("iou, max_det", [(0.7, 300), (0.45, 300), (0.2, 7)])
def test_batched_greedy_nms_keeps_torchvisions_boxes(seed, iou, max_det):
    """``batched_greedy_nms`` keeps, image by image, exactly the indices torchvision's NMS keeps, in its order."""
    from yolo11.postprocess import batched_greedy_nms

    boxes, scores, counts = _crowded_candidates(seed)
    rows, kept = batched_greedy_nms(boxes, scores, counts, iou, max_det)
    expected = _torchvision_per_image(boxes, scores, counts, iou, max_det)
    assert kept == [len(keep) for keep in expected]
    assert torch.equal(rows, torch.cat(expected))
    assert max(kept) < max(counts)  # something was suppressed


def test_batched_greedy_nms_settles_a_long_chain_of_suppressions():
    """Boxes in a row, each overlapping the next above the threshold but not the one after, scores falling along
    the row: greedy NMS keeps every other box, and each box's fate waits for the one before it (one box settled per
    round, more rounds than the first check's)."""
    from yolo11.postprocess import batched_greedy_nms, nms

    left = torch.arange(200, dtype=torch.float32) * 4
    boxes = torch.stack((left, torch.zeros(200), left + 40, torch.full((200,), 40.0)), dim=1)
    scores = torch.linspace(0.9, 0.1, 200)
    rows, kept = batched_greedy_nms(boxes, scores, [200], 0.7, 300)
    assert torch.equal(rows, nms(boxes, scores, 0.7))
    assert rows.tolist() == list(range(0, 200, 2)) and kept == [100]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_batched_greedy_nms_on_cuda_keeps_torchvisions_boxes():
    """On CUDA, where training's validation uses it: torchvision's CUDA NMS keeps the same boxes per image."""
    from yolo11.postprocess import batched_greedy_nms

    for seed in range(6):
        boxes, scores, counts = _crowded_candidates(seed, "cuda")
        rows, kept = batched_greedy_nms(boxes, scores, counts, 0.7, 300)
        expected = _torchvision_per_image(boxes, scores, counts, 0.7, 300)
        assert kept == [len(keep) for keep in expected]
        assert torch.equal(rows, torch.cat(expected))


def test_image_groups_stay_within_the_budget_unless_one_image_exceeds_it():
    from yolo11.postprocess import _image_groups

    assert _image_groups([3, 4, 5, 0, 9, 1], 8) == [(0, 2), (2, 4), (4, 5), (5, 6)]
    assert _image_groups([20, 1], 8) == [(0, 1), (1, 2)]
    assert _image_groups([], 8) == []


def test_nms_runs_keep_an_image_with_many_candidates_from_widening_the_others():
    """``batched_greedy_nms`` pads a run's images to its largest: runs end where the padded pairs would pass the
    budget, so one crowded image is a run of its own (it set the width of every image in the batch before)."""
    from yolo11.postprocess import _image_groups, _padded_pairs

    budget = 4 * 300 * 300
    assert _image_groups([300, 300, 3000, 300, 200, 100], budget, _padded_pairs) == [(0, 2), (2, 3), (3, 6)]
    assert _image_groups([300] * 9, budget, _padded_pairs) == [(0, 4), (4, 8), (8, 9)]


def test_batched_nms_takes_runs_of_several_images_on_cuda_within_its_bounds(monkeypatch):
    """``batched_greedy_nms`` serves CUDA runs of two or more images within ``max_nms`` and ``MAX_PAIR_ENTRIES``;
    torchvision's NMS the rest (a lone image costs it one sync, fewer than the batched rounds' checks)."""
    from types import SimpleNamespace

    from yolo11.postprocess import _batchable

    monkeypatch.setattr("yolo11.postprocess.MAX_PAIR_ENTRIES", 100 * 100)
    cuda, cpu = SimpleNamespace(is_cuda=True), SimpleNamespace(is_cuda=False)
    assert _batchable(cuda, [10, 20], 300)
    assert not _batchable(cuda, [10], 300)
    assert not _batchable(cuda, [10, 301], 300)
    assert not _batchable(cuda, [10, 101], 300)
    assert not _batchable(cpu, [10, 20], 300)


def test_max_det_for_data_raises_only_the_default():
    from yolo11.postprocess import max_det_for_data

    assert max_det_for_data(300, {"train": 120, "val": 300}) == (300, None)
    raised, line = max_det_for_data(300, {"train": 412, "val": 390})
    assert raised == 412 and line.startswith("images of the data hold up to 412 objects (train 412, val 390)")
    kept, line = max_det_for_data(200, {"val": 250}, flag="max_det")
    assert kept == 200 and line.endswith("more than max_det 200: kept as chosen; recall is capped at 200 detections "
                                         "an image")


def test_in_two_parts_runs_a_flood_of_candidates_now_and_equals_the_call(monkeypatch):
    """``Postprocessor.in_two_parts``: candidates in one group are held for later (their count returned); more
    than one group (a model early in training) is suppressed now, group by group, holding nothing; both give what
    the call gives."""
    from yolo11.postprocess import Postprocessor

    torch.manual_seed(0)
    feats = [torch.randn(2, 64 + 3, s, s) for s in (8, 4, 2)]  # 84 anchors, 3 classes
    post = Postprocessor(conf=0.3, iou=0.6)
    expected = post(feats)
    later, held = post.in_two_parts(feats)
    assert held > 0 and all(torch.equal(a, b) for a, b in zip(later(), expected, strict=True))
    monkeypatch.setattr("yolo11.postprocess.MAX_GROUP_CANDIDATES", 40)
    later, held = post.in_two_parts(feats)
    assert held == 0 and all(torch.equal(a, b) for a, b in zip(later(), expected, strict=True))
