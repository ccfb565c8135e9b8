"""Training configuration: frozen, self-validating dataclasses parsed once from the command line.

Every field of the sections below is a command-line flag (``--lr0``, ``--close-mosaic`` ...), generated from the
dataclass so that the flag, its default, its type and its help string live in one place. ``--config file.yaml``
supplies defaults (flat keys, the flag names with ``_`` or ``-``, or an Ultralytics cfg / ``args.yaml``:
``engine/ultralytics_args.py``); unknown keys raise. Values derived at run time (world size, per-process
batch, number of classes) are computed in the trainer (``engine/trainer.py``) and passed forward: nothing writes
back into a config.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from yolo11.architecture import HEAD_LAYER
from yolo11.arguments import ArgumentParser  # usage errors in one line
from yolo11.data.augment_params import AugmentParams
from yolo11.engine.ultralytics_args import (
    FLAG_ALIASES,
    bare_switches,
    freeze_numbers,
    read_ultralytics_keys,
    ultralytics_switches,
)
from yolo11.gate import BOOL_WORDS, SCALE_NAMES, read_yaml
from yolo11.output_errors import write_file
from yolo11.preflight import MAX_STRIDE, check_report_to, check_weights, resolve_data, round_imgsz

_HUB_REPO = re.compile(r"[\w.-]+/[\w.-]+")


# How a flag behaves on --resume, declared with the flag (the helper that makes its field says which):
FIXED = "fixed"  # what the run computes: read from the checkpoint; another value is refused (--allow-changes)
FREE = "free"  # how the run executes, is watched or saved: read from the checkpoint unless typed, then changed
LOCAL = "local"  # where this invocation writes, how it resumes, where it stops: never read from the checkpoint
RESUME_RULES = (FIXED, FREE, LOCAL)


def _opt(default: Any, help: str, choices: tuple | None = None, *, resume: str) -> Any:  # noqa: A002 - argparse's
    return field(default=default, metadata={"help": help, "choices": choices, "resume": resume})


def _fixed(default: Any, help: str, choices: tuple | None = None) -> Any:  # noqa: A002
    return _opt(default, help, choices, resume=FIXED)


def _free(default: Any, help: str, choices: tuple | None = None) -> Any:  # noqa: A002
    return _opt(default, help, choices, resume=FREE)


def _local(default: Any, help: str, choices: tuple | None = None) -> Any:  # noqa: A002
    return _opt(default, help, choices, resume=LOCAL)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _require(config: Any, name: str, low: float | None = None, high: float | None = None,
             low_open: bool = False, high_open: bool = False) -> None:
    """Raise ``ValueError`` naming the flag unless ``config.name`` lies in the range (``None`` = unset, passes).

    A float must also be finite (``nan`` fails every comparison, ``inf`` would pass a one-sided bound).
    """
    value = getattr(config, name)
    if value is None:
        return
    is_float = isinstance(value, float)
    ok = (not is_float or math.isfinite(value)) and (low is None or (value > low if low_open else value >= low)) \
        and (high is None or (value < high if high_open else value <= high))
    if ok:
        return
    annotation = {f.name: f.type for f in dataclasses.fields(config)}[name]
    kind = "a finite number" if _field_type(annotation)[0] is float else "an integer"
    if low is not None and high is not None:
        bounds = f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    else:
        bounds = f"{'>' if low_open else '>='} {low}" if low is not None else f"{'<' if high_open else '<='} {high}"
    raise ValueError(f"{_flag(name)} must be {kind} {bounds}, got {value}")


class _SelfValidating:
    """``__post_init__`` of the sections: field types, then the section's ``_check`` (ranges), then finiteness.

    Types come first because a YAML default can be anything (a string compared with a number raises TypeError);
    the ranges come before the generic finite check so that ``nan`` is reported with the flag's range.
    """

    def __post_init__(self) -> None:
        fields = [(f.name, *_field_type(f.type)) for f in dataclasses.fields(self)]
        for name, scalar, optional in fields:
            value = getattr(self, name)
            accepted = (int, float) if scalar is float else scalar
            if not (value is None and optional) and (not isinstance(value, accepted) or
                                                     (scalar is not bool and isinstance(value, bool))):
                raise ValueError(f"{_flag(name)} expects {scalar.__name__}, got {value!r}")
        self._check()
        for name, scalar, _ in fields:
            value = getattr(self, name)
            if scalar is float and value is not None and not math.isfinite(value):
                raise ValueError(f"{_flag(name)} must be a finite number, got {value}")

    def _check(self) -> None:
        """Ranges and combinations of this section's values; raise ``ValueError`` naming the flag."""


MODEL_NAMES = SCALE_NAMES  # yolo11n ... yolo11x, yolo26n ... yolo26x


@dataclass(frozen=True)
class ModelConfig(_SelfValidating):
    model: str | None = _fixed(None, f"architecture: {', '.join(MODEL_NAMES)} (default: the architecture of "
                                   "--weights, else yolo11n)")
    backbone: str | None = _fixed(None, "a timm model name to use in place of the native YOLO11 backbone")
    pretrained: bool = _fixed(False, "load ImageNet weights for a timm backbone (needs the internet)")
    weights: str | None = _fixed(None, "initial weights: a .safetensors / .pt file, a save_pretrained folder, "
                                     "hf://owner/repo/file, a Hub repo owner/name, or yolo11n.pt ... yolo11x.pt, "
                                     "yolo26n.pt ... yolo26x.pt (downloaded from the Hub)")
    freeze: str | None = _fixed(None, "layers to freeze, as Ultralytics' freeze (its layer numbers: 0-10 the "
                                      "backbone, 11-22 the neck, 23 the head): N freezes layers 0..N-1 (10: the "
                                      "backbone but its C2PSA), [i, j] or i,j those layers; with a timm backbone, "
                                      "any of 0-10 freezes all of it")
    partial_weights: bool = _fixed(False, "with --weights: transfer only the tensors whose names and shapes match "
                                        "when the architecture differs (--model, --backbone); each re-initialised "
                                        "tensor is listed. Without it only the class branch may differ")

    def _check(self) -> None:
        if self.pretrained and self.backbone is None:
            raise ValueError("--pretrained applies to a timm --backbone; use --weights for YOLO11 weights")
        if self.model is not None and self.model not in MODEL_NAMES:
            suffix = Path(self.model).suffix.lower()
            hint = (f"; to start from weights pass --weights {self.model} (the architecture then comes from the "
                    "weights)") if suffix and suffix not in (".yaml", ".yml") else (
                "; other architectures' YAMLs (yolov8n.yaml, a model of your own) are not built here" if suffix else "")
            raise ValueError(f"--model is the architecture, one of {', '.join(MODEL_NAMES)}, got {self.model!r}"
                             f"{hint}")
        if self.partial_weights and self.weights is None:
            raise ValueError("--partial-weights applies to --weights")
        if self.freeze is not None:
            frozen_layers(self.freeze)  # the error names the value


def frozen_layers(spec: str) -> frozenset[int]:
    """The Ultralytics layer numbers ``--freeze`` names: ``"10"`` is layers 0-9 (``range(10)``, as Ultralytics
    reads an int), ``"[10]"`` or ``"3,5"`` a list of layers. ``ValueError`` naming the value otherwise."""
    try:
        read = freeze_numbers(spec)
    except ValueError:
        raise ValueError(f"--freeze {spec}: a layer count (10) or a list of layer numbers ([0, 1, 2] or 0,1,2)") \
            from None
    listed = isinstance(read, list)
    numbers = read if listed else [read]
    if any(not 0 <= n <= HEAD_LAYER + (not listed) for n in numbers):
        raise ValueError(f"--freeze {spec}: Ultralytics' layer numbers are 0-{HEAD_LAYER} (a count up to "
                         f"{HEAD_LAYER + 1})")
    return frozenset(numbers) if listed else frozenset(range(numbers[0]))


@dataclass(frozen=True)
class DataConfig(AugmentParams, _SelfValidating):
    """The data flags; the augmentation flags (mosaic ... hsv_v) are ``AugmentParams``' fields, declared there once."""

    data: str = _fixed("synthetic", "dataset: synthetic[:k=v,...], a Hub id, a save_to_disk folder, a COCO json "
                                  "or an Ultralytics data YAML")
    train_split: str = _fixed("train", "split used for training")
    val_split: str = _fixed("val", "split used for validation (when a dataset has no 'val': 'validation', 'valid' "
                                 "or 'test', said in the log)")
    images: str | None = _fixed(None, "image folder of a COCO json --data, '{split}' replaced by the split name "
                                    "(images/{split}2017); default: beside the json, else the COCO layout: "
                                    "<root>/images/<name> or <root>/<name> for <root>/annotations/*_<name>.json")
    bbox_format: str = _fixed("auto", "how --data stores boxes (Hub datasets, dataset folders, COCO json): xywh (the "
                                    "Hub and COCO convention), xyxy, or auto (COCO json: xywh; Hub/folder: read "
                                    "from the boxes, an error when they fit both)", ("auto", "xywh", "xyxy"))
    single_cls: bool = _fixed(False, "train every class as one, 'item' (Ultralytics' single_cls): a detector of "
                                     "objects, whatever their class; validation scores it so too")
    imgsz: int = _fixed(640, "training and validation image size in pixels (multiple of 32)")
    workers: int | None = _free(None, "data-loader worker processes per training process, at most its CPU cores; "
                                     "default auto: 8, but none on a CPU run at 320 px or more with 2 cores or "
                                     "fewer per process, where they only take cycles from the training step")
    cache_dir: str | None = _free(None, "where converted Arrow datasets are cached (default: $YOLO11_CACHE, else "
                                        "~/.cache/yolo11/datasets)")
    cache_images: bool | None = _free(None, "decode and resize every image once into RAM shared by the loader "
                                           "workers (Ultralytics' cache=ram); default auto: when the train and val "
                                           "images of every process of the machine fit in half the available RAM")
    hsv_on_device: bool | None = _free(None, "apply the HSV augmentation to whole batches on the training device "
                                            "instead of in the loader workers (default: on CUDA, where the "
                                            "workers are the limit of a compiled step)")
    max_boxes: int | None = _fixed(None, "pad targets to this many boxes per image (static shapes for --compile); an "
                                       "image with more keeps its first N, the rest are not trained on. CUDA graphs "
                                       "need no padding: they bucket box counts themselves and drop none")
    close_mosaic: int = _fixed(10, "train the last N epochs without mosaic and mixup")

    def _check(self) -> None:
        if not str(self.data).strip():  # `--data "$DATA"` with DATA unset
            raise ValueError("--data is empty; name the dataset, or leave --data out for the built-in synthetic "
                             "shapes")
        if self.imgsz < MAX_STRIDE or self.imgsz % MAX_STRIDE:
            raise ValueError(f"--imgsz must be a positive multiple of {MAX_STRIDE} (the largest stride), "
                             f"got {self.imgsz}")
        if self.bbox_format not in ("auto", "xywh", "xyxy"):  # a --config YAML value skips argparse's choices
            raise ValueError(f"--bbox-format must be auto, xywh or xyxy, got {self.bbox_format!r}")
        _require(self, "workers", 0)
        _require(self, "max_boxes", 1)
        _require(self, "close_mosaic", 0)
        for name in ("mosaic", "mixup", "flipud", "fliplr"):
            if not 0.0 <= getattr(self, name) <= 1.0:  # also false for nan
                raise ValueError(f"{_flag(name)} is a probability in [0, 1], got {getattr(self, name)}")
        for name in ("translate", "scale", "perspective", "hsv_h", "hsv_s", "hsv_v"):  # Ultralytics' fraction keys
            _require(self, name, 0, 1)
        _require(self, "degrees", 0, 180)
        _require(self, "shear", 0, 90, high_open=True)


@dataclass(frozen=True)
class OptimConfig(_SelfValidating):
    optimizer: str = _fixed("auto", "auto (Ultralytics' rule: MuSGD above 10k iterations, else AdamW), SGD, AdamW "
                                  "or MuSGD", ("auto", "SGD", "AdamW", "MuSGD"))
    lr0: float = _fixed(0.01, "initial learning rate (ignored by --optimizer auto, which picks its own)")
    lrf: float = _fixed(0.01, "final learning rate as a fraction of lr0")
    schedule: str = _fixed("linear", "per-epoch learning-rate decay", ("linear", "cosine"))
    momentum: float = _fixed(0.937, "SGD momentum / Adam beta1")
    weight_decay: float = _fixed(5e-4, "weight decay at the nominal batch (scaled by batch * accumulation / nbs)")
    warmup_epochs: float = _fixed(3.0, "warmup length in epochs (never into the last epoch)")
    warmup_momentum: float = _fixed(0.8, "momentum at the start of warmup")
    warmup_bias_lr: float = _fixed(0.1, "bias learning rate at the start of warmup")
    nominal_batch: int = _fixed(64, "nominal batch size (nbs): gradients are accumulated up to it")
    grad_accum: int | None = _fixed(None, "gradient-accumulation steps (default: round(nbs / batch), at least 1)")
    lr_scaling: str = _fixed("linear", "how the step grows with the effective batch: linear (Ultralytics: the loss is "
                                     "a sum over images), sqrt, or none (same step as at the nominal batch)",
                           ("linear", "sqrt", "none"))
    clip_grad: float = _fixed(10.0, "gradient clipping max-norm (0 disables)")
    ema: bool = _fixed(True, "keep an exponential moving average of the weights and evaluate it")
    ema_decay: float = _fixed(0.9999, "EMA decay")
    ema_tau: float = _fixed(2000.0, "EMA warmup (optimizer steps)")

    def _check(self) -> None:
        _require(self, "lr0", 0, low_open=True)
        _require(self, "lrf", 0, 1, low_open=True)
        _require(self, "momentum", 0, 1, low_open=True, high_open=True)  # SGD uses Nesterov momentum: > 0
        _require(self, "weight_decay", 0)
        _require(self, "warmup_epochs", 0)
        _require(self, "warmup_momentum", 0, 1, high_open=True)
        _require(self, "warmup_bias_lr", 0)
        _require(self, "nominal_batch", 1)
        _require(self, "grad_accum", 1)
        _require(self, "clip_grad", 0)
        _require(self, "ema_decay", 0, 1, high_open=True)
        _require(self, "ema_tau", 0, low_open=True)


@dataclass(frozen=True)
class RunConfig(_SelfValidating):
    epochs: int = _fixed(100, "number of epochs")
    batch_size: int = _fixed(16, "GLOBAL batch size per step, split evenly over all processes")
    seed: int = _fixed(0, "random seed (data order and augmentation are a function of seed, epoch and index)")
    output_dir: str = _local("runs/train", "parent folder of run folders")
    name: str = _local("exp", "run folder name under --output-dir")
    exist_ok: bool = _local(False, "reuse an existing run folder instead of making exp2, exp3 ...")
    resume: str | None = _local(None, "resume from a run folder, a checkpoint folder, a run's "
                                      "weights/last.safetensors, or 'auto' (the newest unfinished run of --output-dir; "
                                      "with --name, that run: its latest checkpoint, or a fresh start before its "
                                      "first)")
    allow_changes: bool = _local(False, "with --resume: accept flags that change the run (model, data, optimizer, "
                               "batch, epochs...) instead of refusing them")
    save_period: int | None = _free(None, "save a resumable checkpoint every N epochs; default auto: at the end of "
                                         "every epoch that ends a minute or more after the last checkpoint (every "
                                         "epoch, unless epochs are short); the last epoch and stop signals always")
    keep_checkpoints: int = _free(1, "how many resumable checkpoints to keep, the newest (each holds the model, "
                                    "optimizer state and EMA in float32: a resume is bitwise); 0: the newest while "
                                    "the run trains, none once it is finished (it cannot be trained longer then; "
                                    "weights/ stays, as Ultralytics' stripped last.pt)")
    val_interval: int = _free(1, "validate every N epochs and after the last (-1: after the last only, as "
                                 "Ultralytics' val=False; 0: never, for benchmarks)")
    patience: int = _fixed(100, "stop after N epochs without a better fitness (0 disables)")
    max_steps: int | None = _local(None, "stop after this many optimizer steps (smoke runs); state is saved")
    device: str | None = _local(None, "one process's device, as Ultralytics names it: cpu, a GPU index (0) or "
                                      "cuda:N, mps; default: the Accelerate config's (else the first GPU). Several "
                                      "GPUs train under accelerate launch, whose config places each process")
    report_to: str = _free("none", "trackers: wandb, tensorboard, all or none (comma lists allowed)")
    tracker_project: str = _free("yolo11-accelerate", "W&B / TensorBoard project (the run folder: --output-dir/--name)")
    sync_bn: bool = _fixed(False, "convert BatchNorm to SyncBatchNorm (multi-process CUDA runs only)")
    compile: bool | None = _free(None, "torch.compile the model (fused kernels); default auto: on CUDA when the run "
                                      "trains enough images to repay the compilation, never on the CPU")
    compile_mode: str = _free("auto", "torch.compile mode of the model; auto: reduce-overhead (CUDA graphs) on CUDA",
                             ("auto", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"))
    compile_loss: bool | None = _free(None, "torch.compile the loss and assigner too (one graph for every box count); "
                                           "default auto: with the model")
    cuda_graphs: bool | None = _free(None, "replay each training micro-step (forward, loss, backward) as a CUDA "
                                          "graph, built in about a second; default auto: on for one-process CUDA "
                                          "runs that do not compile the model (not with fp16 or DeepSpeed)")
    compile_cache_dir: str = _free("~/.cache/yolo11/compile", "compiled kernels kept between runs, so that a run of "
                                  "the same shapes does not compile again (TORCHINDUCTOR_CACHE_DIR, if set, wins)")
    channels_last: bool = _free(True, "channels_last memory format on CUDA and the CPU (faster there)")
    log_interval: int = _free(20, "progress every N batches and at each epoch's end: a line when the output is "
                                 "not a terminal (a bar otherwise); trackers get the values at the same points")
    profile: bool = _free(False, "trace optimizer steps 10-14 with torch.profiler into <run>/profile")
    val_conf: float = _fixed(0.001, "confidence threshold for validation NMS")
    val_iou: float = _fixed(0.7, "IoU threshold for validation NMS")
    max_det: int = _fixed(300, "maximum detections per image in validation")
    val_nms: bool = _fixed(True, "YOLO26: validate the one-to-many head with NMS (Ultralytics' default); false: the "
                               "one-to-one head's top-k without NMS (Ultralytics' nms=False). YOLO11 has NMS only")
    val_batch_size: int | None = _fixed(None, "global validation batch size (default: 2 x --batch-size)")
    val_rect: bool = _fixed(True, "rectangular validation batches, as Ultralytics validates (images grouped by aspect "
                                "ratio, each batch letterboxed to its own shape); false: square letterbox")
    val_images: int = _free(16, "validation images drawn (and sent to trackers) each validation")
    plots: bool = _free(True, "write plots (results.png, PR curve, confusion matrix, batch previews)")
    push_to_hub: str | None = _free(None, "at the end, upload the best weights to this Hugging Face Hub repo "
                                         "(owner/name) as model.safetensors + config.json + model card")

    def _check(self) -> None:
        if self.push_to_hub is not None and not _HUB_REPO.fullmatch(self.push_to_hub):
            raise ValueError(f"--push-to-hub expects a Hub repo id owner/name, got {self.push_to_hub!r}")
        for name in ("epochs", "batch_size", "max_steps", "save_period", "log_interval", "max_det", "val_batch_size"):
            _require(self, name, 1)
        for name in ("seed", "patience", "val_images", "keep_checkpoints"):  # numpy seeds: >= 0
            _require(self, name, 0)
        _require(self, "val_interval", -1)
        _require(self, "val_conf", 0, 1)
        _require(self, "val_iou", 0, 1)
        if not self.name.strip() or self.name.strip() in (".", ".."):  # the run folder would be --output-dir itself
            raise ValueError(f"--name {self.name!r} names no run folder; give one (default: exp)")


@dataclass(frozen=True)
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, dict[str, Any]]) -> TrainConfig:
        """Rebuild from ``to_dict()`` output (a saved ``config.yaml``); unknown sections or keys raise."""
        unknown = set(values) - set(_SECTIONS)
        if unknown:
            raise ValueError(f"unknown config sections: {sorted(unknown)}")
        return cls(**{name: _SECTIONS[name](**values.get(name, {})) for name in _SECTIONS})


_SECTIONS: dict[str, type] = {"model": ModelConfig, "data": DataConfig, "optim": OptimConfig, "run": RunConfig}


def resume_rules() -> dict[str, str]:
    """Every flag's rule on ``--resume`` (``FIXED``, ``FREE`` or ``LOCAL``), from its declaration."""
    return {f.name: f.metadata["resume"] for section in _SECTIONS.values() for f in dataclasses.fields(section)}


def flags_with_rule(*rules: str) -> frozenset[str]:
    return frozenset(name for name, rule in resume_rules().items() if rule in rules)


def _parse_bool(text: str) -> bool:
    try:
        return BOOL_WORDS[text.lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(f"expected a boolean (true/false), got {text!r}") from None


def _field_type(annotation: Any) -> tuple[type, bool]:
    """(scalar type, optional) of an annotation such as ``int``, ``str | None``."""
    if isinstance(annotation, str):
        annotation = eval(annotation, {"str": str, "int": int, "float": float, "bool": bool, "None": None})  # noqa: S307
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0], True
    return annotation, False


def _converter(annotation: Any):
    scalar, optional = _field_type(annotation)
    base = _parse_bool if scalar is bool else scalar

    def convert(text: str):
        # None: the flag's automatic choice; a string flag keeps "auto" (--resume auto)
        if optional and text.lower() in ("none", "null", "") + (("auto",) if scalar in (bool, int) else ()):
            return None
        return base(text)

    convert.__name__ = scalar.__name__  # argparse uses it in error messages
    return convert


def _aliases(name: str) -> tuple[str, ...]:
    return (FLAG_ALIASES[name],) if name in FLAG_ALIASES else ()


def _help_with_default(help_text: str, default: Any) -> str:
    """``--help``'s text of a flag with its default, as argparse's ArgumentDefaultsHelpFormatter appends it, except
    where the default is chosen at run time (None) and the help already says how (``default auto: ...``): there
    "(default: None)" would read as if the flag had none."""
    if default is None and re.search(r"\bdefault\b", help_text):
        return help_text
    return help_text + " (default: %(default)s)"


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    # allow_abbrev=False: a typo such as --epoch must not silently set --epochs
    parser = ArgumentParser(description=description, allow_abbrev=False)
    parser.add_argument("--config", type=Path, default=None, help=_help_with_default(
        "YAML file of defaults: flat keys named as the flags, or an Ultralytics cfg / args.yaml", None))
    for section_name, section in _SECTIONS.items():
        group = parser.add_argument_group(section_name)
        for f in dataclasses.fields(section):
            flag = "--" + f.name.replace("_", "-")
            scalar, _ = _field_type(f.type)
            kwargs: dict[str, Any] = {"dest": f.name, "default": f.default,
                                      "help": _help_with_default(f.metadata["help"], f.default)}
            if scalar is bool:
                # --ema / --no-ema, and also --ema false for scripts.
                kwargs.update(nargs="?", const=True, type=_converter(f.type))
                group.add_argument(flag, *_aliases(f.name), **kwargs)
                group.add_argument("--no-" + f.name.replace("_", "-"), dest=f.name, action="store_false",
                                   help=argparse.SUPPRESS)
            else:
                kwargs.update(type=_converter(f.type), choices=f.metadata["choices"])
                group.add_argument(flag, *_aliases(f.name), **kwargs)
    return parser


def _load_yaml_defaults(path: Path) -> tuple[dict[str, Any], list[str]]:
    """Flag defaults from a YAML file (ours, flat or by section, or an Ultralytics cfg / ``args.yaml``) and the
    notes on Ultralytics keys read as ours or ignored."""
    if not path.is_file():
        raise FileNotFoundError(f"--config: no such file: {path}")
    values = read_yaml(path) or {}  # the gate: safe_load, a !!python tag or a syntax error refused in one line
    if not isinstance(values, dict):
        raise ValueError(f"--config {path}: expected a mapping of flag names to values, got {type(values).__name__}")
    # A saved config.yaml is nested by section; a hand-written one is flat. Accept both.
    if set(values) <= set(_SECTIONS) and all(isinstance(v, dict) for v in values.values()):
        values = {k: v for section in values.values() for k, v in section.items()}
    ours = {f.name: _field_type(f.type)[1] for s in _SECTIONS.values() for f in dataclasses.fields(s)}
    try:
        defaults, notes = read_ultralytics_keys({str(k).replace("-", "_"): v for k, v in values.items()}, ours)
    except ValueError as err:
        raise ValueError(f"--config {path}: {err}") from None
    return defaults, [f"--config {path}: {note}" for note in notes]


_KEY_VALUE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*=")


def parse_config(argv: list[str] | None = None) -> TrainConfig:
    """Parse the command line (and an optional ``--config`` YAML of defaults) into a validated ``TrainConfig``.

    Ultralytics' ``key=value`` arguments (``epochs=3 model=yolo11n.pt``) are read as ``--config`` keys are, and
    take precedence over ``--config``; a ``--flag`` given as well wins over both."""
    return parse_command_line(argv)[0]


def parse_command_line(argv: list[str] | None = None) -> tuple[TrainConfig, frozenset[str]]:
    """``parse_config``, and the names of the fields the user set (typed flags, ``key=value`` arguments and
    ``--config`` keys): what ``--resume`` compares with the checkpoint, the rest being read from it.

    A bare ``resume`` (Ultralytics' ``yolo train resume model=runs/.../last.pt``) means ``resume=true``."""
    parser = build_parser()
    switches = ultralytics_switches() | {f.name for section in _SECTIONS.values() for f in dataclasses.fields(section)
                                         if _field_type(f.type)[0] is bool}
    # `yolo train resume`, `... cos_lr`: a bare boolean key is true, as Ultralytics' CLI reads it
    argv = bare_switches(sys.argv[1:] if argv is None else argv, switches)
    pre, extras = parser.parse_known_args(argv)
    key_values = [token for token in extras if _KEY_VALUE.match(token)]
    argv = [token for token in argv if token not in key_values]
    notes: list[str] = []
    typed: set[str] = set()
    if pre.config is not None:
        try:
            defaults, config_notes = _load_yaml_defaults(pre.config)
        except (OSError, ValueError) as err:
            parser.error(str(err))
        parser.set_defaults(**defaults)
        notes += config_notes
        typed |= set(defaults)
    if key_values:
        ours = {f.name: _field_type(f.type)[1] for s in _SECTIONS.values() for f in dataclasses.fields(s)}
        values = {}
        for token in key_values:
            key, _, text = token.partition("=")
            try:
                values[key.replace("-", "_")] = yaml.safe_load(text) if text else None  # 3, 0.01, true, null
            except yaml.YAMLError as err:  # e.g. a !!python tag: safe_load builds no Python objects
                parser.error(f"{token}: not a plain YAML value ({' '.join(str(err).split())})")
        try:
            defaults, kv_notes = read_ultralytics_keys(values, ours)
        except ValueError as err:
            parser.error(f"key=value arguments: {err}")
        parser.set_defaults(**defaults)
        notes += kv_notes
        typed |= set(defaults)
    args = vars(parser.parse_args(argv))
    # Before torch loads, so that a wrong path or name answers at once. Under a launch of several processes the
    # trainer reports them instead, once the processes have connected: a rank that exited here alone would have
    # the launcher kill the one that was saying why.
    alone = int(os.environ.get("WORLD_SIZE", "1")) <= 1
    try:
        args["imgsz"], imgsz_note = round_imgsz(args["imgsz"])
        args["data"], data_note = resolve_data(args["data"], check=alone)
        if alone:
            check_report_to(args["report_to"])
            if args["weights"]:
                check_weights(args["weights"])
    except (ValueError, FileNotFoundError) as err:  # the trainer's form of a user error: one line, exit 2
        print(f"error: {err}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    for note in [*notes, imgsz_note, data_note] if os.environ.get("RANK", "0") == "0" else ():  # once per job
        if note:
            print(note, flush=True)
    typed |= _typed_flags(argv)
    try:
        config = TrainConfig(**{name: section(**{f.name: args[f.name] for f in dataclasses.fields(section)})
                                for name, section in _SECTIONS.items()})
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    if "data" not in typed and not config.run.resume and os.environ.get("RANK", "0") == "0":
        # Ultralytics warns and takes coco8 here; the default data is ours: said, so that no one trains on it unaware
        print("data: the built-in synthetic shapes, the default (--data or data= names your dataset)", flush=True)
    return config, frozenset(typed)


def _typed_flags(argv: list[str]) -> set[str]:
    """The fields that ``--flags`` of ``argv`` set: a parser whose every default is absent keeps only those."""
    parser = build_parser()
    unset = object()  # not a string: argparse would run a string default through the flag's type
    names = [f.name for section in _SECTIONS.values() for f in dataclasses.fields(section)]
    parser.set_defaults(**dict.fromkeys(names, unset))
    return {name for name, value in vars(parser.parse_args(argv)).items() if name in names and value is not unset}


def save_args_yaml(config: TrainConfig, path: Path) -> None:
    """args.yaml as Ultralytics writes it in a run folder, with Ultralytics' keys only (``ultralytics_train_args``):
    ``yolo train cfg=args.yaml`` accepts it, and ``cfg=``/``--config args.yaml`` reads those settings back; the
    full config is config.yaml (``save_config``)."""
    from yolo11.engine.ultralytics_args import ultralytics_train_args

    flat = ultralytics_train_args(config.to_dict())
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, yaml.safe_dump(flat, sort_keys=False))  # a temporary name, then a rename


def save_config(config: TrainConfig, path: Path) -> None:

    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, yaml.safe_dump(config.to_dict(), sort_keys=False))
