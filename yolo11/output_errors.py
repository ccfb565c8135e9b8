"""Outputs that cannot be written (a full disk, a path through or onto an existing file, no permission): the
user's to fix, so the tools and the trainer say it in one line instead of a traceback. Every file the project writes
goes to a temporary name first and is renamed, so such an error leaves nothing half-written."""

from __future__ import annotations

import contextlib
import errno
import os
import re
from pathlib import Path

WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EEXIST,
                          errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.EFBIG})
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})  # space to free: "free space, then resume"
PROBE_BYTES = 1 << 16
_OS_ERROR = re.compile(r"os error (\d+)")  # how safetensors' Rust writer words an I/O error


def error_text(err: BaseException) -> str:
    """What the ``error:`` line says of a user error: its message, or for one raised without words (Python's own
    ``MemoryError``: a file whose parse needed more memory than there is) what it was."""
    return str(err) or ("out of memory" if isinstance(err, MemoryError) else type(err).__name__)


def write_error_message(err: OSError) -> str:
    """``cannot write <file>: <reason>`` for an ``OSError`` of ``WRITE_ERRNOS``."""
    where = f" {err.filename}" if err.filename else ""
    return f"cannot write{where}: {err.strerror or err}"


def as_write_error(err: BaseException, target: str | Path) -> OSError | None:
    """The ``OSError`` (of ``WRITE_ERRNOS``) behind a failed write to ``target`` (a file or the folder written
    into), None when the failure is something else. ``torch.save`` reports a full disk as a ``RuntimeError``
    without an errno ("unexpected pos ..."), OpenCV's ``imwrite`` only by returning False, safetensors as its own
    error with "os error 28" in the text: the first two are told by a probe write beside ``target``, the last
    read from the text."""
    if isinstance(err, OSError) and err.errno is not None:
        return err if err.errno in WRITE_ERRNOS else None
    match = _OS_ERROR.search(str(err))
    if match and int(match[1]) in WRITE_ERRNOS:
        return OSError(int(match[1]), os.strerror(int(match[1])), str(target))
    if not isinstance(err, (RuntimeError, OSError)):  # OSError without an errno: OpenCV's imwrite returned False
        return None
    probe_error = _probe(Path(target))
    if probe_error is None:
        return None
    return OSError(probe_error.errno, probe_error.strerror, str(target))


def _probe(target: Path) -> OSError | None:
    """A write of ``PROBE_BYTES`` beside ``target``: its error, None when it succeeds."""
    folder = target if target.is_dir() else target.parent
    probe = folder / f".write-probe-{os.getpid()}"
    try:
        with probe.open("wb") as f:
            f.write(b"\0" * PROBE_BYTES)
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        return err if err.errno in WRITE_ERRNOS else None
    finally:
        probe.unlink(missing_ok=True)
    return None


@contextlib.contextmanager
def writing(target: str | Path):
    """Writes to ``target`` in the block: a failure ``as_write_error`` recognises leaves it as that ``OSError``."""
    try:
        yield
    except Exception as err:
        found = as_write_error(err, target)
        if found is None or found is err:
            raise
        raise found from err


@contextlib.contextmanager
def replaced(path: str | Path):
    """A temporary name beside ``path`` to write (same suffix: writers choose the format by it), renamed to
    ``path`` when the block succeeds and removed when it fails: ``path`` is the old file or the new one, whole."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        if err.filename == str(tmp):  # the user knows the file by its own name
            raise OSError(err.errno, err.strerror, str(path)) from err
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_file(path: str | Path, data: str | bytes) -> None:
    """``data`` into ``path`` through ``replaced``; a full disk leaves as the ``OSError`` (``writing``)."""
    with replaced(path) as tmp, writing(path):
        if isinstance(data, str):
            tmp.write_text(data)
        else:
            tmp.write_bytes(data)
