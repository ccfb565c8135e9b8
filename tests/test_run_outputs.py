"""``yolo11.engine.run_outputs``: what each epoch leaves (results.csv, last/best weights written by a thread, the
epoch lines, the plots of the last epoch), the best epoch and patience, and the run's closing words."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator

import yolo11
from yolo11.engine.loop import EpochResult
from yolo11.engine.run_outputs import RunOutputs, fitness
from yolo11.engine.run_state import TrainState
from yolo11.evaluation import EvaluationResult, plots
from yolo11.evaluation.results import read_results

CLASS_NAMES = ["cat", "dog"]
pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


def outputs_for(run_dir, resumed: TrainState | None = None, **options) -> RunOutputs:
    settings = dict(epochs=3, patience=100, plots=False, report_to=[]) | options
    return RunOutputs(Accelerator(cpu=True), run_dir, CLASS_NAMES, resumed or TrainState(), **settings)


def validation(score: float) -> EvaluationResult:
    metrics = {"precision": 0.5, "recall": 0.4, "map50": 2 * score, "map50_95": score}
    return EvaluationResult(metrics, [], torch.full((3,), 0.5), [])


def end_epoch(outputs: RunOutputs, epoch: int, result: EpochResult, lrs: list[float], validation, model,
              optimizer_steps: int, final: bool = False):
    """An epoch recorded as the trainer records one scored at once: its facts read, then its record."""
    facts = outputs.epoch_facts(epoch, result, lrs, outputs.weights_now(model), optimizer_steps)
    return outputs.record(facts, validation, final=final)


def trained_epoch() -> EpochResult:
    return EpochResult(torch.tensor([1.0, 2.0, 3.0]), 8, 1.0, False)


def test_fitness_is_map50_95_alone_as_ultralytics_8_4():
    assert fitness({"map50": 0.9, "map50_95": 0.1}) == 0.1  # 8.4's DetMetrics.fitness weights [0, 0, 0, 1]
    assert fitness({"map50": 0.1, "map50_95": 0.2}) > fitness({"map50": 0.9, "map50_95": 0.1})


def test_validation_plots_are_drawn_for_the_final_epoch_only(tmp_path, monkeypatch):
    """As Ultralytics: drawing them costs more than an epoch of a small dataset."""

    drawn = []
    monkeypatch.setattr(plots, "validation_plot_jobs", lambda run_dir, *args: drawn.append(run_dir) or [])
    outputs = RunOutputs(Accelerator(cpu=True), tmp_path, CLASS_NAMES, TrainState(), epochs=3, patience=100,
                         plots=True, report_to=[])
    metrics = {"precision": 0.1, "recall": 0.1, "map50": 0.1, "map50_95": 0.05}
    validation = EvaluationResult(metrics, [], torch.zeros(3), [])
    model = yolo11.create_model("yolo11n", num_classes=len(CLASS_NAMES))
    for epoch in range(3):
        end_epoch(outputs, epoch, EpochResult(torch.ones(3), 8, 1.0, False), [0.01] * 3, validation, model, epoch,
                          final=epoch == 2)
        assert len(drawn) == (1 if epoch == 2 else 0)
    outputs.wait_for_writes()  # written by a thread
    assert (tmp_path / "weights" / "last.safetensors").is_file()


def test_may_stop_announces_the_epoch_where_patience_ends_the_run(tmp_path):
    """The trainer asks for the plots' data before validating exactly when the epoch can be the run's last."""

    outputs = RunOutputs(Accelerator(cpu=True), tmp_path, CLASS_NAMES, TrainState(), epochs=10, patience=2,
                         plots=False, report_to=[])
    model = yolo11.create_model("yolo11n", num_classes=len(CLASS_NAMES))
    announced, stopped = [], []
    # best at epoch 1: epochs 3 and 4 may be the last; 3 is (no better), 4 is not (better)
    for epoch, score in enumerate([0.1, 0.2, 0.2, 0.2, 0.3]):
        announced.append(outputs.may_stop(epoch))
        metrics = {"precision": 0.1, "recall": 0.1, "map50": score, "map50_95": score}
        outcome = end_epoch(outputs, epoch, EpochResult(torch.ones(3), 8, 1.0, False), [0.01] * 3,
                                    EvaluationResult(metrics, [], torch.zeros(3), []), model, epoch)
        stopped.append(outcome.stop)
    assert announced == [False, False, False, True, True]
    assert stopped == [False, False, False, True, False]


def test_results_csv_time_is_cumulative_across_epochs_and_resumes(tmp_path, monkeypatch):
    """Ultralytics' results.csv `time`: seconds since the run started, not per epoch; a resumed run continues from
    the last kept epoch's time."""
    from yolo11.engine import run_outputs

    now = [100.0]
    monkeypatch.setattr(run_outputs.time, "perf_counter", lambda: now[0])
    model = yolo11.create_model("yolo11n", num_classes=len(CLASS_NAMES))

    def epoch(outputs: RunOutputs, index: int, at: float) -> None:
        now[0] = at
        end_epoch(outputs, index, EpochResult(torch.ones(3), 8, 1.0, False), [0.01] * 3, None, model, index)

    state = TrainState()
    outputs = RunOutputs(Accelerator(cpu=True), tmp_path, CLASS_NAMES, state, epochs=3, patience=0, plots=False,
                         report_to=[])  # started at 100
    epoch(outputs, 0, 110.0)
    epoch(outputs, 1, 130.0)
    assert [float(r["time"]) for r in read_results(tmp_path / "results.csv")] == [10.0, 30.0]
    state.epoch = 2  # resumed after epoch 2: the kept rows' last time carries on
    now[0] = 500.0
    resumed = RunOutputs(Accelerator(cpu=True), tmp_path, CLASS_NAMES, state, epochs=3, patience=0, plots=False,
                         report_to=[])
    epoch(resumed, 2, 505.0)
    assert [float(r["time"]) for r in read_results(tmp_path / "results.csv")] == [10.0, 30.0, 35.0]


def test_weights_are_the_epochs_even_when_training_goes_on_while_they_are_written(tmp_path):
    """last.safetensors is written by a thread: it must hold the weights as they were at the end of the epoch,
    not as the next epoch changes them in place."""
    from safetensors.torch import load_file

    outputs = RunOutputs(Accelerator(cpu=True), tmp_path, CLASS_NAMES, TrainState(), epochs=2, patience=100,
                         plots=False, report_to=[])
    model = yolo11.create_model("yolo11n", num_classes=len(CLASS_NAMES))
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    end_epoch(outputs, 0, EpochResult(torch.ones(3), 8, 1.0, False), [0.01] * 3, None, model, 0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # the next epoch's updates, in place
    outputs.wait_for_writes()
    written = load_file(tmp_path / "weights" / "last.safetensors")
    assert written.keys() == expected.keys()
    # float16, as Ultralytics' weights (tests/test_checkpoint_size.py)
    assert all(torch.equal(written[k], expected[k].half() if expected[k].is_floating_point() else expected[k])
               for k in expected)


def test_best_weights_are_those_of_the_best_epoch_and_last_of_the_latest(tmp_path):
    from safetensors.torch import load_file

    outputs = outputs_for(tmp_path)
    model = yolo11.create_model("yolo11n", num_classes=len(CLASS_NAMES))
    assert outputs.best_summary() is None and outputs.class_table({}) is None  # no validation yet
    weights = []
    for epoch, score in enumerate([0.2, 0.1]):  # the second epoch is worse
        with torch.no_grad():
            next(model.parameters()).add_(1.0)
        weights.append(next(model.parameters()).detach().clone())
        outcome = end_epoch(outputs, epoch, trained_epoch(), [0.01] * 3, validation(score), model, epoch)
        assert (outcome.best_epoch, outcome.best_fitness) == (0, 0.2)
    outputs.wait_for_writes()
    first = next(iter(model.state_dict()))
    # float16, as Ultralytics' weights: each epoch's values rounded (the epochs differ by 1.0, far beyond it)
    assert torch.equal(load_file(tmp_path / "weights" / "best.safetensors")[first], weights[0].half())
    assert torch.equal(load_file(tmp_path / "weights" / "last.safetensors")[first], weights[1].half())
    assert outputs.best_summary() == {"epoch": 1, "fitness": 0.2, "map50_95": 0.2, "map50": 0.4}


def test_the_first_validated_epoch_is_the_best_so_far_even_with_nothing_to_find(tmp_path):
    """COCO scores -1 where the data has no labelled object: the first validated epoch is still the best so far,
    as Ultralytics writes best.pt after its first epoch, so a run that validated always leaves best weights."""
    outputs = outputs_for(tmp_path)
    model = yolo11.create_model("yolo11n", num_classes=len(CLASS_NAMES))
    end_epoch(outputs, 0, trained_epoch(), [0.01] * 3, None, model, 0)  # not validated: nothing to compare
    outcome = end_epoch(outputs, 1, trained_epoch(), [0.01] * 3, validation(-1.0), model, 1)
    assert (outcome.best_epoch, outcome.best_fitness) == (1, -1.0)
    assert end_epoch(outputs, 2, trained_epoch(), [0.01] * 3, validation(-1.0), model, 2).best_epoch == 1
    outputs.wait_for_writes()
    assert (tmp_path / "weights" / "best.safetensors").is_file()


def test_a_resumed_run_keeps_its_best_epoch_until_beaten(tmp_path):
    """The best epoch of before the resume comes from the TrainState; its metrics are not known any more."""
    resumed = TrainState(epoch=3, best_fitness=0.5, best_epoch=2)
    outputs = outputs_for(tmp_path, resumed, epochs=5, patience=2)
    model = yolo11.create_model("yolo11n", num_classes=len(CLASS_NAMES))
    outcome = end_epoch(outputs, 3, trained_epoch(), [0.01] * 3, validation(0.4), model, 30)
    assert (outcome.best_epoch, outcome.best_fitness, outcome.stop) == (2, 0.5, False)
    assert outputs.best_summary() == {"epoch": 3, "fitness": 0.5}
    assert end_epoch(outputs, 4, trained_epoch(), [0.01] * 3, validation(0.45), model, 40).stop  # patience 2
    outputs.wait_for_writes()
    assert not (tmp_path / "weights" / "best.safetensors").exists()  # the best weights were never these


def test_results_csv_rows_and_epoch_lines_with_and_without_validation(tmp_path, capsys):
    outputs = outputs_for(tmp_path, epochs=2)
    model = yolo11.create_model("yolo11n", num_classes=len(CLASS_NAMES))
    end_epoch(outputs, 0, trained_epoch(), [0.01, 0.02, 0.03], None, model, 4)
    end_epoch(outputs, 1, trained_epoch(), [0.01, 0.02, 0.03], validation(0.25), model, 8, final=True)
    outputs.wait_for_writes()
    first, second = read_results(tmp_path / "results.csv")
    assert (first["epoch"], float(first["train/cls_loss"]), float(first["lr/pg2"])) == ("1", 2.0, 0.03)
    assert first["metrics/mAP50-95(B)"] == ""  # no validation that epoch
    assert (float(second["metrics/mAP50-95(B)"]), float(second["val/box_loss"])) == (0.25, 0.5)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert lines[0].startswith("epoch 1/2 done in ") and "mAP50-95" not in lines[0]
    assert lines[1] == "  losses box cls dfl: train 1.0000 2.0000 3.0000"
    assert "(validation 0:00:00) | mAP50-95 0.2500 mAP50 0.5000 P 0.5000 R 0.4000" in lines[2]
    assert lines[3].endswith("| val 0.5000 0.5000 0.5000")


def test_push_to_hub_without_weights_says_so_and_fails(tmp_path, capsys):
    assert outputs_for(tmp_path).push_to_hub("me/model", "synthetic", {}) is False
    assert f"error: --push-to-hub me/model: no weights were saved in {tmp_path / 'weights'}" in capsys.readouterr().err
