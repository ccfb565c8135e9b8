"""Converting a COCO-sized YOLO-layout dataset to the Arrow cache: first conversion, cached start-up, peak RSS.

    .venv/bin/python benchmarks/conversion_speed.py --num-images 118287 --root /tmp/conversion-bench

Generates ``--num-images`` small JPEGs or PNGs (``--format``; 64-160 px sides, 1-8 random boxes each, fixed seed;
kept in ``--root`` and reused when the count matches) with their YOLO labels, then times ``load_source`` in fresh
processes: the first conversion and a cached load, for one process and for a 2-process gloo launch
(``ACCELERATE_USE_CPU=1``, ``accelerate_configs/2gpu.yaml``), where only the main process converts. Peak RSS is
``getrusage`` ``maxrss`` of each process and the largest of its reaped children (the conversion's worker processes).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
NUM_CLASSES = 80


def write_sample(task: tuple[Path, int, int, str]) -> None:
    """One image and its label file, from a seed of its own so any worker count gives the same files."""
    root, index, seed, suffix = task
    rng = np.random.default_rng([seed, index])
    width, height = (int(v) for v in rng.integers(64, 161, 2))
    image = np.empty((height, width, 3), np.uint8)
    image[:] = rng.integers(0, 256, 3)
    lines = []
    for _ in range(int(rng.integers(1, 9))):
        w, h = rng.uniform(0.05, 0.6, 2)
        cx, cy = rng.uniform(w / 2, 1 - w / 2), rng.uniform(h / 2, 1 - h / 2)
        x1, y1 = int((cx - w / 2) * width), int((cy - h / 2) * height)
        x2, y2 = int((cx + w / 2) * width), int((cy + h / 2) * height)
        cv2.rectangle(image, (x1, y1), (x2, y2), tuple(int(c) for c in rng.integers(0, 256, 3)), -1)
        lines.append(f"{rng.integers(0, NUM_CLASSES)} {cx:.6f} {cy:.6f} {w:.6f} {h:.6f}")
    name = f"{index:012d}"
    cv2.imwrite(os.fspath(root / "images" / "train" / f"{name}.{suffix}"), image, [cv2.IMWRITE_JPEG_QUALITY, 90])
    (root / "labels" / "train" / f"{name}.txt").write_text("\n".join(lines) + "\n")


def generate(root: Path, num_images: int, seed: int, suffix: str = "jpg") -> Path:
    """The dataset's data YAML, writing the files first unless ``root`` already holds this count and seed."""
    yaml_path, marker = root / "data.yaml", root / "generated.json"
    stamp = {"num_images": num_images, "seed": seed, "format": suffix}
    if marker.is_file() and json.loads(marker.read_text()) == stamp:
        return yaml_path
    shutil.rmtree(root, ignore_errors=True)
    for folder in ("images", "labels"):
        (root / folder / "train").mkdir(parents=True)
    start = time.perf_counter()
    with multiprocessing.Pool() as pool:
        pool.map(write_sample, [(root, index, seed, suffix) for index in range(num_images)], chunksize=256)
    names = "\n".join(f"  {k}: class{k}" for k in range(NUM_CLASSES))
    yaml_path.write_text(f"path: {root}\ntrain: images/train\nval: images/train\nnames:\n{names}\n")
    marker.write_text(json.dumps(stamp))
    print(f"generated {num_images} images in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return yaml_path


def measure(yaml_path: str, cache: str, out: str) -> None:
    """In a fresh process (one rank of a launch, or alone): time one ``load_source`` and write the figures."""
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU")) if "WORLD_SIZE" in os.environ else None
    sys.path.insert(0, os.fspath(ROOT))  # this checkout's package, not an installed one
    from yolo11.data import load_source
    from yolo11.data.sources import CONVERSIONS

    # children forked before the conversion (by imports) count their inherited pages: record that floor too
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    source = load_source(yaml_path, "train", cache_dir=cache)
    seconds = time.perf_counter() - start
    rank = state.process_index if state else 0
    kib = 1024  # maxrss is in KiB on Linux
    record = {"rank": rank, "seconds": seconds, "rows": len(source.dataset), "conversions": CONVERSIONS["yolo"],
              "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / kib,
              "children_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / kib,
              "children_rss_before_mib": children_before / kib}
    Path(out, f"rank{rank}.json").write_text(json.dumps(record))


def run(yaml_path: Path, cache: Path, processes: int) -> list[dict]:
    """Wall time of the whole command and each rank's record."""
    out = Path(tempfile.mkdtemp())
    script = [os.fspath(Path(__file__).resolve()), "--measure", os.fspath(yaml_path), os.fspath(cache), os.fspath(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if processes == 1:
        command = [sys.executable, *script]
    else:
        env["ACCELERATE_USE_CPU"] = "1"
        command = [os.fspath(Path(sys.executable).with_name("accelerate")), "launch", "--config_file",
                   os.fspath(ROOT / "accelerate_configs" / "2gpu.yaml"), *script]
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - start
    records = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    shutil.rmtree(out)
    return [{"command_wall_s": wall, **record} for record in records]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-images", type=int, default=118287, help="COCO train2017 has 118287")
    parser.add_argument("--root", type=Path, help="dataset folder (kept for reuse); default: a temporary folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--format", choices=["jpg", "png"], default="jpg", help="image files to generate")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2], choices=[1, 2])
    parser.add_argument("--measure", nargs=3, metavar=("YAML", "CACHE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(*args.measure)
        return
    root = args.root or Path(tempfile.mkdtemp(prefix="conversion-bench-"))
    yaml_path = generate(root, args.num_images, args.seed, args.format)
    results = {"num_images": args.num_images, "format": args.format, "cpus": len(os.sched_getaffinity(0))}
    for processes in args.processes:
        cache = root.parent / f"{root.name}-cache-{processes}proc"
        shutil.rmtree(cache, ignore_errors=True)
        first = run(yaml_path, cache, processes)
        cached = run(yaml_path, cache, processes)
        cache_mib = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()) / 2**20
        results[f"{processes}proc"] = {"first": first, "cached": cached, "cache_mib": cache_mib}
        shutil.rmtree(cache)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
