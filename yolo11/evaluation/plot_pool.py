"""Figures drawn in worker processes while the run goes on.

matplotlib takes about a second per figure (text layout and rasterising, in one thread), and a run ends with
seven of them (PR/F1/P/R curves, two confusion matrices, results.png) after its last epoch, plus labels.jpg at its
start: several seconds of a small run's wall time. A few worker processes draw them side by side instead; the
trainer waits for them only at the very end.

Workers are spawned, not forked: ``Process.start`` returns at once (the imports happen in the child, while the run
goes on), and nothing is inherited from a process that runs threads by then. They are started without the
``__main__`` module, which a spawned process otherwise imports again: they need only the figure code, and a
user's script that calls the trainer without an ``if __name__ == "__main__"`` guard must not run twice.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor

from yolo11.child_process import main_module_hidden, worker_signals

MAX_WORKERS = 4  # the end of a run has 6-8 figures of about a second each


def _worker_start(parent: int) -> None:
    """``worker_signals`` (Ctrl-C ignored, dies with the trainer), then the figure code imported before the first
    figure is due."""
    worker_signals(parent)
    from yolo11.evaluation import plots

    plots._pyplot()


def _started() -> int:
    return os.getpid()


class PlotPool:
    """``submit(figure, *args)`` draws ``figure(*args)`` (a module-level function of ``yolo11.evaluation.plots``,
    arguments that pickle: NumPy arrays, lists, paths) in a worker process; ``wait()`` returns once every figure
    is written and raises the first figure's error (an ``OSError`` of a full disk keeps its errno)."""

    def __init__(self, workers: int | None = None):
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        workers = max(1, min(MAX_WORKERS, cores) if workers is None else workers)
        self._executor = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_worker_start, initargs=(os.getpid(),))
        # one task per worker starts them all now; each is then ready (imports done) when the figures come
        with main_module_hidden():
            self._pending: list[Future] = [self._executor.submit(_started) for _ in range(workers)]

    def submit(self, figure: Callable, *args) -> None:
        self._pending.append(self._executor.submit(figure, *args))

    def wait(self) -> None:
        """Every figure submitted so far written; the first error raised."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def close(self, cancel: bool = False) -> None:
        """Stop the workers once the figures still pending are written; ``cancel``: only those being drawn (a
        stopped run skips its figures, and a figure killed half drawn would leave a truncated file)."""
        self._executor.shutdown(wait=True, cancel_futures=cancel)
        self._pending = []
