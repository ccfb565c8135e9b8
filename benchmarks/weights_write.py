"""The epoch's weights file of a run, timed on the CPU: ``weights_snapshot`` (the training thread's part) and
``write_weights`` (the writer thread's), of a yolo11n of 80 classes in float16 as a run's ``last.safetensors``;
medians of ``--calls`` after 5 warm-up calls, one torch thread.

    python benchmarks/weights_write.py
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from yolo11.models import create_model
from yolo11.weights.safetensors_io import weights_snapshot, write_weights


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = create_model("yolo11n", num_classes=80).eval()
    snapshots, writes = [], []
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.calls + 5):
            start = time.perf_counter()
            snapshot = weights_snapshot(model, half=True)
            snapshots.append(time.perf_counter() - start)
            start = time.perf_counter()
            write_weights(snapshot, Path(folder) / "last.safetensors")
            writes.append(time.perf_counter() - start)
    print(f"snapshot median {statistics.median(snapshots[5:]) * 1000:.2f} ms, "
          f"write median {statistics.median(writes[5:]) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
