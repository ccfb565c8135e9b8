"""results.csv writer and the figures: files exist, are PNGs, and show what they should."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from yolo11.evaluation import plots
from yolo11.evaluation.results import COLUMNS, ResultsCSV, read_results

CLASS_NAMES = ["cat", "dog"]


def epoch_row(epoch: int, with_val: bool = True) -> dict:
    row = {"epoch": epoch, "time": 1.5 * epoch, "train/box_loss": 2.0 / epoch, "train/cls_loss": 3.0 / epoch,
           "train/dfl_loss": 1.0 / epoch, "lr/pg0": 0.01, "lr/pg1": 0.01, "lr/pg2": 0.1,
           "throughput/img_s": 100.0, "memory/peak_gb": 0.0}
    if with_val:
        row.update({"metrics/precision(B)": 0.1 * epoch, "metrics/recall(B)": 0.05 * epoch,
                    "metrics/mAP50(B)": 0.04 * epoch, "metrics/mAP50-95(B)": 0.02 * epoch,
                    "val/box_loss": 2.5 / epoch, "val/cls_loss": 3.5 / epoch, "val/dfl_loss": 1.2 / epoch})
    return row


def test_results_csv_columns_and_rows(tmp_path):
    path = tmp_path / "results.csv"
    csv = ResultsCSV(path)
    for epoch in (1, 2, 3):
        csv.append(epoch_row(epoch, with_val=epoch != 2))
    rows = read_results(path)
    assert list(rows[0]) == list(COLUMNS)
    assert [r["epoch"] for r in rows] == ["1", "2", "3"]
    assert rows[1]["metrics/mAP50(B)"] == ""  # no validation that epoch
    assert float(rows[2]["metrics/mAP50-95(B)"]) == pytest.approx(0.06)
    with pytest.raises(KeyError, match="no column"):
        csv.append({"epoch": 4, "val/made_up": 1.0})


def test_results_csv_resume_keeps_epochs_up_to_checkpoint(tmp_path):
    path = tmp_path / "results.csv"
    csv = ResultsCSV(path)
    for epoch in (1, 2, 3):
        csv.append(epoch_row(epoch))
    resumed = ResultsCSV(path, keep_epochs=2)  # the checkpoint was taken after epoch 2
    resumed.append(epoch_row(3) | {"time": 99.0})
    rows = read_results(path)
    assert [r["epoch"] for r in rows] == ["1", "2", "3"]
    assert float(rows[2]["time"]) == 99.0
    ResultsCSV(path)  # no keep_epochs: a fresh run starts an empty file
    assert read_results(path) == []


def test_a_resumed_results_csv_with_rows_it_cannot_read_keeps_the_others(tmp_path):
    """A results.csv edited by hand or by another tool: rows whose epoch is not a number, or that lack one, are
    dropped on resume (they would have been a traceback), the others kept."""
    path = tmp_path / "results.csv"
    csv = ResultsCSV(path)
    for epoch in (1, 2, 3):
        csv.append(epoch_row(epoch))
    text = path.read_text()
    path.write_text(text + "epoch,note\nabc,1\n\n,2\n")
    ResultsCSV(path, keep_epochs=2)
    assert [r["epoch"] for r in read_results(path)] == ["1", "2"]


def test_a_results_csv_that_is_gigabytes_is_refused_by_name(tmp_path):
    """A run folder from elsewhere whose results.csv is huge: refused in one line naming it, not read whole."""
    from yolo11.gate import FileRefusedError

    path = tmp_path / "results.csv"
    with path.open("wb") as fh:
        fh.truncate(8 << 30)  # sparse
    with pytest.raises(FileRefusedError, match=r"results\.csv: .*limit"):
        ResultsCSV(path, keep_epochs=2)


def _is_png(path) -> tuple[int, int]:
    with Image.open(path) as image:
        assert image.format == "PNG"
        return image.size


def test_results_csv_has_an_lr_column_per_parameter_group(tmp_path):
    csv = ResultsCSV(tmp_path / "results.csv", lr_groups=8)  # MuSGD's groups
    row = epoch_row(1) | {f"lr/pg{i}": 0.01 for i in range(3, 8)}
    csv.append(row)
    header = list(read_results(tmp_path / "results.csv")[0])
    assert header[12:20] == [f"lr/pg{i}" for i in range(8)] and header[-2:] == list(COLUMNS[-2:])
    with pytest.raises(KeyError, match="lr/pg3"):
        ResultsCSV(tmp_path / "other.csv").append(row)


def test_results_png(tmp_path):
    csv = ResultsCSV(tmp_path / "results.csv")
    for epoch in range(1, 6):
        csv.append(epoch_row(epoch))
    width, height = _is_png(plots.plot_results(tmp_path / "results.csv", tmp_path / "results.png"))
    assert width > 2 * height  # the 2 x 5 grid


def test_results_png_of_a_run_stopped_in_its_first_epoch_warns_nothing(tmp_path, recwarn):
    """A run stopped before its first epoch ended (``--max-steps 1``) has a results.csv without rows; results.png is
    its empty grid, without matplotlib's "No artists with labels found to put in legend" on the console."""
    ResultsCSV(tmp_path / "results.csv")
    _is_png(plots.plot_results(tmp_path / "results.csv", tmp_path / "results.png"))
    assert [str(w.message) for w in recwarn] == []


def plot_metrics() -> dict:
    grid = np.linspace(0, 1, 1000)
    return {"map50": 0.5, "per_class_ap50": [0.7, None],
            "pr_curve": {"recall": grid.tolist(), "precision": [np.linspace(1, 0, 1000).tolist()], "classes": [0]},
            "conf_curve": {"confidence": grid.tolist(), "precision": [(0.5 + 0.5 * grid).tolist()],
                           "recall": [(1 - grid).tolist()], "classes": [0]},
            "confusion_matrix": [[3, 0, 1], [1, 0, 0], [0, 2, 0]]}


def test_validation_plots_are_ultralytics_files(tmp_path):
    image = torch.zeros(3, 64, 96, dtype=torch.uint8)
    samples = [{"image": image, "predictions": torch.tensor([[5.0, 5, 30, 30, 0.9, 0], [40, 40, 60, 60, 0.01, 1]]),
                "boxes": torch.tensor([[6.0, 6, 31, 31]]), "labels": torch.tensor([0])}] * 17
    paths = plots.save_validation_plots(tmp_path, plot_metrics(), samples, CLASS_NAMES)
    assert [p.name for p in paths] == [
        "BoxPR_curve.png", "BoxF1_curve.png", "BoxP_curve.png", "BoxR_curve.png", "confusion_matrix.png",
        "confusion_matrix_normalized.png", "val_batch0_labels.jpg", "val_batch0_pred.jpg", "val_batch1_labels.jpg",
        "val_batch1_pred.jpg"]  # 16 samples per mosaic, as Ultralytics' plot_images
    for path in paths:
        with Image.open(path) as picture:
            assert picture.format == ("PNG" if path.suffix == ".png" else "JPEG")
    assert (tmp_path / "val_batch0_pred.jpg").stat().st_size < 200_000
    # the raw matrix and the normalised one are different pictures
    raw, normalised = (tmp_path / "confusion_matrix.png"), (tmp_path / "confusion_matrix_normalized.png")
    assert raw.read_bytes() != normalised.read_bytes()


def test_confusion_matrix_counts_are_written_as_counts(tmp_path, monkeypatch):
    texts = []
    real = plots._pyplot()
    monkeypatch.setattr(real.Axes, "text", lambda self, x, y, s, **kw: texts.append(s), raising=False)
    plots.plot_confusion_matrix(plot_metrics(), CLASS_NAMES, tmp_path / "raw.png", normalize=False)
    assert sorted(texts) == ["1", "1", "2", "3"]
    texts.clear()
    plots.plot_confusion_matrix(plot_metrics(), CLASS_NAMES, tmp_path / "norm.png")
    assert sorted(texts) == ["0.25", "0.75", "1.00", "1.00"]


def test_gaussian_smoothing_bends_a_short_series_as_scipy_does():
    y = np.array([1.0, 0.0, 0.0, 0.0, 0.0])
    smoothed = plots.gaussian_smooth(y)
    assert smoothed.shape == y.shape and not np.allclose(smoothed, y)  # visible from a few epochs on
    np.testing.assert_allclose(plots.gaussian_smooth(np.full(7, 2.5)), 2.5)  # a flat series stays flat
    # direct evaluation: sum over the kernel of y at scipy's reflected indices (d c b a | a b c d | d c b a)
    radius, n = 12, y.size
    weights = np.exp(-0.5 * (np.arange(-radius, radius + 1) / 3.0) ** 2)
    weights /= weights.sum()

    def reflected(i: int) -> float:
        i %= 2 * n
        return y[i] if i < n else y[2 * n - 1 - i]

    expected = [sum(w * reflected(t + k) for k, w in zip(range(-radius, radius + 1), weights, strict=True))
                for t in range(n)]
    np.testing.assert_allclose(smoothed, expected, atol=1e-12)


def test_labels_plot(tmp_path):
    boxes = np.array([[0.5, 0.5, 0.2, 0.3], [0.2, 0.7, 0.1, 0.1], [0.8, 0.1, 0.4, 0.2]])
    path = plots.plot_labels(boxes, np.array([0, 1, 1]), CLASS_NAMES, tmp_path / "labels.jpg")
    with Image.open(path) as picture:
        assert picture.format == "JPEG" and picture.size == (1600, 1600)


def test_draw_detections_draws_in_class_colour_only_inside_the_box_area():
    image = np.zeros((60, 80, 3), dtype=np.uint8)
    drawn = plots.draw_detections(image, np.array([[20.0, 25, 50, 55]]), np.array([1]), CLASS_NAMES,
                                  scores=np.array([0.5]))
    assert image.sum() == 0  # the input is not modified
    changed = np.argwhere(drawn.any(axis=2))
    assert changed[:, 1].min() >= 20 and changed[:, 0].max() <= 55  # nothing left of or below the box
    assert tuple(drawn[40, 20]) == plots._palette(1)  # the left edge in the class colour


def test_draw_sample_hides_low_scores():
    sample = {"image": torch.zeros(3, 40, 40, dtype=torch.uint8), "boxes": torch.zeros(0, 4),
              "labels": torch.zeros(0, dtype=torch.int64),
              "predictions": torch.tensor([[5.0, 5, 30, 30, 0.1, 0]])}
    truth, predicted = plots.draw_sample(sample, CLASS_NAMES, conf=0.25)
    assert truth.sum() == 0 and predicted.sum() == 0
    _, predicted = plots.draw_sample(sample, CLASS_NAMES, conf=0.05)
    assert predicted.sum() > 0


@pytest.mark.parametrize("points", [1, 2, 3, 20, 21, 1000])
def test_smooth_keeps_length(points):
    """Ultralytics' width formula is even for e.g. 20 epochs; ours keeps every curve's length."""
    from yolo11.evaluation.matching import smooth

    y = np.linspace(0, 1, points)
    assert smooth(y).shape == y.shape
    np.testing.assert_allclose(smooth(np.full(points, 3.0)), 3.0)


def test_labels_jpg_from_a_training_source():
    """The trainer's labels.jpg reads every box of the training source, normalised centre xywh per image size."""
    from yolo11.data import load_source
    from yolo11.engine import trainer

    source = load_source("synthetic:imgsz=64,num_images=6", "train")
    boxes, classes, names = trainer.labels_plot_data(source)
    seen = {"boxes": boxes, "classes": classes}
    assert names == source.class_names
    objects = source.dataset["objects"]
    assert len(seen["boxes"]) == len(seen["classes"]) == sum(len(o["bbox"]) for o in objects)
    first = source.dataset[0]
    x, y, w, h = first["objects"]["bbox"][0]
    expected = [(x + w / 2) / first["width"], (y + h / 2) / first["height"], w / first["width"], h / first["height"]]
    np.testing.assert_allclose(seen["boxes"][0], expected, rtol=1e-6)
    assert 0 <= seen["boxes"].min() and seen["boxes"].max() <= 1


def test_plot_pool_writes_the_figures_and_raises_their_errors(tmp_path):
    """The validation figures drawn by the pool's worker processes are the files ``save_validation_plots`` writes in
    this process; a figure that fails raises in ``wait``, with its errno (the trainer's full-disk handling reads
    it)."""
    from yolo11.evaluation.plot_pool import PlotPool

    samples = [{"image": torch.zeros(3, 64, 96, dtype=torch.uint8), "labels": torch.tensor([0]),
                "predictions": torch.tensor([[5.0, 5, 30, 30, 0.9, 0]]), "boxes": torch.tensor([[6.0, 6, 31, 31]])}] * 3
    in_process = plots.save_validation_plots(tmp_path / "here", plot_metrics(), samples, CLASS_NAMES)
    (tmp_path / "pool").mkdir()
    pool = PlotPool(workers=2)
    try:
        for figure, args in plots.validation_plot_jobs(tmp_path / "pool", plot_metrics(), samples, CLASS_NAMES):
            pool.submit(figure, *args)
        pool.wait()
        for path in in_process:
            assert (tmp_path / "pool" / path.name).read_bytes() == path.read_bytes(), path.name
        pool.submit(plots.plot_labels, np.array([[0.5, 0.5, 0.2, 0.3]]), [0], CLASS_NAMES,
                    tmp_path / "no-such-folder" / "labels.jpg")
        with pytest.raises(OSError) as raised:
            pool.wait()
        assert raised.value.errno is not None
    finally:
        pool.close()


ORPHAN_SCRIPT = """
import time
from yolo11.evaluation.plot_pool import PlotPool
pool = PlotPool(workers=2)  # no __main__ guard: the workers must not run this file again
pool.wait()
print(" ".join(str(pid) for pid in pool._executor._processes), flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process states from /proc (Linux)")
def test_plot_workers_die_with_a_killed_trainer_and_do_not_rerun_its_script(tmp_path):
    """kill -9 of the trainer cannot shut its pool down: its idle workers must not wait forever. And a script that
    starts a pool without an ``if __name__ == "__main__"`` guard is not run again by the workers."""
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "unguarded.py"
    script.write_text(ORPHAN_SCRIPT)
    trainer = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=tmp_path)
    try:
        workers = [int(pid) for pid in trainer.stdout.readline().split()]
        assert len(workers) == 2, trainer.stderr.read() if trainer.poll() is not None else "no worker pids"
    finally:
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()

    def alive(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in workers)
