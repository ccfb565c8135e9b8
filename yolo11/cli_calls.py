"""The command-line entry points called from Python (``yolo11.YOLO``): keywords written as their ``key=value``
arguments, the ``error:`` line they print for a user error kept for the exception, and the process group that a
launched process needs again after the trainer closed it."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml


class ErrorLines:
    """Stands in for ``sys.stderr``: the last ``error: ...`` line (what the CLIs print for a user error, also
    argparse's ``prog: error: ...``) is kept in ``last``; the text passes through, or with ``hold`` waits for
    ``release`` (an argument error then raises without argparse's usage text)."""

    _ERROR = re.compile(r"(?:^|: )error: (.+)")

    def __init__(self, stream: Any, hold: bool = False) -> None:
        self.stream, self.hold, self.last = stream, hold, None
        self._line, self._held = "", []

    def write(self, text: str) -> int:
        *lines, self._line = (self._line + text).split("\n")
        for line in lines:
            match = self._ERROR.search(line)
            if match:
                self.last = match.group(1).strip()
        if self.hold:
            self._held.append(text)
            return len(text)
        return self.stream.write(text)

    def release(self) -> None:
        self.stream.write("".join(self._held))
        self._held = []

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding...: the real stream's
        return getattr(self.stream, name)


@contextlib.contextmanager
def error_lines(program: str | None = None, hold: bool = False) -> Iterator[ErrorLines]:
    """``sys.stderr`` read for ``error:`` lines (held back with ``hold``, and printed unless the block raises), and
    ``sys.argv[0]`` set to ``program``, the name argparse gives the tool in its notes (as ``yolo11.cli`` does)."""
    errors = ErrorLines(sys.stderr, hold)
    argv0 = sys.argv[0] if sys.argv else None
    if program is not None and sys.argv:
        sys.argv[0] = program
    try:
        with contextlib.redirect_stderr(errors):
            yield errors
        errors.release()
    finally:
        if argv0 is not None:
            sys.argv[0] = argv0


def train_tokens(kwargs: dict[str, Any]) -> list[str]:
    """Keywords as the trainer's ``key=value`` arguments, each value written as the YAML that reads back into it
    (``True`` -> ``true``, the string ``'yes'`` quoted, ``None`` -> ``null``)."""
    tokens = []
    for key, value in kwargs.items():
        value = str(value) if isinstance(value, Path) else value
        text = yaml.safe_dump([value], default_flow_style=True, width=math.inf).strip()[1:-1]  # "[x]" -> "x"
        tokens.append(f"{key}={text}")
    return tokens


def tool_tokens(kwargs: dict[str, Any]) -> list[str]:
    """Keywords as a tool's ``key=value`` arguments (``read_key_values``: a switch takes true/false, a flag its text);
    None is the tool's default, so it is left out."""
    return [f"{key}={str(value).lower() if isinstance(value, bool) else value}"
            for key, value in kwargs.items() if value is not None]


def is_main_process() -> bool:
    """Rank 0, or a single process (read from the launcher's environment, as the config parser does, so that no
    Accelerate state is made: ``notebook_launcher`` refuses to start after one)."""
    return os.environ.get("RANK", "0") == "0"


_GROUPS = itertools.count()  # process groups made again in this process: the same sequence on every rank


@contextlib.contextmanager
def process_group() -> Iterator[None]:
    """Under a launcher, the default process group for the block. Accelerate makes it once per process (the first
    ``PartialState``) and the trainer's ``end_training`` destroys it: a ``val`` after ``train`` (its own, at the
    end) or a second ``train`` makes it again, and destroys what it made when done, as the trainer would."""
    made = False
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import torch.distributed as dist

        from yolo11.engine.process_group import COLLECTIVE_TIMEOUT, launch_state

        state = launch_state()  # the trainer's; the first makes the group
        if not dist.is_initialized():
            # under a fresh key prefix: the launcher's store keeps the first group's addresses under the default one
            store, rank, world_size = next(dist.rendezvous("env://"))
            dist.init_process_group(state.backend, store=dist.PrefixStore(f"yolo11-api-{next(_GROUPS)}", store),
                                    rank=rank, world_size=world_size, timeout=COLLECTIVE_TIMEOUT)
            made = True
    try:
        yield
    finally:
        if made and dist.is_initialized():
            dist.destroy_process_group()
