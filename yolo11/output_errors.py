"""Outputs that cannot be written (a full disk, a path through or onto an existing file, no permission): the
user's to fix, so the tools and the trainer say it in one line instead of a traceback. Every file the project writes
goes to a temporary name first and is renamed, so such an error leaves nothing half-written."""

from __future__ import annotations

import errno

WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EEXIST,
                          errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG})


def write_error_message(err: OSError) -> str:
    """``cannot write <file>: <reason>`` for an ``OSError`` of ``WRITE_ERRNOS``."""
    where = f" {err.filename}" if err.filename else ""
    return f"cannot write{where}: {err.strerror or err}"
