"""Figures of a run: results.png curves, PR curve, confusion matrix, validation images with boxes.

matplotlib with the Agg backend (no display); boxes are drawn with OpenCV so the same drawing serves the
predict CLI and TensorBoard.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import cv2
import numpy as np
import torch

from yolo11.evaluation.matching import smooth
from yolo11.evaluation.results import read_results


@functools.cache
def _pyplot():
    """matplotlib.pyplot on the Agg backend, imported on first use: importing it costs every run's start a third
    of a second, and only the last epoch draws."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt

# Ultralytics' results.png grid: train losses and P/R on the top row, val losses and mAPs below.
RESULTS_GRID = (
    ("train/box_loss", "train/cls_loss", "train/dfl_loss", "metrics/precision(B)", "metrics/recall(B)"),
    ("val/box_loss", "val/cls_loss", "val/dfl_loss", "metrics/mAP50(B)", "metrics/mAP50-95(B)"),
)
DRAW_CONF = 0.25  # predictions below this score are not drawn on validation images


def _palette(index: int) -> tuple[int, int, int]:
    """A stable RGB colour per class (matplotlib's tab20)."""
    plt = _pyplot()
    r, g, b, _ = plt.get_cmap("tab20")(index % 20)
    return int(r * 255), int(g * 255), int(b * 255)



def plot_results(csv_path: Path, out_path: Path) -> Path:
    """results.png: each column of ``RESULTS_GRID`` against the epoch, raw and smoothed."""
    plt = _pyplot()
    rows = read_results(csv_path)
    fig, axes = plt.subplots(2, 5, figsize=(15, 6), tight_layout=True)
    for ax, column in zip(axes.ravel(), [c for row in RESULTS_GRID for c in row], strict=True):
        points = [(float(r["epoch"]), float(r[column])) for r in rows if r.get(column)]
        if points:
            x, y = np.asarray(points).T
            ax.plot(x, y, marker=".", linewidth=2, markersize=8, label="results")
            if len(y) > 2:
                ax.plot(x, smooth(y), ":", linewidth=2, label="smooth")
        ax.set_title(column, fontsize=12)
    axes[0, 0].legend()
    fig.savefig(out_path, dpi=200)
    plt.close(fig)
    return Path(out_path)


def plot_pr_curve(metrics: dict, class_names: list[str], out_path: Path) -> Path:
    """PR_curve.png at IoU 0.5: one line per class (with legend when there are fewer than 21) and their mean."""
    plt = _pyplot()
    curve = metrics["pr_curve"]
    recall, precision = np.asarray(curve["recall"]), np.asarray(curve["precision"]).reshape(-1, len(curve["recall"]))
    ap50 = metrics["per_class_ap50"]
    fig, ax = plt.subplots(1, 1, figsize=(9, 6), tight_layout=True)
    show_legend = 0 < len(curve["classes"]) < 21
    for k, cls in enumerate(curve["classes"]):
        label = f"{class_names[cls]} {ap50[cls] or 0.0:.3f}" if show_legend else None
        ax.plot(recall, precision[k], linewidth=1, label=label, color="grey" if not show_legend else None)
    if precision.size:
        ax.plot(recall, precision.mean(0), linewidth=3, color="blue",
                label=f"all classes {metrics['map50']:.3f} mAP@0.5")
    ax.set(xlabel="Recall", ylabel="Precision", xlim=(0, 1), ylim=(0, 1), title="Precision-Recall Curve")
    ax.legend(bbox_to_anchor=(1.04, 1), loc="upper left")
    fig.savefig(out_path, dpi=200)
    plt.close(fig)
    return Path(out_path)


def plot_confusion_matrix(metrics: dict, class_names: list[str], out_path: Path, normalize: bool = True) -> Path:
    """confusion_matrix.png: rows predicted, columns true, last row/column = background (Ultralytics' layout);
    ``normalize`` divides each column by its true-class count."""
    plt = _pyplot()
    matrix = np.asarray(metrics["confusion_matrix"], dtype=float)
    if normalize:
        matrix = matrix / (matrix.sum(0, keepdims=True) + 1e-9)
    labels = [*class_names, "background"]
    size = min(max(6.0, 0.2 * len(labels)), 16.0)
    fig, ax = plt.subplots(1, 1, figsize=(size * 1.2, size), tight_layout=True)
    image = ax.imshow(np.where(matrix > 0, matrix, np.nan), cmap="Blues", vmin=0.0)
    fig.colorbar(image, ax=ax)
    ticks = np.arange(len(labels))
    fontsize = 8 if len(labels) < 30 else 5
    ax.set_xticks(ticks, labels, rotation=90, fontsize=fontsize)
    ax.set_yticks(ticks, labels, fontsize=fontsize)
    if len(labels) < 30:
        for (i, j), value in np.ndenumerate(matrix):
            if value > 0:
                ax.text(j, i, f"{value:.2f}" if normalize else f"{int(value)}", ha="center", va="center", fontsize=7,
                        color="white" if value > 0.5 * np.nanmax(matrix) else "black")
    ax.set(xlabel="True", ylabel="Predicted", title="Confusion Matrix" + (" Normalized" if normalize else ""))
    fig.savefig(out_path, dpi=150)
    plt.close(fig)
    return Path(out_path)


def draw_detections(image: np.ndarray, boxes: np.ndarray, classes: np.ndarray, class_names: list[str],
                    scores: np.ndarray | None = None) -> np.ndarray:
    """A copy of ``image`` (H, W, 3) uint8 RGB with xyxy pixel ``boxes`` (n, 4) and ``name [score]`` captions."""
    canvas = np.ascontiguousarray(image).copy()
    thickness = max(1, round(sum(canvas.shape[:2]) / 600))
    for i, (box, cls) in enumerate(zip(np.asarray(boxes).reshape(-1, 4), np.asarray(classes).astype(int),
                                       strict=True)):
        x1, y1, x2, y2 = (int(round(v)) for v in box)
        colour = _palette(cls)
        cv2.rectangle(canvas, (x1, y1), (x2, y2), colour, thickness)
        name = class_names[cls] if 0 <= cls < len(class_names) else str(cls)
        caption = name if scores is None else f"{name} {float(scores[i]):.2f}"
        scale = 0.35 * thickness
        (w, h), _ = cv2.getTextSize(caption, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
        top = max(y1, h + 2)
        cv2.rectangle(canvas, (x1, top - h - 2), (x1 + w, top), colour, -1)
        cv2.putText(canvas, caption, (x1, top - 1), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), 1, cv2.LINE_AA)
    return canvas


def draw_sample(sample: dict, class_names: list[str], conf: float = DRAW_CONF) -> tuple[np.ndarray, np.ndarray]:
    """(ground truth, predictions) drawings of one validation sample: ``image`` uint8 (3, H, W), ``boxes`` (G, 4)
    and ``labels`` (G,) in input pixels, ``predictions`` (n, 6) in input pixels."""
    image = sample["image"].permute(1, 2, 0).numpy() if isinstance(sample["image"], torch.Tensor) \
        else np.asarray(sample["image"])
    pred = np.asarray(sample["predictions"], dtype=np.float64).reshape(-1, 6)
    pred = pred[pred[:, 4] >= conf]
    truth = draw_detections(image, np.asarray(sample["boxes"]), np.asarray(sample["labels"]), class_names)
    predicted = draw_detections(image, pred[:, :4], pred[:, 5], class_names, scores=pred[:, 4])
    return truth, predicted


def plot_validation_images(samples: list[dict], class_names: list[str], out_path: Path,
                           conf: float = DRAW_CONF) -> Path:
    """val_images.png: one row per sample pair, ground truth (left) beside predictions with score >= ``conf``."""
    plt = _pyplot()
    columns = 2 * min(2, len(samples)) or 2
    rows = max(1, math.ceil(2 * len(samples) / columns))
    fig, axes = plt.subplots(rows, columns, figsize=(4 * columns, 4 * rows), tight_layout=True, squeeze=False)
    for ax in axes.ravel():
        ax.axis("off")
    for i, sample in enumerate(samples):
        truth, predicted = draw_sample(sample, class_names, conf)
        for j, (picture, title) in enumerate(((truth, "ground truth"), (predicted, f"predictions >= {conf}"))):
            ax = axes.ravel()[2 * i + j]
            ax.imshow(picture)
            ax.set_title(title, fontsize=9)
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return Path(out_path)


def save_validation_plots(run_dir: Path, metrics: dict, samples: list[dict], class_names: list[str]) -> list[Path]:
    """PR_curve.png, confusion_matrix.png and (with samples) val_images.png in ``run_dir``."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    paths = [plot_pr_curve(metrics, class_names, run_dir / "PR_curve.png"),
             plot_confusion_matrix(metrics, class_names, run_dir / "confusion_matrix.png")]
    if samples:
        paths.append(plot_validation_images(samples, class_names, run_dir / "val_images.png"))
    return paths
