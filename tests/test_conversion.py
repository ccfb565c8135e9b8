"""Converting a file source: worker processes give the rows of the serial path, one progress bar, and under a
2-process launch only the main process converts (and its error reaches the other)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.engine_helpers import ROOT, describe, launch
from helpers.yolo_folders import corrupt_middle, make_dataset, write_image

from yolo11.data import DataSourceError, load_source

DATA = ROOT.parent / "shared" / "data"


def dirty_dataset(root: Path) -> Path:
    """20 images with boxes, a background, a bad label line, and three broken images in the middle."""
    labels = {f"{k:03d}": f"{k % 3} 0.5 0.5 0.{k % 8 + 1} 0.3\n1 0.2 0.2 0.1 0.1\n" for k in range(20)}
    labels["005"], labels["007"] = None, "0 0.5 0.5 0.2\n1 0.2 0.2 0.1 0.1\n"
    yaml_path = make_dataset(root, labels)
    images = root / "images" / "train"
    (images / "010.jpg").write_bytes(corrupt_middle(write_image(images / "010.jpg", seed=10, size=(120, 160))))
    (images / "011.jpg").write_bytes((images / "011.jpg").read_bytes()[:300])
    (images / "012.jpg").write_bytes(b"")
    return yaml_path


def converted(spec: Path, cache: Path, workers: int) -> tuple[list[dict], dict]:
    source = load_source(os.fspath(spec), "train", cache_dir=cache, workers=workers)
    return source.dataset.to_list(), source.summary.to_dict()


@pytest.mark.parametrize("which", ["coco8", "dirty"])
def test_parallel_conversion_gives_the_serial_rows(tmp_path: Path, which: str) -> None:
    if which == "coco8":
        if not (DATA / "coco8.yaml").is_file():
            pytest.skip(f"test data not found in {DATA}")
        spec = DATA / "coco8.yaml"
    else:
        spec = dirty_dataset(tmp_path / "data")
    serial = converted(spec, tmp_path / "serial", workers=1)
    parallel = converted(spec, tmp_path / "parallel", workers=3)
    assert parallel == serial
    if which == "dirty":
        rows, summary = serial
        assert len(rows) == 17 and len(summary["skipped_images"]) == 3 and len(summary["skipped_lines"]) == 1
        assert [row["image_id"] for row in rows] == [k for k in range(20) if k not in (10, 11, 12)]


def test_progress_bar_counts_the_images(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    spec = dirty_dataset(tmp_path / "data")
    load_source(os.fspath(spec), "train", cache_dir=tmp_path / "cache", workers=2)
    err = capfd.readouterr().err
    assert "converting data train: 20/20 images" in err
    assert "Saving the dataset" not in err  # datasets' own bar is hidden behind ours
    load_source(os.fspath(spec), "train", cache_dir=tmp_path / "cache", workers=2)
    assert "converting" not in capfd.readouterr().err  # cached: nothing to convert


def run_two_processes(tmp_path: Path, spec: Path) -> tuple[list[dict], str]:
    out = tmp_path / "out"
    out.mkdir()
    result = launch([os.fspath(spec), os.fspath(tmp_path / "cache"), os.fspath(out)], config="2gpu.yaml",
                    script=ROOT / "tests" / "helpers" / "convert_once.py", cpu_ddp=True, timeout=300)
    assert result.returncode == 0, describe(result)
    records = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert all(record["num_processes"] == 2 for record in records)
    return records, result.stderr


@pytest.mark.slow
def test_two_processes_convert_once(tmp_path: Path) -> None:
    records, stderr = run_two_processes(tmp_path, dirty_dataset(tmp_path / "data"))
    assert [record["conversions"] for record in records] == [1, 0]
    assert records[0]["rows"] == records[1]["rows"] and len(records[0]["rows"]) == 17
    assert stderr.count("converting data train: 20/20 images") == 1, stderr


@pytest.mark.slow
def test_two_processes_share_the_main_process_error(tmp_path: Path) -> None:
    spec = make_dataset(tmp_path / "data", {"000": None, "001": None})  # no label file at all: convert() raises
    records, _ = run_two_processes(tmp_path, spec)
    assert [record["conversions"] for record in records] == [0, 0]
    assert "no label file for any of the 2 'train' images" in records[0]["error"]
    assert "local main process could not convert" in records[1]["error"]
    assert records[0]["error"] in records[1]["error"]


def test_waiting_process_raises_the_recorded_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The waiting side without a launch: a non-main process finds no cache and the main process's error."""
    from yolo11.data import sources

    class Waiting:
        is_local_main_process = False

        def wait_for_everyone(self) -> None:
            (tmp_path / ".synthetic-train-abc.error").write_text(json.dumps({"type": "DataSourceError",
                                                                             "message": "bad data"}))

    monkeypatch.setattr(sources, "_launch_state", lambda: Waiting())
    with pytest.raises(DataSourceError, match="could not convert this source: bad data"):
        sources._cached(tmp_path, "synthetic-train", "abc", lambda: pytest.fail("a waiting process converted"))


def test_conversion_workers_end_quietly_under_the_trainers_stop_handler():
    """The trainer's start-up stop handler is installed while datasets convert; the forked workers must not run it
    when the pool ends them with SIGTERM (they printed a StopRequested traceback each, and one could hang the
    pool's shutdown)."""
    script = (
        "import sys\n"
        "from yolo11.engine.interrupt import StopSignal\n"
        "from yolo11.data.sources.parallel import ordered_map\n"
        "StopSignal(raise_first=True).install()\n"
        "for _ in range(3):\n"
        "    items = list(range(-500, 500))\n"
        "    assert ordered_map(abs, items, workers=2, desc='t') == [abs(i) for i in items]\n"
        "print('done')\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0 and "done" in result.stdout, result.stderr
    assert "StopRequested" not in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_conversion_workers_started_from_an_unguarded_script_do_not_run_it_again(tmp_path):
    """A script without ``if __name__ == "__main__"`` (a notebook cell saved as a file, the Python API's users) that
    converts with worker processes: the forkserver must not import the script again (it used to wait forever)."""
    script = tmp_path / "convert_me.py"
    script.write_text("from yolo11.data.sources import load_source\n"
                      f"source = load_source('coco8.yaml', 'train', cache_dir={str(tmp_path / 'cache')!r}, workers=2)\n"
                      "print('rows', len(source.dataset))\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180,
                            cwd=Path(__file__).resolve().parents[1] / "yolo11" / "assets")
    assert result.returncode == 0 and "rows 4" in result.stdout, result.stderr[-2000:]
