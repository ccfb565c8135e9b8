"""What worker processes of the trainer's pools (dataset conversion, figures) do first."""

from __future__ import annotations

import contextlib
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # Linux prctl: a signal for this process when its parent dies


def worker_signals(parent: int | None = None) -> None:
    """The trainer decides when to stop: a worker ignores Ctrl-C (sent to the whole terminal's process group), dies
    on SIGTERM, and on Linux dies with its parent (``parent``: its pid when known; a forkserver's child takes the
    server, which exits with the trainer): a trainer killed with -9 cannot shut its pools down, and an idle worker
    would wait for work forever."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform == "linux":
        import ctypes

        parent = os.getppid() if parent is None else parent
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)


@contextlib.contextmanager
def main_module_hidden():
    """``multiprocessing``'s spawn (and the forkserver's server) re-imports ``__main__`` by its module name or file,
    which runs a user's script again when it has no ``if __name__ == "__main__"`` guard (a conversion pool started
    from such a script waited forever); without them it imports nothing of the parent's script. Wrap the start of
    the pool in it."""
    main = sys.modules["__main__"]
    saved = {name: main.__dict__.pop(name) for name in ("__file__", "__spec__") if name in main.__dict__}
    try:
        main.__spec__ = None
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)
