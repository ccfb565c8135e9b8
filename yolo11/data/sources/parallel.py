"""Per-image conversion work (header, EXIF, decode check, labels) spread over worker processes, in input order,
with one progress bar.

Processes rather than threads: ``checks.decode_problem`` ties libjpeg's warnings to a file by redirecting the
process's stderr around the decode, which threads of one process would mix up.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

from tqdm.auto import tqdm

from yolo11.child_process import main_module_hidden, worker_signals

Item = TypeVar("Item")
Result = TypeVar("Result")

# Fewer items than this are checked in this process: starting the pool (a forkserver importing this package) takes
# about a second of a 2-core machine, the checks of 500 small images about 0.05 s (benchmarks/image_check_cost.py).
MIN_ITEMS_FOR_WORKERS = 500
MAX_CHUNK = 256  # items per task: large enough to hide the pickling, small enough to keep the bar moving


class _Lines:
    """A stream for tqdm in a log file: each refresh as a line of its own, not carriage returns."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        text = text.replace("\r", "").strip("\n")
        if text.strip():
            self.stream.write(text + "\n")

    def flush(self) -> None:
        self.stream.flush()


def _context(func: Callable) -> multiprocessing.context.BaseContext:
    """Workers forked from a clean server process ("forkserver"), not from this one: by the time a dataset converts,
    this process runs threads (pyarrow's jemalloc, torch's, tqdm's), and a worker forked while one of them held a
    lock waits on it forever (seen: the conversion pool hung in a test run). The server imports ``func``'s module
    once; each worker then starts in milliseconds. Where there is no forkserver (Windows, macOS default), spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([func.__module__])
    return context


def default_workers() -> int:
    """CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def ordered_map(func: Callable[[Item], Result], items: Sequence[Item], *, workers: int | None,
                desc: str) -> list[Result]:
    """``[func(item) for item in items]``, computed in ``workers`` processes (in this one when ``workers <= 1``),
    showing ``desc: n/total images``. ``func`` must be a module-level function (it is pickled by name)."""
    if workers is None:  # auto: all cores, but none for a few items, where a pool's start costs more
        workers = default_workers() if len(items) >= MIN_ITEMS_FOR_WORKERS else 1
    workers = min(workers, len(items))
    terminal = sys.stderr.isatty()
    bar = tqdm(total=len(items), desc=desc, unit="img", file=sys.stderr if terminal else _Lines(sys.stderr),
               dynamic_ncols=True, bar_format="{desc}: {n_fmt}/{total_fmt} images [{elapsed}<{remaining}, {rate_fmt}]",
               mininterval=0.5 if terminal else 5.0)  # a log file gets a line every 5 s, not 10 a second
    try:
        if workers <= 1:
            results = []
            for item in items:
                results.append(func(item))
                bar.update()
            return results
        chunk = max(1, min(MAX_CHUNK, len(items) // (workers * 8)))
        with main_module_hidden():  # a user's unguarded script is not run again in the workers
            pool = _context(func).Pool(workers, initializer=worker_signals)
        with pool:
            results = []
            for result in pool.imap(func, items, chunksize=chunk):
                results.append(result)
                bar.update()
            return results
    finally:
        bar.close()
