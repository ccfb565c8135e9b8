"""Numbered output folders (``exp``, ``exp2``, ``exp3``...), as Ultralytics numbers its ``runs/<task>/<name>``.

A folder is claimed by making it: ``mkdir`` fails on one that exists, so two jobs started at once from the same
place (a sweep, a second terminal) get a folder each, where looking first and making later would hand both the
same one. Training, ``yolo11-val`` and ``yolo11-predict`` all name their folders here.
"""

from __future__ import annotations

from pathlib import Path


def numbered_dir(base: Path, exist_ok: bool = False) -> Path:
    """``base`` made (its parents too) and returned; unless ``exist_ok``, where it exists, the first of ``base2``,
    ``base3``... that ``mkdir`` makes instead, so a second run never writes into the first one's folder."""
    base = Path(base)
    base.parent.mkdir(parents=True, exist_ok=True)
    if exist_ok:
        base.mkdir(exist_ok=True)
        return base
    path, index = base, 1
    while True:
        try:
            path.mkdir()
            return path
        except FileExistsError:
            index += 1
            path = base.with_name(f"{base.name}{index}")
