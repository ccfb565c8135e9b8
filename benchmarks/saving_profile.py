"""Where a run's "saving" goes, function by function: ``yolo11 train key=value ...`` in this process with the
functions that the trainer runs under its "saving" clock wrapped by timers; prints their totals and counts after
the run (wall time on the calling thread; the weights' writer thread's own time is ``_write_weights_files``).

    python3 benchmarks/saving_profile.py data=.data/coco128.yaml epochs=100 batch=16 imgsz=640
"""

from __future__ import annotations

import collections
import functools
import sys
import time

from yolo11.cli import main as cli_main
from yolo11.engine import checkpoint, run_outputs, trainer
from yolo11.evaluation import results
from yolo11.program_exit import exit_process

TOTALS: dict[str, float] = collections.defaultdict(float)
CALLS: collections.Counter = collections.Counter()


def timed(owner, name: str, label: str) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            TOTALS[label] += time.perf_counter() - start
            CALLS[label] += 1

    setattr(owner, name, wrapper)


def main() -> int:
    for owner, name, label in (
            (run_outputs.RunOutputs, "weights_now", "weights_now (the weights' copy)"),
            (run_outputs.RunOutputs, "epoch_facts", "epoch_facts (losses, lrs)"),
            (run_outputs, "weights_snapshot", "  weights_snapshot"),
            (run_outputs, "peak_memory_gb", "  peak_memory_gb"),
            (run_outputs.RunOutputs, "record", "record (row, line, best, writer job)"),
            (results.ResultsCSV, "append", "  results.csv append"),
            (run_outputs.RunOutputs, "wait_for_writes", "  wait_for_writes"),
            (trainer, "save_checkpoint", "save_checkpoint"),
            (checkpoint, "check_finite", "  check_finite"),
            (run_outputs, "_write_weights_files", "_write_weights_files (writer thread)"),
            (trainer, "settle", "settle (incl. waiting for scoring)"),
            (trainer, "checkpoint_due", "checkpoint_due")):
        timed(owner, name, label)
    rc = cli_main(["train", *sys.argv[1:]])
    print("saving's functions (seconds, calls):")
    for label in sorted(TOTALS, key=lambda k: -TOTALS[k]):
        print(f"  {label:45s} {TOTALS[label]:8.3f} s  {CALLS[label]:5d}")
    return rc


if __name__ == "__main__":
    exit_process(main())
