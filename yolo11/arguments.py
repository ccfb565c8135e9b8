"""The command lines' argument parser: a usage error is one line, ``error: ...``, and exit status 2.

argparse prints its whole usage (40-odd lines for ``yolo11 train``) before the line that says what is wrong;
here the usage comes only with ``--help``, and a misspelt flag or key names the closest one:

    $ yolo11 train epocs=3
    error: unknown argument 'epocs'; did you mean 'epochs'?

Ultralytics' ``yolo`` answers a wrong key the same way, in one line (with its whole help after it). No torch here.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Iterable, Sequence
from typing import NoReturn

# The messages our key readers raise (``ultralytics_args.read_ultralytics_keys``): the unknown key and the closest
# name they found, reworded as the flags' message.
_UNKNOWN_KEY = re.compile(r"(?:key=value arguments: )?unknown key '(?P<key>[^']*)'"
                          r"(?: \(did you mean (?P<close>\S+)\?\))?(?: \(neither [^)]*\))?")
_UNRECOGNIZED = "unrecognized arguments: "


def closest(word: str, *candidates: Iterable[str]) -> str | None:
    """The candidate closest to ``word`` (difflib's ratio, at least 0.6, as ``get_close_matches``), or None; on a
    tie, the one of the earlier group of ``candidates`` (a tool's own names before Ultralytics' keys)."""
    best, best_ratio = None, 0.6
    for group in candidates:
        for candidate in dict.fromkeys(group):
            ratio = difflib.SequenceMatcher(None, word, candidate).ratio()
            if ratio > best_ratio or (best is None and ratio == best_ratio):
                best, best_ratio = candidate, ratio
    return best


def unknown_argument(word: str, *candidates: Iterable[str]) -> str:
    """``unknown argument 'epocs'; did you mean 'epochs'?`` (without the question when nothing is close)."""
    close = closest(word, *candidates)
    return f"unknown argument {word!r}" + (f"; did you mean {close!r}?" if close else "")


class ArgumentParser(argparse.ArgumentParser):
    """argparse (with Ultralytics' ``key=value`` arguments, ``yolo11.engine.ultralytics_args``) whose usage errors
    are one ``error: ...`` line on stderr and exit 2; ``--help`` prints the usage as usual."""

    def flags(self) -> list[str]:
        """Every option string (``--imgsz``, ``--no-rect`` ...)."""
        return [option for action in self._actions for option in action.option_strings]

    def error(self, message: str) -> NoReturn:  # argparse's hook for every usage error
        print(f"error: {self.one_line(message)}", file=sys.stderr, flush=True)
        raise SystemExit(2)

    def one_line(self, message: str) -> str:
        """argparse's and our key readers' messages, the unknown ones reworded with the closest name."""
        if message.startswith(_UNRECOGNIZED):
            tokens = message[len(_UNRECOGNIZED):].split()
            # the words after an unknown flag are its values: name the flags (or, without any, the words)
            named = [token for token in tokens if token.startswith("-")] or tokens
            return "; ".join(unknown_argument(token.partition("=")[0], self.flags()) for token in named)

        def reword(match: re.Match) -> str:
            close = match.group("close")
            return f"unknown argument {match.group('key')!r}" + (f"; did you mean {close!r}?" if close else "")

        return _UNKNOWN_KEY.sub(reword, message)


def check_keys(argv: Sequence[str], ours: Iterable[str], others: Iterable[str] = ()) -> None:
    """Exit 2 with one line for the first ``key=value`` token of ``argv`` whose key is neither in ``ours`` nor in
    ``others`` (Ultralytics' keys a tool ignores); a token naming an existing file is a path, not a key."""
    ours, others = list(ours), list(others)
    for token in argv:
        key, equals, _ = token.partition("=")
        if not equals or not re.fullmatch(r"[A-Za-z_][\w-]*", key) or os.path.exists(token):
            continue
        if key.replace("-", "_") not in (*ours, *others):
            print(f"error: {unknown_argument(key, ours, others)}", file=sys.stderr, flush=True)
            raise SystemExit(2)
