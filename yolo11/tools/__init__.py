"""The user CLIs: ``yolo11-val``, ``yolo11-predict``, ``yolo11-export``, ``yolo11-convert``."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence

from yolo11.data.schema import DataSourceError
from yolo11.weights import UnsafeCheckpointError

# What a user can get wrong (paths, flags, weights, data): one ``error:`` line and exit 2, no traceback.
USER_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, UnsafeCheckpointError,
               DataSourceError, MemoryError)


def cli(main: Callable[[Sequence[str] | None], int]) -> Callable[[Sequence[str] | None], int]:
    """Wrap a tool's ``main``: user errors become one ``error:`` line on stderr and exit status 2."""

    @functools.wraps(main)
    def wrapper(argv: Sequence[str] | None = None) -> int:
        try:
            return main(argv)
        except USER_ERRORS as err:
            print(f"error: {err}", file=sys.stderr)
            return 2

    return wrapper
