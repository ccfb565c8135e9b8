"""``load_source(spec, split)``: any supported source -> a ``DetectionSource`` in the Hub schema, cached as Arrow.

File-based sources (data YAML, COCO json) and ``synthetic`` are converted once and saved under the cache folder
(``cache_dir``, else ``$YOLO11_CACHE``, else ``~/.cache/yolo11/datasets``), keyed by a fingerprint of the source:
the paths, sizes and modification times of the images and label/annotation files, plus the options (split, image
folder, box format). Changing any of them converts again. Hub ids and dataset folders are already Arrow and are
only normalised (``datasets.map``, whose own cache is keyed by the function and its options).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets
import pyarrow.compute
import torch.distributed
from accelerate import PartialState

from yolo11.data.schema import LOGGER, BadSampleSummary, DataSourceError, DetectionSource, detection_features
from yolo11.data.sources.annotation_files import annotation_file_rows
from yolo11.data.sources.box_format import BBOX_FORMATS
from yolo11.data.sources.coco import coco_fingerprint_files, coco_rows, image_folder
from yolo11.data.sources.download import fetch_missing_data, unpacked_export
from yolo11.data.sources.hub import load_disk, load_hub, normalise, other_splits, pick_split
from yolo11.data.sources.layouts import Layout, detect_layout
from yolo11.data.sources.per_image import per_image_fingerprint_files, per_image_rows
from yolo11.data.sources.splits import VAL_FALLBACKS, choose_split
from yolo11.data.sources.synthetic import SHAPES, SyntheticOptions, synthetic_rows
from yolo11.data.sources.yolo import (
    coco_split,
    read_data_yaml,
    split_locations,
    yaml_splits,
    yolo_fingerprint_stats,
    yolo_rows,
)
from yolo11.gate import FileRefusedError, check_regular_file

__all__ = ["BBOX_FORMATS", "CONVERSIONS", "VAL_FALLBACKS", "default_cache_dir", "load_source", "report_same_data",
           "same_data_warning"]

CACHE_VERSION = 5  # bump when the conversion output changes, so old caches are not reused
CONVERSIONS: Counter = Counter()  # conversions done by this process, by source kind (tests check cache reuse)


def default_cache_dir() -> Path:
    return Path(os.environ.get("YOLO11_CACHE") or Path.home() / ".cache" / "yolo11" / "datasets")


def _fingerprint(payload: dict, files: list[Path]) -> str:
    return _fingerprint_stats(payload, [(os.fspath(p), (st := p.stat()).st_size, st.st_mtime_ns) for p in files])


def _fingerprint_stats(payload: dict, stats: list[tuple[str, int, int]]) -> str:
    """A digest of the payload and every ``(path, size, mtime_ns)``: any file added, removed or changed misses."""
    digest = hashlib.sha256(json.dumps({**payload, "version": CACHE_VERSION}, sort_keys=True).encode())
    for path, size, mtime in stats:
        # the path's own bytes: a name that is not UTF-8 (a zip made on Windows) is a str with surrogates here
        digest.update(os.fsencode(path) + f"\0{size}\0{mtime}\n".encode())
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
    features = detection_features(class_names)
    # from_list([]) infers no columns and datasets then rejects the features ("Keys mismatch"): give them empty
    dataset = (datasets.Dataset.from_list(rows, features=features) if rows
               else datasets.Dataset.from_dict({name: [] for name in features}, features=features))
    del rows  # the Arrow table holds the same data: do not keep both at COCO scale
    cache_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=cache_root))
    try:
        # an empty dataset would be saved as no shard at all, which load_from_disk cannot read back
        dataset.save_to_disk(os.fspath(tmp / "data"), num_shards=None if len(dataset) else 1)
        (tmp / "yolo11_source.json").write_text(json.dumps({"class_names": class_names,
                                                            "summary": summary.to_dict()}))
    except BaseException:  # an error or a stop request (Ctrl-C): no half-written folder left in the cache
        shutil.rmtree(tmp, ignore_errors=True)
        raise
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
        try:
            state.wait_for_everyone()
        except RuntimeError:  # the converting process is gone: stopped by a signal (then so is this one) or failed
            _stop_as_recorded(error_file)
            raise
    stopped = False
    try:
        with _quiet_datasets():
            if converter and not meta_file.is_file():
                error_file.unlink(missing_ok=True)
                try:
                    _convert_and_save(cache_root, folder, convert)
                except BaseException as err:  # a stop request too: the waiting processes stop with it
                    stopped = not isinstance(err, Exception)
                    if state is not None:
                        cache_root.mkdir(parents=True, exist_ok=True)
                        error_file.write_text(json.dumps({"type": type(err).__name__, "message": str(err),
                                                          "signum": getattr(err, "signum", None)}))
                    raise
    finally:
        if state is not None and converter:
            # stopped: the others may be gone already (stopped too), and the barrier then fails; the stop goes on
            with contextlib.suppress(RuntimeError) if stopped else contextlib.nullcontext():
                state.wait_for_everyone()
    if not meta_file.is_file():  # only a waiting process gets here: the local main process failed
        _stop_as_recorded(error_file)
        error = json.loads(error_file.read_text()) if error_file.is_file() else {"type": "", "message": "no reason"}
        message = f"{name}: the local main process could not convert this source: {error['message']}"
        raise DataSourceError(message) if error["type"] == "DataSourceError" else RuntimeError(message)
    meta = json.loads(meta_file.read_text())
    with _quiet_datasets():
        dataset = datasets.load_from_disk(os.fspath(folder / "data"))
    return dataset, meta["class_names"], meta["summary"]


def _stop_as_recorded(error_file: Path) -> None:
    """When the converting process recorded a stop signal, this process gets the same signal (its handler, the
    trainer's, stops it as it stopped the converter)."""
    error = json.loads(error_file.read_text()) if error_file.is_file() else {}
    if error.get("signum") is not None:
        signal.raise_signal(error["signum"])


def _looks_like_path(spec: str) -> bool:
    return spec.startswith((".", "/", "~")) or spec.lower().endswith((".yaml", ".yml", ".json", ".zip")) \
        or os.sep * 2 in spec


_REPORTED: set[str] = set()  # notes already logged by this process: loading train then val would say each twice


def _report(note: str) -> None:
    """Log a choice made for the user (a stand-in split, a guessed folder) once per machine and process."""
    state = _launch_state()
    if note and note not in _REPORTED and (state is None or state.is_local_main_process):
        _REPORTED.add(note)
        LOGGER.warning("%s", note)


@dataclass(frozen=True)
class _Request:
    """What ``load_source`` was asked for, handed to the loader of each kind of source."""

    split: str
    cache_root: Path
    images: Path | None
    workers: int | None
    bbox_format: str
    fallback_splits: tuple[str, ...]
    split_flag: str | None


def load_source(spec: str, split: str = "train", cache_dir: str | os.PathLike | None = None,
                images: str | os.PathLike | None = None, workers: int | None = None, *, bbox_format: str = "auto",
                fallback_splits: Sequence[str] = (), split_flag: str | None = None,
                **synthetic_opts) -> DetectionSource:
    """Load one split of a detection source in the Hub schema.

    ``spec`` is ``synthetic[:key=value,...]`` (options also as ``synthetic_opts``), an Ultralytics data YAML (its
    splits YOLO image folders or COCO jsons), a COCO instances json (images beside it, in the standard COCO layout
    ``../images/<name>`` or ``../<name>``, or in ``images``; a json holds one split, so ``{split}`` in ``spec``
    and ``images`` is replaced by the split name), a ``save_to_disk`` folder or a folder of dataset files, or a
    Hub id. When the source has no ``split`` but has one of ``fallback_splits`` (tried in order, and only when
    ``split`` is one of them), that one is used and logged; ``split_flag`` is the option errors tell the user to
    set. ``bbox_format`` (``auto``, ``xywh``, ``xyxy``) says how Hub/folder boxes and COCO json boxes are stored;
    ``auto`` reads it from a Hub dataset's boxes and follows the format's rule for COCO json (``xywh``).
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
        return DetectionSource(dataset, names, f"synthetic-{split}", BadSampleSummary.from_dict(summary),
                               origin=f"synthetic:{split}")
    if synthetic_opts:
        raise DataSourceError(f"options {sorted(synthetic_opts)} only apply to the synthetic source, not {spec!r}")
    if bbox_format not in BBOX_FORMATS:
        raise DataSourceError(f"--bbox-format must be one of {BBOX_FORMATS}, got {bbox_format!r}")
    images = os.fspath(images).replace("{split}", split) if images is not None else None
    request = _Request(split, cache_root, Path(images).expanduser() if images else None, workers, bbox_format,
                       tuple(fallback_splits), split_flag)
    path = Path(spec.replace("{split}", split)).expanduser()  # one COCO json per split: instances_{split}2017.json
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return _load_yaml(path.resolve(), request)
    if path.suffix == ".json" and path.is_file():
        return _load_coco(path.resolve(), request.images, request)
    if path.suffix.lower() == ".zip" and path.is_file():  # an export as the tool handed it out
        unpacked = unpacked_export(path.resolve(), cache_root, _fingerprint({"kind": "zip"}, [path.resolve()]))
        _report(f"{path}: unpacked into {unpacked}")
        path = unpacked
    if path.is_dir():
        _no_image_folder(request, os.fspath(path))
        layout = detect_layout(path)
        return _load_folder(path, request) if layout is None else _load_layout(layout, request)
    if path.exists() and not path.is_file():  # a FIFO, a device: named by kind, not "no such file"
        try:
            check_regular_file(path)
        except FileRefusedError as err:
            raise DataSourceError(str(err)) from None
    if _looks_like_path(spec):
        templated = f" ({spec} for split {split!r}; {split_flag or 'the split argument'} names the split)" \
            if "{split}" in spec else ""
        raise DataSourceError(f"{path}: no such file or folder{templated} (expected a data YAML, a COCO json or a "
                              "dataset folder)")
    return _load_hub(spec, request)


def _load_hub(repo_id: str, request: _Request) -> DetectionSource:
    """A Hub dataset: ``datasets`` caches the download; the split is picked and normalised here."""
    _no_image_folder(request, f"Hub dataset {repo_id}")
    loaded = load_hub(repo_id)
    dataset, chosen, note = pick_split(loaded, request.split, request.fallback_splits, request.split_flag,
                                       f"Hub dataset {repo_id}")
    _report(note)
    where = f"{repo_id}[{chosen}]"
    dataset, names, note, summary = normalise(dataset, where, request.bbox_format,
                                              other_splits=other_splits(loaded, chosen))
    _report(note)
    return _checked(f"{repo_id}-{chosen}", (dataset, names, summary.to_dict()), where, f"hub:{repo_id}:{chosen}")


def _no_image_folder(request: _Request, where: str) -> None:
    """``images`` names the folder of COCO json file names; anywhere else it would be silently unused."""
    if request.images is not None:
        raise DataSourceError(f"{where}: --images applies to a COCO json (or a data YAML naming COCO jsons); "
                              "this source says where its images are itself")


def _no_bbox_format(request: _Request, where: os.PathLike, why: str) -> None:
    """``--bbox-format`` says how Hub/folder and COCO json boxes are stored; a file format that fixes it (``why``)
    would silently ignore it."""
    if request.bbox_format != "auto":
        raise DataSourceError(f"{where}: --bbox-format applies to Hub datasets, dataset folders and COCO jsons; {why}")


def _load_folder(folder: Path, request: _Request) -> DetectionSource:
    """A ``save_to_disk`` folder or a folder of dataset files: already Arrow (or read by ``datasets``), only
    normalised, not cached by us."""
    loaded = load_disk(folder)
    dataset, chosen, note = pick_split(loaded, request.split, request.fallback_splits, request.split_flag,
                                       os.fspath(folder))
    _report(note)
    single = not isinstance(loaded, datasets.DatasetDict)  # one Dataset serves every split: the same rows
    where = os.fspath(folder) if single else f"{folder}[{chosen}]"
    dataset, names, note, summary = normalise(dataset, where, request.bbox_format,
                                              other_splits=other_splits(loaded, chosen))
    _report(note)
    origin = f"folder:{folder.resolve()}" + ("" if single else f":{chosen}")
    return _checked(f"{folder.name}-{chosen}", (dataset, names, summary.to_dict()), where, origin)


def _load_layout(layout: Layout, request: _Request) -> DetectionSource:
    """A folder another tool exported (``layouts.py``): its data YAML, its COCO jsons, its CSV or CreateML files,
    its VOC xml or LabelMe json files, or its YOLO folders."""
    _report(layout.note)
    if layout.kind == "yaml":
        return _load_yaml(layout.path.resolve(), request)
    if layout.kind == "per_image":
        return _load_per_image(layout, request)
    if layout.kind == "table":
        return _load_annotation_files(layout, request)
    if layout.kind == "coco":
        split, note = choose_split(list(layout.split_files), request.split, request.fallback_splits,
                                   request.split_flag, f"{layout.path} (COCO export)")
        _report(note)
        return _load_coco(layout.split_files[split].resolve(), None, request)
    return _load_yaml(layout.path.resolve(), request, layout.data, layout.labels_beside_images)


def _load_yaml(path: Path, request: _Request, data: dict | None = None,
               labels_beside_images: bool = False) -> DetectionSource:
    """An Ultralytics data YAML: YOLO txt labels, or COCO jsons named per split (converted as a json given alone).
    ``data``: the YAML's content for a folder without one (``path`` is then its names file)."""
    data, note = fetch_missing_data(path, data or read_data_yaml(path), request.cache_root / "downloads")
    _report(note)
    split, note = choose_split(yaml_splits(data), request.split, request.fallback_splits, request.split_flag,
                               os.fspath(path))
    _report(note)
    coco = coco_split(path, data, split)
    if coco is not None:
        json_path, yaml_images = coco
        if not json_path.is_file():
            raise DataSourceError(f"{path}: the '{split}' json {json_path} does not exist")
        return _load_coco(json_path.resolve(), request.images or yaml_images, request)
    _no_image_folder(request, f"{path} (YOLO labels)")
    _no_bbox_format(request, path, "YOLO txt labels are always 'class cx cy w h', normalised")
    stats = yolo_fingerprint_stats(path, split, data, labels_beside_images)
    fingerprint = _fingerprint_stats({"kind": "yolo", "split": split, "data": data if path.suffix not in (
        ".yaml", ".yml") else None, "beside": labels_beside_images}, stats)
    result = _cached(request.cache_root, f"yolo-{path.stem}-{split}", fingerprint,
                     lambda: yolo_rows(path, split, request.workers, data, labels_beside_images))
    origin = "yolo:" + ";".join(sorted(os.fspath(p.resolve()) for p in split_locations(path, data, split)))
    return _checked(f"{path.stem}-{split}", result, f"{path}: split {split!r}", origin)


def _load_per_image(layout: Layout, request: _Request) -> DetectionSource:
    """An annotation file per image, Pascal VOC xml or LabelMe json (``per_image.py``), converted once per split."""
    _no_bbox_format(request, layout.path, "Pascal VOC and LabelMe files state their boxes' format")
    split, note = choose_split(list(layout.image_splits), request.split, request.fallback_splits,
                               request.split_flag, os.fspath(layout.path))
    _report(note)
    chosen = layout.image_splits[split]
    fingerprint = _fingerprint({"kind": "per_image", "split": chosen.name},
                               per_image_fingerprint_files(layout.image_splits, split, layout.label_map))
    result = _cached(request.cache_root, f"images-{chosen.name}", fingerprint,
                     lambda: per_image_rows(layout.image_splits, split, layout.label_map, request.workers))
    return _checked(chosen.name, result, f"{layout.path}: split {split!r}",
                    f"images:{layout.path.resolve()}:{chosen.name}")


def _load_annotation_files(layout: Layout, request: _Request) -> DetectionSource:
    """Roboflow's CSV or CreateML export (``annotation_files.py``), converted once per split."""
    _no_bbox_format(request, layout.path, "these files state their boxes' format")
    split, note = choose_split(list(layout.split_files), request.split, request.fallback_splits, request.split_flag,
                               os.fspath(layout.path))
    _report(note)
    path = layout.split_files[split]
    others = sorted(set(layout.split_files.values()) - {path})  # their names number the classes too
    fingerprint = _fingerprint({"kind": "table", "file": os.fspath(path)},  # one conversion for a file serving two
                               [path, *others, *sorted(p for p in path.parent.iterdir() if p.is_file())])
    result = _cached(request.cache_root, f"table-{layout.path.name}-{path.parent.name}", fingerprint,
                     lambda: annotation_file_rows(layout.split_files, split, request.workers))
    return _checked(f"{layout.path.name}-{split}", result, os.fspath(path), f"table:{path.resolve()}")


def _load_coco(json_path: Path, images: Path | None, request: _Request) -> DetectionSource:
    """One COCO json and the folder of its images (``image_folder``: given, or beside it, or the COCO layout)."""
    images_dir, note = image_folder(json_path, images.resolve() if images else None)
    _report(note)
    bbox_format = "xyxy" if request.bbox_format == "xyxy" else "xywh"  # auto: COCO's rule
    fingerprint = _fingerprint({"kind": "coco", "images": os.fspath(images_dir), "bbox_format": bbox_format},
                               coco_fingerprint_files(json_path, images_dir))
    result = _cached(request.cache_root, f"coco-{json_path.stem}", fingerprint,
                     lambda: coco_rows(json_path, images_dir, bbox_format, request.workers))
    return _checked(json_path.stem, result, os.fspath(json_path), f"coco:{json_path}")


def _checked(name: str, result: tuple[datasets.Dataset, list[str], dict], where: str,
             origin: str) -> DetectionSource:
    """The converted source, its problems logged once per machine; an error when no image was usable."""
    dataset, names, summary_dict = result
    summary = BadSampleSummary.from_dict(summary_dict)
    state = _launch_state()
    main = state is None or state.is_local_main_process
    if main:
        summary.log(name)
    if len(dataset) == 0:
        raise DataSourceError(f"{where}: no usable images (see the warnings above)")
    if main and labelled_objects(dataset) == 0:  # empty label files, crowd-only or no annotations: only background
        LOGGER.warning("%s: none of its %d images has a labelled object: a model learns nothing but background "
                       "from it, and COCO scores it -1 (nothing to find); check its labels", name, len(dataset))
    return DetectionSource(dataset, names, name, summary, origin=origin)


def labelled_objects(dataset: datasets.Dataset) -> int:
    """The objects of every row, counted in Arrow (no image is read, no row becomes Python)."""
    column = dataset.select_columns(["objects"]).with_format("arrow")[:].column("objects")
    return sum(int(pyarrow.compute.sum(pyarrow.compute.list_value_length(chunk.field("category"))).as_py() or 0)
               for chunk in column.chunks)


def same_data_warning(train: DetectionSource, val: DetectionSource) -> str:
    """A warning when training and validation read the same rows (one json without ``{split}``, a YAML whose
    train and val name the same folder, a single saved Dataset), else ``""``: the scores then measure fitting,
    not generalisation, which Ultralytics' coco8/coco128 do on purpose."""
    if not train.origin or train.origin != val.origin:
        return ""
    return (f"training and validation use the same data ({train.origin.partition(':')[2]}): validation scores "
            "measure how well the training images are fitted, not how well the model generalises")


def report_same_data(train: DetectionSource, val: DetectionSource) -> None:
    """Log ``same_data_warning`` once per machine."""
    _report(same_data_warning(train, val))
