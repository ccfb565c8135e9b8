"""A full disk during any write of a run: one line naming the file and the intact checkpoint, exit 2, and nothing
half-written where the run's files are (``yolo11/output_errors.py``: ``replaced``, ``writing``)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
from helpers.engine_helpers import ROOT, TINY_FLAGS, describe, launch, one_error_line
from safetensors import SafetensorError
from safetensors.torch import load_file

from yolo11.evaluation.results import ResultsCSV, read_results
from yolo11.output_errors import as_write_error, replaced, write_file, writing

FULL = os.strerror(errno.ENOSPC)


def test_a_failed_write_leaves_the_previous_file_whole_and_no_temporary(tmp_path):
    path = tmp_path / "config.yaml"
    write_file(path, "old: 1\n")
    with pytest.raises(OSError) as raised, replaced(path) as tmp:
        tmp.write_text("new: ")
        raise OSError(errno.ENOSPC, FULL, str(tmp))
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(path)  # the user's name for it
    assert path.read_text() == "old: 1\n" and sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_results_csv_keeps_its_rows_when_an_append_fails(tmp_path, monkeypatch):
    import pathlib

    table = ResultsCSV(tmp_path / "results.csv")
    table.append({"epoch": 1, "time": 1.0})
    before = (tmp_path / "results.csv").read_bytes()
    original = pathlib.Path.write_bytes

    def full(self, data):
        original(self, data[:len(data) // 2])
        raise OSError(errno.ENOSPC, FULL, str(self))

    monkeypatch.setattr(pathlib.Path, "write_bytes", full)
    with pytest.raises(OSError, match="No space left"):
        table.append({"epoch": 2, "time": 2.0})
    monkeypatch.undo()
    assert (tmp_path / "results.csv").read_bytes() == before
    assert [row["epoch"] for row in read_results(tmp_path / "results.csv")] == ["1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]


def test_a_figure_that_cannot_be_written_leaves_no_truncated_image(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from yolo11.evaluation import plots

    def full(self, path, **kwargs):
        open(path, "wb").write(b"\x89PNG half")
        raise OSError(errno.ENOSPC, FULL, str(path))

    ResultsCSV(tmp_path / "results.csv").append({"epoch": 1, "train/box_loss": 1.0})
    monkeypatch.setattr(Figure, "savefig", full)
    with pytest.raises(OSError) as raised:
        plots.plot_results(tmp_path / "results.csv", tmp_path / "results.png")
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(tmp_path / "results.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]


def test_safetensors_and_torch_save_report_a_full_disk_in_their_own_words(tmp_path):
    """safetensors says "os error 28" in its text; torch.save raises a RuntimeError without errno ("unexpected
    pos"), told by a probe write (here under a 32 KiB file size limit: EFBIG, as a real full disk gives ENOSPC)."""
    error = as_write_error(SafetensorError("Error while serializing: I/O error: No space left on device (os error "
                                           "28)"), tmp_path / "last.safetensors")
    assert error.errno == errno.ENOSPC and error.filename == str(tmp_path / "last.safetensors")
    assert as_write_error(RuntimeError("unexpected pos 576 vs 534"), tmp_path) is None  # the disk has room
    assert as_write_error(ValueError("not a write"), tmp_path) is None
    child = ("import resource, signal, sys, torch\n"
             "from yolo11.output_errors import writing\n"
             "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
             "resource.setrlimit(resource.RLIMIT_FSIZE, (32768, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
             "try:\n"
             "    with writing(sys.argv[1]):\n"
             "        torch.save({'a': torch.zeros(100000)}, sys.argv[1])\n"
             "except OSError as err:\n"
             "    print(type(err.__cause__).__name__, err.errno, err.filename)\n")
    result = subprocess.run([sys.executable, "-c", child, str(tmp_path / "optimizer.bin")], capture_output=True,
                            text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert result.stdout.split() == ["RuntimeError", str(errno.EFBIG), str(tmp_path / "optimizer.bin")], \
        describe(result)
    with pytest.raises(RuntimeError, match="not a write"), writing(tmp_path / "x"):
        raise RuntimeError("not a write")


FLAGS = [*TINY_FLAGS, "--batch-size", "8", "--epochs", "2", "--save-period", "1", "--val-interval", "1"]


def faulty_job(args: list[str], env: dict, processes: int = 1) -> subprocess.CompletedProcess:
    """``tests/helpers/faulty_train.py`` through ``yolo11-launch`` (the trainer's exit code, no launcher traceback)."""
    return launch(args, script=ROOT / "tests" / "helpers" / "faulty_train.py", env=env, wrapper=True, timeout=300,
                  config="cpu_2proc.yaml" if processes == 2 else "cpu.yaml", cpu_ddp=processes == 2)


def no_temporaries(run) -> None:
    """Nothing half-written left beside the run's files: no .<name>.tmp<suffix>, no .tmp-checkpoint-*."""
    left = [p for p in run.rglob(".*") if p.name != ".lock"]
    assert left == [], left


FIRST, SECOND = "checkpoint-00000003", "checkpoint-00000006"  # 24 images, batch 8: 3 batches per epoch


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "file", "intact", "rows"), [
    ({"FAULT_WRITE": "results:3"}, "results.csv", FIRST, 1),  # header, epoch 1, epoch 2
    # safetensors' own error, for epoch 2's weights: written in the background, said at the end
    ({"FAULT_WRITE": "last:2"}, "weights/last.safetensors", SECOND, 2),
    ({"FAULT_WRITE": "latest:2"}, "checkpoints/latest", FIRST, 2),  # epoch 2's checkpoint is whole, not named
    ({"FAULT_FIGURES": "1"}, "results.png", SECOND, 2),  # the figures at the end of the run
])
def test_a_full_disk_mid_run_is_one_line_naming_the_file_and_the_intact_checkpoint(tmp_path, fault, file, intact,
                                                                                      rows):
    run = tmp_path / "run"
    result = faulty_job([*FLAGS, "--output-dir", str(tmp_path), "--name", "run"], fault)
    assert result.returncode == 2, describe(result)
    line = one_error_line(result)
    assert f"cannot write {run / file}: {FULL}" in line, line
    assert f"the last complete checkpoint, {run / 'checkpoints' / intact}, is intact: free space, then resume " \
           "with " in line and line.endswith(f"--resume {run}"), line  # the launch that resumes the run
    assert (run / "checkpoints" / "latest").read_text().strip() == intact and (run / "checkpoints" / intact).is_dir()
    no_temporaries(run)
    assert len(read_results(run / "results.csv")) == rows
    load_file(run / "weights" / "last.safetensors")  # whole: the previous epoch's or this one's


@pytest.mark.slow
def test_a_full_disk_before_the_first_checkpoint_says_there_is_nothing_to_resume(tmp_path):
    result = faulty_job([*FLAGS, "--output-dir", str(tmp_path), "--name", "run"], {"FAULT_WRITE": "config:1"})
    assert result.returncode == 2, describe(result)
    line = one_error_line(result)
    assert f"cannot write {tmp_path / 'run' / 'config.yaml'}: {FULL}; no checkpoint was written yet" in line
    assert not (tmp_path / "run").exists()  # the start made it and trained nothing in it


@pytest.mark.slow
def test_a_full_disk_on_rank_1_while_saving_ends_both_ranks_with_its_line(tmp_path):
    """Rank 1's RNG state of the second checkpoint cannot be written: rank 1 says so (``[rank 1]``), rank 0 ends
    quietly, the job exits 2 (not 143), and ``latest`` names the first checkpoint."""
    run = tmp_path / "run"
    result = faulty_job([*FLAGS, "--output-dir", str(tmp_path), "--name", "run"],
                        {"FAULT_DISK_FULL": "2", "FAULT_DISK_FULL_RANK": "1"}, processes=2)
    assert result.returncode == 2, describe(result)
    line = one_error_line(result)
    assert line.startswith("error: [rank 1] cannot write ") and "random_states_1.pkl" in line, line
    assert f"the last complete checkpoint, {run / 'checkpoints' / FIRST}, is intact" in line
    assert (run / "checkpoints" / "latest").read_text().strip() == FIRST
    no_temporaries(run)


def test_an_error_raised_without_words_still_says_what_it_was(tmp_path, capsys):
    """A parse that ran out of memory raised Python's bare ``MemoryError``, and the tool printed ``error: ``."""
    from yolo11.output_errors import error_text
    from yolo11.tools import cli

    assert error_text(MemoryError()) == "out of memory"
    assert error_text(ValueError()) == "ValueError"
    assert error_text(MemoryError("--cache-images needs 3 GiB")) == "--cache-images needs 3 GiB"

    def parse_too_big(argv):
        raise MemoryError

    assert cli(parse_too_big)([]) == 2
    assert capsys.readouterr().err == "error: out of memory\n"
