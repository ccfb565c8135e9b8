"""Loader: the batch contract, augmentation as a pure function of (seed, epoch, index), Accelerate sharding/resume."""

from __future__ import annotations

import dataclasses
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from accelerate import Accelerator

from yolo11.data import (
    AugmentParams,
    LoaderConfig,
    augment_preset,
    build_dataloader,
    build_train_stream,
    build_val_stream,
    first_batches,
    load_source,
    save_batch_preview,
)
from yolo11.data.dataset import DetectionDataset, decode_image
from yolo11.data.sampling import EpochStream

NO_GEOMETRY = AugmentParams(mosaic=1.0, translate=0.0, scale=0.0, fliplr=0.0, hsv_h=0.0, hsv_s=0.0, hsv_v=0.0)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory):
    return load_source("synthetic:num_images=24,num_val=10,imgsz=96", "train", cache_dir=tmp_path_factory.mktemp("c"))


def batches(loader, epoch: int = 0) -> list[dict]:
    loader.set_epoch(epoch)
    return list(loader)


def assert_same_batches(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x["image_ids"] == y["image_ids"]
        for key in ("images", "boxes", "labels", "orig_sizes", "ratio_pad"):
            torch.testing.assert_close(x[key], y[key], rtol=0, atol=0)


def test_train_batch_contract(source) -> None:
    config = LoaderConfig(imgsz=64, batch_size=5, workers=0, epochs=3, close_mosaic=1)
    loader = build_dataloader(source, "train", config)
    all_batches = batches(loader)
    assert [len(b["image_ids"]) for b in all_batches] == [5, 5, 5, 5, 4]
    batch = all_batches[0]
    assert batch["images"].dtype == torch.uint8 and batch["images"].shape == (5, 3, 64, 64)
    assert batch["images"].is_contiguous(memory_format=torch.channels_last)  # RGB rows: no transpose anywhere
    boxes, labels = batch["boxes"], batch["labels"]
    assert boxes.dtype == torch.float32 and labels.dtype == torch.int64 and boxes.shape[:2] == labels.shape
    valid = labels >= 0
    assert valid.any() and (~valid).any()  # synthetic images hold 1-4 boxes: some rows are padding
    assert (boxes[~valid] == 0).all() and (labels[valid] < len(source.class_names)).all()
    assert (boxes[valid] >= 0).all() and (boxes[valid] <= 64).all()
    assert (boxes[valid][:, 2:] > boxes[valid][:, :2]).all()
    assert batch["orig_sizes"].tolist() == [[96, 96]] * 5 and (batch["ratio_pad"] == 0).all()
    epoch_ids = sorted(i for b in all_batches for i in b["image_ids"])
    assert epoch_ids == sorted(source.dataset["image_id"])  # a shuffled permutation: every image once

    padded = next(iter(build_dataloader(source, "train", dataclasses.replace(config, max_boxes=40))))
    assert padded["boxes"].shape == (5, 40, 4) and (padded["labels"][:, -1] == -1).all()


def test_val_images_are_rgb_resized_and_invertible(source) -> None:
    loader = build_dataloader(source, "val", LoaderConfig(imgsz=128, batch_size=4, workers=0))
    batch = next(iter(loader))
    gain_h, gain_w, top, left = batch["ratio_pad"][0].tolist()
    # as Ultralytics' load_image: the long side goes to imgsz (up too), the letterbox then only pads
    assert gain_h == gain_w == pytest.approx(128 / 96) and top == left == 0.0
    bgr = cv2.resize(decode_image(source.dataset[0]["image"]), (128, 128), interpolation=cv2.INTER_LINEAR)
    expected = torch.from_numpy(np.ascontiguousarray(bgr[:, :, ::-1].transpose(2, 0, 1)))
    torch.testing.assert_close(batch["images"][0], expected, rtol=0, atol=0)
    # original = (input - pad) / gain gives the stored COCO boxes back
    valid = batch["labels"][0] >= 0
    restored = (batch["boxes"][0][valid] - torch.tensor([left, top] * 2)) / torch.tensor([gain_w, gain_h] * 2)
    xywh = torch.tensor(source.dataset[0]["objects"]["bbox"])
    torch.testing.assert_close(restored, torch.cat([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], 1))


def test_rect_val_batches(source) -> None:
    def widen(row: dict, i: int) -> dict:  # images of other aspect ratios (their boxes stretched along)
        width = 96 + 8 * i
        image = cv2.resize(cv2.imdecode(np.frombuffer(row["image"]["bytes"], np.uint8), cv2.IMREAD_COLOR),
                           (width, row["height"]))
        objects = {**row["objects"], "bbox": [[x * width / row["width"], y, w * width / row["width"], h]
                                              for x, y, w, h in row["objects"]["bbox"]]}
        return {"width": width, "image": {"bytes": cv2.imencode(".png", image)[1].tobytes(), "path": None},
                "objects": objects}

    wide = source.dataset.map(widen, with_indices=True)
    shaped = type(source)(wide, source.class_names, "wide")
    loader = build_dataloader(shaped, "val", LoaderConfig(imgsz=64, batch_size=4, workers=0, rect=True))
    for batch in loader:
        _, _, height, width = batch["images"].shape
        assert height % 32 == 0 and width % 32 == 0 and height <= width
    # Accelerate's even_batches may fill the last rect batch with samples of another shape: padded, not a crash
    dataset = loader.dataset
    mixed = loader.collate_fn([dataset[0], dataset[len(dataset) - 1]])
    shapes = [dataset[i]["image"].shape for i in (0, len(dataset) - 1)]
    assert shapes[0] != shapes[1] and mixed["images"].shape[2:] == tuple(max(a, b) for a, b in zip(*shapes))[:2]
    with pytest.raises(ValueError, match="rect"):
        build_dataloader(source, "train", LoaderConfig(imgsz=64, batch_size=4, workers=0, rect=True))


def test_same_key_same_sample_and_epochs_differ(source) -> None:
    dataset = build_dataloader(source, "train", LoaderConfig(imgsz=64, batch_size=4, workers=0, epochs=10)).dataset
    a, b, other = dataset[(3, 5)], dataset[(3, 5)], dataset[(4, 5)]
    np.testing.assert_array_equal(a["image"], b["image"])
    np.testing.assert_array_equal(a["boxes"], b["boxes"])
    assert not np.array_equal(a["image"], other["image"])


def test_worker_count_does_not_change_batches(source) -> None:
    kwargs = dict(imgsz=64, batch_size=6, epochs=4, close_mosaic=1, seed=3, hyp=augment_preset("yolo", mixup=0.5))
    single = batches(build_dataloader(source, "train", LoaderConfig(workers=0, **kwargs)), epoch=1)
    multi = batches(build_dataloader(source, "train", LoaderConfig(workers=2, **kwargs)), epoch=1)
    assert_same_batches(single, multi)
    other_epoch = batches(build_dataloader(source, "train", LoaderConfig(workers=0, **kwargs)), 2)
    assert single[0]["image_ids"] != other_epoch[0]["image_ids"]


def test_worker_batches_send_only_the_images_through_shared_memory(source) -> None:
    """Each tensor sent through shared memory costs a socket round trip to the busy worker: the small ones
    (boxes, labels, sizes, HSV gains) come inside the pickle, equal to the in-process batch."""
    config = LoaderConfig(imgsz=96, batch_size=6, workers=0, epochs=2, seed=1, hsv_on_device=True)
    single = batches(build_dataloader(source, "train", config))
    multi = batches(build_dataloader(source, "train", dataclasses.replace(config, workers=2)))
    assert_same_batches(single, multi)
    batch = multi[0]
    assert type(batch) is dict and batch["images"].is_shared()
    assert not any(batch[k].is_shared() for k in ("boxes", "labels", "orig_sizes", "ratio_pad", "hsv_gains"))
    torch.testing.assert_close(batch["hsv_gains"], single[0]["hsv_gains"], rtol=0, atol=0)


def test_close_mosaic_follows_the_epoch(source) -> None:
    loader = build_dataloader(source, "train", LoaderConfig(imgsz=96, batch_size=4, workers=0, epochs=5, close_mosaic=2,
                                                            hyp=NO_GEOMETRY))
    dataset = loader.dataset
    assert [dataset.mosaic_enabled(e) for e in range(5)] == [True, True, True, False, False]
    decoded = decode_image(source.dataset[7]["image"])
    # without mosaic (and with geometry and colour off) a sample is its own image; with mosaic it is a collage
    np.testing.assert_array_equal(dataset[(3, 7)]["image"], decoded)
    assert not np.array_equal(dataset[(2, 7)]["image"], decoded)


def test_accelerate_prepare_set_epoch_and_skip_first_batches(source) -> None:
    kwargs = dict(imgsz=64, batch_size=4, workers=0, epochs=3, seed=1)
    reference = batches(build_dataloader(source, "train", LoaderConfig(**kwargs)), epoch=2)
    accelerator = Accelerator(cpu=True)
    prepared = accelerator.prepare(build_dataloader(source, "train", LoaderConfig(**kwargs)))
    prepared.set_epoch(2)  # must reach our sampler through Accelerate's wrappers
    assert_same_batches(reference, list(prepared))
    # as train_accelerate.py resumes: set_epoch, then skip (Accelerate copies the epoch into the new loader, which
    # calls set_epoch again when iterated)
    prepared.set_epoch(2)
    resumed = accelerator.skip_first_batches(prepared, 2)
    assert_same_batches(reference[2:], list(resumed))


def test_epoch_stream_is_the_epoch_loaders_batches_back_to_back(source) -> None:
    """One pass over the stream == the per-epoch loader's epochs in a row (same keys, so the same samples)."""
    kwargs = dict(imgsz=64, batch_size=5, workers=0, epochs=3, seed=2)
    stream = build_train_stream(source, LoaderConfig(**kwargs))
    assert stream.batch_sampler.batches_per_epoch == 5  # 24 images: 4 x 5 + one of 4
    per_epoch = [b for epoch in range(3) for b in batches(build_dataloader(source, "train", LoaderConfig(**kwargs)),
                                                           epoch)]
    assert_same_batches(per_epoch, list(stream))
    stream.set_epoch(1, 2)  # resumed after 2 batches of epoch 1
    assert_same_batches(per_epoch[7:], list(stream))


@pytest.mark.parametrize("processes", [2, 3])
def test_epoch_stream_shards_each_global_batch_over_the_processes(processes) -> None:
    """Process r takes its share of every global batch; all take the same number of steps; one epoch covers every
    image, and the global batches do not depend on the process count (resume on another count)."""
    single = EpochStream(26, 4 * processes, epochs=2, seed=3)
    shards = [EpochStream(26, 4, epochs=2, seed=3, num_processes=processes, process_index=r) for r in range(processes)]
    assert {s.batches_per_epoch for s in shards} == {single.batches_per_epoch}
    for epoch in range(2):
        global_batches = single.epoch_batches(epoch)
        rank_batches = [s.epoch_batches(epoch) for s in shards]
        assert len({len(b) for b in rank_batches}) == 1
        for k, expected in enumerate(global_batches):
            joined = [key for r in range(processes) for key in rank_batches[r][k]]
            assert joined[:len(expected)] == expected  # what is past it tops up the short last batch
            assert len({len(rank_batches[r][k]) for r in range(processes)}) == 1
        seen = {index for batches_ in rank_batches for batch in batches_ for _, index in batch}
        assert seen == set(range(26))


@pytest.mark.parametrize("processes", [1, 3])
def test_epoch_stream_full_batches_top_up_the_last_batch_from_the_epochs_start(processes) -> None:
    """For a compiled model: every batch full, the epoch's images all seen, the top-up taken from the start of
    its order; the same global batches on any process count."""
    plain = EpochStream(26, 4 * processes, epochs=1, seed=3)
    shards = [EpochStream(26, 4, epochs=1, seed=3, num_processes=processes, process_index=r, full_batches=True)
              for r in range(processes)]
    rank_batches = [s.epoch_batches(0) for s in shards]
    assert {len(batch) for batches_ in rank_batches for batch in batches_} == {4}
    order = [index for batch in plain.epoch_batches(0) for _, index in batch]
    joined = [index for k in range(shards[0].batches_per_epoch) for r in range(processes)
              for _, index in rank_batches[r][k]]
    assert joined == order + order[:len(joined) - 26]


def test_epoch_stream_workers_build_the_next_epoch_before_it_is_asked_for(source, tmp_path, monkeypatch) -> None:
    """The point of the stream: once the last batch of epoch 0 is taken, the workers are already on epoch 1."""
    original = DetectionDataset.__getitem__

    def recording_getitem(self, key):
        (tmp_path / f"{key[0]}-{key[1]}").touch()
        return original(self, key)

    monkeypatch.setattr(DetectionDataset, "__getitem__", recording_getitem)
    loader = build_train_stream(source, LoaderConfig(imgsz=64, batch_size=8, workers=2, epochs=2, seed=0))
    stream = iter(loader)
    for _ in range(loader.batch_sampler.batches_per_epoch):
        next(stream)
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob("1-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(tmp_path.glob("1-*")), "no sample of epoch 1 was built while the trainer was between epochs"
    del stream


@pytest.mark.parametrize("processes", [1, 3])
def test_val_stream_repeats_the_val_loaders_batches_shared_out_whole(source, processes) -> None:
    """Each pass of the stream is the val loader's batches (rect shapes included), process r taking batches
    r, r + P, ...: together one pass covers every image once; no more workers than a pass has batches."""
    config = LoaderConfig(imgsz=64, batch_size=4, workers=0, rect=True)
    val = build_dataloader(source, "val", config)
    expected = list(val)
    passes = []
    for rank in range(processes):
        stream = build_val_stream(source, dataclasses.replace(config, workers=4), num_processes=processes,
                                  process_index=rank)
        per_pass = stream.batch_sampler.batches_per_pass
        assert per_pass == len(expected[rank::processes])
        assert 1 <= stream.num_workers <= per_pass  # a worker per batch of a pass at most
        batches = list(itertools.islice(iter(stream), 2 * per_pass))
        assert_same_batches(batches[:per_pass], batches[per_pass:])  # the second pass repeats the first
        passes.append(batches[:per_pass])
    for rank in range(processes):
        assert_same_batches(expected[rank::processes], passes[rank])
    ids = [i for batches in passes for batch in batches for i in batch["image_ids"]]
    assert sorted(ids) == sorted(source.dataset["image_id"])


def test_first_batches_are_the_loaders_and_leave_the_global_rng_alone(source) -> None:
    """The previews' batches (built on a thread while training starts) are the train loader's first ones, and
    building them draws nothing from torch's global RNG, which a DataLoader's iterator would."""
    config = LoaderConfig(imgsz=64, batch_size=5, workers=0, pin_memory=False)
    expected = list(itertools.islice(build_dataloader(source, "train", config), 3))
    state = torch.get_rng_state()
    ours = list(first_batches(source, config, 3))
    assert torch.equal(torch.get_rng_state(), state)
    assert_same_batches(expected, ours)


def test_batch_preview(source, tmp_path: Path) -> None:
    batch = next(iter(build_dataloader(source, "train", LoaderConfig(imgsz=64, batch_size=5, workers=0))))
    path = save_batch_preview(batch, source.class_names, tmp_path / "train_batch0.jpg")
    preview = cv2.imread(str(path))
    assert preview.shape == (2 * 64, 3 * 64, 3)  # 5 images in a 3-column grid
    blank = {**batch, "labels": torch.full_like(batch["labels"], -1)}
    plain = cv2.imread(str(save_batch_preview(blank, source.class_names, tmp_path / "plain.png")))
    assert np.abs(plain.astype(int) - cv2.imread(str(path)).astype(int)).max() > 100  # boxes were drawn


DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
REFERENCE = DATA / "reference" / "yolo11n_coco128_outputs.npz"


@pytest.mark.skipif(not REFERENCE.is_file(), reason=f"Ultralytics reference outputs not found in {REFERENCE.parent}")
def test_val_preprocessing_equals_ultralytics_reference(tmp_path: Path) -> None:
    """Ultralytics' letterboxed input of coco128 images 9 and 25 (640, RGB) and its targets, from our val loader."""
    reference = np.load(REFERENCE)
    source = load_source(str(DATA / "coco128.yaml"), "train", cache_dir=tmp_path)
    ids = source.dataset["image_id"]
    subset = type(source)(source.dataset.select([ids.index(9), ids.index(25)]), source.class_names, "two")
    batch = next(iter(build_dataloader(subset, "val", LoaderConfig(imgsz=640, batch_size=2, workers=0))))
    expected = np.round(reference["input"] * 255).astype(np.uint8)
    np.testing.assert_array_equal(batch["images"].numpy(), expected)
    targets = reference["targets"]  # rows [image, class, cx, cy, w, h] normalised to the 640 input
    for i in range(2):
        valid = batch["labels"][i] >= 0
        boxes = batch["boxes"][i][valid].numpy()
        ours = np.concatenate([batch["labels"][i][valid].numpy()[:, None],
                               np.concatenate([(boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2]], 1)
                               / 640], 1)
        theirs = targets[targets[:, 0] == i][:, 1:]
        np.testing.assert_allclose(ours[np.lexsort(ours.T[::-1])], theirs[np.lexsort(theirs.T[::-1])], atol=1e-5)


@pytest.mark.parametrize("imgsz", [96, 64])  # 96: cached images are the originals (no resize), 64: resized
def test_image_cache_gives_the_same_batches_and_stays_unchanged(source, imgsz) -> None:
    """--cache-images must be invisible in the batches (train with mosaic, mixup, HSV, and the no-mosaic epochs;
    val) and no transform may write into the shared cache."""
    kwargs = dict(imgsz=imgsz, batch_size=6, epochs=3, close_mosaic=1, seed=5, hyp=augment_preset("yolo", mixup=0.5))
    plain = build_dataloader(source, "train", LoaderConfig(workers=0, **kwargs))
    cached = build_dataloader(source, "train", LoaderConfig(workers=2, cache_images=True, **kwargs))
    assert (cached.dataset.cache.shapes[:, 1] > 0).all()  # every image came from the cache
    snapshot = cached.dataset.cache.buffer.copy()
    for epoch in (0, 2):  # mosaic on, then off
        assert_same_batches(batches(plain, epoch), batches(cached, epoch))
    val_plain = build_dataloader(source, "val", LoaderConfig(imgsz=imgsz, batch_size=4, workers=0))
    val_cached = build_dataloader(source, "val", LoaderConfig(imgsz=imgsz, batch_size=4, workers=0, cache_images=True))
    assert_same_batches(batches(val_plain), batches(val_cached))
    np.testing.assert_array_equal(cached.dataset.cache.buffer, snapshot)


def test_image_cache_refuses_what_does_not_fit(source, monkeypatch) -> None:
    import yolo11.data.dataset as dataset_module

    monkeypatch.setattr(dataset_module, "_available_memory", lambda: 1000)
    with pytest.raises(MemoryError, match=r"--cache-images needs about .* GiB for 24 images at 64 px in each of 1 "):
        build_dataloader(source, "train", LoaderConfig(imgsz=64, batch_size=6, workers=0, cache_images=True))


def ring_loader(source, hyp_seed: int = 5):
    """A train loader whose workers use the shared batch ring, as on CUDA (where pin_memory is on)."""
    from torch.utils.data import DataLoader

    from yolo11.data.collate import DetectionCollate

    config = LoaderConfig(imgsz=64, batch_size=6, workers=0, epochs=3, seed=hyp_seed)
    reference = build_dataloader(source, "train", config)
    ring = DataLoader(reference.dataset, batch_sampler=reference.batch_sampler, num_workers=2,
                      collate_fn=DetectionCollate(ring_slots=3), persistent_workers=True)
    ring.batch_sampler.sampler.set_epoch(0)
    return reference, ring


def test_batch_ring_reuses_buffers_only_after_they_are_handed_back(source, monkeypatch) -> None:
    """The pin-memory thread's copy (simulated: Tensor.pin_memory is unavailable without CUDA) hands each slot
    back; later batches then reuse slots, and no pinned batch is changed by them."""
    from yolo11.data.collate import ReusableBatch

    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *args, **kwargs: self.clone())
    reference, ring = ring_loader(source)
    expected = batches(reference) + batches(reference, epoch=1)
    received = []
    for epoch in (0, 1):
        ring.batch_sampler.sampler.set_epoch(epoch)
        for item in ring:
            assert isinstance(item, ReusableBatch)
            received.append((item.pin_memory(), item.reused))
    assert_same_batches(expected, [batch for batch, _ in received])
    assert sum(reused for _, reused in received) >= len(received) - 2 * 3  # at most 3 new slots per worker
    assert any(reused for _, reused in received)


def test_batch_ring_never_overwrites_a_batch_not_handed_back(source) -> None:
    """A consumer that keeps every batch and never pins: each worker fills its 3 slots, then allocates fresh
    buffers; every batch stays intact."""
    reference, ring = ring_loader(source)
    kept = []
    for epoch in (0, 1):  # 8 batches: 4 per worker, one more than its slots
        ring.batch_sampler.sampler.set_epoch(epoch)
        kept += list(ring)
    from yolo11.data.collate import ReusableBatch

    in_slots = [item for item in kept if isinstance(item, ReusableBatch)]
    assert len(in_slots) == 6 and not any(item.reused for item in in_slots)  # 3 slots x 2 workers, then fresh
    plain = [item.batch if isinstance(item, ReusableBatch) else item for item in kept]
    assert_same_batches(batches(reference) + batches(reference, epoch=1), plain)


def test_copy_bgr_to_rgb_writes_into_the_rows_of_a_larger_batch_buffer() -> None:
    """cv2 must write into the given view (a silently reallocated output would leave the batch unwritten), also
    for a smaller image in the corner of a rect batch and for a flipped (negative-stride) view."""
    from yolo11.data.collate import copy_bgr_to_rgb

    image = np.random.default_rng(0).integers(0, 256, (40, 50, 3), dtype=np.uint8)
    rows = np.full((2, 64, 64, 3), 7, np.uint8)
    copy_bgr_to_rgb(image, rows[1])
    copy_bgr_to_rgb(image[:, ::-1], rows[0])
    np.testing.assert_array_equal(rows[1, :40, :50], image[:, :, ::-1])
    np.testing.assert_array_equal(rows[0, :40, :50], image[:, ::-1, ::-1])
    assert (rows[:, 40:] == 7).all() and (rows[:, :, 50:] == 7).all()  # the padding is left alone


def test_workers_are_capped_by_the_cores_per_local_process(monkeypatch):
    from yolo11.data.workers import usable_workers

    monkeypatch.setattr(os, "sched_getaffinity", lambda _: set(range(16)), raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert usable_workers(8) == 4 and usable_workers(2) == 2 and usable_workers(0) == 0
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "32")
    assert usable_workers(8) == 1  # never below one worker per process while some were asked for




FAULTS_PER_BATCH = """
import resource, sys
import numpy as np
from yolo11.data.workers import keep_freed_memory

kept = keep_freed_memory() if sys.argv[1] == "keep" else None

def one_round():  # a worker's batch: 16 images of 640 px made, touched, freed
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    images = [np.full((640, 640, 3), 114, np.uint8) for _ in range(16)]
    del images
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

one_round()
print(kept, min(one_round() for _ in range(3)))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings")
def test_workers_keep_freed_memory_instead_of_faulting_it_in_again():
    def page_faults(mode: str) -> tuple[str, int]:
        # a fresh interpreter each: malloc's state is per process, and a fork of this one inherits what the other
        # tests left in its heap
        result = subprocess.run([sys.executable, "-c", FAULTS_PER_BATCH, mode], capture_output=True, text=True,
                                timeout=120, cwd=Path(__file__).resolve().parents[1])
        assert result.returncode == 0, result.stderr[-2000:]
        kept, faults = result.stdout.split()
        return kept, int(faults)

    kept, kept_faults = page_faults("keep")
    if kept != "True":
        pytest.skip("this C library has no glibc mallopt")
    _, default_faults = page_faults("default")
    assert default_faults > 16 * 100  # each 1.2 MB image faulted in again (about 300 pages)
    assert kept_faults < 50


LEFT_RUNNING = """
import sys
from yolo11.data import LoaderConfig, build_dataloader, build_val_stream, load_source
source = load_source("synthetic:num_images=24,num_val=10,imgsz=96", "train", cache_dir=sys.argv[1])
config = LoaderConfig(imgsz=64, batch_size=4, workers=2, epochs=3)
train = iter(build_dataloader(source, "train", config))
next(train)
val = iter(build_val_stream(source, LoaderConfig(imgsz=64, batch_size=4, workers=2, rect=True)))
next(val)
if sys.argv[2] == "raise":
    raise RuntimeError("a crash with the loaders' workers busy")
"""


@pytest.mark.parametrize("how", ["return", "raise"])
def test_a_program_exits_with_loader_iterators_still_running(tmp_path, how):
    """The workers ignore SIGTERM, which multiprocessing's exit sends them before joining them: iterators left
    alive at the end of a program (module level, or held by an uncaught exception's traceback) must still let it
    exit."""
    result = subprocess.run([sys.executable, "-c", LEFT_RUNNING, str(tmp_path), how], capture_output=True,
                            text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == (1 if how == "raise" else 0), result.stderr[-2000:]
