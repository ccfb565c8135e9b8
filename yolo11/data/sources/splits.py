"""Which split of a source to read: the one asked for, else a conventional stand-in for validation, said aloud."""

from __future__ import annotations

from collections.abc import Sequence

from yolo11.data.schema import DataSourceError

# Stand-ins for a missing validation split, in order: Hub datasets say "validation" (or only have "test", as
# cppe-5), Roboflow exports "valid"; Ultralytics also validates on "test" when a data YAML has no "val".
VAL_FALLBACKS = ("val", "validation", "valid", "test")


def choose_split(available: Sequence[str], requested: str, fallbacks: Sequence[str], flag: str | None,
                 where: str) -> tuple[str, str]:
    """``(split, note)``: ``requested`` when ``available`` has it (note ``""``), else the first of ``fallbacks``
    that it has and a note saying so, for the log. Only a conventional name (one of ``fallbacks``) falls back: a
    split the user named otherwise, such as ``dev``, is an error when absent.

    Raises ``DataSourceError`` listing the splits there are and naming ``flag`` (the option that picks the split).
    """
    if requested in available:
        return requested, ""
    for candidate in fallbacks if requested in fallbacks else ():
        if candidate != requested and candidate in available:
            return candidate, (f"{where}: no {requested!r} split, using {candidate!r} in its place "
                               f"({flag or 'the split argument'} chooses another)")
    tried = [s for s in fallbacks if s != requested] if requested in fallbacks else []
    also = f" nor {' / '.join(repr(s) for s in tried)}" if tried else ""
    choose = f"; choose one with {flag}" if flag else ""
    raise DataSourceError(f"{where}: no {requested!r} split{also} (it has {sorted(available)}){choose}")
