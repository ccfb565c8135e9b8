"""What a run leaves behind: results.csv, plots, last/best weights, tracker logs, early stopping.

Everything here writes on the main process only; weights are written to a temporary file and renamed. The best
epoch so far comes in (from the resumed ``TrainState``) and goes out in each ``EpochOutcome``; the training loop
owns the state.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from accelerate import Accelerator
from torch import nn

from yolo11.engine import tracking
from yolo11.engine.checkpoint import TrainState
from yolo11.engine.config import TrainConfig
from yolo11.engine.loop import EpochResult
from yolo11.engine.progress import LOSS_NAMES, format_duration, peak_memory_gb
from yolo11.evaluation import EvaluationResult, plots
from yolo11.evaluation.results import ResultsCSV
from yolo11.weights import save_weights


def fitness(metrics: dict) -> float:
    """Ultralytics 8.4's model-selection score (``DetMetrics.fitness``): mAP50-95 alone."""
    return metrics["map50_95"]


@dataclass(frozen=True)
class EpochOutcome:
    best_fitness: float
    best_epoch: int  # 0-based; -1 before any validation
    stop: bool  # patience ran out


class RunOutputs:
    """``resumed``: the TrainState of the run so far (finished epochs, best epoch, tracker run id)."""

    def __init__(self, accelerator: Accelerator, run_dir: Path, class_names: list[str], config: TrainConfig,
                 resumed: TrainState, report_to: list[str], lr_groups: int = 3):
        self.accelerator = accelerator
        self.run_dir = run_dir
        self.class_names = class_names
        self.best_fitness, self.best_epoch = resumed.best_fitness, resumed.best_epoch
        self.patience = config.run.patience
        self.epochs = config.run.epochs
        self.make_plots = config.run.plots
        self.weights_dir = run_dir / "weights"
        self.epoch_start = time.perf_counter()
        self.best_metrics: dict | None = None
        self.csv = ResultsCSV(run_dir / "results.csv", keep_epochs=resumed.epoch, lr_groups=lr_groups) \
            if accelerator.is_main_process else None
        self.tracker_run_id = resumed.tracker_run_id
        if report_to:
            # only the main process starts trackers: the other ranks need not probe the W&B server
            init_kwargs = tracking.tracker_init_kwargs(report_to, run_dir, config.run.name, resumed.tracker_run_id) \
                if accelerator.is_main_process else {}
            accelerator.init_trackers(config.run.tracker_project, config=_flatten(config.to_dict()),
                                      init_kwargs=init_kwargs)
            self.tracker_run_id = tracking.current_run_id(accelerator) or resumed.tracker_run_id
        self.report_to = report_to

    def end_epoch(self, epoch: int, result: EpochResult, lrs: list[float], validation: EvaluationResult | None,
                  model: nn.Module, optimizer_steps: int) -> EpochOutcome:
        """Record the epoch (logged at ``optimizer_steps``); save last/best weights."""
        accelerator = self.accelerator
        row = {"epoch": epoch + 1, "time": round(time.perf_counter() - self.epoch_start, 3)}
        row.update({f"train/{n}": v for n, v in zip(LOSS_NAMES, result.mean_losses.tolist(), strict=True)})
        if validation is not None:
            m = validation.metrics
            row.update({"metrics/precision(B)": m["precision"], "metrics/recall(B)": m["recall"],
                        "metrics/mAP50(B)": m["map50"], "metrics/mAP50-95(B)": m["map50_95"]})
            row.update({f"val/{n}": v for n, v in zip(LOSS_NAMES, validation.losses.tolist(), strict=True)})
            score = fitness(m)
            if score > self.best_fitness:
                self.best_fitness, self.best_epoch = score, epoch
                self.best_metrics = m
                self._save(model, "best")
        row.update({f"lr/pg{i}": lr for i, lr in enumerate(lrs)})
        row.update({"throughput/img_s": result.images / max(result.seconds, 1e-9),
                    "memory/peak_gb": peak_memory_gb(accelerator.device)})
        self._save(model, "last")
        accelerator.log({k: v for k, v in row.items() if k != "epoch"} | {"epoch": epoch + 1},
                        step=optimizer_steps)
        if accelerator.is_main_process:
            self.csv.append(row)
            print(self.epoch_line(row), flush=True)
            if validation is not None:
                if self.make_plots:
                    plots.save_validation_plots(self.run_dir, validation.metrics, validation.samples,
                                                self.class_names)
                tracking.log_validation_images(accelerator, validation.samples, self.class_names,
                                               step=optimizer_steps)
        self.epoch_start = time.perf_counter()
        stop = self.patience > 0 and self.best_epoch >= 0 and epoch - self.best_epoch >= self.patience
        return EpochOutcome(self.best_fitness, self.best_epoch, stop)

    def epoch_line(self, row: dict) -> str:
        """``epoch 3/100 done in 0:01:02 | train box .. cls .. dfl .. | val box .. | mAP50-95 .. mAP50 .. P .. R ..``"""
        def losses(split: str) -> str:
            return " ".join(f"{name.split('_')[0]} {row[f'{split}/{name}']:.4f}" for name in LOSS_NAMES)

        parts = [f"epoch {row['epoch']}/{self.epochs} done in {format_duration(row['time'])}",
                 f"train {losses('train')}"]
        if "metrics/mAP50-95(B)" in row:
            parts += [f"val {losses('val')}",
                      f"mAP50-95 {row['metrics/mAP50-95(B)']:.4f} mAP50 {row['metrics/mAP50(B)']:.4f} "
                      f"P {row['metrics/precision(B)']:.4f} R {row['metrics/recall(B)']:.4f}"]
        return " | ".join(parts)

    def best_summary(self) -> dict | None:
        if self.best_epoch < 0:
            return None
        summary = {"epoch": self.best_epoch + 1, "fitness": self.best_fitness}
        if self.best_metrics is not None:  # unknown when the best epoch was before a resume
            summary.update(map50_95=self.best_metrics["map50_95"], map50=self.best_metrics["map50"])
        return summary

    def finish(self) -> None:
        if not self.accelerator.is_main_process:
            return
        if self.make_plots and (self.run_dir / "results.csv").is_file():
            plots.plot_results(self.run_dir / "results.csv", self.run_dir / "results.png")
        best = self.weights_dir / "best.safetensors"
        if best.is_file():
            tracking.log_best_weights_artifact(self.accelerator, best)
            print(f"best weights: {best}")
        message = tracking.final_message(self.report_to, self.run_dir)
        if message:
            print(message)

    def _save(self, model: nn.Module, name: str) -> None:
        """Write to a temporary file and rename, so a crash never leaves a truncated weights file."""
        if self.accelerator.is_main_process:
            final = self.weights_dir / f"{name}.safetensors"
            tmp = final.with_name(f".{final.name}.tmp")
            save_weights(self.accelerator.unwrap_model(model, keep_torch_compile=False), tmp)
            os.replace(tmp, final)


def _flatten(nested: dict) -> dict:
    return {f"{section}.{key}": value for section, values in nested.items() for key, value in values.items()}
