"""How the command-line programs end: every exit handler run, then no interpreter teardown.

A training process holds torch (and often torch._dynamo), a dataset, loader state and a CUDA context. At a normal
exit Python then frees the whole heap object by object and unloads every module: 0.8 s on a 2-core CPU after the
last file of a run was written (benchmarks/RESULTS.md), time the user waits for nothing. For a program that
succeeded, ``exit_process`` does what a normal exit does that anyone can observe (non-daemon threads joined,
``atexit`` handlers run: loader workers stopped, trackers finished, logging flushed; stdout and stderr flushed)
and then ends the process with ``os._exit``. Every file is complete by then: the trainer and the tools write
through temporary files that they rename before returning.

Only the programs' entry points call it (the console scripts, ``python -m ...``, ``train_accelerate.py``); the
``main`` functions return their exit code, so that Python callers (notebooks, tests) keep their interpreter.
A leaf: standard library only.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn


def exit_process(code: int | None) -> NoReturn:
    """End the program with ``code`` (None: 0) as described above when it succeeded. A failed or stopped program
    exits normally: nothing waits on it, and under a launcher its peers may still be stopping (a rank that leaves
    closes its connections under their collectives). Where this Python lacks the private hook a normal exit uses
    (``threading._shutdown``), it exits normally too."""
    code = 0 if code is None else int(code)
    shutdown = getattr(threading, "_shutdown", None)
    if code != 0 or shutdown is None or threading.current_thread() is not threading.main_thread():
        sys.exit(code)
    try:
        shutdown()  # threading's own exit step: executors told to stop, then non-daemon threads joined
        atexit._run_exitfuncs()  # what the interpreter runs next; exceptions are printed, not raised
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):  # closed, a broken pipe, or replaced by None
                pass
        os._exit(code)


def program(module: str) -> Callable[[], NoReturn]:
    """A console script's function: ``module``'s ``main()`` on the command line, ended by ``exit_process``."""

    def run() -> NoReturn:
        exit_process(importlib.import_module(module).main())

    run.__qualname__ = run.__name__ = f"run_{module.rsplit('.', 1)[-1]}"
    return run
