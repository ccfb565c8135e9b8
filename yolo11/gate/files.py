"""Opening what a user names: a regular file, or a one-line refusal.

Reading a FIFO waits for a writer that never comes and ``/dev/zero`` never ends, so every reader of the gate opens
through ``open_regular`` (or checks with ``check_regular_file`` before handing the path to a library), and so can
the data conversion code for images and label files.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

# What a stat mode is when it is not a regular file, in the words of the refusal.
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class FileRefusedError(ValueError):
    """A file the gate refuses; the message is one line: the file, then what is wrong with it."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path, self.problem = str(path), " ".join(problem.split())  # one line, whatever the cause said
        super().__init__(f"{path}: {self.problem}")


def _not_regular(path: Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a file")
        raise FileRefusedError(path, f"{kind}, not a regular file; refused (reading it could block or never end)")


def _os_error(path: Path, err: OSError) -> Exception:
    """``FileNotFoundError`` for nothing there, else a refusal naming the cause (a symbolic link loop...)."""
    if err.errno in (errno.ENOENT, errno.ENOTDIR):
        return FileNotFoundError(f"no such file: {path}")
    if err.errno == errno.ELOOP:
        return FileRefusedError(path, "a symbolic link loop (too many levels of symbolic links); refused")
    return FileRefusedError(path, f"cannot be opened ({err.strerror or err})")


def check_regular_file(path: str | Path) -> Path:
    """``path`` when it names a regular file (after following symbolic links), checked with ``os.stat`` without
    opening it; ``FileNotFoundError`` when nothing is there, ``FileRefusedError`` for a FIFO, a device, a socket, a
    directory or a symbolic link loop. For a path handed to a library that opens it itself (an image decoder)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise _os_error(path, err) from None
    _not_regular(path, mode)
    return path


def _open_checked(path: Path) -> tuple[int, os.stat_result]:
    """A descriptor of ``path`` opened non-blocking (a FIFO put in its place does not block the open) and its
    ``fstat``, refused unless it is a regular file; the caller closes it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise _os_error(path, err) from None
    try:
        info = os.fstat(fd)
        _not_regular(path, info.st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def open_regular(path: str | Path) -> BinaryIO:
    """``path`` opened for binary reading, refused as in ``check_regular_file``; the check is repeated on the
    opened file."""
    path = check_regular_file(path)
    fd, _ = _open_checked(path)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_regular(path: str | Path, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``, refused as in ``open_regular`` (and when larger).

    One open and one ``fstat`` (no ``stat`` before, no blocking mode after: a regular file never blocks): the
    conversion reads every image of a dataset through here, so its cost per file counts."""
    path = Path(path)
    fd, info = _open_checked(path)
    try:
        if info.st_size > max_bytes:
            raise FileRefusedError(path, f"{info.st_size} bytes: larger than the {max_bytes}-byte limit for this file")
        chunks, left = [], info.st_size + 1  # one byte more: a file that grew since the fstat is still caught
        while left > 0 and (chunk := os.read(fd, left)):
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise FileRefusedError(path, f"more than the {max_bytes}-byte limit for this file")
    return data
