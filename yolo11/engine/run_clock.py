"""One clock for a training run: every phase timed in one place, read by the summary line and ``results.csv``.

    clock = RunClock(started=process_start)      # start-up counts from the process's launch
    with clock("training"): ...                   # phases add up over the run
    with clock("saving", "saving checkpoints"):   # ... and a part of one, timed with it
    clock.add("scoring", seconds)                 # a part of a phase measured elsewhere (the evaluator's compute)
    clock.split()                                 # "start-up 8.1 s, training 25.9 s (captures 1.2 s), ..."

Phases are this process's wall time (the main process's is what the summary prints). A leaf: standard library only.

Start-up's own parts are marked where they end (``mark_startup("model")``), before any clock exists (the clock
is part of the run that start-up builds); ``startup_split()`` reads them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

# Top-level phases, in the order the summary prints them; "other" is the wall time none of them covers.
PHASES = ("start-up", "training", "validation", "saving", "plots")
# Parts of a phase (measured inside it, not added to the wall-time split twice): part -> its phase.
PARTS = {"training captures": "training", "training scoring alongside": "training", "validation data": "validation",
         "scoring": "validation", "validation captures": "validation", "saving checkpoints": "saving",
         "saving writer waits": "saving"}
SHOWN_WHEN_ZERO = ("validation data", "scoring")  # the other parts are printed where they took time

_STARTUP_MARKS: list[tuple[str, float]] = []  # (the part that ended, time.time()) in this process


def mark_startup(part: str, first: bool = False) -> None:
    """Start-up's ``part`` ends now (the parts are contiguous: each runs from the previous mark); ``first``: the
    marks of an earlier run in this process (a caller training twice) are dropped."""
    if first:
        _STARTUP_MARKS.clear()
    _STARTUP_MARKS.append((part, time.time()))


class RunClock:
    """Seconds per phase since ``started`` (a ``time.time()`` of the process's launch, or now)."""

    def __init__(self, started: float | None = None) -> None:
        self._started_wall = started if started is not None else time.time()
        self._seconds = dict.fromkeys((*PHASES, *PARTS), 0.0)
        self._start_mark = time.perf_counter()  # the clock's own start: "start-up" ends at the first phase
        self._startup_open = True

    @contextlib.contextmanager
    def __call__(self, phase: str, part: str | None = None) -> Iterator[None]:
        """The block's seconds added to ``phase`` and, where given, to one of its ``part``s too."""
        self._close_startup()
        start = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            self.add(phase, seconds)
            if part is not None:
                self.add(part, seconds)

    def add(self, phase: str, seconds: float) -> None:
        if phase not in self._seconds:
            raise KeyError(f"unknown run phase {phase!r}; known: {', '.join(self._seconds)}")
        self._seconds[phase] += seconds

    def end_startup(self) -> None:
        """Start-up ends here (the first step is about to run): from the process's launch until now."""
        self._close_startup()

    def _close_startup(self) -> None:
        if self._startup_open:
            self._startup_open = False
            self._seconds["start-up"] = max(time.time() - self._started_wall, 0.0)
            self._start_mark = time.perf_counter()

    def startup_split(self) -> str:
        """Start-up's parts, e.g. "imports 3.04 s, process group 0.22 s, data 0.47 s, ..., rest 0.00 s": the
        seconds from the launch (or the previous mark) to each mark, and from the last mark to the end of start-up
        ("rest")."""
        end = self._started_wall + self._seconds["start-up"] if not self._startup_open else time.time()
        text, previous = [], self._started_wall
        for part, at in (*_STARTUP_MARKS, ("rest", end)):
            text.append(f"{part} {max(at - previous, 0.0):.2f} s")
            previous = at
        return ", ".join(text)

    def seconds(self, phase: str) -> float:
        return self._seconds[phase]

    def since_start(self) -> float:
        """Wall seconds since start-up ended (the run's own time: what results.csv's ``time`` counts)."""
        return time.perf_counter() - self._start_mark

    def total(self) -> float:
        """Wall seconds since the process's launch."""
        return self._seconds["start-up"] + self.since_start() if not self._startup_open else \
            time.time() - self._started_wall

    def split(self) -> str:
        """The summary's ``time:`` line body: each phase, the parts of validation, and the rest as "other"."""
        other = self.total() - sum(self._seconds[phase] for phase in PHASES)
        text = []
        for phase in PHASES:
            parts = ", ".join(f"{part.removeprefix(phase + ' ')} {self._seconds[part]:.1f} s" for part, of in
                              PARTS.items() if of == phase and (self._seconds[part] or part in SHOWN_WHEN_ZERO))
            text.append(f"{phase} {self._seconds[phase]:.1f} s" + (f" ({parts})" if parts else ""))
        return ", ".join(text) + f", other {max(other, 0.0):.1f} s"
