"""Ultralytics' training arguments read as our flags: ``--config`` accepts an Ultralytics cfg or a run's
``args.yaml`` (flat keys), and ``--batch``, ``--project``, ``--nbs`` are aliases of our flags.

A key of ours is taken as it is. An Ultralytics key is renamed (``batch`` -> ``batch_size``), translated with its
value (``model: yolo11s.pt`` -> ``--model yolo11s --weights yolo11s.pt``, ``cos_lr: true`` -> ``--schedule cosine``)
or, for what this trainer does not implement, ignored with a note that lists the keys whose values differ from
Ultralytics' defaults. A key that is neither ours nor Ultralytics' is an error; an old key that 8.4.190 still reads
(``half``, ``end2end``...) is read as its current key, and ``imgsz=[h, w]`` as the larger side, each with a note.
``cfg=file.yaml`` reads the file's keys under the others, as Ultralytics' ``cfg``. The other way,
``ultralytics_train_args`` writes a run's ``args.yaml`` with Ultralytics' keys only. No torch here: ``--help`` is
light.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import PurePath
from typing import Any

# Flag aliases with Ultralytics' names (ours -> theirs): the same value, the same meaning.
FLAG_ALIASES = {"batch_size": "--batch", "output_dir": "--project", "nominal_batch": "--nbs"}

# Ultralytics name -> ours, the value unchanged (Ultralytics' training validation uses `conf`, `iou`, `split`).
RENAMED = {"batch": "batch_size", "project": "output_dir", "nbs": "nominal_batch", "split": "val_split",
           "conf": "val_conf", "iou": "val_iou", "nms": "val_nms"}

# Ultralytics keys whose false value is a --no-... switch of a tool: predict's save=False writes no drawn images.
INVERSE_SWITCHES = {"save": "no_draw"}

# Why a few Ultralytics keys have no counterpart here (the others: not implemented).
REASONS = {"amp": "mixed precision comes from the Accelerate config (without one: bf16 autocast on a GPU)",
           "save_dir": "the run folder is --output-dir/--name"}

# ultralytics/cfg/default.yaml of 8.4.190 (every key an args.yaml holds, plus `save_dir`): its defaults tell which
# ignored keys change nothing.
ULTRALYTICS_DEFAULTS: dict[str, Any] = {
    "task": "detect", "mode": "train", "model": None, "data": None, "epochs": 100, "time": None, "patience": 100,
    "batch": 16, "imgsz": 640, "save": True, "save_period": -1, "cache": False, "device": None, "workers": 8,
    "project": None, "name": None, "exist_ok": False, "pretrained": True, "cls_remap": True, "optimizer": "auto",
    "verbose": True, "seed": 0, "deterministic": True, "single_cls": False, "rect": False, "cos_lr": False,
    "close_mosaic": 10, "resume": False, "amp": True, "fraction": 1.0, "profile": False, "freeze": None,
    "multi_scale": 0.0, "compile": False, "channels_last": None, "overlap_mask": True, "mask_ratio": 4,
    "dropout": 0.0, "val": True, "split": "val", "save_json": False, "conf": None, "iou": 0.7, "max_det": 300,
    "quantize": None, "dnn": False, "plots": True, "nms": None, "source": None, "vid_stride": 1,
    "stream_buffer": False, "visualize": False, "augment": False, "agnostic_nms": False, "classes": None,
    "retina_masks": False, "embed": None, "show": False, "save_frames": False, "save_txt": False,
    "save_conf": False, "save_crop": False, "show_labels": True, "show_conf": True, "show_boxes": True,
    "line_width": None, "format": "torchscript", "optimize": False, "dynamic": False, "simplify": True,
    "opset": None, "workspace": None, "lr0": 0.01, "lrf": 0.01, "momentum": 0.937, "weight_decay": 0.0005,
    "warmup_epochs": 3.0, "warmup_momentum": 0.8, "warmup_bias_lr": 0.1, "distill_model": None, "dis": 6.0,
    "box": 7.5, "cls": 0.5, "cls_pw": 0.0, "dfl": 1.5, "pose": 12.0, "kobj": 1.0, "rle": 1.0, "angle": 1.0,
    "dlog": 1.0, "dgrad": 0.5, "dlam": 1.0, "nbs": 64, "hsv_h": 0.015, "hsv_s": 0.7, "hsv_v": 0.4, "degrees": 0.0,
    "translate": 0.1, "scale": 0.5, "shear": 0.0, "perspective": 0.0, "flipud": 0.0, "fliplr": 0.5, "bgr": 0.0,
    "mosaic": 1.0, "mixup": 0.0, "cutmix": 0.0, "copy_paste": 0.0, "copy_paste_mode": "flip",
    "auto_augment": "randaugment", "erasing": 0.4, "cfg": None, "tracker": "tracktrack.yaml", "save_dir": None,
}

_SCALE = re.compile(r"yolo(11|26)[nsmlx]")  # MODEL_NAMES: YOLO11 and YOLO26

# Keys of earlier Ultralytics versions that 8.4.190 still reads (cfg._handle_deprecation): old key -> its current
# key and value (``half=True`` -> ``quantize=16``); the removed keys map to None and are dropped.
LEGACY_KEYS: dict[str, Callable[[Any], tuple[str, Any]] | None] = {
    "half": lambda v: ("quantize", 16 if _on(v) else None),
    "int8": lambda v: ("quantize", 8 if _on(v) else None),
    "end2end": lambda v: ("nms", False if _on(v) else None),
    "boxes": lambda v: ("show_boxes", v),
    "hide_labels": lambda v: ("show_labels", not _on(v)),
    "hide_conf": lambda v: ("show_conf", not _on(v)),
    "line_thickness": lambda v: ("line_width", v),
    **dict.fromkeys(("label_smoothing", "save_hybrid", "crop_fraction", "keras")),
}

LEGACY_SWITCHES = {"half", "int8", "end2end", "boxes", "hide_labels", "hide_conf"}  # a bare one means key=true


def _on(value: Any) -> bool:
    """Ultralytics' reading of a legacy switch: anything but none/false/0 is on."""
    return str(value).strip().lower() not in {"none", "false", "0"}


def read_legacy_key(key: str, value: Any) -> tuple[str | None, Any, str]:
    """An old Ultralytics key as its current ``(key, value)`` and the note that says so; ``(None, None, note)``
    for a key Ultralytics removed. Other keys come back unchanged with an empty note."""
    if key not in LEGACY_KEYS:
        return key, value, ""
    modern = LEGACY_KEYS[key]
    if modern is None:
        return None, None, f"{key}={value}: removed from Ultralytics, ignored"
    new_key, new_value = modern(value)
    return new_key, new_value, f"{key}={value}: Ultralytics' former name of {new_key}={new_value}"


def legacy_tokens(argv: Sequence[str], ours: Iterable[str]) -> list[str]:
    """A tool's ``argv`` with old Ultralytics ``key=value`` tokens (``half=true``) written as their current keys
    (left out where that is the default) and a note printed for each; a key that is one of the tool's own flags
    (``yolo11 export half=true``) stays."""
    import yaml  # a light import, here so that the module stays import-cheap for --help

    ours, out = set(ours), []
    for token in argv:
        match = _TOOL_KEY_VALUE.match(token)
        key = match.group("key").replace("-", "_") if match else None
        if key not in LEGACY_KEYS or key in ours or os.path.exists(token):
            out.append(token)
            continue
        text = match.group("value")
        new_key, value, note = read_legacy_key(key, yaml.safe_load(text) if text else None)
        print(note, file=sys.stderr)
        if value is not None:  # None: the current key's default (half=false), nothing to set
            out.append(f"{new_key}={str(value).lower() if isinstance(value, bool) else value}")
    return out


def imgsz_value(value: Any, key: str = "imgsz") -> tuple[Any, str | None]:
    """Ultralytics' ``imgsz=[h, w]`` (or ``[s]``) as one size, the larger side, with a note (its training takes the
    largest too; we letterbox to squares): other values come back as they are, for the usual checks."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) and not isinstance(v, bool)
                                                         for v in value):
        size = max(value)
        return size, None if len(set(value)) == 1 else f"{key}={list(value)}: a square of the larger side, {size}"
    return value, None


def _model(value: Any, values: dict) -> dict[str, Any]:
    """``yolo11s.pt`` (or any weights file) -> scale and ``weights``; ``yolo11s.yaml`` / ``yolo26n.yaml`` -> the
    scale."""
    path = PurePath(str(value))
    if path.suffix in (".pt", ".safetensors"):
        scale = {"model": path.stem} if _SCALE.fullmatch(path.stem) else {}
        return {**scale, "weights": str(value)}
    if path.suffix in (".yaml", ".yml") and _SCALE.fullmatch(path.stem):
        return {"model": path.stem}
    return {"model": value}  # ours (a scale name), or a wrong value that the config's check reports


def _pretrained(value: Any, values: dict) -> dict[str, Any]:
    """Ultralytics: start from weights (true: those of ``model``; a path: these). Ours: ImageNet weights for a timm
    ``backbone``, so a bool is ours only beside a ``backbone``."""
    if isinstance(value, str):
        return {"weights": value}
    return {"pretrained": value} if values.get("backbone") else {}


# Keys whose value changes with the translation; an empty result sets nothing (Ultralytics' default meaning).
TRANSLATED: dict[str, Callable[[Any, dict], dict[str, Any]]] = {
    "model": _model,
    "pretrained": _pretrained,
    "resume": lambda v, _: {"resume": "auto"} if v is True else {} if v is False else {"resume": v},
    "cos_lr": lambda v, _: {"schedule": "cosine"} if v else {},
    "val": lambda v, _: {} if v else {"val_interval": -1},  # Ultralytics still validates the final epoch
    "cache": lambda v, _: {"cache_images": True} if v else {},  # 'ram', 'disk', true: ours caches in RAM
    "save_period": lambda v, _: {"save_period": v} if isinstance(v, int) and v > 0 else {},
}


# Keys of Ultralytics' that are ours too, under the same name but meaning something else: read as ours, said aloud
OTHER_MEANING = {"profile": "here a torch.profiler trace of optimizer steps 10-14 into <run>/profile (Ultralytics' "
                            "profile times ONNX and TensorRT exports of the model)"}


def read_ultralytics_keys(values: dict[str, Any], ours: dict[str, bool]) -> tuple[dict[str, Any], list[str]]:
    """Our flag values from a flat mapping of ours and Ultralytics' keys, and the notes to print.

    ``ours``: our field names -> whether the field accepts ``None``. Raises ``ValueError`` for a key that is
    neither ours nor Ultralytics', a task other than detection, and two keys that set the same flag.
    """
    if values.get("cfg") is not None:  # Ultralytics' cfg=file.yaml: the file's keys, the others win over them
        values = {**read_cfg_file(values["cfg"]), **{k: v for k, v in values.items() if k != "cfg"}}
    legacy_notes = []
    for key in [key for key in values if key in LEGACY_KEYS and key not in ours]:  # half=True, as Ultralytics
        new_key, value, note = read_legacy_key(key, values.pop(key))
        legacy_notes.append(note)
        if new_key is not None and new_key not in values:  # the current key, given too, wins (Ultralytics')
            values[new_key] = value
    batch = values.get("batch")
    if batch == -1 or (isinstance(batch, float) and 0 < batch < 1):  # AutoBatch: all GPU memory, or a fraction
        values["batch"] = 16
        legacy_notes.append(f"batch={batch}: Ultralytics' AutoBatch is not implemented; batch 16, its choice where "
                            "it cannot measure the GPU")
    if isinstance(values.get("freeze"), int | list) and not isinstance(values["freeze"], bool):  # 10, [0, 1]
        values["freeze"] = str(values["freeze"]) if values["freeze"] else None  # freeze=0 or []: nothing
    if isinstance(values.get("device"), int | list):  # device=0 reads as an int, device=[0, 1] as a list
        values["device"] = ",".join(map(str, values["device"])) if isinstance(values["device"], list) \
            else str(values["device"])
    if "imgsz" in values:  # imgsz=[640, 480]
        values["imgsz"], imgsz_note = imgsz_value(values["imgsz"])
        legacy_notes += [imgsz_note] if imgsz_note else []
    if values.get("resume") is True and PurePath(str(values.get("model"))).suffix in (".pt", ".safetensors"):
        # `yolo train resume model=runs/.../weights/last.pt`: the model names the run to resume, not new weights
        values = {**{k: v for k, v in values.items() if k != "model"}, "resume": values["model"]}
    out: dict[str, Any] = {}
    origin: dict[str, str] = {}
    mapped, ignored, at_default = [], [], 0
    for key, value in values.items():
        if key in TRANSLATED:
            result = TRANSLATED[key](value, values)
            if result and result != {key: value}:
                mapped.append(f"{key}: {value} -> " + " ".join(f"{_flag(k)} {v}" for k, v in result.items()))
        elif key in ours:
            if key == "data" and value is None:  # `data=$DATA` with DATA unset: not the built-in data, silently
                raise ValueError("data= has no value; name the dataset, or leave data out for the built-in "
                                 "synthetic shapes")
            # Ultralytics leaves unset keys null; a flag of ours that takes no None keeps its default then.
            result = {} if value is None and not ours[key] else {key: value}
        elif key in RENAMED:
            result = {} if value is None else {RENAMED[key]: value}
            if result:
                mapped.append(f"{key} -> {_flag(RENAMED[key])}")
        elif key == "task" and value not in (None, "detect"):
            raise ValueError(f"task: {value}: only detection ('detect') is implemented")
        elif key in ULTRALYTICS_DEFAULTS:
            result = {}
            if value == ULTRALYTICS_DEFAULTS[key] or key in ("task", "mode"):
                at_default += 1
            else:
                ignored.append(f"{key}={value}" + (f" ({REASONS[key]})" if key in REASONS else ""))
        else:
            hint = did_you_mean(key, [*ours, *RENAMED, *TRANSLATED, *ULTRALYTICS_DEFAULTS])
            raise ValueError(f"unknown key {key!r}{hint} (neither a flag of this trainer nor an Ultralytics argument)")
        for name, item in result.items():
            if name in out:
                raise ValueError(f"{origin[name]!r} and {key!r} both set {_flag(name)}")
            out[name], origin[name] = item, key
    notes = legacy_notes + [f"{key}={values[key]}: {meaning}" for key, meaning in OTHER_MEANING.items()
                            if values.get(key) and key in ours]
    if mapped:
        notes.append("Ultralytics keys read as ours: " + ", ".join(mapped))
    if ignored:  # keys at Ultralytics' defaults change nothing: counted, not listed, and alone not said at all
        notes.append(f"Ultralytics keys not implemented here, ignored: {', '.join(ignored)}"
                     + (f" (and {at_default} more at Ultralytics' defaults)" if at_default else ""))
    return out, notes


def read_cfg_file(path: Any) -> dict[str, Any]:
    """The keys of ``cfg=path``: an Ultralytics cfg or ``args.yaml`` (flat), or our ``config.yaml`` (by section),
    without a ``cfg`` of its own (Ultralytics drops it too). Raises ``ValueError`` for a missing or wrong file."""
    from yolo11.gate import read_yaml  # PyYAML: here so that the module stays import-cheap for --help

    if not os.path.isfile(str(path)):
        raise ValueError(f"cfg={path}: no such file")
    values = read_yaml(str(path)) or {}
    if not isinstance(values, dict):
        raise ValueError(f"cfg={path}: expected a mapping of keys to values, got {type(values).__name__}")
    if values and all(isinstance(v, dict) for v in values.values()):  # config.yaml: {model: {...}, data: {...}}
        values = {k: v for section in values.values() for k, v in section.items()}
    return {str(k).replace("-", "_"): v for k, v in values.items() if k != "cfg"}


_OMIT = object()  # a value Ultralytics cannot hold as ours means it: the key is left out of args.yaml


def _without_auto(value: Any) -> Any:
    return _OMIT if value is None else value


# args.yaml: our field -> (Ultralytics' key, our value -> theirs or _OMIT). Ultralytics types these keys
# (ultralytics.cfg.check_cfg): an automatic choice of ours (None) is left out, so that Ultralytics reads its own
# default and our reader reads ours. Every value written reads back (read_ultralytics_keys) as the same setting.
WRITTEN: dict[str, tuple[str, Callable[[Any], Any]]] = {
    **{name: (name, lambda v: v) for name in (
        "data", "epochs", "patience", "imgsz", "name", "exist_ok", "optimizer", "seed", "close_mosaic", "max_det",
        "plots", "channels_last", "lr0", "lrf", "momentum", "weight_decay", "warmup_epochs", "warmup_momentum",
        "warmup_bias_lr", "hsv_h", "hsv_s", "hsv_v", "degrees", "translate", "scale", "shear", "perspective",
        "flipud", "fliplr", "mosaic", "mixup", "device", "single_cls")},
    **{ours: (theirs, lambda v: v) for theirs, ours in RENAMED.items() if ours not in ("val_nms",)},
    "val_nms": ("nms", lambda v: _OMIT if v else False),  # unset: the one-to-many head with NMS, as ours
    "workers": ("workers", _without_auto),
    "compile": ("compile", _without_auto),
    "save_period": ("save_period", lambda v: -1 if v is None else v),
    "cache_images": ("cache", lambda v: True if v else _OMIT),  # Ultralytics' false reads back as our auto
    "schedule": ("cos_lr", lambda v: v == "cosine"),
    "val_interval": ("val", lambda v: v > 0),
    "resume": ("resume", lambda v: False if v is None else True if v == "auto" else v),
    "freeze": ("freeze", lambda v: None if v is None else freeze_numbers(v)),
}


def freeze_numbers(spec: str) -> int | list[int]:
    """Ultralytics' ``freeze`` as ``--freeze`` holds it: ``"10"`` a layer count, ``"[10]"`` or ``"3,5"`` a list of
    layer numbers; int()'s ``ValueError`` for anything else."""
    text = spec.strip()
    if text.startswith("[") or "," in text:
        return [int(n) for n in text.strip("[]").split(",") if n.strip()]
    return int(text)


def ultralytics_train_args(config: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A run's ``args.yaml`` from our resolved config (``TrainConfig.to_dict()``): Ultralytics' keys only, in the
    order of its default.yaml, each with a value of its type, so that ``yolo train cfg=args.yaml`` (and
    ``ultralytics.cfg.get_cfg``) accept the file and ``yolo11 train cfg=args.yaml`` reads the same settings back.
    Ours without an Ultralytics key (``--ema``, ``--lr-scaling``, ``--backbone``...) are only in config.yaml.

    ``model`` is the architecture's YAML (``yolo11n.yaml``) and ``pretrained`` the initial weights, as Ultralytics
    reads ``model=yolo11n.yaml pretrained=yolo11n.pt``; without an architecture, ``model`` is the weights."""
    flat = {key: value for section in config.values() for key, value in section.items()}
    out: dict[str, Any] = {"task": "detect", "mode": "train"}
    if flat.get("model"):
        out["model"] = f"{flat['model']}.yaml"
        if flat.get("weights"):
            out["pretrained"] = flat["weights"]
    elif flat.get("weights"):
        out["model"] = flat["weights"]
    for ours, (theirs, convert) in WRITTEN.items():
        value = convert(flat[ours]) if ours in flat else _OMIT
        if value is not _OMIT:
            out[theirs] = value
    order = list(ULTRALYTICS_DEFAULTS)
    return dict(sorted(out.items(), key=lambda item: order.index(item[0])))


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` (did you mean --epochs?)`` for the closest candidate, or ``""``; argparse 3.11 suggests nothing."""
    close = difflib.get_close_matches(word, list(dict.fromkeys(candidates)), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def bare_switches(argv: Sequence[str], switches: set[str]) -> list[str]:
    """``argv`` with each switch's bare name (``save_txt``, ``show``) as ``key=true``, as Ultralytics' CLI reads a
    boolean key given without a value; a token that is a flag's value (``--name val``) or an existing path stays."""
    out = []
    for token in argv:
        key = token.replace("-", "_")
        after_flag = bool(out) and out[-1].startswith("-") and "=" not in out[-1]
        out.append(f"{key}=true" if key in switches and not after_flag and not os.path.exists(token) else token)
    return out


def ultralytics_switches() -> set[str]:
    """Ultralytics' boolean keys (a bare name of one means true)."""
    return {key for key, value in ULTRALYTICS_DEFAULTS.items() if isinstance(value, bool)}


def _is_switch(action: argparse.Action) -> bool:
    """A flag without a value (``--save-txt``) or with its ``--no-`` twin (``--rect/--no-rect``)."""
    return action.nargs == 0 or isinstance(action, argparse.BooleanOptionalAction)


_TOOL_KEY_VALUE = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_-]*)=(?P<value>.*)$", re.DOTALL)


def read_key_values(parser: argparse.ArgumentParser, argv: Sequence[str],
                    positionals: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """``argv`` with the ``key=value`` tokens of a tool (``yolo val`` style) turned into its flags, and notes.

    A key that is a flag's name (``imgsz=320``, ``save_txt=true``) becomes that flag (a switch is given for a true
    value and left out for a false one, ``rect=false`` -> ``--no-rect``); ``positionals`` maps Ultralytics' keys to
    positional arguments (``model`` -> the weights); another Ultralytics key is ignored with a note; anything else
    is an error with the closest name. A token naming an existing file is left alone.
    """
    import yaml  # a light import, here so that the module stays import-cheap for --help

    positionals = positionals or {}
    by_key = {action.dest: action for action in parser._actions if action.option_strings}  # no public listing
    flags, heads, ignored, size_notes = [], {name: [] for name in positionals.values()}, [], []
    rest = []
    switches = ultralytics_switches() | {key for key, action in by_key.items() if _is_switch(action)}
    for token in bare_switches(argv, switches):
        match = _TOOL_KEY_VALUE.match(token)
        if match is None or os.path.exists(token):
            rest.append(token)
            continue
        key, text = match.group("key").replace("-", "_"), match.group("value")
        if not text.strip():  # `data=$DATA` with DATA unset: read as "" it named the current folder
            parser.error(f"{key}= has no value")
        value = yaml.safe_load(text)
        if key == "imgsz" and key in by_key and isinstance(value, list):  # imgsz=[640, 480]: the flag's one size
            value, note = imgsz_value(value)
            text, size_notes = str(value), [*size_notes, note] if note else size_notes
        if key in positionals:
            heads[positionals[key]].append(text)
        elif key in by_key:
            action = by_key[key]
            if _is_switch(action):
                if not isinstance(value, bool):
                    parser.error(f"{key}={text}: expected true or false")
                negative = [option for option in action.option_strings if option.startswith("--no-")]
                if value:
                    flags.append(action.option_strings[0])
                elif negative:
                    flags.append(negative[0])
            else:
                flags += [action.option_strings[0], text]
        elif INVERSE_SWITCHES.get(key) in by_key:  # predict's save=False: --no-draw
            if not isinstance(value, bool):
                parser.error(f"{key}={text}: expected true or false")
            if not value:
                flags.append(by_key[INVERSE_SWITCHES[key]].option_strings[0])
        elif key in ULTRALYTICS_DEFAULTS:
            ignored.append(f"{key}={text}")
        else:
            parser.error(f"unknown key {key!r}{did_you_mean(key, [*by_key, *positionals, *ULTRALYTICS_DEFAULTS])} "
                         f"(neither a flag of {parser.prog} nor an Ultralytics argument)")
    notes = size_notes + ([f"Ultralytics keys not implemented by {parser.prog}, ignored: {', '.join(ignored)}"]
                          if ignored else [])
    # the positionals in their order: those given as keys up to the first that was not, then the bare tokens (that
    # one given plainly: `predict best.safetensors source=a.jpg`), then the rest given as keys
    names = list(positionals.values())
    first_open = next((k for k, name in enumerate(names) if not heads[name]), len(names))
    if not rest and any(heads[name] for name in names[first_open:]):  # source= without model=: named, not shifted
        key = next(key for key, name in positionals.items() if name == names[first_open])
        parser.error(f"{key}= is missing (the {names[first_open]} argument)")
    keyed = [[item for name in part for item in heads[name]] for part in (names[:first_open], names[first_open:])]
    return [*keyed[0], *rest, *keyed[1], *flags], notes
