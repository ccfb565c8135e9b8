"""``--profile``: a ``torch.profiler`` trace of a few optimizer steps, to see where a training step spends its time.

The window opens after ``start`` optimizer steps (past compilation and the loader's first batches) and closes
``steps`` steps later. The main process writes ``<run>/profile/trace.json`` (open it in https://ui.perfetto.dev or
chrome://tracing) and ``summary.txt``: the busiest operators by device and by host time, and the share of the
window in which device kernels ran. A low share with a low ``data`` share in the progress lines means the host
(Python launching kernels) is the limit: try ``--compile``.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile


class StepProfiler:
    """Profiles optimizer steps ``[start, start + steps)`` when ``enabled``; ``step`` after every optimizer step,
    ``close`` once at the end of training."""

    def __init__(self, out_dir: Path, enabled: bool, device: torch.device, start: int = 10, steps: int = 5):
        self.out_dir = out_dir
        self.enabled = enabled
        self.device = device
        self.start = start
        self.steps = steps
        self._profile: profile | None = None
        self._opened_at = (0, 0.0)  # (optimizer steps, host time) when the window opened

    def step(self, optimizer_steps: int) -> None:
        """Call after each optimizer step with the run's step count."""
        if not self.enabled:
            return
        if self._profile is None and optimizer_steps == self.start:
            activities = [ProfilerActivity.CPU]
            if self.device.type == "cuda":
                activities.append(ProfilerActivity.CUDA)
            self._synchronize()
            self._profile = profile(activities=activities, record_shapes=False)
            self._profile.__enter__()
            self._opened_at = (optimizer_steps, time.perf_counter())
        elif self._profile is not None and optimizer_steps == self._opened_at[0] + self.steps:
            self.close(optimizer_steps)

    def close(self, optimizer_steps: int) -> None:
        """End the window early (training stopped inside it) or on time; a profiler left open crashes the exit."""
        if self._profile is None:
            return
        self._synchronize()
        seconds = time.perf_counter() - self._opened_at[1]
        self._profile.__exit__(None, None, None)
        self._write(self._profile, seconds, optimizer_steps - self._opened_at[0])
        self._profile, self.enabled = None, False

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _write(self, prof: profile, seconds: float, steps: int) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(self.out_dir / "trace.json"))
        events = prof.key_averages()
        # Kernel and copy events only: operator events carry their kernels' time too (the table's own total).
        device_seconds = sum(e.self_device_time_total for e in events if e.device_type == DeviceType.CUDA) / 1e6
        lines = [f"{steps} optimizer steps in {seconds * 1e3:.1f} ms host time "
                 f"({seconds / max(steps, 1) * 1e3:.1f} ms per step)"]
        if self.device.type == "cuda":
            lines.append(f"device kernels and copies: {device_seconds * 1e3:.1f} ms, "
                         f"{device_seconds / max(seconds, 1e-9):.0%} of the window")
            lines += ["", "by time on the device:", events.table(sort_by="self_device_time_total", row_limit=30)]
        lines += ["", "by host time:", events.table(sort_by="self_cpu_time_total", row_limit=30)]
        (self.out_dir / "summary.txt").write_text("\n".join(lines) + "\n")
        print(f"profile written to {self.out_dir}: " + "; ".join(line for line in lines[:2]), flush=True)
