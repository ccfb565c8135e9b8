"""Why a process of a run failed, said by the process that knows.

A rank that exits without a word leaves the job's log to the launcher, whose SIGTERM to the other ranks (exit 143)
a scheduler reads as a preemption. So every process that fails says why in one ``error:`` line (``error: [rank r]``
on the ranks other than the main one), and a line that several processes of one host meet alike (a missing
dataset, a bad flag) is said once: the first to say it leaves a marker in a folder named for the job.

Where every process checks in (``agreed``: the resume's checks, the checkpoint and output writes) a failure on one
process ends every process there with exit 2, instead of leaving the others to wait in the next collective until
the launcher kills them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import sys
import tempfile
from pathlib import Path

import torch
from accelerate.utils import broadcast_object_list, reduce


class FailedElsewhere(Exception):
    """Another process failed in an ``agreed`` block and says why; this one ends quietly (exit 2)."""


def job_token(state) -> str:
    """A token that every process of this job shares (the main process's, broadcast): names the markers."""
    token = [secrets.token_hex(8)]
    if state.num_processes > 1:
        broadcast_object_list(token, from_process=0)
    return token[0]


def say_error(message: str, state, job: str) -> None:
    """``error: <message>`` on stderr, ``error: [rank r] <message>`` on a rank other than the main one; in a
    multi-process job, once per host for the same message (``job``: ``job_token``'s; empty before the processes
    shared one, when every rank says it)."""
    if state.num_processes > 1 and job and not _first_to_say(message, job):
        return
    if state.num_processes == 1 and os.environ.get("RANK", "0") != "0":  # launched ranks each in a world of one
        return  # (check_launch's error): the launcher's first rank says it
    rank = "" if state.is_main_process else f"[rank {state.process_index}] "
    print(f"error: {rank}{message}", file=sys.stderr, flush=True)


def _first_to_say(message: str, job: str) -> bool:
    folder = Path(tempfile.gettempdir()) / f"yolo11-errors-{job}"
    marker = folder / hashlib.sha256(message.encode()).hexdigest()[:16]
    try:
        folder.mkdir(exist_ok=True)
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    except OSError:  # no marker (a full /tmp): said twice rather than not at all
        return True
    return True


@contextlib.contextmanager
def agreed(state, catch: tuple[type[BaseException], ...] = (OSError,)):
    """Run the block on every process; when it raises ``catch`` on any of them, every process raises at its end:
    its own error where it failed, ``FailedElsewhere`` elsewhere. The block must be entered by every process."""
    error = None
    try:
        yield
    except catch as err:
        error = err
    if state.num_processes > 1:
        failed = reduce(torch.tensor([float(error is not None)], device=state.device), reduction="sum")
        if error is None and failed.item():
            raise FailedElsewhere("another process failed and said why")
    if error is not None:
        raise error
