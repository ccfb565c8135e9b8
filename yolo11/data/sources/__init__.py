"""``load_source(spec, split)``: any supported source -> a ``DetectionSource`` in the Hub schema, cached as Arrow.

File-based sources (data YAML, COCO json) and ``synthetic`` are converted once and saved under the cache folder
(``cache_dir``, else ``$YOLO11_CACHE``, else ``~/.cache/yolo11/datasets``), keyed by a fingerprint of the source:
the paths, sizes and modification times of the images and label/annotation files, plus the options. Changing any
of them converts again. Hub ids and ``save_to_disk`` folders are already Arrow and are only normalised.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import datasets
import torch.distributed
from accelerate import PartialState

from yolo11.data.schema import BadSampleSummary, DataSourceError, DetectionSource, detection_features
from yolo11.data.sources.coco import coco_fingerprint_files, coco_rows
from yolo11.data.sources.hub import load_disk, load_hub, normalise
from yolo11.data.sources.synthetic import SHAPES, SyntheticOptions, synthetic_rows
from yolo11.data.sources.yolo import yolo_fingerprint_files, yolo_rows

__all__ = ["CONVERSIONS", "default_cache_dir", "load_source"]

CACHE_VERSION = 2  # bump when the conversion output changes, so old caches are not reused
CONVERSIONS: Counter = Counter()  # conversions done by this process, by source kind (tests check cache reuse)


def default_cache_dir() -> Path:
    return Path(os.environ.get("YOLO11_CACHE") or Path.home() / ".cache" / "yolo11" / "datasets")


def _fingerprint(payload: dict, files: list[Path]) -> str:
    digest = hashlib.sha256(json.dumps({**payload, "version": CACHE_VERSION}, sort_keys=True).encode())
    for path in files:
        stat = path.stat()
        digest.update(f"{os.fspath(path)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:20]


def _launch_state() -> PartialState | None:
    """Accelerate's view of the launch when several processes already share a process group, else ``None``.

    Only an initialised group is used: building ``PartialState`` here would initialise it before the caller's
    ``Accelerator`` could choose its options."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        state = PartialState()
        return state if state.num_processes > 1 else None
    return None


@contextlib.contextmanager
def _quiet_datasets():
    """Hide ``datasets``' own save/load bars: our conversion bar already reports the progress."""
    was_disabled = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            datasets.enable_progress_bars()


def _convert_and_save(cache_root: Path, folder: Path, convert) -> None:
    rows, class_names, summary = convert()
    CONVERSIONS[folder.name.split("-")[0]] += 1
    dataset = datasets.Dataset.from_list(rows, features=detection_features(class_names))
    del rows  # the Arrow table holds the same data: do not keep both at COCO scale
    cache_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=cache_root))
    dataset.save_to_disk(os.fspath(tmp / "data"))
    (tmp / "yolo11_source.json").write_text(json.dumps({"class_names": class_names, "summary": summary.to_dict()}))
    try:
        tmp.rename(folder)
    except OSError:  # another machine sharing this folder finished the same conversion first: use theirs
        shutil.rmtree(tmp, ignore_errors=True)


def _cached(cache_root: Path, name: str, fingerprint: str, convert) -> tuple[datasets.Dataset, list[str], dict]:
    """Load ``name-fingerprint`` from the cache, or run ``convert() -> (rows, names, summary)`` and save it.

    Under a multi-process launch only the local main process of each machine converts (the cache folder may be
    per machine) while the others wait at a barrier, then load its Arrow files. When the conversion fails the
    main process still reaches the barrier after writing the error beside the cache, and the others raise it too
    instead of waiting forever. The folder is written under a temporary name and renamed, so no process ever
    sees half a cache.
    """
    folder = cache_root / f"{name}-{fingerprint}"
    meta_file = folder / "yolo11_source.json"
    error_file = cache_root / f".{folder.name}.error"
    state = _launch_state()
    converter = state is None or state.is_local_main_process
    if state is not None and not converter:
        state.wait_for_everyone()
    try:
        with _quiet_datasets():
            if converter and not meta_file.is_file():
                error_file.unlink(missing_ok=True)
                try:
                    _convert_and_save(cache_root, folder, convert)
                except Exception as err:
                    if state is not None:
                        cache_root.mkdir(parents=True, exist_ok=True)
                        error_file.write_text(json.dumps({"type": type(err).__name__, "message": str(err)}))
                    raise
    finally:
        if state is not None and converter:
            state.wait_for_everyone()
    if not meta_file.is_file():  # only a waiting process gets here: the local main process failed
        error = json.loads(error_file.read_text()) if error_file.is_file() else {"type": "", "message": "no reason"}
        message = f"{name}: the local main process could not convert this source: {error['message']}"
        raise DataSourceError(message) if error["type"] == "DataSourceError" else RuntimeError(message)
    meta = json.loads(meta_file.read_text())
    with _quiet_datasets():
        dataset = datasets.load_from_disk(os.fspath(folder / "data"))
    return dataset, meta["class_names"], meta["summary"]


def _looks_like_path(spec: str) -> bool:
    return spec.startswith((".", "/", "~")) or spec.endswith((".yaml", ".yml", ".json")) or os.sep * 2 in spec


def load_source(spec: str, split: str = "train", cache_dir: str | os.PathLike | None = None,
                images: str | os.PathLike | None = None, workers: int | None = None,
                **synthetic_opts) -> DetectionSource:
    """Load one split of a detection source in the Hub schema.

    ``spec`` is ``synthetic[:key=value,...]`` (options also as ``synthetic_opts``), an Ultralytics data YAML,
    a COCO instances json (images beside it or in ``images``; a json holds one split, so ``{split}`` in ``spec``
    and ``images`` is replaced by the split name), a ``save_to_disk`` folder, or a Hub id.
    A YAML or json is converted once, checking its images in ``workers`` processes (all cores when ``None``;
    the rows do not depend on it). Raises ``DataSourceError`` for a source that cannot be used; bad samples are
    skipped, counted in ``DetectionSource.summary`` and logged once (by the local main process of a launch).
    """
    cache_root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if spec == "synthetic" or spec.startswith("synthetic:"):
        options = SyntheticOptions.parse(spec.partition(":")[2], **synthetic_opts)
        fingerprint = _fingerprint({"kind": "synthetic", "split": split, **options.to_dict()}, [])
        dataset, names, summary = _cached(cache_root, f"synthetic-{split}", fingerprint,
                                          lambda: (synthetic_rows(options, split), list(SHAPES), BadSampleSummary()))
        return DetectionSource(dataset, names, f"synthetic-{split}", BadSampleSummary.from_dict(summary))
    if synthetic_opts:
        raise DataSourceError(f"options {sorted(synthetic_opts)} only apply to the synthetic source, not {spec!r}")
    if "{split}" in spec:  # one COCO json per split: "annotations/instances_{split}2017.json"
        spec = spec.replace("{split}", split)
        images = os.fspath(images).replace("{split}", split) if images is not None else None
    path = Path(spec).expanduser()
    if path.suffix in (".yaml", ".yml") and path.is_file():
        path = path.resolve()
        fingerprint = _fingerprint({"kind": "yolo", "split": split}, yolo_fingerprint_files(path, split))
        result = _cached(cache_root, f"yolo-{path.stem}-{split}", fingerprint,
                         lambda: yolo_rows(path, split, workers))
        name = f"{path.stem}-{split}"
    elif path.suffix == ".json" and path.is_file():
        path, image_dir = path.resolve(), Path(images).resolve() if images else None
        fingerprint = _fingerprint({"kind": "coco", "images": os.fspath(image_dir or "")},
                                   coco_fingerprint_files(path, image_dir))
        result = _cached(cache_root, f"coco-{path.stem}", fingerprint, lambda: coco_rows(path, image_dir, workers))
        name = path.stem
    elif path.is_dir():
        dataset, names = normalise(load_disk(path, split), os.fspath(path))
        return DetectionSource(dataset, names, f"{path.name}-{split}")
    elif _looks_like_path(spec):
        raise DataSourceError(f"{spec}: no such file or folder (expected a data YAML, a COCO json or a "
                              "save_to_disk folder)")
    else:
        dataset, names = normalise(load_hub(spec, split), spec)
        return DetectionSource(dataset, names, f"{spec}-{split}")
    dataset, names, summary_dict = result
    summary = BadSampleSummary.from_dict(summary_dict)
    state = _launch_state()
    if state is None or state.is_local_main_process:
        summary.log(name)
    if len(dataset) == 0:
        raise DataSourceError(f"{spec}: no usable images in split {split!r} (see the warnings above)")
    return DetectionSource(dataset, names, name, summary)
