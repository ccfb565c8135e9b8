"""Training progress: lines in logs, a bar on a terminal, the end-of-run summary."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator

from yolo11.engine.checkpoint import TrainState
from yolo11.engine.progress import BatchReport, Progress, print_summary

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


def report(epoch: int, batch: int, images: int, seconds: float, data_seconds: float, last: bool = False):
    return BatchReport(epoch, batch, torch.tensor([2.0, 4.0, 6.0]), 2, [0.1, 0.1, 0.1], images, seconds, data_seconds,
                       last)


def epoch_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("epoch")]


def test_progress_line_restarts_its_window_in_each_epoch(capsys):
    """A print interval longer than an epoch: the line in a later epoch reports that epoch's own figures, not a
    difference against the previous line's counters, which belong to another epoch (this gave negative data-wait
    shares and throughput diluted by validation time)."""
    progress = Progress(Accelerator(cpu=True), interval=5, epochs=3, batches_per_epoch=8, bars=False)
    progress.batch(TrainState(optimizer_steps=5), report(1, 5, images=16, seconds=4.0, data_seconds=1.0))
    progress.batch(TrainState(optimizer_steps=10), report(2, 5, images=32, seconds=2.0, data_seconds=0.5))
    lines = epoch_lines(capsys.readouterr().out)
    assert len(lines) == 2
    assert lines[0].startswith("epoch 2/3 batch 5/8 step 5 | box 1.000 cls 2.000 dfl 3.000 |")
    assert "| 4.0 img/s data 25% |" in lines[0]
    assert "| 16.0 img/s data 25% |" in lines[1]  # 32 images in 2 s, 0.5 s of them waiting
    assert "| RSS " in lines[0] and "| RSS 0.0G" not in lines[0]  # the process's peak memory on the CPU


def test_lines_every_interval_batches_and_at_each_epochs_end(capsys):
    progress = Progress(Accelerator(cpu=True), interval=2, epochs=2, batches_per_epoch=3, bars=False)
    for epoch in range(2):
        for batch in range(1, 4):
            progress.batch(TrainState(), report(epoch, batch, 4 * batch, batch, 0.0, last=batch == 3))
        progress.end_epoch()
    heads = [line.split(" step")[0] for line in epoch_lines(capsys.readouterr().out)]
    assert heads == ["epoch 1/2 batch 2/3", "epoch 1/2 batch 3/3", "epoch 2/2 batch 2/3", "epoch 2/2 batch 3/3"]


def test_a_terminal_gets_a_bar_instead_of_lines(capsys):
    """With bars (the main process on a TTY): one bar per epoch with the losses, img/s and data share; no lines."""
    progress = Progress(Accelerator(cpu=True), interval=1, epochs=2, batches_per_epoch=3, bars=True)
    for batch in range(1, 4):
        progress.batch(TrainState(), report(0, batch, 4 * batch, batch, 0.0, last=batch == 3))
    progress.end_epoch()
    out = capsys.readouterr().out
    assert not any(" step " in line and "img/s data" in line for line in out.splitlines())
    final = out.split("\r")[-1]
    assert final.startswith("epoch 1/2 100%|") and "3/3" in final
    assert "box 1.0000 cls 2.0000 dfl 3.0000" in final and "img/s" in final and "data 0%" in final


class FakeTime:
    """``time.time`` and ``time.perf_counter`` that move only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return self.now

    def perf_counter(self) -> float:
        return self.now


def test_summary_gives_training_throughput_apart_from_validation(capsys, monkeypatch):
    from yolo11.engine import run_clock

    fake = FakeTime()
    monkeypatch.setattr(run_clock, "time", fake)
    clock = run_clock.RunClock(started=fake.now - 6.0)  # the process started 6 s ago
    clock.end_startup()
    for phase, seconds in (("training", 40.0), ("validation", 25.0), ("saving", 3.0), ("plots", 1.5)):
        with clock(phase):
            fake.now += seconds
    clock.add("scoring", 10.0)
    clock.add("validation data", 2.5)
    clock.add("training captures", 1.25)
    fake.now += 0.5  # time in no phase: "other"
    print_summary(Accelerator(cpu=True), clock, images=400, best={"epoch": 3, "fitness": 0.5})
    out = capsys.readouterr().out
    assert "finished in 0:01:10 | training 0:00:40 at 10.0 img/s | validation 0:00:25" in out
    # a part is printed after its phase; captures only where graphs were captured
    assert ("time: start-up 6.0 s, training 40.0 s (captures 1.2 s), validation 25.0 s (data 2.5 s, scoring 10.0 s), "
            "saving 3.0 s, plots 1.5 s, other 0.5 s") in out  # no saving parts where none took time
    assert "best: epoch 3, fitness 0.5000" in out


def test_run_clock_refuses_an_unknown_phase_and_counts_start_up_from_the_launch(monkeypatch):
    from yolo11.engine import run_clock

    fake = FakeTime()
    monkeypatch.setattr(run_clock, "time", fake)
    clock = run_clock.RunClock(started=fake.now - 4.0)
    fake.now += 1.0
    with clock("training"):  # the first phase ends start-up: launch to here
        fake.now += 2.0
    assert clock.seconds("start-up") == 5.0 and clock.seconds("training") == 2.0 and clock.since_start() == 2.0
    with pytest.raises(KeyError, match="unknown run phase 'train'"):
        clock.add("train", 1.0)


def test_the_start_up_split_runs_from_the_launch_through_each_mark_to_the_first_step(monkeypatch):
    from yolo11.engine import run_clock

    fake = FakeTime()
    monkeypatch.setattr(run_clock, "time", fake)
    monkeypatch.setattr(run_clock, "_STARTUP_MARKS", [])
    clock = run_clock.RunClock(started=fake.now - 2.0)  # launched 2 s ago: the imports took them
    run_clock.mark_startup("an earlier run's part")  # a caller training twice in one process
    run_clock.mark_startup("imports", first=True)
    fake.now += 0.5
    run_clock.mark_startup("data")
    fake.now += 0.25
    clock.end_startup()
    assert clock.startup_split() == "imports 2.00 s, data 0.50 s, rest 0.25 s"
    assert clock.seconds("start-up") == 2.75


def test_log_lines_fit_120_columns(capsys):
    """The widest line we promise (9999 batches an epoch, 99,999 steps, losses below 10, 10,000 img/s, an ETA of
    hours) and the epoch summary."""
    from yolo11.engine.run_outputs import RunOutputs

    progress = Progress(Accelerator(cpu=True), interval=1, epochs=300, batches_per_epoch=9999, bars=False)
    big = BatchReport(299, 9999, torch.tensor([9.3456, 9.5678, 9.789]), 1, [0.00123456], 99999, 10.0, 1.0, True)
    progress.batch(TrainState(optimizer_steps=99999), big)
    row = {"epoch": 300, "time": 36000.0, **{f"{split}/{name}_loss": 12.3456 for split in ("train", "val")
                                             for name in ("box", "cls", "dfl")},
           **{f"metrics/{key}(B)": 0.5 for key in ("mAP50-95", "mAP50", "precision", "recall")}}
    outputs = RunOutputs.__new__(RunOutputs)  # only epoch_line's attribute
    outputs.epochs = 300
    lines = capsys.readouterr().out.splitlines() + outputs.epoch_line(row, 36000.0, val_seconds=3600.0).splitlines()
    assert len(lines) == 3
    assert max(map(len, lines)) <= 120, "\n".join(f"{len(line)} {line}" for line in lines)


def test_a_second_run_in_one_process_counts_its_start_up_from_its_call(tmp_path, capsys, monkeypatch):
    """A script training twice: the second run's start-up was measured from the process's launch (14 s for a call
    of 5 s in all); it counts from its own call."""
    import re
    import time

    from helpers.engine_helpers import TINY_FLAGS, reset_accelerate_state

    from yolo11.engine.config import parse_config
    from yolo11.engine.trainer import train

    flags = [*TINY_FLAGS, "--batch-size", "4", "--epochs", "1", "--output-dir", str(tmp_path)]
    assert train(parse_config([*flags, "--name", "first"])) == 0
    reset_accelerate_state()
    time.sleep(3)  # longer than the second run's start-up
    capsys.readouterr()
    called = time.monotonic()
    assert train(parse_config([*flags, "--name", "second"])) == 0
    took = time.monotonic() - called
    reset_accelerate_state()
    start_up = float(re.search(r"time: start-up ([\d.]+) s", capsys.readouterr().out).group(1))
    assert start_up <= took
