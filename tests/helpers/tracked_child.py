"""What the W&B + TensorBoard tests run in a child process (wandb's service and global state must not leak into the
other tests): ``run_child`` starts a script with an offline, isolated environment; the script calls
``start_offline_run`` and logs ``validation_sample()`` as it needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HELPERS = Path(__file__).resolve().parent
ROOT = HELPERS.parents[1]


def run_child(script: str, tmp_path: Path, timeout: float,
              wandb_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``script`` run as ``python run.py <tmp_path>/run`` with HOME in ``tmp_path``, W&B's variables
    ``wandb_env`` (default: offline) and nothing else of this process's environment."""
    (tmp_path / "run.py").write_text(script)
    wandb_env = {"WANDB_MODE": "offline"} if wandb_env is None else wandb_env
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "WANDB_SILENT": "true", **wandb_env,
           "PYTHONPATH": f"{ROOT}:{HELPERS}"}
    return subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path / "run")], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path)


def start_offline_run(run_dir: Path):
    """An ``Accelerator`` logging to W&B and TensorBoard in ``run_dir``, as the trainer starts them; returns it and
    the trackers' names."""
    from accelerate import Accelerator

    from yolo11.engine import tracking

    report_to = tracking.resolve_report_to("wandb,tensorboard")
    accelerator = Accelerator(log_with=report_to, project_dir=str(run_dir))
    accelerator.init_trackers("yolo11-test", config={"run.epochs": 1},
                              init_kwargs=tracking.tracker_init_kwargs(report_to, run_dir, "exp", None))
    return accelerator, report_to


def validation_sample() -> dict:
    """One validation sample as ``predict_and_score`` keeps it: a grey image, a kept and a low-score prediction."""
    import torch

    return {"image": torch.full((3, 32, 48), 128, dtype=torch.uint8),
            "predictions": torch.tensor([[2.0, 3, 20, 25, 0.8, 1], [1, 1, 5, 5, 0.01, 0]]),
            "boxes": torch.tensor([[2.0, 2, 21, 26]]), "labels": torch.tensor([1])}
