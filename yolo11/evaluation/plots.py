"""Figures of a run, named as Ultralytics names them: results.png, BoxPR/BoxF1/BoxP/BoxR_curve.png,
confusion_matrix.png (counts) and confusion_matrix_normalized.png, val_batchN_labels.jpg / val_batchN_pred.jpg and
labels.jpg (the training labels' class histogram and box statistics).

matplotlib with the Agg backend (no display); boxes are drawn with OpenCV so the same drawing serves the
predict CLI and TensorBoard. No torch here: ``PlotPool`` workers import this module alone.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

from yolo11.evaluation.matching import smooth
from yolo11.evaluation.results import read_results
from yolo11.output_errors import replaced, writing

MOSAIC_IMAGES = 16  # images per val_batchN mosaic, as Ultralytics' plot_images


@functools.cache
def _pyplot():
    """matplotlib.pyplot on the Agg backend, imported on first use: importing it costs every run's start a third
    of a second, and only the last epoch draws."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt

def _save_figure(fig, out_path: Path, dpi: int) -> None:
    """``fig`` written to ``out_path`` through a temporary name (a full disk leaves no truncated image), closed."""
    with replaced(out_path) as tmp, writing(out_path):
        fig.savefig(tmp, dpi=dpi)
    _pyplot().close(fig)


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



def gaussian_smooth(y: np.ndarray, sigma: float = 3.0, truncate: float = 4.0) -> np.ndarray:
    """``scipy.ndimage.gaussian_filter1d(y, sigma)`` (its ``reflect`` border), Ultralytics' results.png smoothing:
    unlike a moving average as wide as 5 % of the points, it bends the line from the third epoch on."""
    y = np.asarray(y, dtype=float)
    radius = int(truncate * sigma + 0.5)
    kernel = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    # scipy's reflect border (d c b a | a b c d | d c b a ...), repeated for series shorter than the kernel
    index = np.arange(-radius, y.size + radius) % (2 * y.size)
    index = np.where(index >= y.size, 2 * y.size - 1 - index, index)
    return np.convolve(y[index], kernel / kernel.sum(), mode="valid")


def plot_results(csv_path: Path, out_path: Path) -> Path:
    """results.png: each column of ``RESULTS_GRID`` against the epoch, raw and smoothed (``gaussian_smooth``)."""
    plt = _pyplot()
    rows = read_results(csv_path)
    fig, axes = plt.subplots(2, 5, figsize=(15, 6))
    # fixed margins that fit the grid's short titles and tick labels: a tight layout measured every tick label of
    # the ten axes, half the figure's time
    fig.subplots_adjust(left=0.055, right=0.99, bottom=0.06, top=0.94, wspace=0.36, hspace=0.32)
    for ax, column in zip(axes.ravel(), [c for row in RESULTS_GRID for c in row], strict=True):
        if rows and column not in rows[0]:  # a YOLO26 run's results.csv names the third loss l1_loss
            column = column.replace("dfl_loss", "l1_loss")
        points = [(float(r["epoch"]), float(r[column])) for r in rows if r.get(column)]
        if points:
            x, y = np.asarray(points).T
            ax.plot(x, y, marker=".", linewidth=2, markersize=8, label="results")
            if len(y) > 1:
                ax.plot(x, gaussian_smooth(y), ":", linewidth=2, label="smooth")
        ax.set_title(column, fontsize=12)
    if rows:  # a run stopped in its first epoch has none: no lines to name (matplotlib would warn)
        axes[0, 0].legend()
    _save_figure(fig, out_path, 200)
    return Path(out_path)


def plot_pr_curve(metrics: dict, class_names: list[str], out_path: Path) -> Path:
    """BoxPR_curve.png at IoU 0.5: one line per class (with legend when there are fewer than 21) and their mean."""
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
    if precision.size:  # data without a labelled object has no curve: no legend (matplotlib would warn)
        ax.legend(bbox_to_anchor=(1.04, 1), loc="upper left")
    _save_figure(fig, out_path, 200)
    return Path(out_path)


CURVES = {"F1": "F1", "P": "Precision", "R": "Recall"}  # BoxF1_curve.png, BoxP_curve.png, BoxR_curve.png


def plot_metric_curve(metrics: dict, class_names: list[str], out_path: Path, metric: str) -> Path:
    """``Box{metric}_curve.png``: F1, precision or recall (IoU 0.5) against the score threshold, one line per class
    and their mean (smoothed as Ultralytics' ``plot_mc_curve``), the mean's best value in the legend."""
    plt = _pyplot()
    curve = metrics["conf_curve"]
    confidence = np.asarray(curve["confidence"])
    precision = np.asarray(curve["precision"]).reshape(-1, confidence.size)
    recall = np.asarray(curve["recall"]).reshape(-1, confidence.size)
    values = {"F1": 2 * precision * recall / (precision + recall + 1e-16), "P": precision, "R": recall}[metric]
    fig, ax = plt.subplots(1, 1, figsize=(9, 6), tight_layout=True)
    show_legend = 0 < len(curve["classes"]) < 21
    for k, cls in enumerate(curve["classes"]):
        ax.plot(confidence, values[k], linewidth=1, label=class_names[cls] if show_legend else None,
                color="grey" if not show_legend else None)
    if values.size:
        mean = smooth(values.mean(0), 0.1)
        best = int(mean.argmax())
        ax.plot(confidence, mean, linewidth=3, color="blue",
                label=f"all classes {mean[best]:.2f} at {confidence[best]:.3f}")
    ax.set(xlabel="Confidence", ylabel=CURVES[metric], xlim=(0, 1), ylim=(0, 1),
           title=f"{CURVES[metric]}-Confidence Curve")
    if values.size:  # data without a labelled object has no curve: no legend (matplotlib would warn)
        ax.legend(bbox_to_anchor=(1.04, 1), loc="upper left")
    _save_figure(fig, out_path, 200)
    return Path(out_path)


# Confusion-matrix layout, as Ultralytics 8.4 draws it: a 12 x 9 inch figure at 250 dpi whose tick labels shrink
# with the class count (15 pt less 0.1 pt a class, 6 pt at least: 7 pt for COCO's 80, about 1 % of the figure's
# height), every class labelled below 99 rows, every k-th class of 100 or more drawn, cell values below 30 rows.
MATRIX_FIGSIZE, MATRIX_DPI = (12.0, 9.0), 250
MATRIX_LABELLED = 99  # rows (classes + background) below which every tick is labelled
MATRIX_VALUES = 30  # rows below which each cell shows its value
MATRIX_MAX_CLASSES = 100  # from this many classes, every k-th one is drawn (k = classes // 60)


def confusion_matrix_figure(matrix: np.ndarray, class_names: list[str], normalize: bool = True):
    """The matplotlib figure of ``matrix`` ((nc + 1, nc + 1) counts: rows predicted, columns true, the last
    row/column background); ``normalize`` divides each column by its true-class count."""
    plt = _pyplot()
    matrix = np.asarray(matrix, dtype=float)
    if normalize:
        matrix = matrix / (matrix.sum(0, keepdims=True) + 1e-9)
    names, classes = list(class_names), len(class_names)
    if classes >= MATRIX_MAX_CLASSES:  # every k-th class and background: an 81-row matrix at most
        step = max(2, classes // 60)
        keep = np.r_[0:classes:step, classes:len(matrix)]
        names, matrix = names[::step], matrix[np.ix_(keep, keep)]
    rows = len(names) + 1
    tick_size, label_size = max(6.0, 15 - 0.1 * rows), max(6.0, 12 - 0.1 * rows)
    fig, ax = plt.subplots(1, 1, figsize=MATRIX_FIGSIZE)
    labels = [*names, "background"]
    # margins from the widest tick label (measured once): a constrained layout measured all of them, a third of
    # the figure's drawing time at COCO's 80 classes
    label = _text_inches(fig, max(labels, key=len), tick_size) if rows < MATRIX_LABELLED else 0.0
    title = (label_size * 1.4 + 8) / 72  # a line of text and its pad
    width, height = MATRIX_FIGSIZE
    fig.subplots_adjust(left=min(0.4, (label + 0.1 + title) / width), right=0.9,
                        bottom=min(0.4, (label + 0.1 + title) / height), top=1 - title / height - 0.01)
    image = ax.imshow(np.where(matrix > 0, matrix, np.nan), cmap="Blues", vmin=0.0, interpolation="none")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.02)
    ticks = np.arange(rows)
    if rows < MATRIX_LABELLED:
        ax.set_xticks(ticks, labels, rotation=90, fontsize=tick_size)
        ax.set_yticks(ticks, labels, fontsize=tick_size)
    if rows < MATRIX_VALUES:
        threshold = 0.45 * (1.0 if normalize else np.nanmax(matrix))
        for (i, j), value in np.ndenumerate(matrix):
            if value > 0:
                ax.text(j, i, f"{value:.2f}" if normalize else f"{int(value)}", ha="center", va="center",
                        fontsize=10 if rows < 15 else 7, color="white" if value > threshold else "black")
    for side in ("left", "right", "bottom", "top"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel("True", fontsize=label_size)
    ax.set_ylabel("Predicted", fontsize=label_size)
    ax.set_title("Confusion Matrix" + (" Normalized" if normalize else ""), fontsize=label_size)
    return fig


def _text_inches(fig, text: str, size: float) -> float:
    """The width of ``text`` at ``size`` points on ``fig``, in inches."""
    probe = fig.text(0, 0, text, fontsize=size)
    inches = probe.get_window_extent(fig.canvas.get_renderer()).width / fig.dpi
    probe.remove()
    return inches


def plot_confusion_matrix(metrics: dict, class_names: list[str], out_path: Path, normalize: bool = True) -> Path:
    """confusion_matrix.png (counts) or, ``normalize``, confusion_matrix_normalized.png
    (``confusion_matrix_figure`` of ``metrics["confusion_matrix"]``)."""
    fig = confusion_matrix_figure(metrics["confusion_matrix"], class_names, normalize)
    _save_figure(fig, out_path, MATRIX_DPI)
    return Path(out_path)


def draw_detections(image: np.ndarray, boxes: np.ndarray, classes: np.ndarray, class_names: list[str],
                    scores: np.ndarray | None = None, labels: bool = True,
                    line_width: int | None = None) -> np.ndarray:
    """A copy of ``image`` (H, W, 3) uint8 RGB with xyxy pixel ``boxes`` (n, 4) and ``name [score]`` captions
    (``labels``: none without); ``line_width``: the boxes' lines, else from the image's size."""
    canvas = np.ascontiguousarray(image).copy()
    thickness = line_width or max(1, round(sum(canvas.shape[:2]) / 600))
    for i, (box, cls) in enumerate(zip(np.asarray(boxes).reshape(-1, 4), np.asarray(classes).astype(int),
                                       strict=True)):
        x1, y1, x2, y2 = (int(round(v)) for v in box)
        colour = _palette(cls)
        cv2.rectangle(canvas, (x1, y1), (x2, y2), colour, thickness)
        if not labels:
            continue
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
    image = np.asarray(sample["image"]).transpose(1, 2, 0)
    pred = np.asarray(sample["predictions"], dtype=np.float64).reshape(-1, 6)
    pred = pred[pred[:, 4] >= conf]
    truth = draw_detections(image, np.asarray(sample["boxes"]), np.asarray(sample["labels"]), class_names)
    predicted = draw_detections(image, pred[:, :4], pred[:, 5], class_names, scores=pred[:, 4])
    return truth, predicted


def mosaic(pictures: list[np.ndarray], max_side: int = 1920) -> np.ndarray:
    """Up to 16 RGB pictures of any sizes in a square grid of equal cells (each fitted and centred), white
    background, at most ``max_side`` pixels wide: Ultralytics' val_batch layout."""
    columns = math.ceil(math.sqrt(len(pictures)))
    rows = math.ceil(len(pictures) / columns)
    cell = max(max(p.shape[:2]) for p in pictures)
    cell = min(cell, max_side // columns)
    grid = np.full((rows * cell, columns * cell, 3), 255, np.uint8)
    for i, picture in enumerate(pictures):
        scale = cell / max(picture.shape[:2])
        height, width = max(1, round(picture.shape[0] * scale)), max(1, round(picture.shape[1] * scale))
        fitted = cv2.resize(picture, (width, height), interpolation=cv2.INTER_AREA) if scale != 1 else picture
        y0, x0 = (i // columns) * cell, (i % columns) * cell
        grid[y0:y0 + height, x0:x0 + width] = fitted
        cv2.rectangle(grid, (x0, y0), (x0 + cell - 1, y0 + cell - 1), (255, 255, 255), 2)
    return grid


def save_validation_batches(samples: list[dict], class_names: list[str], run_dir: Path,
                            conf: float = DRAW_CONF) -> list[Path]:
    """val_batch{N}_labels.jpg (ground truth) and val_batch{N}_pred.jpg (predictions >= ``conf``) per 16 samples,
    as Ultralytics draws its first validation batches; JPEG (tens of KB, not a 1.5 MB PNG)."""
    paths = []
    for n, start in enumerate(range(0, len(samples), MOSAIC_IMAGES)):
        drawn = [draw_sample(sample, class_names, conf) for sample in samples[start:start + MOSAIC_IMAGES]]
        for kind, pictures in (("labels", [d[0] for d in drawn]), ("pred", [d[1] for d in drawn])):
            path = Path(run_dir) / f"val_batch{n}_{kind}.jpg"
            with replaced(path) as tmp, writing(path):
                if not cv2.imwrite(str(tmp), cv2.cvtColor(mosaic(pictures), cv2.COLOR_RGB2BGR),
                                   [cv2.IMWRITE_JPEG_QUALITY, 90]):
                    raise OSError(f"could not write {path}")
            paths.append(path)
    return paths


def validation_plot_jobs(run_dir: Path, metrics: dict, samples: list[dict],
                         class_names: list[str]) -> list[tuple[Callable, tuple]]:
    """``save_validation_plots``' figures as ``(figure, args)`` pairs, for a ``PlotPool``: each figure gets the part
    of the metrics it draws (they are pickled to a worker) and samples as NumPy arrays."""
    run_dir = Path(run_dir)
    curves = {k: metrics[k] for k in ("pr_curve", "per_class_ap50", "map50")}
    jobs: list[tuple[Callable, tuple]] = [(plot_pr_curve, (curves, class_names, run_dir / "BoxPR_curve.png"))]
    if "conf_curve" in metrics:
        conf = {"conf_curve": metrics["conf_curve"]}
        jobs += [(plot_metric_curve, (conf, class_names, run_dir / f"Box{m}_curve.png", m)) for m in CURVES]
    matrix = {"confusion_matrix": metrics["confusion_matrix"]}
    jobs += [(plot_confusion_matrix, (matrix, class_names, run_dir / "confusion_matrix.png", False)),
             (plot_confusion_matrix, (matrix, class_names, run_dir / "confusion_matrix_normalized.png", True))]
    if samples:
        arrays = [{k: np.asarray(v) for k, v in sample.items()} for sample in samples]
        jobs.append((save_validation_batches, (arrays, class_names, run_dir)))
    return jobs


def save_validation_plots(run_dir: Path, metrics: dict, samples: list[dict], class_names: list[str]) -> list[Path]:
    """Ultralytics' validation figures in ``run_dir``: BoxPR/BoxF1/BoxP/BoxR_curve.png, confusion_matrix.png (counts),
    confusion_matrix_normalized.png and (with samples) val_batchN_labels/pred.jpg."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    paths = []
    for figure, args in validation_plot_jobs(run_dir, metrics, samples, class_names):
        written = figure(*args)
        paths += written if isinstance(written, list) else [written]
    return paths


def plot_labels(boxes: np.ndarray, classes: np.ndarray, class_names: list[str], out_path: Path) -> Path:
    """labels.jpg, as Ultralytics' ``plot_labels``: instances per class; up to 500 boxes drawn centred (their
    sizes); 2-D histograms of box centres (x, y) and of sizes (width, height). ``boxes`` ``(N, 4)`` normalised
    xywh (centre), ``classes`` ``(N,)``."""
    plt = _pyplot()
    boxes, classes = np.asarray(boxes, dtype=float).reshape(-1, 4), np.asarray(classes, dtype=int).reshape(-1)
    fig, axes = plt.subplots(2, 2, figsize=(8, 8), tight_layout=True)
    ax = axes.ravel()
    num_classes = len(class_names)
    counts = np.bincount(classes, minlength=num_classes)[:num_classes]
    bars = ax[0].bar(np.arange(num_classes), counts, width=0.8,
                     color=[np.array(_palette(k)) / 255 for k in range(num_classes)])
    ax[0].set_ylabel("instances")
    if num_classes < 30:
        ax[0].set_xticks(range(num_classes), class_names, rotation=90, fontsize=10)
        ax[0].bar_label(bars)
    else:
        ax[0].set_xlabel("classes")
    canvas = np.full((1000, 1000, 3), 255, np.uint8)
    for cls, (_, _, w, h) in zip(classes[:500], boxes[:500], strict=True):
        corners = np.array([0.5 - w / 2, 0.5 - h / 2, 0.5 + w / 2, 0.5 + h / 2]) * 1000
        x1, y1, x2, y2 = (int(round(v)) for v in corners)
        cv2.rectangle(canvas, (x1, y1), (x2, y2), _palette(int(cls)), 1)
    ax[1].imshow(canvas)
    ax[1].axis("off")
    white_blue = plt.matplotlib.colors.LinearSegmentedColormap.from_list("white_blue", ["white", "blue"])
    for a, (i, j, x_label, y_label) in zip(ax[2:], ((0, 1, "x", "y"), (2, 3, "width", "height")), strict=True):
        a.hist2d(boxes[:, i], boxes[:, j], bins=50, cmap=white_blue)
        a.set(xlabel=x_label, ylabel=y_label)
    for a in ax:
        for side in ("top", "right", "left", "bottom"):
            a.spines[side].set_visible(False)
    _save_figure(fig, out_path, 200)
    return Path(out_path)
