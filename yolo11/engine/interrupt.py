"""Stop at a step boundary on SIGINT or SIGTERM (Ctrl-C, ``accelerate launch``'s forwarding, SLURM and Kubernetes
preemption), with every rank stopping after the same optimizer step, so that one checkpoint holds them all.

The first signal only sets a flag; the step in flight completes, the trainer writes a checkpoint and exits with
128 + the first signal's number (130, 143). A signal more than ``GRACE_SECONDS`` after the first ends the
process at once. Signals within that window are the same request passed on by launchers: a Ctrl-C under a
single-process ``accelerate launch`` delivers SIGINT and, a moment later, the launcher's SIGTERM; a scheduler's
SIGTERM to the launcher is forwarded to the trainer, which got its own. The launcher sends SIGKILL 5 s after
its SIGTERM: the step and the checkpoint must be done by then.
"""

from __future__ import annotations

import os
import signal
import time

import torch
from accelerate import Accelerator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_SECONDS = 1.0


class StopSignal:
    """Catches SIGINT and SIGTERM while installed (main thread of the training process only)."""

    def __init__(self):
        self.signum: int | None = None
        self._first_at = 0.0
        self._previous: dict[int, object] = {}

    def install(self) -> StopSignal:
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum or 0)

    def _handle(self, signum: int, frame) -> None:
        if self.signum is None:
            self.signum, self._first_at = signum, time.monotonic()
            print(f"\n{signal.Signals(signum).name}: stopping after the current step and saving a checkpoint "
                  "(send it again to stop at once)", flush=True)
            return
        if time.monotonic() - self._first_at > GRACE_SECONDS:
            signal.signal(signum, signal.SIG_DFL)  # a second request: the default action, now
            os.kill(os.getpid(), signum)


class StopAgreement:
    """Whether every rank should stop after this optimizer step, the same answer on every rank.

    One process: the local flag. Several: each step all-reduces the local flag on the device and copies the sum
    to pinned host memory without waiting; the step after reads it (long computed by then), so all ranks stop
    after the same step, one step after the signal, with no host sync per step.
    """

    def __init__(self, accelerator: Accelerator, stop: StopSignal):
        self.accelerator, self.stop = accelerator, stop
        device = accelerator.device
        self._host = torch.zeros((), pin_memory=device.type == "cuda")
        self._event: torch.cuda.Event | None = None
        self._sent = False

    def should_stop(self) -> bool:
        """Call once per optimizer step, on every rank."""
        if self.accelerator.num_processes == 1:
            return self.stop.requested
        agreed = False
        if self._sent:
            if self._event is not None:
                self._event.synchronize()
            agreed = bool(self._host.item())
        local = torch.full((), float(self.stop.requested), device=self.accelerator.device)
        self._host.copy_(self.accelerator.reduce(local, reduction="sum"), non_blocking=True)
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
            return self.stop.requested
        local = torch.full((), float(self.stop.requested), device=self.accelerator.device)
        return bool(self.accelerator.reduce(local, reduction="sum").item())
