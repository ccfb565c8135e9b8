"""What the W&B and TensorBoard dashboards show beyond the per-epoch scalars (``tracking.py`` starts the trackers).

- at the start: model info (parameters, GFLOPs at the training size, as Ultralytics logs them), in the W&B
  config and summary and as TensorBoard text;
- every validation: a W&B table ``val/predictions`` (epoch, image with interactive ground-truth and predicted
  boxes, box counts, best score), beside the ``val/images`` panels of ``tracking.log_validation_images``;
- at the end, from the final validation: the PR curve and the F1/P/R-confidence curves as W&B line plots
  (``curves/*``), the confusion matrix as a W&B confusion-matrix chart (``val/confusion_matrix``), the per-class
  metrics table (``val/per_class``), and the run folder's figures (results.png, curves, confusion matrices,
  labels.jpg) as images under ``plots/`` (TensorBoard: the same figures as images, the table as text).

Everything runs on the main process with a tracker only; nothing here is computed when no tracker is active.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import torch
from accelerate import Accelerator

from yolo11.engine.tracking import active_tracker, wandb_image
from yolo11.evaluation.plots import DRAW_CONF
from yolo11.evaluation.table import TABLE_COLUMNS, class_rows

CURVE_POINTS = 101  # of the 1000-point curves: enough for a line plot, small in the run's files
CURVE_CLASSES = 20  # per-class lines drawn beside the mean (Ultralytics' legend limit)
FIGURES = ("results.png", "BoxPR_curve.png", "BoxF1_curve.png", "BoxP_curve.png", "BoxR_curve.png",
           "confusion_matrix.png", "confusion_matrix_normalized.png", "labels.jpg", "val_batch0_pred.jpg")


def _active(accelerator: Accelerator) -> tuple[object | None, object | None]:
    return active_tracker(accelerator, "wandb"), active_tracker(accelerator, "tensorboard")


def model_info(model: torch.nn.Module, imgsz: int) -> dict:
    """``{"model/parameters", "model/GFLOPs"}`` as Ultralytics 8.4.190's loggers have them
    (``model_info_for_loggers``: ``get_flops`` at the training ``imgsz``, by ultralytics-thop 2.2's rules, which
    ``summary_gflops`` reproduces, rounded to 3 decimals; 640 px gives the model summary's figure), counted on a copy
    built on the meta device: no forward pass through the training model (its BatchNorm statistics stay
    untouched)."""
    from yolo11.models.detector import create_model
    from yolo11.models.flops import summary_gflops

    with torch.device("meta"):
        probe = create_model(**{**model.config, "pretrained": False}).eval()
    return {"model/parameters": sum(p.numel() for p in model.parameters()),
            "model/GFLOPs": round(summary_gflops(probe, imgsz, imgsz), 3),
            "model/name": model.config.get("name"), "model/imgsz": imgsz}


def log_model_info(accelerator: Accelerator, model: torch.nn.Module, imgsz: int) -> None:
    run, writer = _active(accelerator)
    if run is None and writer is None:
        return
    info = model_info(model, imgsz)
    if run is not None:
        run.config.update(info, allow_val_change=True)
        run.summary.update(info)
    if writer is not None:
        writer.add_text("model", " | ".join(f"{k.split('/')[1]}: {v}" for k, v in info.items()), 0)


def log_prediction_table(accelerator: Accelerator, samples: list[dict], class_names: list[str], epoch: int,
                         step: int, conf: float = DRAW_CONF) -> None:
    """W&B ``val/predictions``: one row per drawn validation image of this epoch, ground truth and predictions
    (score >= ``conf``) as interactive box layers of the image."""
    run = active_tracker(accelerator, "wandb")
    if run is None or not samples:
        return
    import wandb

    table = wandb.Table(columns=["epoch", "image", "ground truth boxes", "predicted boxes", "best score"])
    for sample in samples:
        pred = np.asarray(sample["predictions"], dtype=np.float64).reshape(-1, 6)
        shown = pred[pred[:, 4] >= conf]
        table.add_data(epoch + 1, wandb_image(sample, class_names, conf), len(sample["labels"]), len(shown),
                       float(pred[:, 4].max()) if len(pred) else 0.0)
    run.log({"val/predictions": table}, step=step)


def _line_series(x: np.ndarray, lines: np.ndarray, names: list[str], title: str, x_name: str):
    """A W&B line plot: per-class ``lines`` (K, 1000) and their mean, sampled at ``CURVE_POINTS``."""
    import wandb

    pick = np.linspace(0, len(x) - 1, CURVE_POINTS).round().astype(int)
    ys = [row[pick].tolist() for row in lines[:CURVE_CLASSES]] + [lines.mean(0)[pick].tolist()]
    keys = names[:CURVE_CLASSES] + ["all classes"]
    return wandb.plot.line_series(xs=x[pick].tolist(), ys=ys, keys=keys, title=title, xname=x_name)


def wandb_curves(metrics: dict, class_names: list[str]) -> dict:
    """``curves/PR``, ``curves/F1``, ``curves/P``, ``curves/R`` line plots from the metrics' plot data."""
    out = {}
    if "pr_curve" in metrics and metrics["pr_curve"]["classes"]:
        curve = metrics["pr_curve"]
        recall = np.asarray(curve["recall"])
        precision = np.asarray(curve["precision"]).reshape(-1, recall.size)
        out["curves/PR"] = _line_series(recall, precision, [class_names[k] for k in curve["classes"]],
                                        "Precision-Recall (IoU 0.5)", "recall")
    if "conf_curve" in metrics and metrics["conf_curve"]["classes"]:
        curve = metrics["conf_curve"]
        confidence = np.asarray(curve["confidence"])
        precision = np.asarray(curve["precision"]).reshape(-1, confidence.size)
        recall = np.asarray(curve["recall"]).reshape(-1, confidence.size)
        names = [class_names[k] for k in curve["classes"]]
        for key, values in (("F1", 2 * precision * recall / (precision + recall + 1e-16)), ("P", precision),
                            ("R", recall)):
            out[f"curves/{key}"] = _line_series(confidence, values, names, f"{key}-Confidence", "confidence")
    return out


def wandb_confusion_matrix(matrix: list[list[int]], class_names: list[str]):
    """W&B's confusion-matrix chart from counts (rows predicted, columns true, last = background), the table
    ``wandb.plot.confusion_matrix`` builds from labels."""
    import wandb

    labels = [*class_names, "background"]
    counts = np.asarray(matrix)
    table = wandb.Table(columns=["Actual", "Predicted", "nPredictions"],
                        data=[[labels[t], labels[p], int(counts[p, t])] for p, t in zip(*np.nonzero(counts),
                                                                                         strict=True)])
    return wandb.plot_table("wandb/confusion_matrix/v1", table,
                            {"Actual": "Actual", "Predicted": "Predicted", "nPredictions": "nPredictions"},
                            {"title": "Confusion Matrix"})


def log_final_validation(accelerator: Accelerator, metrics: dict | None, table_metrics: dict | None,
                         class_names: list[str], ground_truth: dict | None, run_dir: Path, step: int) -> None:
    """The end of training: curves and confusion matrix of ``metrics`` (the final validation, with plot data),
    the per-class table of ``table_metrics`` (the best epoch's, as printed), the run folder's figures."""
    run, writer = _active(accelerator)
    if run is None and writer is None:
        return
    figures = [Path(run_dir) / name for name in FIGURES if (Path(run_dir) / name).is_file()]
    rows = class_rows(table_metrics, class_names, ground_truth) if table_metrics and ground_truth else []
    if run is not None:
        import wandb

        logged = {f"plots/{path.stem}": wandb.Image(str(path)) for path in figures}
        if metrics is not None:
            logged |= wandb_curves(metrics, class_names)
            if "confusion_matrix" in metrics:
                logged["val/confusion_matrix"] = wandb_confusion_matrix(metrics["confusion_matrix"], class_names)
        if rows:
            logged["val/per_class"] = wandb.Table(columns=list(TABLE_COLUMNS), data=[list(r) for r in rows])
        run.log(logged, step=step)
    if writer is not None:
        for path in figures:
            image = cv2.imread(str(path), cv2.IMREAD_COLOR)
            if image is not None:
                writer.add_image(f"plots/{path.stem}", cv2.cvtColor(image, cv2.COLOR_BGR2RGB), step,
                                 dataformats="HWC")
        if rows:
            header = "| " + " | ".join(TABLE_COLUMNS) + " |\n|" + "---|" * len(TABLE_COLUMNS)
            body = "\n".join("| " + " | ".join(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row) + " |"
                             for row in rows)
            writer.add_text("val/per_class", f"{header}\n{body}", step)
