"""Tracker helpers: --report-to parsing, W&B init kwargs, a real offline W&B + TensorBoard run through Accelerate."""

from __future__ import annotations

import http.server
import json
import textwrap
import threading
import time

import pytest
from helpers.tracked_child import run_child

from yolo11.engine import tracking


@pytest.mark.parametrize(("value", "expected"), [
    ("none", []), ("", []), (None, []), ("wandb", ["wandb"]), ("tensorboard", ["tensorboard"]),
    ("wandb, tensorboard", ["wandb", "tensorboard"]), ("WandB,wandb", ["wandb"]),
])
def test_resolve_report_to(value, expected):
    assert tracking.resolve_report_to(value) == expected


def test_resolve_all_is_the_installed_trackers():
    assert tracking.resolve_report_to("all") == [n for n in tracking.KNOWN_TRACKERS if tracking.tracker_installed(n)]
    assert "wandb" in tracking.resolve_report_to("all")  # installed in the project venv


@pytest.mark.parametrize("value", ["mlflow", "wandb,comet", "none,wandb"])
def test_resolve_unknown_raises(value):
    with pytest.raises(ValueError, match="unknown tracker"):
        tracking.resolve_report_to(value)


def test_wandb_offline_without_credentials(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    kwargs = tracking.tracker_init_kwargs(["wandb"], tmp_path / "run", "exp", None)
    assert kwargs == {"wandb": {"dir": str(tmp_path / "run"), "name": "exp", "mode": "offline"}}
    assert tracking.tracker_init_kwargs(["tensorboard"], tmp_path, "exp") == {}


def test_wandb_online_with_credentials_and_resume(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    monkeypatch.setattr(tracking, "wandb_server_reachable", lambda: True)  # no network in tests
    netrc_file = tmp_path / "netrc"
    netrc_file.write_text("machine api.wandb.ai\n  login user\n  password 0123\n")
    netrc_file.chmod(0o600)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(netrc_file))
    kwargs = tracking.tracker_init_kwargs(["wandb"], tmp_path, "exp", "abc123")["wandb"]
    assert "mode" not in kwargs
    assert kwargs["id"] == "abc123" and kwargs["resume"] == "allow"
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    monkeypatch.setenv("WANDB_MODE", "disabled")  # an explicit choice is left alone
    assert "mode" not in tracking.tracker_init_kwargs(["wandb"], tmp_path, "exp")["wandb"]


DUMMY_KEY = "0123456789" * 4  # the length of a real W&B API key
CLOSED_PORT = "http://127.0.0.1:9"  # the discard port: nothing listens there


def test_wandb_goes_offline_quickly_when_the_server_does_not_answer(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", DUMMY_KEY)
    monkeypatch.setenv("WANDB_BASE_URL", CLOSED_PORT)
    start = time.monotonic()
    kwargs = tracking.tracker_init_kwargs(["wandb"], tmp_path / "run", "exp", "abc123")["wandb"]
    assert time.monotonic() - start < tracking.WANDB_PROBE_TIMEOUT_S + 1
    assert kwargs["mode"] == "offline" and kwargs["id"] == "abc123"
    out = capsys.readouterr().out
    assert f"W&B: the server {CLOSED_PORT} did not answer" in out
    assert f"wandb sync {tmp_path / 'run' / 'wandb'}" in out


def test_wandb_stays_online_when_the_server_answers(tmp_path, monkeypatch):
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)  # answers 501
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.delenv("WANDB_MODE", raising=False)
        monkeypatch.setenv("WANDB_API_KEY", DUMMY_KEY)
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}")
        assert "mode" not in tracking.tracker_init_kwargs(["wandb"], tmp_path, "exp")["wandb"]
    finally:
        server.shutdown()
        server.server_close()


RUN_SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from tracked_child import start_offline_run, validation_sample
    from yolo11.engine import tracking

    run_dir = Path(sys.argv[1])
    accelerator, report_to = start_offline_run(run_dir)
    print("RUN_ID", tracking.current_run_id(accelerator))
    accelerator.log({"train/box_loss": 1.25, "metrics/mAP50(B)": 0.5}, step=3)
    tracking.log_validation_images(accelerator, [validation_sample()], ["cat", "dog"], step=4)
    from yolo11 import create_model
    from yolo11.weights import save_weights
    weights = save_weights(create_model("yolo11n", num_classes=2, names=["cat", "dog"]),
                           run_dir / "weights" / "best.safetensors")
    tracking.log_best_weights_artifact(accelerator, weights)
    accelerator.end_training()
    print(tracking.final_message(report_to, run_dir))
""")


@pytest.mark.slow
def test_offline_wandb_and_tensorboard_run_logs_history_and_boxes(tmp_path):
    from helpers import wandb_reader

    result = run_child(RUN_SCRIPT, tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    run_id = result.stdout.split("RUN_ID ")[1].split()[0]
    stream = wandb_reader.find_stream(tmp_path / "run" / "wandb")
    assert stream.name == f"run-{run_id}.wandb"
    assert f"wandb sync {stream.parent}" in result.stdout

    rows = wandb_reader.history(stream)
    scalars = next(r for r in rows if "train/box_loss" in r)
    assert scalars["train/box_loss"] == 1.25 and scalars["_step"] == 3
    images = next(r for r in rows if any(k.startswith("val/images") for k in r))
    assert images["_step"] == 4
    assert images["val/images/_type"] == "images/separated"
    assert images["val/images/count"] == 1
    (overlays,) = images["val/images/all_boxes"]
    assert set(overlays) == {"predictions", "ground_truth"}
    files = {name: json.loads((stream.parent / "files" / ref["path"]).read_text()) for name, ref in overlays.items()}
    (predicted,) = files["predictions"]["box_data"]  # the 0.01 prediction is below the drawing threshold
    assert predicted["scores"]["conf"] == pytest.approx(0.8) and predicted["class_id"] == 1
    assert predicted["position"] == {"minX": 2.0, "maxX": 20.0, "minY": 3.0, "maxY": 25.0}
    (truth,) = files["ground_truth"]["box_data"]
    assert truth["box_caption"] == "dog" and files["ground_truth"]["class_labels"] == {"0": "cat", "1": "dog"}
    (artifact,) = wandb_reader.artifacts(stream)
    assert artifact.type == "model"
    assert json.loads(artifact.metadata)["names"] == ["cat", "dog"]  # the model's class names travel with it

    # TensorBoard: the ground truth | predictions drawing, side by side
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = (tmp_path / "run" / "yolo11-test").glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    assert accumulator.Tags()["images"] == ["val/images/0"]
    (image,) = accumulator.Images("val/images/0")
    assert (image.step, image.width, image.height) == (4, 2 * 48, 32)
    assert accumulator.Scalars("train/box_loss")[0].value == 1.25


@pytest.mark.slow
def test_run_with_a_key_but_no_server_goes_offline_within_seconds(tmp_path):
    """Without the probe, wandb retries the server for about 90 s and then aborts the training."""
    from helpers import wandb_reader

    start = time.monotonic()
    result = run_child(RUN_SCRIPT, tmp_path, timeout=60,
                       wandb_env={"WANDB_API_KEY": DUMMY_KEY, "WANDB_BASE_URL": CLOSED_PORT})
    assert result.returncode == 0, result.stderr[-3000:]
    # the whole child (imports, a tiny run) takes ~8 s; 45 s still tells the ~90 s of retries apart on a loaded host
    assert time.monotonic() - start < 45
    stream = wandb_reader.find_stream(tmp_path / "run" / "wandb")
    assert stream.parent.name.startswith("offline-run-")
    assert "did not answer" in result.stdout and f"wandb sync {stream.parent}" in result.stdout
