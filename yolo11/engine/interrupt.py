"""Stop requests (SIGINT, SIGTERM: Ctrl-C, ``accelerate launch``'s forwarding, SLURM and Kubernetes preemption)
honoured in every phase of a run, with every rank exiting with the same code (128 + the signal: 130, 143).

- start-up and dataset conversion: the first signal raises ``StopRequested`` at once (conversions write their
  cache under a temporary name, so none is left half-written); nothing to save.
- training: the step in flight completes; every rank stops after the same optimizer step and checkpoints.
- validation: cut short at the next batch; the checkpoint holds the finished training epoch, and a resume runs
  that validation again.
- checkpoint writing: the atomic write completes, then the run stops.
- the end (summary, final plots, trackers, ``--push-to-hub``): the rest is skipped; the last checkpoint is whole.

A signal more than ``GRACE_SECONDS`` after the first ends the process at once. Signals within that window are
the same request passed on by launchers: a Ctrl-C under a single-process ``accelerate launch`` delivers SIGINT and,
a moment later, the launcher's SIGTERM; a scheduler's SIGTERM to the launcher is forwarded to the trainer, which
got its own. The single-process launcher sends SIGKILL 5 s after its SIGTERM (torch elastic, 30 s): the step or
validation batch in flight and the checkpoint must be done by then.

A launcher reports 130 or 143 only when it was stopped by the signal itself (a worker's own 130 or 143 is a
"failure", exit 1): so a rank stopped by a signal that the launcher may not have got passes it to the launcher
as its last act (``tell_launcher``).

``YOLO11_STOP_AT=<phase>:<SIGINT|SIGTERM>[:<rank>|:group]`` (tests) sends the signal to this process (``rank``:
only there; ``group``: the whole process group, as a terminal's Ctrl-C) when the run enters ``phase``
(``PHASES``), so that a test stops every phase deterministically.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch
from accelerate import Accelerator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_SECONDS = 1.0
PHASES = ("startup", "conversion", "training", "validation", "checkpoint", "finish")
STOP_AT_VARIABLE = "YOLO11_STOP_AT"


class StopRequested(BaseException):
    """A stop signal before training started (not an ``Exception``: no error handler may swallow it)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopSignal:
    """Catches SIGINT and SIGTERM while installed (main thread only). The first signal sets a flag that the run
    checks at safe points; with ``raise_first`` it raises ``StopRequested`` instead until ``defer()`` (the
    trainer's start-up, where there is nothing to save and no reason to wait)."""

    def __init__(self, raise_first: bool = False):
        self.signum: int | None = None
        self._first_at = 0.0
        self._previous: dict[int, object] = {}
        self._deferred = not raise_first

    def install(self) -> StopSignal:
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def uninstall(self, replacement=None) -> None:
        """Put back the handlers found at ``install()``; ``replacement``: that handler for every signal instead, with
        no moment under the previous ones in between."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if replacement is None else replacement)
        self._previous.clear()

    def defer(self) -> None:
        """From now on a signal is a request the run honours at its next safe point."""
        self._deferred = True

    def leaving(self) -> None:
        """The run ends on an error that a process says: the SIGTERM a launcher then sends the other ranks (or a
        Ctrl-C) is ignored until ``uninstall()``, rather than turned into a stop message or a traceback."""
        for signum in SIGNALS:
            signal.signal(signum, signal.SIG_IGN)

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum or 0)

    def wait(self, seconds: float) -> int | None:
        """Until a signal has come while installed (its number) or ``seconds`` have passed (None). With
        ``raise_first`` before ``defer()``, the first signal's ``StopRequested`` comes out of here."""
        deadline = time.monotonic() + seconds
        while self._previous and self.signum is None and time.monotonic() < deadline:
            time.sleep(0.001)
        return self.signum

    def enter(self, phase: str, rank: int = 0) -> None:
        """The run starts ``phase``: sends the test's signal when ``YOLO11_STOP_AT`` names it."""
        wanted = os.environ.get(STOP_AT_VARIABLE, "").split(":")
        if wanted[0] != phase:
            return
        target = wanted[2] if len(wanted) > 2 else "all"
        if target not in ("all", str(rank)) and not (target == "group" and rank == 0):  # one Ctrl-C per group
            return
        signum = signal.Signals[wanted[1]] if len(wanted) > 1 else signal.SIGINT
        os.environ.pop(STOP_AT_VARIABLE)  # once
        if target == "group":
            os.killpg(os.getpgrp(), signum)
            # unlike os.kill, killpg returns before this process has run its handler: the kernel may hand the
            # signal to another thread, run later on a busy machine, and the phase would be over by then
            self.wait(5.0)
        else:
            os.kill(os.getpid(), signum)  # handled before os.kill returns (CPython checks its signals there)

    def _handle(self, signum: int, frame) -> None:
        if self.signum is None:
            self.signum, self._first_at = signum, time.monotonic()
            if not self._deferred:
                print(f"\n{signal.Signals(signum).name}: stopping (training had not started: nothing to save)",
                      file=sys.stderr, flush=True)
                raise StopRequested(signum)
            print(f"\n{signal.Signals(signum).name}: stopping at the next safe point and saving a checkpoint "
                  "(send it again to stop at once)", flush=True)
            return
        if time.monotonic() - self._first_at > GRACE_SECONDS:
            signal.signal(signum, signal.SIG_DFL)  # a second request: the default action, now
            os.kill(os.getpid(), signum)


def tell_launcher(signum: int) -> None:
    """Send ``signum`` to the parent process when it is ``accelerate launch`` or torch elastic and the signal may
    not have reached it, so that the job exits with 128 + ``signum`` instead of reporting a failed worker; never to
    a shell or anything else.

    Torch elastic's agent takes a second signal in its stride (it exits 128 + that signal). The single-process
    launcher does not: a SIGINT while it handles its own Ctrl-C escapes as a traceback. It is told of SIGTERM
    only, which it turns into exit 143 whenever it comes; a SIGINT reached it already (a terminal's Ctrl-C is
    sent to the whole foreground process group)."""
    elastic = "TORCHELASTIC_RUN_ID" in os.environ
    if not elastic and signum != signal.SIGTERM:
        return
    try:
        import psutil  # an Accelerate dependency

        parent = psutil.Process(os.getppid())
        words = [os.path.basename(part) for part in parent.cmdline()[:4]]
    except Exception:  # noqa: BLE001 - psutil.Error, ImportError: gone, or not ours to read; tell no one
        return
    if ("accelerate" in words and "launch" in words) or "torchrun" in words or "torch.distributed.run" in words:
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(parent.pid, signum)


class StopAgreement:
    """Whether every rank should stop after this optimizer step, the same answer on every rank, and the signal
    they all exit with (SIGINT when any rank's first signal was SIGINT, else SIGTERM).

    One process: the local flag. Several: each step all-reduces the local request on the device and copies the
    sum to pinned host memory without waiting; the step after reads it (long computed by then), so all ranks stop
    after the same step, one step after the signal, with no host sync per step.
    """

    def __init__(self, accelerator: Accelerator, stop: StopSignal):
        self.accelerator, self.stop = accelerator, stop
        device = accelerator.device
        self._host = torch.zeros(len(SIGNALS), pin_memory=device.type == "cuda")
        self._event: torch.cuda.Event | None = None
        self._sent = False
        self.signum: int | None = None  # agreed: the same on every rank

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum or self.stop.signum or 0)

    def _local(self) -> torch.Tensor:
        return torch.tensor([float(self.stop.signum == s) for s in SIGNALS], device=self.accelerator.device)

    def _agree(self, counts: torch.Tensor) -> bool:
        if counts.sum() > 0:
            self.signum = int(SIGNALS[0] if counts[0] > 0 else SIGNALS[1])
        return self.signum is not None

    def should_stop(self) -> bool:
        """Call once per optimizer step, on every rank."""
        if self.accelerator.num_processes == 1:
            self.signum = self.stop.signum
            return self.stop.requested
        agreed = False
        if self._sent:
            if self._event is not None:
                self._event.synchronize()
            agreed = self._agree(self._host)
        self._host.copy_(self.accelerator.reduce(self._local(), reduction="sum"), non_blocking=True)
        self._event = None
        if self.accelerator.device.type == "cuda":
            self._event = torch.cuda.Event()
            self._event.record()
        self._sent = True
        return agreed

    def agreed_now(self) -> bool:
        """The same question answered with a blocking all-reduce (between epochs, where a sync costs nothing)."""
        self._sent, self._event = False, None
        if self.accelerator.num_processes == 1:
            self.signum = self.stop.signum
            return self.stop.requested
        return self._agree(self.accelerator.reduce(self._local(), reduction="sum").cpu())
