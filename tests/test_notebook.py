"""``examples/notebook_launcher.ipynb`` executed as a user would run it: a Jupyter kernel, 2 CPU processes."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_notebook_launcher_example_trains_on_two_cpu_processes(tmp_path, monkeypatch):
    """Every cell runs (nbclient, the python3 kernel of this interpreter); the launch uses 2 gloo processes when
    there is no GPU, and the last cell reads the run's results.csv, one row per epoch. Port 29500 (Accelerate's
    default) is held meanwhile, as another run on the machine would hold it: the notebook must pick a free one."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    examples = tmp_path / "examples"  # the notebook writes runs/ beside its folder: a copy keeps the checkout clean
    examples.mkdir()
    shutil.copy(ROOT / "examples" / "notebook_launcher.ipynb", examples)
    notebook = nbformat.read(examples / "notebook_launcher.ipynb", as_version=4)
    with socket.socket() as other_run:
        try:
            other_run.bind(("", 29500))
            other_run.listen()
        except OSError:
            pass  # already held by something else on the machine: the same condition
        nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(examples)}}).execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    text = "".join(output.get("text", "") for output in outputs)
    assert "2 process(es) x batch 4" in text, text[-3000:]
    rows = notebook.cells[-1].outputs[0]["text"].splitlines()
    assert [row.split()[0] for row in rows] == ["1", "2"], rows
    assert (tmp_path / "runs" / "notebook" / "synthetic" / "weights" / "last.safetensors").is_file()
