"""One job per run folder: ``<run>/.lock``, an ``flock`` that the main process holds for the life of the run.

Two jobs with one ``--name`` (``--exist-ok``, or a resume of a run that still trains) would interleave
``results.csv`` and prune each other's checkpoints. The lock file says who holds it (pid and host); the kernel
releases an ``flock`` when its process ends, however it ends, so a lock left by a killed run never blocks (a pid file
would).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import sys
from pathlib import Path

from accelerate.utils import broadcast_object_list

LOCK_FILE = ".lock"
NO_FLOCK = frozenset({errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK})  # e.g. Lustre mounted without -o flock


class RunFolderBusyError(ValueError):
    """The run folder is locked by another job's process."""


class RunLock:
    """The held lock of a run folder; ``release()`` (or the end of the process) frees it."""

    def __init__(self, fd: int):
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor of the open file releases the flock
            self._fd = None


def acquire(run_dir: Path) -> RunLock | None:
    """Lock ``run_dir`` for this process, or raise ``RunFolderBusyError`` naming the folder and the holder; None
    (with a warning) where the filesystem has no ``flock``: the run goes on unguarded rather than not at all."""
    path = run_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 256).decode(errors="replace").split()
        os.close(fd)
        who = f"process {holder[0]} on {holder[1]}" if len(holder) >= 2 else "another process"
        raise RunFolderBusyError(f"{run_dir} is in use by {who} (it holds {path}): wait for that run to end, or "
                                 "give this one another --name") from None
    except OSError as err:
        os.close(fd)
        if err.errno not in NO_FLOCK:
            raise
        print(f"warning: {run_dir}: the filesystem does not lock files ({err.strerror}): nothing keeps a second job "
              "with this --name out of the folder", file=sys.stderr, flush=True)
        return None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return RunLock(fd)


def lock_run_dir(run_dir: Path, state) -> RunLock | None:
    """The main process locks ``run_dir`` (None on the other processes); its refusal, or the ``OSError`` of a lock
    file that cannot be written, is raised on every process."""
    lock, outcome = None, [None]
    if state.is_main_process:
        try:
            lock = acquire(run_dir)
        except (RunFolderBusyError, OSError) as err:
            outcome = [err]
    if state.num_processes > 1:
        broadcast_object_list(outcome, from_process=0)
    if outcome[0] is not None:
        raise outcome[0]
    return lock
