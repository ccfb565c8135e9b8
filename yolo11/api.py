"""``yolo11.YOLO``: Ultralytics' Python API (``YOLO(...).train/val/predict/export``) on this project's trainer, tools
and ``Detector``.

    from yolo11 import YOLO
    model = YOLO("yolo11n")                       # an architecture (random weights); "yolo11n.pt": Ultralytics' weights
    metrics = model.train(data="coco8.yaml", epochs=3, imgsz=160)   # Ultralytics' keys, as `yolo11 train` reads them
    print(metrics.map50_95, metrics.best)         # the best weights, validated again; `model` now holds them
    results = model("bus.jpg")                    # = model.predict(...): a list of yolo11.Detections
    model.export(format="onnx")                   # -> the path written

The keyword arguments are the command line's ``key=value`` arguments (``train``: ``yolo11/engine/config.py`` and
``engine/ultralytics_args.py``; ``val`` and ``export``: their tools), so Python and the shell accept the same keys
with the same defaults and messages. A wrong argument, path or dataset raises ``UsageError`` (a ``ValueError``)
with the one-line message the CLI prints. docs/python_api.md maps Ultralytics' names onto ours.

``import yolo11`` stays light: torch loads when a ``YOLO`` is made.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import glob
import io
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from yolo11 import cli_calls as calls
from yolo11.engine.ultralytics_args import ULTRALYTICS_DEFAULTS, did_you_mean, imgsz_value, read_legacy_key
from yolo11.gate import SCALE_NAMES

if TYPE_CHECKING:
    import torch

    from yolo11.data import DetectionSource
    from yolo11.engine.config import TrainConfig
    from yolo11.models import YOLO11Detector
    from yolo11.predictor import Detections, Detector

# Detector's settings, which predict() takes as keywords (Ultralytics' names); and the keys of saving results.
PREDICT_KEYS = ("imgsz", "conf", "iou", "max_det", "rect", "batch", "device", "nms", "names", "classes")
SAVE_KEYS = ("save", "save_txt", "save_conf", "project", "name", "exist_ok")


class UsageError(ValueError):
    """A wrong argument, path, dataset or weights file: the one-line message the command line prints."""


class TrainingError(RuntimeError):
    """Training started but stopped with an error (a non-finite loss, a full disk, a stop signal other than Ctrl-C)."""


@dataclass(frozen=True)
class Metrics:
    """The metrics of one validation (``YOLO.val``; ``YOLO.train``: the best weights validated after training, as
    Ultralytics' ``final_eval``), all in [0, 1]; None where nothing was validated.

    ``per_class``: class name -> ``{"precision", "recall", "map50", "map50_95"}`` (P and R at the best-F1
    confidence; None for a class without ground truth). ``best_epoch`` counts from 1. ``raw``: the evaluator's
    dict (the 12 COCO stats, curves, confusion matrix)."""

    map50_95: float | None
    map50: float | None
    precision: float | None
    recall: float | None
    per_class: dict[str, dict[str, float | None]] = field(default_factory=dict, repr=False)
    run_dir: Path | None = None
    best: Path | None = None
    last: Path | None = None
    best_epoch: int | None = None
    raw: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_evaluation(cls, metrics: dict, class_names: list[str], ground_truth: dict) -> Metrics:
        """From ``CocoEvaluator``'s dict and the COCO ground truth it scored (``evaluate_weights``' values). A class
        with ground truth but no detection scores 0, as in the printed table (COCO gives it no AP)."""
        keys = {"precision": "per_class_precision", "recall": "per_class_recall", "map50": "per_class_ap50",
                "map50_95": "per_class_ap50_95"}
        present = {annotation["category_id"] - 1 for annotation in ground_truth["annotations"]}
        lists = {ours: metrics.get(theirs) or [None] * len(class_names) for ours, theirs in keys.items()}
        per_class = {name: {ours: (values[k] or 0.0) if k in present else None for ours, values in lists.items()}
                     for k, name in enumerate(class_names)}
        return cls(metrics["map50_95"], metrics["map50"], metrics["precision"], metrics["recall"], per_class,
                   raw=metrics)

    @property
    def fitness(self) -> float | None:
        """Ultralytics 8.4's model-selection score: mAP50-95 (``run_outputs.fitness``)."""
        return self.map50_95

    @property
    def results_dict(self) -> dict[str, float | None]:
        """Ultralytics' ``DetMetrics.results_dict`` keys (results.csv's columns)."""
        return {"metrics/precision(B)": self.precision, "metrics/recall(B)": self.recall,
                "metrics/mAP50(B)": self.map50, "metrics/mAP50-95(B)": self.map50_95, "fitness": self.fitness}

    @property
    def box(self) -> SimpleNamespace:
        """Ultralytics' ``metrics.box``: ``map``, ``map50``, ``map75`` (COCO's), ``mp``, ``mr``, ``maps`` (per-class
        mAP50-95, the overall mAP50-95 for a class without ground truth, as Ultralytics fills it) and, for the
        classes with ground truth (``ap_class_index``, ascending), ``ap`` (mAP50-95), ``ap50``, ``p``, ``r`` and
        ``f1`` (at the best-F1 confidence), one value each in that order. The per-class values are NumPy arrays,
        as Ultralytics'."""
        import numpy as np  # here: `import yolo11` stays light

        maps = [self.map50_95 if values["map50_95"] is None else values["map50_95"]
                for values in self.per_class.values()]
        present = [(k, values) for k, values in enumerate(self.per_class.values()) if values["map50_95"] is not None]

        def column(key: str) -> np.ndarray:
            return np.array([values[key] for _, values in present], dtype=np.float64)

        p, r = column("precision"), column("recall")
        return SimpleNamespace(map=self.map50_95, map50=self.map50, map75=self.raw.get("map75"), mp=self.precision,
                               mr=self.recall, maps=np.array(maps, dtype=np.float64),
                               ap_class_index=np.array([k for k, _ in present], dtype=np.int64),
                               ap=column("map50_95"), ap50=column("map50"), p=p, r=r, f1=2 * p * r / (p + r + 1e-16))

    @property
    def save_dir(self) -> Path | None:
        """Ultralytics' name of ``run_dir``."""
        return self.run_dir


class YOLO:
    """A detection model with Ultralytics' ``YOLO`` methods.

    ``model``: an architecture (``yolo11n`` ... ``yolo26x``, or ``yolo11n.yaml``: random weights, 80 classes), a
    weights reference as ``yolo11.weights.load_weights`` takes it (``best.safetensors``, a ``save_pretrained``
    folder, an Ultralytics ``.pt``, ``hf://owner/repo/file``, ``yolo11n.pt`` ... downloaded from the Hub), or a run
    folder (its ``weights/best.safetensors``, else ``last.safetensors``). Unlike Ultralytics, a bare ``yolo11n`` is
    the architecture, as ``model=yolo11n`` is on our command line; ``yolo11n.pt`` names the pretrained weights.
    """

    task = "detect"

    def __init__(self, model: str | Path = "yolo11n") -> None:
        ref = str(model)
        path = Path(ref).expanduser()
        self.run_dir: Path | None = None  # the run that made the weights (a run folder or its weights/), or train()'s
        self.overrides: dict[str, Any] = {}  # that run's data and imgsz: val/predict/export defaults, as Ultralytics'
        self.metrics: Metrics | None = None  # the last train() or val()
        self.ckpt_path: str | None = None  # the weights loaded; None for an architecture
        self._model: YOLO11Detector | None = None
        self._names: list[str] | None = None
        self._fused: tuple[int, YOLO11Detector] | None = None  # (id of the model, its fused copy) for predict
        self._detector: tuple[tuple, Detector] | None = None  # (settings, Detector) for predict
        is_yaml = path.suffix in (".yaml", ".yml")  # Ultralytics' model YAML names the architecture
        if (path.stem if is_yaml else ref) in SCALE_NAMES and (is_yaml or not path.exists()):
            self.architecture = path.stem
            return
        from yolo11.preflight import run_folder_weights

        weights = run_folder_weights(path)  # a run folder: its best weights, else its last, as the tools read it
        if weights is not None:
            ref, path = str(weights), weights
        run = path.parent.parent
        if path.is_file() and path.parent.name == "weights" and (run / "config.yaml").is_file():
            self.run_dir, self.overrides = run, _run_overrides(run)
        self._load(ref)

    def _load(self, ref: str) -> None:
        from yolo11.preflight import check_weights
        from yolo11.tools.onnx_model import OnnxModel, is_onnx
        from yolo11.weights import load_weights

        if Path(ref).is_file() and is_onnx(ref):  # an export predicts and validates, as Ultralytics' YOLO("x.onnx")
            self._model, self.ckpt_path = OnnxModel(ref), ref
        else:
            if Path(ref).suffix.lower() in (".yaml", ".yml") and not Path(ref).is_file():  # yolov8n.yaml, yolo12n.yaml
                raise FileNotFoundError(f"{ref}: not an architecture built here ({', '.join(SCALE_NAMES)}, or their "
                                        ".yaml names) nor a weights file")
            check_weights(ref)  # a missing path in one line, before torch loads
            # in eval mode, as Ultralytics' YOLO(...).model: a forward of model.model in train mode would move the
            # BatchNorm statistics, and every later prediction with them
            self._model, self.ckpt_path = load_weights(ref).eval(), ref
            if not self.overrides:  # an Ultralytics .pt's train_args: its data and size, as Ultralytics keeps them
                self.overrides = _recorded_overrides(ref)
        self._names = self._fused = self._detector = None
        self.architecture = self._model.config["name"]

    @property
    def model(self) -> YOLO11Detector:
        """The ``torch.nn.Module`` (``YOLO11Detector``/``YOLO26Detector``), built on first use for an architecture."""
        if self._model is None:
            from yolo11.models import create_model

            self._model = create_model(self.architecture)
        return self._model

    @property
    def exported(self) -> bool:
        """Whether the model is an ONNX export (``predict`` and ``val`` only)."""
        return getattr(self._model, "exported", False)

    def _torch_model(self, action: str) -> YOLO11Detector:
        """The model for ``action``, which needs its torch modules: an ONNX export is refused by name."""
        if self.exported:
            raise UsageError(f"{action}: {self.ckpt_path} is an ONNX export, which predicts and validates; "
                             f"{action} needs the .safetensors or .pt it was exported from")
        return self.model

    def _runnable(self) -> YOLO11Detector:
        """What predicts and validates: a fused copy of the model, or the export itself."""
        return self.model if self.exported else copy.deepcopy(self.model).fuse()

    @property
    def names(self) -> dict[int, str]:
        """``{class id: name}``, as Ultralytics' ``model.names`` (the class ids as names when the weights have none)."""
        if self._names is None:
            from yolo11.predictor import class_names_for

            self._names = class_names_for(self.model, self.ckpt_path)
        return dict(enumerate(self._names))

    def __repr__(self) -> str:
        return f"YOLO({self.ckpt_path or self.architecture!r})"

    # -- training ------------------------------------------------------------------------------------------------

    def train(self, **kwargs: Any) -> Metrics:
        """Train with Ultralytics' keys or ours (``yolo11 train --help``): ``data=``, ``epochs=``, ``imgsz=``,
        ``batch=`` (global) ...; from this object's weights (``weights=``) or architecture (``model=``) unless a
        key names them, ``resume=True`` resumes the run this object's weights came from. One process in a script or
        notebook; every process under ``accelerate launch``. Returns the best weights' metrics (validated after
        training) with the run folder and weights paths; this object then holds the best weights (else the last)."""
        from yolo11.engine.config import parse_command_line

        kwargs = dict(kwargs)
        if kwargs.get("resume") is True and self.run_dir is not None:  # YOLO("runs/train/exp").train(resume=True)
            kwargs["resume"] = str(self.run_dir)
        if not {"model", "weights", "resume", "cfg"} & kwargs.keys():  # cfg=: its file names them (or not)
            self._torch_model("train")  # an export holds no weights to train from
            kwargs = {**({"weights": self.ckpt_path} if self.ckpt_path else {"model": self.architecture}), **kwargs}
        started = time.time()
        with calls.error_lines("yolo11 train", hold=True) as errors:
            try:
                config, typed = parse_command_line(calls.train_tokens(kwargs))
            except SystemExit as exit_:
                raise UsageError(errors.last or f"training arguments refused (exit {exit_.code})") from None
        from yolo11.engine.trainer import train

        with calls.process_group(), calls.error_lines() as errors:  # the output as it comes; its error line kept
            code = train(config, typed)
        if code == 130:  # Ctrl-C (a notebook's interrupt): the trainer saved a checkpoint; resume=True continues
            with contextlib.suppress(TrainingError):  # stopped before the run folder was kept: nothing to resume
                self.run_dir = _run_folder(config, started)
            raise KeyboardInterrupt
        if code:
            message = errors.last or f"training stopped with exit code {code}"
            raise UsageError(message) if code == 2 else TrainingError(message)
        return self._after_training(_run_folder(config, started))

    def _after_training(self, run_dir: Path) -> Metrics:
        """Hold the run's best weights (else its last) and validate them as the run did."""
        from yolo11.engine.config import TrainConfig
        from yolo11.gate import read_yaml

        saved = TrainConfig.from_dict(read_yaml(run_dir / "config.yaml"))  # the resolved config, resumes included
        best, last = (run_dir / "weights" / f"{name}.safetensors" for name in ("best", "last"))
        best, last = (file if file.is_file() else None for file in (best, last))
        if best or last:
            self._load(str(best or last))
        self.run_dir, self.overrides = run_dir, _run_overrides(run_dir)
        metrics = Metrics(None, None, None, None)
        if best is not None:
            if calls.is_main_process():
                print(f"validating {best}")
            data, run = saved.data, saved.run
            metrics = self._validate(
                data=data.data, split=data.val_split, images=data.images, bbox_format=data.bbox_format,
                cache_dir=data.cache_dir, imgsz=data.imgsz, batch=run.val_batch_size or 2 * run.batch_size,
                workers=2 if data.workers is None else data.workers, conf=run.val_conf, iou=run.val_iou,
                max_det=run.max_det, rect=run.val_rect, nms=run.val_nms, single_cls=data.single_cls)[0]
        self.metrics = dataclasses.replace(metrics, run_dir=run_dir, best=best, last=last,
                                           best_epoch=_best_epoch(run_dir))
        return self.metrics

    # -- validation ----------------------------------------------------------------------------------------------

    def val(self, **kwargs: Any) -> Metrics:
        """Validate on ``data=`` (default: the data of the run the weights came from) with ``yolo11 val``'s keys
        (``imgsz``, ``batch``, ``conf``, ``iou``, ``split``, ``rect``, ``nms``, ``json``, ``plots_dir``...) or
        Ultralytics'; prints the per-class table and returns the metrics. Under ``accelerate launch`` each process
        validates its shard and every process gets the metrics."""
        from yolo11.tools import val as val_tool

        kwargs = {**{k: v for k, v in self.overrides.items() if k in ("data", "imgsz")}, **kwargs}
        if "data" not in kwargs:
            raise UsageError("val needs data= (a data YAML, a COCO json, a dataset folder or a Hub id)")
        with calls.error_lines("yolo11 val", hold=True) as errors:
            try:  # the val tool's flags, defaults and key=value reading; the weights are this object's model
                args = val_tool.parse_args([self._weights_argument(), *calls.tool_tokens(kwargs)])
            except SystemExit as exit_:
                raise UsageError(errors.last or f"val arguments refused (exit {exit_.code})") from None
        try:  # split, image folder, box format: given, else the run's, else the tool's defaults (`yolo11 val`'s)
            settings, _ = val_tool.resolve_settings(args)
        except (ValueError, FileNotFoundError) as err:
            raise UsageError(str(err)) from None
        metrics, predictions, source = self._validate(
            data=settings["data"], split=settings["split"], images=settings["images"],
            bbox_format=settings["bbox_format"], cache_dir=args.cache_dir, imgsz=settings["imgsz"], batch=args.batch,
            workers=args.workers, conf=args.conf, iou=args.iou, max_det=args.max_det, rect=args.rect,
            backend=args.backend, nms=settings["nms"], single_cls=settings["single_cls"])
        if calls.is_main_process():  # the files `yolo11 val` writes, where it writes them (project, name, plots...)
            metrics = dataclasses.replace(metrics, run_dir=val_tool.write_outputs(args, metrics.raw, predictions,
                                                                                 source))
        self.metrics = metrics
        return metrics

    def _validate(self, *, data: str, split: str, images: str | None, bbox_format: str, cache_dir: str | None,
                  imgsz: int, batch: int, workers: int, conf: float, iou: float, max_det: int, rect: bool,
                  nms: bool | None, backend: str = "fast", single_cls: bool = False
                  ) -> tuple[Metrics, list, DetectionSource]:
        """``yolo11.tools.val.main`` on this object's model, returning what it prints: the metrics, the gathered
        predictions and the data source."""
        from accelerate import Accelerator, DataLoaderConfiguration

        from yolo11.evaluation.table import format_table
        from yolo11.postprocess import head_line
        from yolo11.tools.val import evaluate_weights, fit_max_det, run_settings, validation_source

        model = self._runnable()
        imgsz, rect, end2end, note = run_settings(model, imgsz, rect, nms)  # an export's own, as `yolo11 val`
        if note and calls.is_main_process():
            print(note, file=sys.stderr)
        source = validation_source(data, split, cache_dir=cache_dir, images=images, bbox_format=bbox_format,
                                   single_cls=single_cls, split_flag="split")
        max_det = fit_max_det(max_det, source, split, calls.is_main_process(), flag="max_det")
        with calls.process_group():
            # as the val tool: no even_batches padding (rect batches of other shapes), a fused copy of the model
            accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(even_batches=False))
            metrics, predictions, ground_truth = evaluate_weights(
                accelerator, model, source, imgsz=imgsz, batch=batch, workers=workers, conf=conf, iou=iou,
                max_det=max_det, rect=rect, backend=backend, end2end=end2end)
        if calls.is_main_process():
            print(head_line(model.config["name"], model.end2end, end2end))
            print(format_table(metrics, source.class_names, ground_truth))
        return Metrics.from_evaluation(metrics, source.class_names, ground_truth), predictions, source

    # -- prediction ----------------------------------------------------------------------------------------------

    def predict(self, source: Any = None, stream: bool = False, **kwargs: Any) -> list[Detections] | Iterator:
        """Detect objects in ``source``: a path, folder, glob, URL, video or webcam index (as ``yolo11 predict``
        reads them), an (H, W, 3) uint8 **BGR** array (as Ultralytics: ``cv2.imread``, a video frame), a PIL image,
        a torch tensor (RGB), or a list of these. Keywords: ``imgsz``, ``conf``, ``iou``, ``max_det``, ``rect``,
        ``batch``, ``device``, ``nms``, ``names`` (``yolo11.Detector``), and ``save=True`` (drawn images, a drawn
        image per video frame, and predictions.json under ``project``/``name``, default runs/predict/exp),
        ``save_txt``, ``save_conf``. Returns one ``Detections`` per image or video frame, or with ``stream=True`` a
        generator of them."""
        if source is None:
            raise UsageError("predict needs a source (an image, folder, glob, URL, video, array or a list of them)")
        settings, saving = self._predict_settings(kwargs)
        results = self._predictions(self._detector_for(settings), source, saving)
        return results if stream else list(results)

    __call__ = predict

    def _predict_settings(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """``Detector`` settings and saving options from ``predict``'s keywords; another Ultralytics key is ignored
        with a note, anything else is a ``UsageError``."""
        from yolo11.preflight import round_imgsz

        settings = {k: v for k, v in self.overrides.items() if k == "imgsz"}
        saving: dict[str, Any] = {}
        ignored, notes = [], []
        for key, value in kwargs.items():
            key, value, note = read_legacy_key(key, value)  # half=True, as Ultralytics reads it
            notes += [note] if note else []
            if key is None or (note and value is None and key not in PREDICT_KEYS):  # removed, or at its default
                continue
            if key == "imgsz":  # [h, w] and sizes off the stride, as the command line reads them
                value, note = imgsz_value(value)
                try:
                    value, rounded = round_imgsz(value, "imgsz") if isinstance(value, int) else (value, None)
                except ValueError as err:
                    raise UsageError(f"predict: {err}") from None
                notes += [line for line in (note, rounded) if line]
            if key in PREDICT_KEYS:
                settings[key] = value
            elif key in SAVE_KEYS:
                saving[key] = value
            elif key == "verbose":  # predict prints no per-image lines here: nothing for it to silence, no note
                continue
            elif key in ULTRALYTICS_DEFAULTS:
                ignored.append(f"{key}={value}")
            else:
                raise UsageError(f"predict: unknown key {key!r}"
                                 f"{did_you_mean(key, [*PREDICT_KEYS, *SAVE_KEYS, *ULTRALYTICS_DEFAULTS])}")
        if ignored:
            notes.append(f"predict: Ultralytics keys not implemented here, ignored: {', '.join(ignored)}")
        if notes and calls.is_main_process():
            print("\n".join(notes), file=sys.stderr)
        return settings, saving

    def _detector_for(self, settings: dict[str, Any]) -> Detector:
        """A ``Detector`` of a fused copy of the model, kept while the model and the settings stay the same (a
        loop of ``model(frame)`` calls fuses once)."""
        from yolo11.predictor import Detector, class_names_for

        model = self.model
        key = (id(model), tuple(sorted((k, repr(v)) for k, v in settings.items())))
        if self._detector is not None and self._detector[0] == key:
            return self._detector[1]
        if self._fused is None or self._fused[0] != id(model):
            self._fused = (id(model), self._runnable())
        settings = dict(settings)
        names = class_names_for(model, self.ckpt_path, settings.pop("names", None))
        try:  # an export's static size is the Detector's rule, as the CLI's
            detector = Detector(self._fused[1], names, **settings)
        except ValueError as err:
            raise UsageError(f"predict: {err}") from None
        self._detector = (key, detector)
        return detector

    def _predictions(self, detector: Detector, source: Any, saving: dict[str, Any]) -> Iterator[Detections]:
        """Each image's (or video frame's) ``Detections``, in order, ``detector.batch`` images at a time; saved as
        ``saving`` asks (``yolo11 predict``'s ``PredictionWriter``)."""
        from yolo11.run_folders import numbered_dir
        from yolo11.tools.predict import NAME, PROJECT, PredictionWriter

        writer = None
        if saving.get("save") or saving.get("save_txt"):
            folder = Path(saving.get("project") or PROJECT) / (saving.get("name") or NAME)
            writer = PredictionWriter(numbered_dir(folder, bool(saving.get("exist_ok"))), draw=bool(saving.get("save")),
                                      save_txt=bool(saving.get("save_txt")), save_conf=bool(saving.get("save_conf")))
        pending: list[tuple[Any, str | None]] = []  # images waiting for a full batch
        try:
            for kind, item, location in _inputs(source):
                if kind == "image":
                    pending.append((item, location))
                    if len(pending) == detector.batch:
                        yield from _detect(detector, pending, writer)
                        pending = []
                    continue
                yield from _detect(detector, pending, writer)
                pending, frame = [], 1
                for chunk in _frames(item, detector.batch):
                    yield from _detect(detector, [(image, location) for image in chunk], writer, frame)
                    frame += len(chunk)
            yield from _detect(detector, pending, writer)
        finally:
            if writer is not None and writer.records:
                print(f"predictions saved to {writer.finish().parent}")

    # -- the torch model, as Ultralytics' YOLO forwards it --------------------------------------------------------

    def load(self, weights: str | Path) -> YOLO:
        """Transfer ``weights`` into this model where their tensors fit (Ultralytics' ``YOLO("yolo11n.yaml")
        .load("yolo11n.pt")``): every tensor of the same name and shape; the others keep this model's. Prints how
        many were transferred; returns this object."""
        from yolo11.weights import load_weights
        from yolo11.weights.transfer import describe_transfer, transfer_weights

        model = self._torch_model("load")
        source = load_weights(str(weights))
        report = transfer_weights(source, model, allow_partial=True)
        if calls.is_main_process():
            print("\n".join(line.removeprefix("--partial-weights: ") for line in describe_transfer(report, source,
                                                                                                 model)))
        self._names = self._fused = self._detector = None  # predict fuses the new weights
        return self

    def to(self, device: str | torch.device) -> YOLO:
        """Move the model to ``device`` (``predict``'s ``device=`` chooses where it runs); returns this object."""
        self._torch_model("to").to(device)
        self._fused = self._detector = None
        return self

    @property
    def device(self) -> torch.device:
        """Where the model's parameters are."""
        return next(self._torch_model("device").parameters()).device

    def eval(self) -> YOLO:
        self._torch_model("eval").eval()
        return self

    def fuse(self) -> YOLO:
        """Fold each BatchNorm into its convolution (inference only), as Ultralytics' ``model.fuse()``."""
        self._torch_model("fuse").fuse()
        self._fused = self._detector = None
        return self

    # -- export and summary --------------------------------------------------------------------------------------

    def export(self, format: str = "onnx", **kwargs: Any) -> Path:  # noqa: A002 - Ultralytics' keyword
        """Write the model as ``onnx`` (``yolo11 export``'s keys: ``imgsz``, ``batch``, ``dynamic``, ``half``,
        ``opset``, ``nms``, ``check``...), ``pt`` (an Ultralytics checkpoint; needs ultralytics) or ``safetensors``
        (ours); ``output=`` names the file (default: beside the weights, as Ultralytics; ``<stem>_export.safetensors``
        where that would be the file the model was loaded from). Returns its path."""
        from yolo11.tools import export as export_tool
        from yolo11.weights import save_weights

        model = self._torch_model("export")
        fmt = str(format).lower()
        if fmt not in export_tool.EXPORT_FORMATS:
            raise UsageError(f"export: format={format!r}: expected {', '.join(export_tool.EXPORT_FORMATS)}")
        kwargs = {**{k: v for k, v in self.overrides.items() if k == "imgsz" and fmt != "safetensors"}, **kwargs}
        chosen = kwargs.pop("output", None)
        output = Path(chosen or export_tool.default_output(self._weights_name(), f".{fmt}"))
        loaded_from = Path(self.ckpt_path) if self.ckpt_path and Path(self.ckpt_path).exists() else None
        # the default is never the weights file (default_output); a chosen one may be
        if chosen and loaded_from is not None and output.resolve() == loaded_from.resolve():
            raise UsageError(f"export: {output} is the weights file this model was loaded from; pass another output=")
        if fmt == "safetensors":
            if kwargs:
                raise UsageError(f"export: format=safetensors takes no {', '.join(kwargs)}")
            return save_weights(model, output)
        with tempfile.TemporaryDirectory() as folder, calls.error_lines("yolo11 export", hold=True) as errors:
            weights = save_weights(model, Path(folder) / f"{Path(self._weights_name()).stem}.safetensors")
            printed = io.StringIO()
            try:  # the export tool on this object's model (saved as it is now), so that Python and shell agree
                with contextlib.redirect_stdout(printed):
                    code = export_tool.main([str(weights), "--format", fmt, "--output", str(output),
                                             *calls.tool_tokens(kwargs)])
            except SystemExit as exit_:
                code = exit_.code
            finally:  # its lines name the model's weights, not the temporary copy the tool read
                print(printed.getvalue().replace(str(weights), self._weights_name()), end="")
            if code:
                raise UsageError(errors.last or f"export failed (exit {code})")
        return output

    def info(self, detailed: bool = False, verbose: bool = True, imgsz: int = 640) -> tuple[int, int, int, float]:
        """``(layers, parameters, gradients, GFLOPs)`` as Ultralytics' ``model.info()`` returns them, the numbers of
        ``yolo11 info`` (``yolo11.models.summary``: Ultralytics' parameters and GFLOPs; layers counted its way, on
        our modules); ``verbose`` prints its summary line, ``detailed`` (Ultralytics' first argument) a row per
        parameter before it: name, gradient, size, shape, mean and standard deviation."""
        from yolo11.models.summary import model_summary

        model = self._torch_model("info")
        summary = model_summary(model, imgsz)
        if detailed:
            print(f"{'layer':>5} {'name':>48} {'gradient':>8} {'parameters':>10} {'shape':>20} {'mu':>10} "
                  f"{'sigma':>10}")
            for index, (name, param) in enumerate(model.named_parameters()):
                values = param.detach().float()
                sigma = values.std().item() if values.numel() > 1 else 0.0
                print(f"{index:5d} {name:>48} {param.requires_grad!s:>8} {param.numel():10d} "
                      f"{str(list(param.shape)):>20} {values.mean().item():10.3g} {sigma:10.3g}")
        if verbose:
            print(summary.line())
        return summary.layers, summary.parameters, summary.gradients, summary.gflops

    def _weights_argument(self) -> str:
        """What the tools' positional weights argument gets: the weights loaded, else ``.`` (an existing path, so
        that the tools' check passes; the model used is this object's)."""
        return self.ckpt_path if self.ckpt_path and Path(self.ckpt_path).exists() else "."

    def _weights_name(self) -> str:
        """The weights reference outputs are named after (``best.safetensors`` -> ``best.onnx``), else the
        architecture (``yolo11n.onnx`` in the current folder)."""
        return self.ckpt_path or self.architecture


# -- helpers -----------------------------------------------------------------------------------------------------


def _recorded_overrides(ref: str) -> dict[str, Any]:
    """The data and image size that weights record of their training (a run's config.yaml, an Ultralytics
    ``.pt``'s ``train_args``), as ``yolo11 val`` and ``predict`` read them; empty where nothing is recorded."""
    from yolo11.tools.run_record import trained_with

    return _overrides(trained_with(ref))


def _run_overrides(run_dir: Path) -> dict[str, Any]:
    """The data and image size of a run (its config.yaml), what Ultralytics keeps from a checkpoint's arguments."""
    from yolo11.tools.run_record import RUN_CONFIG, read_run_config

    return _overrides(read_run_config(run_dir / RUN_CONFIG))


def _overrides(recorded: Any) -> dict[str, Any]:
    return {key: value for key, value in (("data", recorded.data), ("imgsz", recorded.imgsz)) if value is not None}


def _run_folder(config: TrainConfig, started: float) -> Path:
    """The run folder a training that started at ``started`` (``time.time()``) wrote: of ``--output-dir/--name``,
    its numbered siblings (``exp2``...) and the ``--resume`` target, the one whose config.yaml (written when a run
    starts or resumes) is newest and no older than the start. The trainer does not return its folder."""
    run = config.run
    base = Path(run.output_dir) / run.name
    candidates = [base, *base.parent.glob(f"{glob.escape(base.name)}*")] if base.parent.is_dir() else []
    if run.resume and run.resume != "auto":  # a run folder, one of its checkpoints, or its weights/last.safetensors
        target = Path(run.resume)
        candidates += [target, target.parent, target.parent.parent]
    elif run.resume == "auto" and base.parent.is_dir():  # the newest unfinished run of the folder
        candidates += [folder for folder in base.parent.iterdir() if folder.is_dir()]
    written = [((folder / "config.yaml").stat().st_mtime, folder) for folder in candidates
               if (folder / "config.yaml").is_file()]
    fresh = [item for item in written if item[0] >= started - 2.0]  # 2 s: file-system timestamps may round
    if not fresh:
        raise TrainingError(f"training ended, but no run folder under {base.parent} has a config.yaml written since "
                            "it started")
    return max(fresh, key=lambda item: item[0])[1]


def _best_epoch(run_dir: Path) -> int | None:
    """The epoch (from 1) of the best mAP50-95 in results.csv, the first of equals (as the trainer keeps it)."""
    from yolo11.evaluation.results import read_results

    rows = [row for row in read_results(run_dir / "results.csv") if row.get("metrics/mAP50-95(B)")]
    if not rows:
        return None
    best = max(rows, key=lambda row: float(row["metrics/mAP50-95(B)"]))  # max() keeps the first of equals
    return int(best["epoch"])


def _inputs(source: Any) -> Iterator[tuple[str, Any, str | None]]:
    """``(kind, item, location)`` per input of ``predict``'s ``source``: ``("image", path or array, location)``
    and ``("video", Source, location)`` for a video, stream or webcam (``predict_sources``)."""
    import numpy as np

    from yolo11.tools.predict_sources import expand_sources, read_image

    bgr = not _is_tensor(source)  # the user's arrays are BGR, as Ultralytics reads them (cv2.imread, a video frame)
    if not bgr:  # Ultralytics' tensor source: (B, 3, H, W) or (3, H, W) RGB, float in [0, 1] or uint8
        source = _tensor_images(source)
    if isinstance(source, np.ndarray) and source.ndim == 4:  # a (B, H, W, 3) batch
        source = list(source)
    items = source if isinstance(source, Iterable) and not isinstance(source, (str, Path, np.ndarray)) \
        and not hasattr(source, "convert") else [source]
    for item in items:
        if not isinstance(item, (str, Path)):
            if bgr and isinstance(item, np.ndarray) and item.ndim == 3 and item.shape[2] == 3:
                item = np.ascontiguousarray(item[..., ::-1])  # the Detector's RGB
            yield "image", item, None
            continue
        for found in expand_sources([str(item)]):
            if found.is_video:
                yield "video", found, found.location
            elif found.kind == "url":
                yield "image", read_image(found), found.location
            else:
                yield "image", found.location, found.location


def _is_tensor(source: Any) -> bool:
    torch = sys.modules.get("torch")  # a tensor implies torch is loaded: no import to ask
    return torch is not None and isinstance(source, torch.Tensor)


def _tensor_images(tensor: Any) -> list:
    """A torch image tensor as ``predict``'s (H, W, 3) uint8 RGB arrays: ``(B, 3, H, W)`` or ``(3, H, W)``,
    float in [0, 1] (scaled by 255, as Ultralytics' tensor source reads it) or uint8."""
    import torch

    batch = tensor.detach().cpu()
    batch = batch[None] if batch.ndim == 3 else batch
    if batch.ndim != 4 or batch.shape[1] != 3:
        raise UsageError(f"predict: a tensor source is (B, 3, H, W) or (3, H, W) RGB, got shape {tuple(tensor.shape)}")
    if batch.is_floating_point():
        if batch.numel() and not 0.0 <= float(batch.min()) <= float(batch.max()) <= 1.0:
            raise UsageError("predict: a float tensor source holds values in [0, 1] (as Ultralytics reads it)")
        batch = (batch * 255).round()
    elif batch.dtype != torch.uint8:
        raise UsageError(f"predict: a tensor source is float in [0, 1] or uint8, got {batch.dtype}")
    return list(batch.to(torch.uint8).permute(0, 2, 3, 1).contiguous().numpy())


def _frames(source: Any, size: int) -> Iterator[list]:
    """A video's frames, ``size`` at a time (a webcam's one at a time, to keep up with it)."""
    from yolo11.tools.predict_sources import frame_chunks, open_video

    capture = open_video(source)
    try:
        yield from frame_chunks(capture, 1 if source.kind == "webcam" else size)
    finally:
        capture.release()


def _detect(detector: Detector, items: list[tuple[Any, str | None]], writer: Any,
            frame: int | None = None) -> Iterator[Detections]:
    """``Detections`` of ``(image, location)`` items in one batch, each named after its location (video frames
    numbered from ``frame``) and saved when there is a ``writer``."""
    if not items:
        return
    found = detector.predict([image for image, _ in items])
    for index, (detections, (_, location), timing) in enumerate(zip(found, items, detector.timings, strict=True)):
        speed = {"preprocess": timing.preprocess_ms, "inference": timing.inference_ms,
                 "postprocess": timing.postprocess_ms}
        detections = dataclasses.replace(detections, speed=speed, source=detections.source or location)
        if writer is not None:
            _save(writer, detections, location, None if frame is None else frame + index)
        yield detections


def _save(writer: Any, detections: Detections, location: str | None, frame: int | None) -> None:
    """One result into ``predict``'s ``PredictionWriter``: its json record, txt labels and drawn image (video
    frames: one drawn image per frame)."""
    stem = Path(location).stem if location else "image"
    name = writer.unique_stem(stem if frame is None else f"{stem}_{frame}")
    writer.add(detections, location or name, name, frame)
    suffix = Path(location).suffix.lower() if location and frame is None else ".jpg"
    writer.write_image(detections, name, suffix if suffix in (".jpg", ".jpeg", ".png", ".bmp", ".webp") else ".jpg")
