"""A hostile file costs seconds and megabytes, never minutes or gigabytes (``yolo11/gate/``): each crafted file
here, a few hundred bytes to a few MB, is refused in one line naming the file and the limit. The ``.pt`` and
special files go through ``yolo11-convert`` in a subprocess whose time and peak memory are measured (under an
address-space limit, so that a blow-up fails the test instead of hurting the machine); the parsers are timed
in-process.

The gate's names are imported inside the tests: the CLI tests run against any version of the gate."""

from __future__ import annotations

import collections
import os
import pickle
import re
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers.torch_pickles import FOUR_FLOATS, Storage, Tensor, module, torch_zip

ROOT = Path(__file__).resolve().parents[1]
# A normal yolo11-convert of yolo11n peaks at ~0.9 GB resident and needs 3-4 GB of address space (torch's
# libraries); a refusal comes before any model is built, at ~0.4-0.6 GB.
ADDRESS_SPACE = 6 << 30
MAX_RSS = 1536 << 20
MAX_SECONDS = 20.0  # interpreter start and the torch import included: 1-6 s on a loaded 2-core machine
KILL_AFTER_S = 60.0


@dataclass(frozen=True)
class Finished:
    returncode: int
    stderr: str
    seconds: float
    max_rss: int  # bytes


def run_cli(module_name: str, *args: object) -> Finished:
    """``python -m module_name args`` under ``ADDRESS_SPACE``, killed after ``KILL_AFTER_S``; its own peak RSS
    (``wait4``: that child's, not the largest of all children so far)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}  # one thread: the address space a run needs does not grow with the cores

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    start = time.monotonic()
    with open(os.devnull, "rb") as stdin, subprocess.Popen(
            [sys.executable, "-m", module_name, *map(str, args)], stdin=stdin, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, preexec_fn=limit, env=env, cwd=ROOT) as proc:
        timer = threading.Timer(KILL_AFTER_S, proc.kill)
        timer.start()
        stderr = proc.stderr.read().decode(errors="replace")  # until the child exits (or is killed)
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
    return Finished(proc.returncode, stderr, time.monotonic() - start, usage.ru_maxrss * 1024)


def assert_refused(finished: Finished, path: Path, *phrases: str) -> str:
    """Exit 2 with exactly one ``error:`` line, naming ``path`` and each phrase, within the time and memory bounds."""
    assert finished.seconds < MAX_SECONDS and finished.max_rss < MAX_RSS, finished
    assert finished.returncode == 2, finished.stderr[-3000:]
    errors = [line for line in finished.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {path}: "), finished.stderr[-3000:]
    for phrase in phrases:
        assert phrase in errors[0], errors[0]
    return errors[0]


def convert(path: Path, tmp_path: Path) -> Finished:
    finished = run_cli("yolo11.tools.convert", path, tmp_path / "converted")
    assert not (tmp_path / "converted").exists()
    return finished


# --- .pt files through yolo11-convert ------------------------------------------------------------------------

HALF = torch.HalfStorage
EIGHT_BYTES = bytes(8)  # four float16 zeros


def _grown_tensor(claim: int) -> Tensor:
    """A float16 tensor of 4 elements whose pickled state (``Tensor.__setstate__``: ``set_``) claims ``claim``."""
    storage = Storage("0", 4, HALF)
    return Tensor(storage, (4,), state=(storage, 0, (claim,), (1,)))


def test_pickled_tensor_state_cannot_grow_a_storage(tmp_path: Path) -> None:
    """A 1 KB file whose tensor state grew its storage to 1 GiB (and 2 GiB more when widened to float32): the
    storage is fixed-size and state on a tensor is refused while unpickling."""
    model = module({"weight": _grown_tensor(1 << 29)})
    path = torch_zip(tmp_path / "grow.pt", {"model": model, "ema": None}, {"data/0": EIGHT_BYTES})
    assert path.stat().st_size < 2000
    assert_refused(convert(path, tmp_path), path, "state set on a tensor")


def _dag(levels: int) -> object:
    """A module tree whose every level holds the previous level twice: ``levels`` objects in the pickle,
    2**levels paths for a walk that does not remember what it has seen."""
    level = module()
    for _ in range(levels):
        level = module(modules={"0": level, "1": level})
    return level


def test_module_tree_shared_through_the_memo_is_refused(tmp_path: Path) -> None:
    path = torch_zip(tmp_path / "dag.pt", {"model": _dag(40), "ema": None}, {})
    assert path.stat().st_size < 10_000
    assert_refused(convert(path, tmp_path), path, "MAX_PICKLE_NODES = ")


def test_class_names_shared_through_the_memo_are_refused(tmp_path: Path) -> None:
    """One 1 MB string as 100k class names: 1 MB in the file, 100 GB for whatever joins or copies the names."""
    names = ["n" * (1 << 20)] * 100_000
    path = torch_zip(tmp_path / "names.pt", {"model": module(names=names), "ema": None}, {})
    assert path.stat().st_size < 3 << 20
    assert_refused(convert(path, tmp_path), path, "MAX_PICKLE_TEXT = ")


def _tuple_dag(levels: int) -> tuple:
    """A tuple holding the previous level twice: hashing or printing it costs 2**levels."""
    value: tuple = ("x",)
    for _ in range(levels):
        value = (value, value)
    return value


def _dict_keyed_by(key: object) -> bytes:
    """A pickle of ``{key: 1}`` (written by hand: building that dict here would hash ``key``)."""
    body = pickle.dumps(key, protocol=2)[2:-1]  # without PROTO and STOP
    return b"\x80\x02}(" + body + b"K\x01u."  # EMPTY_DICT MARK key BININT1 SETITEMS STOP


def test_shared_tuple_as_a_dict_key_is_refused_before_unpickling(tmp_path: Path) -> None:
    """A few hundred bytes whose dict key the unpickler would hash in 2**40 steps."""
    path = torch_zip(tmp_path / "key.pt", _dict_keyed_by(_tuple_dag(40)), {})
    assert_refused(convert(path, tmp_path), path, "builds a tuple that holds more than MAX_PICKLE_NODES = ")


def _pickle_with_memo_index(index: int) -> bytes:
    """``None``, stored in the memo at ``index`` (``LONG_BINPUT``), as the whole pickle: 9 bytes."""
    return b"\x80\x02N" + b"r" + struct.pack("<I", index) + b"."


def test_memo_index_beyond_the_pickle_is_refused(tmp_path: Path) -> None:
    """9 bytes that had the C unpickler allocate and clear a memo table of 2**28 entries (2 GiB)."""
    path = torch_zip(tmp_path / "memo.pt", _pickle_with_memo_index(1 << 27), {})
    assert_refused(convert(path, tmp_path), path, "memo entry 134217728")


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _link(path: Path, target: str) -> Path:
    path.symlink_to(target)
    return path


def _loop(folder: Path, name: str) -> Path:
    """``name`` -> ``loop-name`` -> ``name``."""
    _link(folder / f"loop-{name}", name)
    return _link(folder / name, f"loop-{name}")


@pytest.mark.parametrize("make, phrase", [
    (lambda d: _fifo(d / "x.safetensors"), "a FIFO (named pipe), not a regular file"),
    (lambda d: _fifo(d / "x.pt"), "a FIFO (named pipe), not a regular file"),
    (lambda d: _link(d / "zero.pt", "/dev/zero"), "a character device, not a regular file"),
    (lambda d: _link(d / "zero.safetensors", "/dev/zero"), "a character device, not a regular file"),
    (lambda d: _loop(d, "x.pt"), "a symbolic link loop"),
], ids=["fifo.safetensors", "fifo.pt", "dev-zero.pt", "dev-zero.safetensors", "link-loop.pt"])
def test_special_files_are_refused_unread(tmp_path: Path, make, phrase: str) -> None:
    path = make(tmp_path)
    assert_refused(convert(path, tmp_path), path, phrase)


# --- .pt files in-process: each layer holds on its own -----------------------------------------------------

def _refusal(path: Path) -> str:
    from yolo11.gate import FileRefusedError
    from yolo11.weights import load_weights

    with pytest.raises(FileRefusedError) as refused:
        load_weights(path)
    assert "\n" not in str(refused.value) and str(refused.value).startswith(f"{path}: ")
    return str(refused.value)


@pytest.mark.parametrize("state", [
    (Storage("0", 4, HALF), 0, (1 << 20,), (1,)),  # set_ beyond the storage: grows it
    (Storage("0", 4, HALF), 0, (2,), (1,)),  # set_ inside it: harmless, still never written by torch.save
    (Tensor(Storage("0", 4, HALF), (4,)), False, collections.OrderedDict({0: set}), False, None),  # hooks
], ids=["grow", "inside", "hooks"])
def test_any_state_on_a_tensor_is_refused(tmp_path: Path, state: tuple) -> None:
    tensor = Tensor(Storage("0", 4, HALF), (4,), state=state)
    path = torch_zip(tmp_path / "state.pt", {"model": module({"weight": tensor})}, {"data/0": EIGHT_BYTES})
    assert "state set on a tensor (pickle BUILD" in _refusal(path)


@pytest.mark.parametrize("state, message", [
    ((Storage("0", 4, HALF), 0, (1 << 20,), (1,)), "Trying to resize storage that is not resizable"),
    ((Tensor(Storage("0", 4, HALF), (4,)), False, collections.OrderedDict({0: set}), False, None),
     "a tensor of type Tensor with hooks or attributes"),
], ids=["grow", "hooks"])
def test_storages_and_tensors_hold_without_the_state_refusal(tmp_path: Path, monkeypatch, state: tuple,
                                                            message: str) -> None:
    """With ``Tensor.__setstate__`` let through, the storage still cannot grow, and the walk after unpickling
    refuses a tensor with hooks."""
    import contextlib

    from yolo11.weights import safe_pickle

    monkeypatch.setattr(safe_pickle, "_NoTensorState", contextlib.nullcontext)
    tensor = Tensor(Storage("0", 4, HALF), (4,), state=state)
    path = torch_zip(tmp_path / "state.pt", {"model": module({"weight": tensor})}, {"data/0": EIGHT_BYTES})
    assert message in _refusal(path)


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def _list_dag(levels: int) -> list:
    """As ``_tuple_dag``, of lists (not hashable: caught after unpickling)."""
    value: list = ["x"]
    for _ in range(levels):
        value = [value, value]
    return value


def _cycle() -> list:
    value: list = []
    value.append(value)
    return value


@pytest.mark.parametrize("payload, message", [
    (lambda: {"model": module(), "shared": _tuple_dag(40)}, "builds a tuple that holds more than MAX_PICKLE_NODES"),
    (lambda: {"model": module(), "shared": _list_dag(40)}, "expand to more than MAX_PICKLE_NODES = 2000000 objects"),
    (lambda: {"model": module(), "deep": _nested(150)}, "nests objects more than MAX_PICKLE_DEPTH = 100 deep"),
    (lambda: {"model": module(), "loop": _cycle()}, "an object that contains itself"),
    (lambda: b"\x80\x02" + b"N0" * 1_000_001 + b"N.", "more than MAX_PICKLE_OPS = 1000000 pickle operations"),
    (lambda: _pickle_with_memo_index(100), "stores memo entry 100 after 2 operations"),
    (lambda: b"\x80\x02\x8e" + struct.pack("<Q", 1 << 40) + b"abc.", "data.pkl is not a readable checkpoint pickle"),
    (lambda: b"\x80\x02" + b"".join(b"cultralytics.m\nC%d\n0" % k for k in range(1001)) + b"N.",
     "more than MAX_STUB_CLASSES = 1000 module classes named"),
], ids=["shared-tuples", "shared-lists", "deep", "cycle", "operations", "memo-index", "bytes-claim", "classes"])
def test_pickle_structure_is_bounded(tmp_path: Path, payload, message: str) -> None:
    path = torch_zip(tmp_path / "structure.pt", payload(), {"data/0": FOUR_FLOATS})
    start = time.monotonic()
    assert message in _refusal(path)
    assert time.monotonic() - start < 5


def test_real_checkpoint_is_well_within_the_bounds() -> None:
    """A real Ultralytics checkpoint passes with a fifteenth of the operations and objects the limits allow and a
    quarter of the depth (a YOLO11x training checkpoint is ~2-3x this one)."""
    import pickletools
    import zipfile

    from yolo11.gate import MAX_PICKLE_DEPTH, MAX_PICKLE_NODES, MAX_PICKLE_OPS, check_object_graph, pickles
    from yolo11.weights.ultralytics import read_checkpoint

    checkpoint_path = ROOT.parent / "shared" / "data" / "reference" / "yolo11n_coco128.pt"
    with zipfile.ZipFile(checkpoint_path) as archive:
        data = archive.read(next(n for n in archive.namelist() if n.endswith("/data.pkl")))
    assert sum(1 for _ in pickletools.genops(data)) * 15 < MAX_PICKLE_OPS
    checkpoint = read_checkpoint(checkpoint_path)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pickles, "MAX_PICKLE_NODES", MAX_PICKLE_NODES // 15)
        patch.setattr(pickles, "MAX_PICKLE_DEPTH", MAX_PICKLE_DEPTH // 4)
        check_object_graph(checkpoint_path, checkpoint)


# --- special files and links in-process ------------------------------------------------------------------------

@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail instead of hanging when a reader blocks (on a FIFO)."""
    def expire(signum, frame):
        raise TimeoutError(f"blocked for {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _socket(path: Path) -> Path:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()
    return path


@pytest.mark.parametrize("make, phrase", [
    (lambda d: _fifo(d / "x.yaml"), "a FIFO (named pipe), not a regular file"),
    (lambda d: _link(d / "null.json", "/dev/null"), "a character device, not a regular file"),
    (lambda d: _socket(d / "s.yaml"), "a socket, not a regular file"),
    (lambda d: (d / "folder.yaml").mkdir() or d / "folder.yaml", "a directory, not a regular file"),
    (lambda d: _loop(d, "x.yaml"), "a symbolic link loop"),
], ids=["fifo", "device", "socket", "directory", "link-loop"])
def test_every_reader_refuses_what_is_not_a_regular_file(tmp_path: Path, make, phrase: str) -> None:
    from yolo11.gate import (
        FileRefusedError,
        check_regular_file,
        open_regular,
        read_json,
        read_safetensors_header,
        read_yaml,
    )
    from yolo11.weights.safe_pickle import Unpickler
    from yolo11.weights.torch_zip import read_torch_file

    path = make(tmp_path)
    readers = [check_regular_file, open_regular, read_json, read_yaml, read_safetensors_header,
               lambda p: read_torch_file(p, Unpickler)]
    for read in readers:
        with deadline(10), pytest.raises(FileRefusedError) as refused:
            read(path)
        assert str(refused.value) == f"{path}: {refused.value.problem}" and phrase in refused.value.problem


def test_missing_file_is_still_not_found_and_links_to_files_are_read(tmp_path: Path) -> None:
    from yolo11.gate import check_regular_file, open_regular, read_yaml

    for read in (check_regular_file, open_regular, read_yaml):
        with pytest.raises(FileNotFoundError, match="no such file"):
            read(tmp_path / "missing.yaml")
    (tmp_path / "target.yaml").write_text("a: 1\n")
    assert read_yaml(_link(tmp_path / "link.yaml", "target.yaml")) == {"a": 1}


# --- YAML ------------------------------------------------------------------------------------------------------

def _laughs(levels: int, per_level: int = 9) -> str:
    """"Billion laughs": level k is a list of ``per_level`` aliases of level k-1."""
    names = [f"l{k}" for k in range(levels)]
    lines = [f"{names[0]}: &{names[0]} [" + ", ".join(["lol"] * per_level) + "]"]
    lines += [f"{name}: &{name} [" + ", ".join([f"*{previous}"] * per_level) + "]"
              for previous, name in zip(names, names[1:])]
    return "\n".join(lines) + "\n"


def _merge_laughs(levels: int) -> str:
    """The same through merge keys (``<<``), whose flattening copies every merged pair."""
    lines = ["m0: &m0 {" + ", ".join(f"k{k}: 1" for k in range(9)) + "}"]
    lines += [f"m{k}: &m{k} {{<<: [" + ", ".join([f"*m{k - 1}"] * 9) + "]}" for k in range(1, levels)]
    return "\n".join(lines) + "\n"


TOO_MANY_NODES = "more than MAX_YAML_NODES = 250000 nodes or MAX_YAML_BYTES = 8388608 characters with aliases"


@pytest.mark.parametrize("text, message", [
    (_laughs(10), f"line 6: {TOO_MANY_NODES}"),  # the first alias of level 5 (9**6 nodes) past the limit
    (_merge_laughs(10), f"line 6: {TOO_MANY_NODES}"),
    ("s: &s " + "x" * 20_000 + "\nnames: [" + ", ".join(["*s"] * 4000) + "]\n",
     f"line 2: {TOO_MANY_NODES}"),
    ("a: &a [1, *a]\n", "line 1: alias *a lies inside its own anchor"),
    ("a: " + "[" * 50_000 + "]" * 50_000 + "\n", "line 1: nested more than MAX_YAML_DEPTH = 100 levels deep"),
], ids=["laughs", "merge-keys", "long-string", "recursive", "deep"])
def test_yaml_bomb_is_refused_in_a_blink(tmp_path: Path, text: str, message: str) -> None:
    from yolo11.gate import FileRefusedError, read_yaml

    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    assert path.stat().st_size < 200_000
    tracemalloc.start()
    start = time.monotonic()
    try:
        with pytest.raises(FileRefusedError) as refused:
            read_yaml(path)
        seconds, peak = time.monotonic() - start, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(refused.value).startswith(f"{path}: ") and message in str(refused.value), str(refused.value)
    # seconds against minutes unbounded: a generous bound, since a loaded 2-core machine took 5.8 s for 0.5 s work
    assert seconds < 30 and peak < 300 << 20, (seconds, peak)


def test_a_yaml_past_its_size_cap_is_refused_before_parsing(tmp_path: Path) -> None:
    """PyYAML's Python loader reads ~1 MB/s: a 63 MB data YAML or run config.yaml (one long comment) stalled a
    command for 80 s under the configs' 64 MB cap; YAML has its own."""
    from yolo11.gate import MAX_YAML_BYTES, FileRefusedError, read_yaml

    path = tmp_path / "config.yaml"
    path.write_text("epochs: 3\n# " + "x" * MAX_YAML_BYTES + "\n")
    start = time.monotonic()
    with pytest.raises(FileRefusedError, match=f"too large to read .at most {MAX_YAML_BYTES} bytes"):
        read_yaml(path)
    assert time.monotonic() - start < 5


def test_yaml_of_100k_class_names_still_reads(tmp_path: Path) -> None:
    from yolo11.gate import MAX_CLASSES, read_yaml

    path = tmp_path / "data.yaml"
    path.write_text("names:\n" + "".join(f"  - class_{k}\n" for k in range(MAX_CLASSES)))
    assert len(read_yaml(path)["names"]) == MAX_CLASSES


# --- class names -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("names, expected", [
    (["person", "car"], ["person", "car"]),
    ({1: "car", 0: "person"}, ["person", "car"]),
    ([0, 1.5, "x"], ["0", "1.5", "x"]),
    ((), []),
])
def test_check_class_names_lists_names_by_class_id(names, expected) -> None:
    from yolo11.gate import check_class_names

    assert check_class_names(names, "data.yaml") == expected


@pytest.mark.parametrize("names, message", [
    ("person", "'names' is the string 'person', which would be 6 classes of one letter each; names must be a list, "
               "e.g. [person]"),
    (None, "'names' is a NoneType; names must be a list, e.g. [person, car], or a mapping from class id, e.g. "
           "{0: person, 1: car}"),
    ([f"c{k}" for k in range(200_000)], "200000 class names, more than MAX_CLASSES = 100000"),
    (dict.fromkeys(range(200_000), "x"), "200000 class names, more than MAX_CLASSES = 100000"),
    ({0: "a", 2: "c"}, "'names' keys must be the class ids 0..1"),
    ({"0": "a", "1": "b"}, "'names' keys must be the class ids 0..1"),
    (["a", ["b", "c"]], "class name 1 is a list, not a string"),
    (["a", None], "class name 1 is empty (null, ~ or nothing); write a name, quoted if it is one of these words"),
    (["n" * 1000] * 10_000, "class names 0..8000 add up to more than MAX_NAMES_CHARS = 8000000 characters"),
], ids=["string", "none", "200k", "200k-dict", "key-gap", "str-keys", "nested", "null", "chars"])
def test_check_class_names_refuses(names, message: str) -> None:
    from yolo11.gate import FileRefusedError, check_class_names

    with pytest.raises(FileRefusedError) as refused:
        check_class_names(names, "data.yaml")
    assert str(refused.value) == f"data.yaml: {message}"


@pytest.mark.parametrize("names, message", [
    ("names: person\n", "names must be a list, e.g. [person]"),
    ("names: [" + ", ".join(f"c{k}" for k in range(100_001)) + "]\n", "100001 class names, more than MAX_CLASSES"),
], ids=["string", "100k+1"])
def test_data_yaml_names_are_checked(tmp_path: Path, names: str, message: str) -> None:
    from yolo11.data import DataSourceError
    from yolo11.data.sources.yolo import read_data_yaml
    from yolo11.predictor import parse_names

    path = tmp_path / "data.yaml"
    path.write_text(f"path: {tmp_path}\ntrain: images\nval: images\n{names}")
    with pytest.raises(DataSourceError) as refused:
        read_data_yaml(path)
    assert str(refused.value).startswith(f"{path}: ") and message in str(refused.value)
    if len(names) < 100:  # predict's --names data.yaml (parsing 100k names twice takes seconds)
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_names(str(path))


def test_data_yaml_class_names_are_read_as_written(tmp_path: Path) -> None:
    """YAML 1.1 reads unquoted yes/no/on/off as booleans: a data YAML's classes 'no' and 'off' were both 'False',
    a duplicate refused; they are the words written (true/false and numbers still read as YAML 1.2 reads them)."""
    from yolo11.data.sources.yolo import read_data_yaml
    from yolo11.predictor import parse_names

    path = tmp_path / "data.yaml"
    path.write_text(f"path: {tmp_path}\ntrain: images\nval: images\n"
                    "names: [yes, no, on, off, Y, n, true, 7, 'null']\n")
    expected = ["yes", "no", "on", "off", "Y", "n", "True", "7", "null"]
    assert read_data_yaml(path)["names"] == expected
    assert parse_names(str(path)) == expected


def test_pt_class_names_are_checked(tmp_path: Path) -> None:
    from helpers.ultralytics_checkpoint import write_ultralytics_checkpoint

    from yolo11.models.detector import create_model

    model = create_model("yolo11n", num_classes=2)
    path = write_ultralytics_checkpoint(model, ["n" * 1000] * 10_000, tmp_path / "names.pt")
    assert "add up to more than MAX_NAMES_CHARS = 8000000 characters" in _refusal(path)
