"""How long a run's end waits for its last figures: a ``PlotPool`` started as a run starts it, then, once its
workers are ready, the validation figures of an 80-class dataset (PR/F1/P/R curves of six present classes, both
confusion matrices) and results.png of a 30-epoch results.csv submitted at once, and ``wait()`` timed.

    python benchmarks/plot_wait.py [--repeat 3] [--start-seconds 4]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's yolo11, not an installed one

from yolo11.evaluation import plots  # noqa: E402
from yolo11.evaluation.plot_pool import PlotPool  # noqa: E402
from yolo11.evaluation.results import COLUMNS, ResultsCSV  # noqa: E402

CLASSES, PRESENT = 80, [0, 16, 17, 20, 25, 58]


def figure_inputs(folder: Path) -> tuple[dict, list[str], Path]:
    """Validation metrics as an epoch of coco8 leaves them (six classes present, smooth curves) and a results.csv."""
    rng = np.random.default_rng(0)
    grid = np.linspace(0, 1, 1000)
    curves = np.clip(1 - grid[None, :] ** 2 * rng.random((len(PRESENT), 1)), 0, 1)
    matrix = np.zeros((CLASSES + 1, CLASSES + 1), dtype=int)
    matrix[CLASSES, PRESENT], matrix[PRESENT, CLASSES] = 3, 50
    metrics = {"pr_curve": {"recall": grid.tolist(), "precision": curves.tolist(), "classes": PRESENT},
               "conf_curve": {"confidence": grid.tolist(), "precision": curves.tolist(),
                              "recall": curves[::-1].tolist(), "classes": PRESENT},
               "per_class_ap50": rng.random(CLASSES).tolist(), "map50": 0.1, "confusion_matrix": matrix.tolist()}
    results = ResultsCSV(folder / "results.csv")
    for epoch in range(1, 31):
        results.append({column: epoch if column == "epoch" else float(rng.random()) for column in COLUMNS})
    return metrics, [f"class{k}" for k in range(CLASSES)], folder / "results.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--start-seconds", type=float, default=4.0, help="the workers' head start (a run's epochs)")
    args = parser.parse_args()
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            metrics, names, results = figure_inputs(folder)
            pool = PlotPool()
            time.sleep(args.start_seconds)
            start = time.perf_counter()
            for figure, figure_args in plots.validation_plot_jobs(folder, metrics, [], names):
                pool.submit(figure, *figure_args)
            pool.submit(plots.plot_results, results, folder / "results.png")
            pool.wait()
            print(f"figures written {time.perf_counter() - start:.3f} s after they were submitted", flush=True)
            pool.close()


if __name__ == "__main__":
    main()
