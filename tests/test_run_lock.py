"""One job per run folder: the run folder's lock (``engine/run_lock.py``) and numbered folders claimed by ``mkdir``
(``engine/build.py: resolve_run_dir``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.engine_helpers import ROOT, TINY_FLAGS, describe, launch, one_error_line

from yolo11.engine.build import resolve_run_dir
from yolo11.engine.config import parse_command_line
from yolo11.engine.run_lock import LOCK_FILE, RunFolderBusyError, acquire


def test_a_locked_run_folder_is_refused_naming_the_holder(tmp_path):
    held = acquire(tmp_path)
    try:
        with pytest.raises(RunFolderBusyError) as refused:
            acquire(tmp_path)  # another open file: flock conflicts as with another process
        assert str(tmp_path) in str(refused.value)
        assert f"process {os.getpid()} on {socket.gethostname()}" in str(refused.value)
    finally:
        held.release()
    acquire(tmp_path).release()  # free again once released


def test_a_lock_left_by_a_process_that_is_gone_never_blocks(tmp_path):
    """The holder is killed: the kernel drops its flock, and the pid in the file is not read as a claim."""
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                              "from yolo11.engine.run_lock import acquire; acquire(Path(sys.argv[1])); "
                              "print('held', flush=True); time.sleep(60)", str(tmp_path)],
                             stdout=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(RunFolderBusyError, match=f"process {child.pid} on"):
            acquire(tmp_path)
    finally:
        child.kill()
        child.wait()
    assert (tmp_path / LOCK_FILE).read_text().split()[0] == str(child.pid)  # the stale record stays
    acquire(tmp_path).release()


def test_a_filesystem_without_file_locks_warns_and_runs_unguarded(tmp_path, monkeypatch, capsys):
    import errno
    import fcntl

    def unsupported(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", unsupported)
    assert acquire(tmp_path) is None
    assert f"warning: {tmp_path}: the filesystem does not lock files" in capsys.readouterr().err


class MainProcess:
    is_main_process, num_processes, process_index = True, 1, 0


def test_numbered_run_folders_are_claimed_by_mkdir_not_by_a_look_first(tmp_path, monkeypatch):
    """Another job makes ``exp`` and ``exp2`` between this job's look and its mkdir (the look is made to miss
    them): this job still gets a folder of its own."""
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp2").mkdir()
    (tmp_path / "exp2" / "results.csv").write_text("the other job's\n")
    config, _ = parse_command_line(["--output-dir", str(tmp_path), "--name", "exp"])
    exists = Path.exists
    monkeypatch.setattr(Path, "exists", lambda self: False if self.parent == tmp_path else exists(self))
    path, made = resolve_run_dir(config, MainProcess())
    monkeypatch.undo()
    assert path == tmp_path / "exp3" and made == path and list(path.iterdir()) == []


def test_the_tools_numbered_folders_are_claimed_too_one_each_when_started_at_once(tmp_path):
    """``yolo11-val`` and ``yolo11-predict`` name their folders with the same ``numbered_dir``: eight callers at
    once get eight folders, each made by its call; ``exist_ok`` shares the named one."""
    from concurrent.futures import ThreadPoolExecutor

    from yolo11.run_folders import numbered_dir

    base = tmp_path / "runs" / "val" / "exp"
    with ThreadPoolExecutor(8) as pool:
        folders = list(pool.map(lambda _: numbered_dir(base), range(8)))
    assert sorted(folders) == sorted([base, *(base.with_name(f"exp{i}") for i in range(2, 9))])
    assert all(folder.is_dir() for folder in folders)
    assert numbered_dir(base, exist_ok=True) == base


@pytest.mark.slow
def test_a_second_job_into_a_running_folder_is_refused_in_one_line(tmp_path):
    """``--exist-ok`` (and ``--resume``) into a folder another process holds: exit 2 naming the folder and the pid,
    and nothing of the folder touched."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.csv").write_text("the running job's\n")
    held = acquire(run)
    try:
        for extra in (["--exist-ok"], ["--resume", "auto"]):
            result = launch([*TINY_FLAGS, "--epochs", "1", "--output-dir", str(tmp_path), "--name", "run", *extra],
                            wrapper=True, timeout=300)
            assert result.returncode == 2, describe(result)
            assert f"{run} is in use by process {os.getpid()} on" in one_error_line(result), describe(result)
            assert sorted(p.name for p in run.iterdir()) == [LOCK_FILE, "results.csv"]
            assert (run / "results.csv").read_text() == "the running job's\n"
    finally:
        held.release()
