"""``yolo11.program_exit``: the programs end without the interpreter's teardown, yet as a normal exit would for
anything observable: threads joined, exit handlers run, output flushed, no process of theirs left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import atexit, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
from yolo11.program_exit import exit_process

class Heap:
    def __del__(self):  # the interpreter's teardown, which a successful program skips
        print("teardown")
kept = Heap()
atexit.register(lambda: print("exit handler ran"))
def write_late():
    time.sleep(0.3)
    open(sys.argv[1], "w").write("written")
threading.Thread(target=write_late).start()
ThreadPoolExecutor(1).submit(int)  # an idle executor thread: a join alone would wait for it forever
print("buffered", end=" ")
sys.stderr.write("to stderr")
exit_process(int(sys.argv[2]))
"""


@pytest.mark.parametrize("code", [0, 3])
def test_exit_process_does_what_a_normal_exit_does_that_anyone_sees(tmp_path, code):
    """Success: threads joined, exit handlers run, output flushed, and no teardown. A failure exits normally."""
    late = tmp_path / "late.txt"
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(late), str(code)], capture_output=True, text=True,
                            timeout=60, cwd=ROOT)
    assert result.returncode == code
    assert result.stdout == "buffered exit handler ran\n" + ("teardown\n" if code else "")
    assert result.stderr == "to stderr"
    assert late.read_text() == "written"  # the non-daemon thread finished before the process ended


@pytest.mark.slow
def test_a_training_program_leaves_no_process_behind(tmp_path):
    """Loader workers and figure workers end with the run: none survives the trainer's exit (an orphan would hold
    the output pipe open, and a `| tee` would wait for it)."""
    mark = uuid.uuid4().hex
    env = dict(os.environ, YOLO11_TEST_MARK=mark)
    result = subprocess.run([sys.executable, "-m", "yolo11.train", "--data", "synthetic:imgsz=64,num_images=16",
                             "--imgsz", "64", "--epochs", "1", "--batch-size", "8", "--workers", "2",
                             "--output-dir", str(tmp_path), "--name", "run"],
                            capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "loader workers: 2 per process" in result.stdout
    assert (tmp_path / "run" / "weights" / "best.safetensors").is_file()
    assert (tmp_path / "run" / "results.png").is_file()  # drawn by the figure workers before the exit
    left = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("YOLO11_TEST_MARK") == mark:
                left.append(process.cmdline())
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            pass
    assert left == []
