"""What a run leaves behind: results.csv, plots, last/best weights, tracker logs, early stopping.

Everything here writes on the main process only; weights are written to a temporary file and renamed. The best
epoch so far comes in (from the resumed ``TrainState``) and goes out in each ``EpochOutcome``; the training loop
owns the state.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from accelerate import Accelerator
from torch import nn

from yolo11.engine import dashboards, tracking
from yolo11.engine.loop import EpochResult
from yolo11.engine.progress import LOSS_NAMES, format_duration, peak_memory_gb
from yolo11.engine.run_clock import RunClock
from yolo11.engine.run_state import TrainState
from yolo11.evaluation import EvaluationResult, plots
from yolo11.evaluation.plot_pool import PlotPool
from yolo11.evaluation.results import ResultsCSV
from yolo11.evaluation.table import format_table
from yolo11.output_errors import replaced, writing
from yolo11.weights import load_weights, save_pretrained
from yolo11.weights.safetensors_io import WeightsSnapshot, weights_snapshot, write_weights


def fitness(metrics: dict) -> float:
    """Ultralytics 8.4's model-selection score (``DetMetrics.fitness``): mAP50-95 alone."""
    return metrics["map50_95"]


@dataclass(frozen=True)
class EpochFacts:
    """``RunOutputs.epoch_facts``: an epoch as it ended, before (or without) its validation's metrics."""

    epoch: int  # 0-based
    row: dict  # results.csv's columns known then: epoch, time, train losses, learning rates, throughput, memory
    seconds: float  # since the previous epoch's facts: the epoch line's "done in"
    optimizer_steps: int  # the trackers' step
    weights: WeightsSnapshot | None  # last.safetensors' tensors (main process)


@dataclass(frozen=True)
class EpochOutcome:
    best_fitness: float
    best_epoch: int  # 0-based; -1 before any validation
    stop: bool  # patience ran out


class RunOutputs:
    """``resumed``: the TrainState of the run so far (finished epochs, best epoch, tracker run id)."""

    loss_names: tuple[str, ...] = LOSS_NAMES  # the loss items' names (``progress.loss_names``): YOLO26's differ

    def __init__(self, accelerator: Accelerator, run_dir: Path, class_names: list[str], resumed: TrainState, *,
                 epochs: int, patience: int, plots: bool, report_to: list[str], lr_groups: int = 3,
                 loss_names: tuple[str, ...] = LOSS_NAMES, clock: RunClock | None = None):
        """``clock``: the run's (results.csv's ``time`` and the figures' wait are read from it and added to it)."""
        self.accelerator = accelerator
        self.clock = clock or RunClock()
        self.loss_names = loss_names
        self.run_dir = run_dir
        self.class_names = class_names
        self.best_fitness, self.best_epoch = resumed.best_fitness, resumed.best_epoch
        self.patience = patience
        self.epochs = epochs
        self.make_plots = plots
        self.weights_dir = run_dir / "weights"
        self.epoch_start = time.perf_counter()
        self.best_metrics: dict | None = None
        self.last_metrics: dict | None = None
        self.csv = ResultsCSV(run_dir / "results.csv", keep_epochs=resumed.epoch, lr_groups=lr_groups,
                              loss_names=loss_names) \
            if accelerator.is_main_process else None
        self.time_before = self.csv.seconds_before if self.csv is not None else 0.0  # results.csv's time: cumulative
        self.report_to = report_to
        self._figures: PlotPool | None = None  # started with the first figure (main process, --plots)
        # last/best.safetensors are written by a thread while the next epoch trains (tens of ms each on a GPU
        # machine's disk, every epoch of a small run), and train_batch0-2.jpg while the first one does
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="weights")
        self._written: Future | None = None
        self.final_metrics: dict | None = None  # the validation whose plots were drawn: the dashboards' curves
        self.last_step = 0

    def weights_now(self, model: nn.Module) -> WeightsSnapshot | None:
        """On the main process, ``model``'s weights as they are now, for ``epoch_facts``; float16 as Ultralytics'
        last.pt/best.pt: half the size (resume reads the float32 checkpoints instead)."""
        if not self.accelerator.is_main_process:
            return None
        return weights_snapshot(self.accelerator.unwrap_model(model, keep_torch_compile=False), half=True)

    def epoch_facts(self, epoch: int, result: EpochResult, lrs: list[float], weights: WeightsSnapshot | None,
                    optimizer_steps: int) -> EpochFacts:
        """What the epoch's record needs that must be read as the epoch ends: its time, losses, learning rates,
        peak memory, with the weights taken by ``weights_now`` as it ended. ``record`` takes them with the epoch's
        validation, at once or, where the validation is scored while the next epoch trains, after it."""
        now = time.perf_counter()
        row = {"epoch": epoch + 1, "time": round(self.time_before + self.clock.since_start(), 3)}
        row.update({f"train/{n}": v for n, v in zip(self.loss_names, result.mean_losses.tolist(), strict=True)})
        row.update({f"lr/pg{i}": lr for i, lr in enumerate(lrs)})
        row.update({"throughput/img_s": result.images / max(result.seconds, 1e-9),
                    "memory/peak_gb": peak_memory_gb(self.accelerator.device)})
        facts = EpochFacts(epoch, row, now - self.epoch_start, optimizer_steps, weights)
        self.epoch_start = now
        return facts

    def record(self, facts: EpochFacts, validation: EvaluationResult | None, final: bool = False,
               val_seconds: float = 0.0) -> EpochOutcome:
        """The epoch of ``facts`` with its ``validation``: results.csv's row, the epoch line, trackers, the best
        epoch, last/best weights (written in the background: a file to a temporary name, then renamed, so a crash
        never leaves a truncated one; best the same bytes). The validation plots are drawn for the ``final``
        epoch (or the one where patience stops the run) only, as Ultralytics does: drawing them costs seconds,
        more than a whole epoch of a small dataset."""
        accelerator, epoch, row = self.accelerator, facts.epoch, dict(facts.row)
        self.last_step = facts.optimizer_steps
        improved = False
        if validation is not None:
            m = self.last_metrics = validation.metrics
            row.update({"metrics/precision(B)": m["precision"], "metrics/recall(B)": m["recall"],
                        "metrics/mAP50(B)": m["map50"], "metrics/mAP50-95(B)": m["map50_95"]})
            row.update({f"val/{n}": v for n, v in zip(self.loss_names, validation.losses.tolist(), strict=True)})
            score = fitness(m)
            # the first validated epoch is the best so far whatever it scores (-1: nothing to find), as Ultralytics
            # writes best.pt after the first epoch: best.safetensors always exists once a run has validated
            improved = self.best_epoch < 0 or score > self.best_fitness
            if improved:
                self.best_fitness, self.best_epoch = score, epoch
                self.best_metrics = m
        if facts.weights is not None:
            self.write_in_background(_write_weights_files, facts.weights, self.weights_dir / "last.safetensors",
                                     improved)
        accelerator.log({k: v for k, v in row.items() if k != "epoch"} | {"epoch": epoch + 1},
                        step=facts.optimizer_steps)
        stop = not improved and self.may_stop(epoch)
        if accelerator.is_main_process:
            self.csv.append(row)
            print(self.epoch_line(row, facts.seconds, val_seconds), flush=True)
            if validation is not None:
                if self.make_plots and (final or stop):
                    for figure, args in plots.validation_plot_jobs(self.run_dir, validation.metrics,
                                                                   validation.samples, self.class_names):
                        self.draw(figure, *args)
                tracking.log_validation_images(accelerator, validation.samples, self.class_names,
                                               step=facts.optimizer_steps)
                dashboards.log_prediction_table(accelerator, validation.samples, self.class_names, epoch,
                                                step=facts.optimizer_steps)
                if (final or stop) and "pr_curve" in validation.metrics:
                    self.final_metrics = validation.metrics
        return EpochOutcome(self.best_fitness, self.best_epoch, stop)

    def may_stop(self, epoch: int) -> bool:
        """Whether patience ends the run after ``epoch`` unless its validation improves on the best one."""
        return self.patience > 0 and self.best_epoch >= 0 and epoch - self.best_epoch >= self.patience

    def epoch_line(self, row: dict, epoch_seconds: float, val_seconds: float = 0.0) -> str:
        """``epoch 3/100 done in 0:01:02 (validation 0:00:05) | mAP50-95 .. mAP50 .. P .. R ..`` and, on a second
        line, ``  losses box cls dfl: train .. .. .. | val .. .. ..``: each under 120 columns (one line was 165)."""
        def losses(split: str) -> str:
            return " ".join(f"{row[f'{split}/{name}']:.4f}" for name in self.loss_names)

        head = f"epoch {row['epoch']}/{self.epochs} done in {format_duration(epoch_seconds)}"
        loss_line = f"  losses {' '.join(name.split('_')[0] for name in self.loss_names)}: train {losses('train')}"
        if "metrics/mAP50-95(B)" not in row:
            return f"{head}\n{loss_line}"
        head += (f" (validation {format_duration(val_seconds)}) | mAP50-95 {row['metrics/mAP50-95(B)']:.4f} "
                 f"mAP50 {row['metrics/mAP50(B)']:.4f} P {row['metrics/precision(B)']:.4f} "
                 f"R {row['metrics/recall(B)']:.4f}")
        return f"{head}\n{loss_line} | val {losses('val')}"

    def best_summary(self) -> dict | None:
        if self.best_epoch < 0:
            return None
        summary = {"epoch": self.best_epoch + 1, "fitness": self.best_fitness}
        if self.best_metrics is not None:  # unknown when the best epoch was before a resume
            summary.update(map50_95=self.best_metrics["map50_95"], map50=self.best_metrics["map50"])
        return summary

    def class_table(self, ground_truth: dict) -> str | None:
        """The per-class table of the best epoch (of the last validation when the best one was before a resume),
        as Ultralytics prints at the end of training; None without a validation."""
        metrics = self.best_metrics or self.last_metrics
        if metrics is None:
            return None
        which = f"best epoch {self.best_epoch + 1}" if self.best_metrics is not None else "last validation"
        return f"per class, {which}:\n" + format_table(metrics, self.class_names, ground_truth)

    def draw(self, figure: Callable, *args) -> None:
        """``figure(*args)`` drawn by a worker process while the run goes on (``finish_figures`` waits for it)."""
        if self._figures is None:
            self._figures = PlotPool()
        self._figures.submit(figure, *args)

    def finish_figures(self, cancel: bool = False) -> None:
        """results.png, then wait until every figure is written (counted as plotting time); ``cancel``: a stopped
        run draws nothing more and drops the figures not started."""
        if not self.accelerator.is_main_process:
            return
        if not cancel and self.make_plots and (self.run_dir / "results.csv").is_file():
            self.draw(plots.plot_results, self.run_dir / "results.csv", self.run_dir / "results.png")
        if self._figures is None:
            return
        figures, self._figures = self._figures, None
        with self.clock("plots"):  # waiting for the figures at the end: the summary's "plots"
            try:
                if not cancel:
                    figures.wait()
            finally:
                figures.close(cancel=cancel)

    def finish(self, ground_truth: dict | None = None) -> None:
        """The dashboards' end-of-run panels (``ground_truth``: the evaluator's COCO dict, for the per-class
        table), the best weights artifact; after ``finish_figures``."""
        if not self.accelerator.is_main_process:
            return
        dashboards.log_final_validation(self.accelerator, self.final_metrics, self.best_metrics or self.last_metrics,
                                        self.class_names, ground_truth, self.run_dir, self.last_step)
        best = self.weights_dir / "best.safetensors"
        if best.is_file():
            tracking.log_best_weights_artifact(self.accelerator, best)
            print(f"best weights: {best}")
        message = tracking.final_message(self.report_to, self.run_dir)
        if message:
            print(message)

    def push_to_hub(self, repo_id: str, dataset: str, train_config: dict) -> bool:
        """Main process: write ``<run>/hub`` (``save_pretrained`` of the best weights, else the last, with a model
        card of the best metrics, the dataset and the config) and upload it to ``repo_id``; False on failure,
        with the command that uploads the folder later."""
        if not self.accelerator.is_main_process:
            return True
        from yolo11.hub import push_to_hub

        weights = next((self.weights_dir / f"{n}.safetensors" for n in ("best", "last")
                        if (self.weights_dir / f"{n}.safetensors").is_file()), None)
        if weights is None:
            print(f"error: --push-to-hub {repo_id}: no weights were saved in {self.weights_dir}", file=sys.stderr)
            return False
        folder = save_pretrained(load_weights(weights), self.run_dir / "hub", metrics=self.best_metrics,
                                 dataset=dataset, train_config=train_config, repo_id=repo_id)
        try:
            url = push_to_hub(folder, repo_id, commit_message=f"Upload {weights.name} of {self.run_dir.name}")
        except Exception as err:  # offline, no token, no permission: the folder stays for a later upload
            print(f"warning: --push-to-hub {repo_id} failed ({type(err).__name__}: {err}); the run itself finished "
                  f"and its model folder is {folder}: upload it later with `hf upload {repo_id} {folder} .` or "
                  f"yolo11.hub.push_to_hub(\"{folder}\", \"{repo_id}\")", file=sys.stderr)
            return False
        print(f"pushed {weights} to {url}")
        return True

    def write_in_background(self, write: Callable, *args) -> None:
        """``write(*args)`` on the writer thread once what was submitted before is written (one job in flight:
        its error, if any, surfaces here or at ``wait_for_writes``)."""
        self.wait_for_writes()
        self._written = self._writer.submit(write, *args)

    def wait_for_writes(self) -> None:
        """Until the files submitted so far (weights, the first batches' previews) are written; raises a write's
        error (``OSError``)."""
        written, self._written = self._written, None
        if written is not None:
            start = time.perf_counter()
            try:
                written.result()
            finally:  # the time line shows how long the writer held the run up
                self.clock.add("saving writer waits", time.perf_counter() - start)


def _write_weights_files(snapshot: WeightsSnapshot, final: Path, also_best: bool) -> None:
    write_weights(snapshot, final)  # through a temporary name: never a truncated last.safetensors
    if also_best:
        best = final.with_name("best.safetensors")
        with replaced(best) as tmp, writing(best):
            shutil.copyfile(final, tmp)
