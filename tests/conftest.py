"""Fixtures shared by the test files, and where their helpers live.

Helpers are modules of ``tests/helpers/`` (``from helpers.engine_helpers import launch``); a test file never imports
another test file. ``tests/helpers`` is also on ``sys.path``, so that the plain form (``from engine_helpers import
launch``) names the same files, and a script run by path from that folder imports its neighbours so."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

# Two pytest workers (`-n 2`, pyproject's addopts) share the cores with each other's launched runs: OpenMP threads
# that spin at barriers while another process holds the core make a CPU step 50-100x slower; sleeping ones do not.
# Read by libgomp when torch starts, here and in every process a test launches (it inherits the environment).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

HELPERS = Path(__file__).resolve().parent / "helpers"
if str(HELPERS) not in sys.path:
    sys.path.append(str(HELPERS))

from helpers.engine_helpers import TINY_RUN_FLAGS, describe, launch, reset_accelerate_state  # noqa: E402


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow end-to-end tests first (their files first, for ``--dist loadfile``): two workers then share out
    the long runs at the start, and the short tests fill in at the end instead of one long file ending the suite
    alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: each file keeps its order


@pytest.fixture
def fresh_accelerate_state():
    """Accelerate's process-wide state reset after the test: each test builds its own ``Accelerator`` (a file asks
    for it on every test with ``pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")``)."""
    yield
    reset_accelerate_state()


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """``huggingface_hub.HfApi`` replaced by ``FakeHfApi`` (uploads land in ``tmp_path / "remote"``) and the Hub
    reachable; returns the class, whose ``calls`` and ``remote`` the test reads."""
    from helpers.fake_hub import FakeHfApi

    from yolo11 import hub

    FakeHfApi.remote, FakeHfApi.calls = tmp_path / "remote", []
    monkeypatch.setattr(hub, "HfApi", FakeHfApi)
    monkeypatch.setattr(hub, "hub_reachable", lambda: True)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return FakeHfApi


@pytest.fixture(scope="module")
def resumable(tmp_path_factory: pytest.TempPathFactory):
    """A prepared yolo11n, its SGD optimizer after one step, an EMA and a checkpoint of them (a template to copy),
    for the module: ``(accelerator, model, optimizer, ema, checkpoint folder)``."""
    import torch
    from accelerate import Accelerator

    from yolo11.engine.checkpoint import TrainState, save_checkpoint
    from yolo11.engine.ema import ModelEMA
    from yolo11.models.detector import create_model

    accelerator = Accelerator(cpu=True)
    model = create_model("yolo11n", num_classes=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6, momentum=0.9)
    model, optimizer = accelerator.prepare(model, optimizer)
    sum(o.mean() for o in model(torch.rand(2, 3, 64, 64))).backward()
    optimizer.step()
    ema = ModelEMA(model, updates=3)
    root = tmp_path_factory.mktemp("resume")
    folder = save_checkpoint(accelerator, root, TrainState(epoch=2, iteration=5, optimizer_steps=5), keep=1,
                             model=model, ema=ema, config={"train": {"lr0": 0.01}})
    yield accelerator, model, optimizer, ema, folder
    reset_accelerate_state()


@pytest.fixture(scope="session")
def tiny_trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run folder of ONE tiny training run, made once per test run through ``accelerate launch`` on the CPU
    (``TINY_RUN_FLAGS``: synthetic 64 px data, 2 epochs of 6 steps, a checkpoint after each): config, weights,
    results.csv, checkpoints. For tests that read a finished run or compare with the uninterrupted one; a test that
    changes the folder takes ``tiny_run_copy`` (a finished run is not resumable: ``helpers.run_folders.rewind`` takes
    the copy back to its checkpoint after epoch 1)."""
    root = tmp_path_factory.mktemp("tiny-run")
    result = launch([*TINY_RUN_FLAGS, "--output-dir", str(root), "--name", "run"])
    assert result.returncode == 0, describe(result)
    return root / "run"


@pytest.fixture
def tiny_run_copy(tiny_trained_run: Path, tmp_path: Path) -> Path:
    """A copy of ``tiny_trained_run`` at ``tmp_path / "run"``, the test's own to resume, break or extend."""
    return Path(shutil.copytree(tiny_trained_run, tmp_path / "run", symlinks=True))
