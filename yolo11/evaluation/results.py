"""results.csv in Ultralytics' column layout, one row per epoch, appended as training goes."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from yolo11.gate import FileRefusedError, read_regular
from yolo11.output_errors import write_file

MAX_RESULTS_BYTES = 64 << 20  # ~250 bytes an epoch: far beyond any run's table

COLUMNS = (
    "epoch", "time", "train/box_loss", "train/cls_loss", "train/dfl_loss",
    "metrics/precision(B)", "metrics/recall(B)", "metrics/mAP50(B)", "metrics/mAP50-95(B)",
    "val/box_loss", "val/cls_loss", "val/dfl_loss", "lr/pg0", "lr/pg1", "lr/pg2",
    "throughput/img_s", "memory/peak_gb",
)


def columns(lr_groups: int = 3, loss_names: tuple[str, ...] = ("box_loss", "cls_loss", "dfl_loss")) -> tuple[str, ...]:
    """``COLUMNS`` with one ``lr/pgN`` column per optimizer parameter group (MuSGD has 8), as Ultralytics writes,
    and the loss items named ``loss_names`` (YOLO26's third is ``l1_loss``)."""
    first, last = COLUMNS.index("lr/pg0"), COLUMNS.index("lr/pg2")
    named = COLUMNS[:first] + tuple(f"lr/pg{i}" for i in range(lr_groups)) + COLUMNS[last + 1:]
    renamed = dict(zip(("box_loss", "cls_loss", "dfl_loss"), loss_names, strict=True))
    return tuple(f"{c.split('/')[0]}/{renamed[c.split('/')[1]]}" if c.startswith(("train/", "val/")) else c
                 for c in named)


class ResultsCSV:
    """Appends rows to ``path``; the header is written once.

    On resume, ``keep_epochs`` = the number of finished epochs: rows with ``epoch`` (1-based) above it, written by
    the interrupted run after its last checkpoint, are dropped so the resumed run rewrites them. ``None`` starts
    a fresh file. ``lr_groups``: the optimizer's parameter groups, one ``lr/pgN`` column each. Every write replaces
    the whole file through a temporary name (``write_file``): a full disk never leaves a truncated table.
    """

    def __init__(self, path: Path, keep_epochs: int | None = None, lr_groups: int = 3,
                 loss_names: tuple[str, ...] = ("box_loss", "cls_loss", "dfl_loss")):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.columns = columns(lr_groups, loss_names)
        kept = [row for row in read_results(self.path)
                if (epoch := _number(row.get("epoch"))) is not None and int(epoch) <= keep_epochs] \
            if keep_epochs is not None and self.path.is_file() else []
        # `time` is cumulative, as Ultralytics': the seconds of the run before this resume (0 where a row says none)
        self.seconds_before = (_number(kept[-1].get("time")) or 0.0) if kept else 0.0
        self._text = self._rows([{k: row.get(k, "") for k in self.columns} for row in kept], header=True)
        write_file(self.path, self._text.encode())

    def append(self, row: dict) -> None:
        """Write one epoch; missing columns stay empty (e.g. epochs without validation); unknown keys raise."""
        unknown = set(row) - set(self.columns)
        if unknown:
            raise KeyError(f"results.csv has no column(s) {sorted(unknown)}")
        text = self._text + self._rows([{k: _format(row.get(k)) for k in self.columns}])
        write_file(self.path, text.encode())
        self._text = text

    def _rows(self, rows: list[dict], header: bool = False) -> str:
        out = io.StringIO(newline="")  # csv's own \r\n line ends, as a file opened with newline="" gets
        writer = csv.DictWriter(out, fieldnames=self.columns)
        if header:
            writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()


def _format(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def read_results(path: Path) -> list[dict[str, str]]:
    """Rows of a results.csv as dicts of strings (empty string = no value). Read as a regular file of at most
    ``MAX_RESULTS_BYTES`` (a resumed run folder may come from elsewhere); ``FileRefusedError`` naming it otherwise,
    or when it is not a table."""
    text = read_regular(path, MAX_RESULTS_BYTES).decode("utf-8", errors="replace")
    try:
        return list(csv.DictReader(io.StringIO(text, newline="")))
    except csv.Error as err:
        raise FileRefusedError(path, f"not a results table ({err})") from None


def _number(cell: str | None) -> float | None:
    """A cell as a finite number; None when it holds none (a line edited by hand)."""
    try:
        value = float(cell or "")
    except ValueError:
        return None
    return value if math.isfinite(value) else None
