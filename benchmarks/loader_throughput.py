"""Train-loader throughput (images/s, mosaic on) on coco128 replicated to >= 1024 images, ours vs Ultralytics'.

    .venv/bin/python benchmarks/loader_throughput.py --workers 2 --imgsz 640 --batch-size 16

The replica is a folder of symlinks (images and labels) in a temporary directory, described by a data YAML, so
both loaders read the same files. Ultralytics' loader runs only when ``import ultralytics`` works; our code never
imports it otherwise. Timing starts after one batch per worker (start-up excluded) and covers the rest of one
epoch. On a GPU every batch is also copied to it (pinned memory, as in training), and our loader is timed twice:
with HSV in the workers and with HSV left to the GPU (``BatchHSV``, the trainer's default there).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from functools import partial
from pathlib import Path

import torch
import yaml

from yolo11.data import BatchHSV, LoaderConfig, build_dataloader, load_source

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def replicate_coco128(out: Path, copies: int) -> Path:
    """``copies`` x coco128 as symlinks under ``out``; returns the data YAML."""
    source = DATA / "coco128"
    names = yaml.safe_load((DATA / "coco128.yaml").read_text())["names"]
    for folder in ("images", "labels"):
        (out / folder / "train").mkdir(parents=True, exist_ok=True)
    for image in sorted((source / "images" / "train2017").glob("*.jpg")):
        label = source / "labels" / "train2017" / f"{image.stem}.txt"
        for k in range(copies):
            os.symlink(image, out / "images" / "train" / f"{image.stem}_{k}.jpg")
            if label.exists():
                os.symlink(label, out / "labels" / "train" / f"{image.stem}_{k}.txt")
    yaml_path = out / "data.yaml"
    yaml_path.write_text(yaml.safe_dump({"path": str(out), "train": "images/train", "val": "images/train",
                                         "names": names}))
    return yaml_path


def time_loader(loader, max_batches: int | None, consume=None) -> tuple[float, int]:
    """Images per second after the first round of batches, and the number of images timed. ``consume(batch)``
    stands for the training step's use of a batch (on a GPU: the copy to the device, and the HSV pass if it was
    left there).

    Every worker starts on its first batch at once, so they all arrive together: timing from the first one only
    would count the others as free (12 batches from 16 workers once read 10784 img/s). Timing starts after one
    batch per worker."""
    iterator = iter(loader)
    for _ in range(max(loader.num_workers, 1)):
        next(iterator)
    start, images = time.perf_counter(), 0
    for i, batch in enumerate(iterator):
        images += len(batch["images"] if "images" in batch else batch["img"])
        if consume is not None:
            consume(batch)
        if max_batches is not None and i + 1 >= max_batches:
            break
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return images / (time.perf_counter() - start), images


def to_device(batch: dict, hsv: BatchHSV | None) -> None:
    images = batch["images"] if "images" in batch else batch["img"]
    images = images.to("cuda", non_blocking=True)
    if hsv is not None and "hsv_gains" in batch:
        hsv(images, batch["hsv_gains"].to("cuda", non_blocking=True))


def ours(yaml_path: Path, cache: Path, args: argparse.Namespace) -> float:
    source = load_source(os.fspath(yaml_path), "train", cache_dir=cache)
    cuda = torch.cuda.is_available()
    rate = 0.0
    for hsv_on_device in sorted({False, cuda and args.hsv_on_device}):
        loader = build_dataloader(source, "train", LoaderConfig(imgsz=args.imgsz, batch_size=args.batch_size,
                                  workers=args.workers, epochs=100, close_mosaic=10, seed=0,  # epoch 0: mosaic on
                                  cache_images=args.cache_images, hsv_on_device=hsv_on_device))
        loader.set_epoch(0)
        consume = partial(to_device, hsv=BatchHSV().cuda()) if cuda else None
        rate, images = time_loader(loader, args.max_batches, consume)
        where = "on the GPU" if hsv_on_device else "in the workers"
        print(f"yolo11 loader, HSV {where}: {rate:7.1f} images/s ({images} images, {len(source.dataset)} in the "
              f"dataset{', to the GPU' if cuda else ''})")
        del loader
    return rate


def ultralytics_loader(yaml_path: Path, args: argparse.Namespace) -> float | None:
    try:
        from ultralytics.cfg import get_cfg
        from ultralytics.data import build_dataloader as ul_build_dataloader
        from ultralytics.data import build_yolo_dataset
        from ultralytics.data.utils import check_det_dataset
    except ImportError:
        print("ultralytics loader: skipped (ultralytics is not installed)")
        return None
    cfg = get_cfg(overrides={"imgsz": args.imgsz, "data": os.fspath(yaml_path), "batch": args.batch_size,
                             "workers": args.workers, "cache": "ram" if args.cache_images else False})
    data = check_det_dataset(os.fspath(yaml_path))
    dataset = build_yolo_dataset(cfg, data["train"], args.batch_size, data, mode="train", rect=False, stride=32)
    loader = ul_build_dataloader(dataset, args.batch_size, args.workers, shuffle=True, rank=-1)
    consume = partial(to_device, hsv=None) if torch.cuda.is_available() else None
    rate, images = time_loader(loader, args.max_batches, consume)
    print(f"ultralytics loader: {rate:7.1f} images/s ({images} images)")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--copies", type=int, default=8, help="coco128 replicas (8 -> 1024 images)")
    parser.add_argument("--max-batches", type=int, default=None,
                        help="stop after this many timed batches (default: the rest of the epoch; several times "
                             "--workers for a steady figure)")
    parser.add_argument("--cache-images", action="store_true", help="both loaders cache decoded images in RAM")
    parser.add_argument("--hsv-on-device", action=argparse.BooleanOptionalAction, default=True,
                        help="on a GPU, also time our loader with the HSV pass left to the GPU")
    args = parser.parse_args()
    if not (DATA / "coco128.yaml").is_file():
        raise SystemExit(f"coco128 not found in {DATA}")
    with tempfile.TemporaryDirectory() as tmp:
        yaml_path = replicate_coco128(Path(tmp) / "coco128x", args.copies)
        print(f"imgsz {args.imgsz}, batch {args.batch_size}, workers {args.workers}, cpus {os.cpu_count()}")
        ours_rate = ours(yaml_path, Path(tmp) / "cache", args)
        theirs = ultralytics_loader(yaml_path, args)
        if theirs:
            print(f"ratio ours / ultralytics: {ours_rate / theirs:.2f}")


if __name__ == "__main__":
    main()
