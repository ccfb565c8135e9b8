"""Weights by name and Hub models: the resolver (local, cache, offline errors), save_pretrained's model card,
from_pretrained, push_to_hub (with a test double for the upload), class names in every file."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
import torch
import yaml
from huggingface_hub import constants
from safetensors import safe_open

import yolo11
from yolo11 import hub
from yolo11.tools import convert, val
from yolo11.weights import WeightsNotFoundError, load_weights, resolve_weights, save_pretrained, save_weights

NAMES = ["cat", "dog", "bird"]
METRICS = {"map50_95": 0.4321, "map50": 0.6543, "map75": 0.41, "precision": 0.7, "recall": 0.6}


def _model(names: list[str] | None = NAMES, name: str = "yolo11n") -> yolo11.YOLO11Detector:
    torch.manual_seed(0)
    return yolo11.create_model(name, num_classes=len(names or NAMES), names=names)


def _outputs(model: torch.nn.Module) -> list[torch.Tensor]:
    with torch.no_grad():
        return model.eval()(torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(1)))


@pytest.fixture
def empty_hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache, and the process's working folder in tmp_path (official names are looked up
    there first)."""
    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)
    return cache


def _cache_file(cache: Path, repo: str, file: str, data: bytes) -> Path:
    """Lay out ``file`` of ``repo`` as huggingface_hub's cache does (refs/main -> snapshots/<commit>/file)."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    root = cache / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    path = root / "snapshots" / commit / file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# --- the resolver ----------------------------------------------------------------------------------------------


def test_names_are_kept_on_the_model_and_checked():
    model = _model()
    assert model.names == NAMES and model.config["names"] == NAMES
    assert yolo11.create_model("yolo11n", num_classes=3).names is None
    with pytest.raises(ValueError, match="2 class names for a model of 3 classes"):
        yolo11.create_model("yolo11n", num_classes=3, names=["a", "b"])


def test_safetensors_file_carries_names_in_its_metadata(tmp_path):
    file = save_weights(_model(), tmp_path / "w.safetensors")
    with safe_open(str(file), framework="pt") as handle:
        metadata = handle.metadata()
    assert json.loads(metadata["names"]) == NAMES
    assert json.loads(metadata["config"])["names"] == NAMES
    assert load_weights(file).names == NAMES


def test_local_paths_come_first(empty_hub_cache):
    local = save_weights(_model(), Path("yolo11n.pt").with_suffix(".safetensors"))
    assert resolve_weights(str(local)) == local
    Path("yolo11n.pt").write_bytes(b"an official name that exists here is this file")
    assert resolve_weights("yolo11n.pt") == Path("yolo11n.pt")  # no download when the file is in place


@pytest.mark.parametrize("offline_by", ["HF_HUB_OFFLINE", "refused_port", "silent_server"])
def test_offline_official_name_fails_within_seconds_saying_where_to_get_it(empty_hub_cache, monkeypatch,
                                                                          offline_by):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    listener = None
    if offline_by == "HF_HUB_OFFLINE":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        if offline_by == "silent_server":
            listener.listen(1)  # accepts connections (backlog) and never answers
            monkeypatch.setattr("yolo11.netprobe.HUB_PROBE_TIMEOUT_S", 1.0)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{listener.getsockname()[1]}")
    try:
        start = time.perf_counter()
        with pytest.raises(WeightsNotFoundError) as caught:
            resolve_weights("yolo11n.pt")
        elapsed = time.perf_counter() - start
    finally:
        if listener is not None:
            listener.close()
    message = str(caught.value)
    assert elapsed < 5, f"took {elapsed:.1f} s"
    assert "yolo11n.pt" in message
    assert "https://github.com/ultralytics/assets/releases/download/v8.3.0/yolo11n.pt" in message
    assert "/Ultralytics/YOLO11/resolve/main/yolo11n.pt" in message
    assert f"put it at {Path.cwd() / 'yolo11n.pt'}" in message
    assert not list(Path.cwd().glob("*.pt"))


def test_offline_official_name_comes_from_the_hub_cache(empty_hub_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cached = _cache_file(empty_hub_cache, "Ultralytics/YOLO11", "yolo11s.pt", b"cached checkpoint")
    assert resolve_weights("yolo11s.pt").read_bytes() == cached.read_bytes()


def test_hub_references_resolve_through_the_cache(empty_hub_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = _model()
    folder = save_pretrained(model, Path("staging"))
    for file in ("model.safetensors", "config.json", "README.md"):
        _cache_file(empty_hub_cache, "me/yolo11n-pets", file, (folder / file).read_bytes())
    expected = model.state_dict()
    for ref in ("me/yolo11n-pets", "hf://me/yolo11n-pets", "hf://me/yolo11n-pets/model.safetensors"):
        loaded = hub.from_pretrained(ref)
        assert loaded.names == NAMES, ref
        assert all(torch.equal(t, expected[k]) for k, t in loaded.state_dict().items()), ref


def test_unknown_reference_says_what_is_accepted(empty_hub_cache):
    with pytest.raises(FileNotFoundError, match=r"no such weights file or folder: nope\.safetensors .*yolo11n\.pt"):
        load_weights("nope.safetensors")


def test_tools_fail_fast_offline_with_one_line(empty_hub_cache, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    assert val.main(["yolo11m.pt", "--data", "synthetic"]) == 2
    assert convert.main(["yolo11m.pt", "out"]) == 2
    assert time.perf_counter() - start < 5
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("error: weights yolo11m.pt:") for line in lines)


# --- Hub folders -----------------------------------------------------------------------------------------------


def _front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_save_pretrained_writes_the_hub_conventions(tmp_path):
    model = _model()
    train_config = {"model": {"model": None, "weights": "yolo11n.pt"}, "run": {"epochs": 3}}
    folder = save_pretrained(model, tmp_path / "m", metrics=METRICS, dataset="me/pets", train_config=train_config,
                             repo_id="me/yolo11n-pets")
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    config = json.loads((folder / "config.json").read_text())
    assert config["names"] == NAMES and config["name"] == "yolo11n" and config["num_classes"] == 3
    assert config["task"] == "detect" and config["strides"] == [8, 16, 32]
    card = (folder / "README.md").read_text()
    meta = _front_matter(card)
    assert meta["library_name"] == "yolo11-accelerate"
    assert {"object-detection", "yolo11"} <= set(meta["tags"])
    assert meta["datasets"] == ["me/pets"]
    (result,) = meta["model-index"][0]["results"]
    assert meta["model-index"][0]["name"] == "me/yolo11n-pets"
    assert result["dataset"]["type"] == "me/pets"
    assert {m["name"]: m["value"] for m in result["metrics"]}["mAP50-95"] == pytest.approx(0.4321)
    assert "0: cat, 1: dog, 2: bird" in card
    assert 'from_pretrained("me/yolo11n-pets")' in card and "yolo11-predict me/yolo11n-pets" in card
    assert "weights: yolo11n.pt" in card and "epochs: 3" in card  # the training config
    loaded = hub.from_pretrained(folder)
    torch.testing.assert_close(_outputs(loaded), _outputs(model), rtol=0, atol=0)


def test_local_dataset_is_named_but_not_linked(tmp_path):
    """A local dataset is shown by its name only (not the training machine's path), in the text, the model-index
    and the training config; the card has a license and an install line."""
    train_config = {"data": {"data": "/home/me/secret/coco8.yaml", "images": None}, "run": {"epochs": 3}}
    card = (save_pretrained(_model(), tmp_path, dataset="/home/me/secret/coco8.yaml", metrics=METRICS,
                            train_config=train_config) / "README.md").read_text()
    meta = _front_matter(card)
    assert "datasets" not in meta and "`coco8.yaml`" in card and "/home/me" not in card
    assert meta["license"] == "apache-2.0" and "## License" in card and "pip install" in card


def test_weights_files_honour_the_umask(tmp_path):
    """safetensors writes 0600 through its temporary file; ours are 0666 less the umask, as any file."""
    import os

    old = os.umask(0o022)
    try:
        weights = save_weights(_model(), tmp_path / "w.safetensors")
        folder = save_pretrained(_model(), tmp_path / "m")
    finally:
        os.umask(old)
    assert oct(weights.stat().st_mode & 0o777) == oct(0o644)
    assert oct((folder / "model.safetensors").stat().st_mode & 0o777) == oct(0o644)


def test_push_to_hub_uploads_exactly_the_model_folder(tmp_path, fake_hub):
    model = _model()
    folder = save_pretrained(model, tmp_path / "m", metrics=METRICS)
    (folder / "notes.txt").write_text("not part of the model")
    url = hub.push_to_hub(folder, "me/pets", private=True)
    assert url == "https://huggingface.co/me/pets"
    assert [c[0] for c in fake_hub.calls] == ["create_repo", "upload_folder"]
    assert fake_hub.calls[0] == ("create_repo", "me/pets", "model", True, True)
    uploaded = fake_hub.remote / "me" / "pets"
    assert sorted(p.name for p in uploaded.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    torch.testing.assert_close(_outputs(hub.from_pretrained(uploaded)), _outputs(model), rtol=0, atol=0)


def test_push_to_hub_of_a_model_writes_its_card(fake_hub):
    hub.push_to_hub(_model(), "me/pets", metrics=METRICS, dataset="me/pets-data")
    card = (fake_hub.remote / "me" / "pets" / "README.md").read_text()
    assert _front_matter(card)["datasets"] == ["me/pets-data"] and "| mAP50 | 0.6543 |" in card


def test_push_to_hub_offline_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConnectionError, match="cannot push to me/pets"):
        hub.push_to_hub(_model(), "me/pets")


def test_val_says_which_class_count_is_whose(tmp_path, capsys):
    weights = save_weights(_model(), tmp_path / "pets.safetensors")
    data = "synthetic:num_images=2,imgsz=64"
    assert val.main([str(weights), "--data", data, "--imgsz", "64", "--cache-dir", str(tmp_path / "cache")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {weights} predicts 3 classes (cat, dog, bird); --data {data} has 6 classes (circle, square, "
        "triangle, cross, ...)")


def test_failed_push_keeps_the_finished_run_exit_0(tmp_path, monkeypatch, capsys):
    """--push-to-hub offline: a warning with the command that uploads later, exit 0, the hub folder kept; the
    run's weights and checkpoint files honour the umask (0644 here)."""
    import os

    from yolo11 import train

    def offline(*args, **kwargs):
        raise OSError("the Hub cannot be reached")

    monkeypatch.setattr(hub, "push_to_hub", offline)
    old = os.umask(0o022)
    try:
        assert train.main(["--data", "synthetic:num_images=8,num_val=4,imgsz=64", "--imgsz", "64", "--epochs", "1",
                           "--batch-size", "4", "--workers", "0", "--plots", "false", "--val-images", "0",
                           "--cache-dir", str(tmp_path / "cache"), "--output-dir", str(tmp_path), "--name", "p",
                           "--push-to-hub", "me/yolo11n-offline"]) == 0
    finally:
        os.umask(old)
    err = capsys.readouterr().err
    assert "warning: --push-to-hub me/yolo11n-offline failed" in err and "hf upload me/yolo11n-offline" in err
    run = tmp_path / "p"
    assert (run / "hub" / "model.safetensors").is_file()
    files = [run / "weights" / "last.safetensors", *sorted((run / "checkpoints").glob("checkpoint-*/*.safetensors"))]
    assert len(files) >= 2 and {oct(f.stat().st_mode & 0o777) for f in files} == {oct(0o644)}, files
