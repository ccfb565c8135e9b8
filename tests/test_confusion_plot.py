"""What an Ultralytics user reads off the run's figures and dashboards: the confusion matrix labelled legibly at
COCO's 80 classes (and thinned beyond 100, as Ultralytics does), and ``model/GFLOPs`` as Ultralytics' loggers
count it."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from yolo11.engine.dashboards import model_info
from yolo11.evaluation import plots
from yolo11.models.detector import create_model

COCO_NAMES = ["person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
              "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
              "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
              "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
              "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
              "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
              "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard",
              "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase",
              "scissors", "teddy bear", "hair drier", "toothbrush"]


def drawn_figure(monkeypatch, class_names, normalize=True):
    """The figure ``plot_confusion_matrix`` saves for a random matrix of ``class_names``, its dpi, the matrix."""
    saved = []
    monkeypatch.setattr(plots, "_save_figure", lambda fig, path, dpi: saved.append((fig, dpi)))
    rng = np.random.default_rng(0)
    size = len(class_names) + 1
    matrix = rng.integers(0, 3, (size, size)) * (rng.random((size, size)) < 0.05) + np.diag(rng.integers(1, 9, size))
    plots.plot_confusion_matrix({"confusion_matrix": matrix}, class_names, "unused.png", normalize=normalize)
    ((fig, dpi),) = saved
    fig.canvas.draw()
    return fig, dpi, matrix


def label_boxes(labels):
    return [label.get_window_extent() for label in labels if label.get_text()]


def assert_apart(boxes, axis):
    """Neighbouring tick labels do not overlap along ``axis`` (0: x, 1: y) by more than the font box's blank
    margins (ascent above capitals, descent below letters without descenders: 15 % of it)."""
    spans = sorted((box.x0, box.x1) if axis == 0 else (box.y0, box.y1) for box in boxes)
    assert all(end - start <= 0.15 * (end - begin)
               for (begin, end), (start, _) in zip(spans, spans[1:], strict=False)), spans


def test_coco_confusion_matrix_labels_every_class_legibly(monkeypatch):
    """80 classes: every class and background named on both axes, in letters about 1 % of the figure's height
    (Ultralytics: 7 pt on a 9 inch figure; ours were 5 pt on 16 inches, 0.4 %), none overlapping, all inside."""
    fig, dpi, _ = drawn_figure(monkeypatch, COCO_NAMES)
    ax = fig.axes[0]
    expected = [*COCO_NAMES, "background"]
    assert [t.get_text() for t in ax.get_xticklabels()] == expected == [t.get_text() for t in ax.get_yticklabels()]
    figure = fig.bbox
    for labels, axis in ((ax.get_xticklabels(), 0), (ax.get_yticklabels(), 1)):
        boxes = label_boxes(labels)
        letters = min(box.height if axis == 1 else box.width for box in boxes)  # x labels are turned 90 degrees
        assert letters / figure.height >= 0.009, letters / figure.height
        assert_apart(boxes, axis)
        assert all(figure.x0 <= b.x0 and b.x1 <= figure.x1 and figure.y0 <= b.y0 and b.y1 <= figure.y1 for b in boxes)
    assert figure.height * dpi / fig.dpi >= 2000  # saved at 250 dpi: 3000 x 2250 pixels, as Ultralytics'


def test_many_classes_are_thinned_and_a_few_carry_their_counts(monkeypatch):
    """365 classes (Objects365): every k-th class is drawn, labels legible and apart; 6 classes: each cell its
    value."""
    names = [f"class{i}" for i in range(365)]
    fig, _, _ = drawn_figure(monkeypatch, names)
    ax = fig.axes[0]
    shown = [t.get_text() for t in ax.get_yticklabels()]
    assert shown[0] == "class0" and shown[1] == "class6" and shown[-1] == "background" and len(shown) < 99
    assert_apart(label_boxes(ax.get_yticklabels()), 1)
    fig, _, matrix = drawn_figure(monkeypatch, COCO_NAMES[:6], normalize=False)
    assert sorted(int(t.get_text()) for t in fig.axes[0].texts) == sorted(matrix[matrix > 0].tolist())


@pytest.mark.parametrize("imgsz", [64, 640])
def test_dashboard_gflops_are_ultralytics_loggers_figure(imgsz):
    """``model/GFLOPs``: Ultralytics 8.4.190's ``model_info_for_loggers`` logs ``get_flops(model, args.imgsz)``
    (the training size, thop 2.2's rules, 3 decimals): 6.505 for a 6-class YOLO11n at 640, where our count by
    thop's older rules gave 6.44."""
    model = create_model("yolo11n", num_classes=6)
    expected = {64: 0.064, 640: 6.505}[imgsz]
    assert model_info(model, imgsz)["model/GFLOPs"] == expected


@pytest.mark.skipif(importlib.util.find_spec("ultralytics") is None,
                    reason="ultralytics 8.4.190 is not importable (PYTHONPATH=/tmp/ultra3)")
def test_dashboard_gflops_equal_ultralytics_get_flops_at_the_training_size():
    from ultralytics.nn.tasks import DetectionModel
    from ultralytics.utils.torch_utils import get_flops

    reference = DetectionModel("yolo11n.yaml", nc=6, verbose=False)
    model = create_model("yolo11n", num_classes=6)
    for imgsz in (64, 160, 640):
        assert model_info(model, imgsz)["model/GFLOPs"] == round(get_flops(reference, imgsz), 3), imgsz
