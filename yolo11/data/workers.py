"""What every loader worker process sets up for itself: RNG seeds, OpenCV threads, CPU priority, memory reuse."""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import multiprocessing.util  # noqa: F401  (registers its exit handler first: ours must come after it)
import os
import random
import signal
import sys
import time
import weakref

import cv2
import numpy as np
import torch

WORKER_NICENESS = 10
_live_iterators: weakref.WeakSet = weakref.WeakSet()
_loader_workers: weakref.WeakSet = weakref.WeakSet()  # their worker processes (multiprocessing keeps them)
# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory(trim_threshold: int = 1 << 30, mmap_threshold: int = 32 << 20) -> bool:
    """Let this process's glibc malloc keep freed memory for reuse instead of returning it to the system.

    A worker makes each sample's canvas and warped image (1-5 MB each) in fresh memory and frees a whole batch of
    them after the collate. By default glibc hands large blocks back (``mmap``/heap trimming), so the next batch
    page-faults all of it in again (100-300 first-touch faults per 640 px mosaic sample). Keeping a batch's worth
    per worker removes them and about 15% of the worker's CPU time per sample (``benchmarks/RESULTS.md``).
    Returns whether the settings took (glibc on Linux only; elsewhere nothing changes)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    return bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold)) and bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold))


def seed_worker(worker_id: int) -> None:
    """Seed the libraries' global RNGs per worker (our augmentation does not use them, user code might), keep
    OpenCV single-threaded inside each worker (the workers are the parallelism), ignore SIGINT and SIGTERM (the
    training process stops at a step boundary and ends its workers), and lower the worker's CPU
    priority: with as many workers as cores, the training process's Python thread, which launches every GPU
    kernel, must not queue behind them. The workers still get every cycle the main process does not use. Each
    worker also keeps the memory it frees (``keep_freed_memory``)."""
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)
    cv2.setNumThreads(0)
    for signum in (signal.SIGINT, signal.SIGTERM):  # the training process decides when to stop, and stops them
        signal.signal(signum, signal.SIG_IGN)
    if hasattr(os, "nice"):  # POSIX
        os.nice(WORKER_NICENESS)
    keep_freed_memory()


def cores_per_process() -> int:
    """The CPU cores this process may use divided by the training processes on this machine, at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(cores // max(local_processes, 1), 1)


def usable_workers(requested: int) -> int:
    """``requested`` loader workers, capped at ``cores_per_process()`` (as Ultralytics caps them): more workers
    than cores only oversubscribe them."""
    return min(requested, cores_per_process())


def stop_workers_at_exit(iterator) -> None:
    """Stop ``iterator``'s workers when the program exits with it still alive.

    The workers ignore SIGTERM (``seed_worker``), and multiprocessing's exit handler terminates daemonic children
    with SIGTERM and then joins them: a loader iterator that outlives the program (one held at module level, or
    by the traceback of an uncaught exception) would make the exit wait forever. ``_stop_live_iterators`` runs
    before multiprocessing's handler (exit handlers run last registered, first) and ends them the normal way."""
    if not hasattr(iterator, "_shutdown_workers"):  # no workers: nothing to stop
        return
    _live_iterators.add(iterator)
    _loader_workers.update(getattr(iterator, "_workers", ()))


@atexit.register  # at import: after multiprocessing's own handler, so it runs before it
def _stop_live_iterators() -> None:
    for iterator in list(_live_iterators):
        iterator._shutdown_workers()
    end_stray_workers()


EXIT_GRACE_SECONDS = 1.0


def end_stray_workers(grace: float = EXIT_GRACE_SECONDS) -> int:
    """Kill the loader workers of this process still alive, after ``grace`` seconds to end by themselves; returns
    how many were killed. At exit only: a worker busy with a long sample on a loaded machine misses its loader's
    stop (``_shutdown_workers`` waits a few seconds, then sends the SIGTERM the worker ignores), and
    multiprocessing's exit handler would wait for it forever after its own SIGTERM."""
    deadline = time.monotonic() + grace
    killed = 0
    for worker in list(_loader_workers):
        worker.join(timeout=max(deadline - time.monotonic(), 0.0))
        if worker.is_alive():
            worker.kill()
            worker.join()
            killed += 1
    return killed
