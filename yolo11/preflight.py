"""Checks of command-line values that need no torch: the trainer and the tools run them before torch loads, so a
wrong path, tracker name or image size answers in well under a second.

Each check returns the value to use and a note to print (``None`` when there is nothing to say), or raises
``ValueError`` / ``FileNotFoundError`` with one line naming the flag.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from yolo11.architecture import MAX_STRIDE
from yolo11.gate import BOOL_WORDS, check_regular_file

KNOWN_TRACKERS = ("wandb", "tensorboard")  # yolo11.engine.tracking's, which loads accelerate (tested equal)
ASSETS = Path(__file__).resolve().parent / "assets"
# Data YAMLs given by name that resolve to the copy shipped in yolo11/assets when they are not a local file
# (coco8's images are shipped too; coco128's are downloaded on first use, as Ultralytics does).
SAMPLE_DATA = {"coco8.yaml": ASSETS / "coco8.yaml", "coco128.yaml": ASSETS / "coco128.yaml"}
# yolo11.weights.resolve.OFFICIAL_NAMES (which loads huggingface_hub)
OFFICIAL_WEIGHTS = tuple(f"{family}{scale}.pt" for family in ("yolo11", "yolo26") for scale in "nsmlx")
_HF_URI = re.compile(r"hf:/+[\w.-]+/[\w.-]+(/.+)?")
_REPO_ID = re.compile(r"[\w.-]+/[\w.-]+")


def round_imgsz(value: int, flag: str = "--imgsz") -> tuple[int, str | None]:
    """Ultralytics' ``check_imgsz``: a size that is not a multiple of the largest stride is rounded UP to one,
    with a warning, rather than refused (150 -> 160)."""
    if value <= 0:
        raise ValueError(f"{flag} must be a positive number of pixels, got {value}")
    rounded = max(math.ceil(value / MAX_STRIDE) * MAX_STRIDE, MAX_STRIDE)
    if rounded == value:
        return value, None
    return rounded, (f"warning: {flag} {value} must be a multiple of the largest stride {MAX_STRIDE}, "
                     f"updating to {rounded}")


def looks_like_path(spec: str) -> bool:
    """A data spec that names a file or folder (not ``synthetic`` or a Hub id): the rule of ``load_source``."""
    return spec.startswith((".", "/", "~")) or spec.endswith((".yaml", ".yml", ".json")) or os.sep * 2 in spec


def refuse_link_loop(path: Path) -> None:
    """Raise the gate's refusal for a symbolic link loop at ``path``; a path that does not exist for another
    reason is left to the caller's own message."""
    if path.is_symlink():
        with contextlib.suppress(FileNotFoundError):  # a dangling link: "no such file" says it
            check_regular_file(path)


def resolve_data(spec: str, flag: str = "--data", check: bool = True) -> tuple[str, str | None]:
    """``spec``, or the shipped copy of a sample data YAML named but not here (``coco8.yaml``); with ``check``, a
    path that does not exist is an error now rather than after the imports."""
    if spec in SAMPLE_DATA and not Path(spec).exists():
        shipped = SAMPLE_DATA[spec]
        return str(shipped), f"{flag} {spec}: not a file here; using the data YAML shipped with yolo11: {shipped}"
    if check and "{split}" not in spec and looks_like_path(spec) and not Path(spec).expanduser().exists():
        refuse_link_loop(Path(spec).expanduser())
        shipped = f"; shipped samples by name: {', '.join(SAMPLE_DATA)}" if spec.endswith((".yaml", ".yml")) else ""
        raise FileNotFoundError(f"{flag} {spec}: no such file or folder (expected a data YAML, a COCO json or a "
                                f"dataset folder{shipped})")
    return spec, None


def check_weights(ref: str) -> None:
    """Raise for weights that cannot be found anywhere: not a local path, ``hf://``, an official name or a Hub
    repo id (``yolo11.weights.resolve_weights`` fetches the last three)."""
    path = Path(ref).expanduser()
    if path.exists() or _HF_URI.fullmatch(ref) or (path.name in OFFICIAL_WEIGHTS and path.parent == Path(".")):
        return
    if _REPO_ID.fullmatch(ref) and not path.suffix:
        return
    refuse_link_loop(path)
    beside = path.with_suffix(".safetensors")
    if path.suffix == ".pt" and beside.is_file():  # Ultralytics' habit, runs/train/exp/weights/best.pt: ours are here
        raise FileNotFoundError(f"no such weights file: {ref}; this trainer writes {beside} beside it (.safetensors; "
                                "yolo11 export --format pt writes a .pt for Ultralytics)")
    raise FileNotFoundError(
        f"no such weights file or folder: {ref} (expected a local .safetensors/.pt file or save_pretrained folder, "
        f"hf://owner/repo/file, a Hub repo owner/name, or one of {', '.join(OFFICIAL_WEIGHTS)})")


def check_report_to(value: str | None) -> None:
    """``yolo11.engine.tracking.resolve_report_to``'s name rule; whether a tracker is installed is checked when the
    trackers start."""
    from yolo11.engine.ultralytics_args import did_you_mean

    names = [part.strip().lower() for part in (value or "none").split(",") if part.strip()]
    if not names or names == ["none"] or "all" in names:
        return
    unknown = sorted(set(names) - set(KNOWN_TRACKERS))
    if unknown or "none" in names:
        hint = did_you_mean(unknown[0], [*KNOWN_TRACKERS, "all", "none"]) if unknown else ""
        raise ValueError(f"--report-to {value!r}: unknown tracker(s) {unknown or ['none']}{hint}; expected a comma "
                         f"list of {', '.join(KNOWN_TRACKERS)}, or all, or none")


def bare_nms(argv: Sequence[str]) -> list[str]:
    """``--nms`` followed by an existing file (``yolo11-export --nms best.pt``) is ``--nms true`` and that file:
    argparse would take the path for the flag's optional true/false value. Any other word stays the flag's value,
    so that ``--nms maybe`` is still refused (the words of a boolean flag: ``tools.NMS_VALUES``)."""
    argv = list(argv)
    for index, token in enumerate(argv[:-1]):
        following = argv[index + 1]
        if token == "--nms" and following.lower() not in BOOL_WORDS and os.path.exists(following):
            argv[index] = "--nms=true"
    return argv


def run_folder_weights(ref: str | Path) -> Path | None:
    """A training run folder's weights (``runs/train/exp`` -> its ``weights/best.safetensors``, else
    ``last.safetensors``), or None when ``ref`` is not a run folder; a run folder without either is an error."""
    folder = Path(ref).expanduser()
    if not (folder / "weights").is_dir() or (folder / "config.json").is_file():  # not a save_pretrained folder
        return None
    found = next((file for file in (folder / "weights" / f"{name}.safetensors" for name in ("best", "last"))
                  if file.is_file()), None)
    if found is None:
        raise FileNotFoundError(f"{folder}: a run folder without weights/best.safetensors or last.safetensors")
    return found


def parse_tool_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
                    positionals: dict[str, str]) -> argparse.Namespace:
    """A tool's flags and Ultralytics ``key=value`` arguments (``positionals``: keys that name a positional; an old
    key, ``half=true`` or a bare ``half``, read as its current one), then the checks that need no torch: the
    weights exist (a run folder: its best weights, else its last), ``--imgsz`` is rounded up, ``--data`` resolves
    (tools that have it). Notes go to stderr; a wrong path raises, which the tools' ``cli`` prints as one
    ``error:`` line."""
    from yolo11.arguments import check_keys
    from yolo11.engine.ultralytics_args import (
        LEGACY_SWITCHES,
        ULTRALYTICS_DEFAULTS,
        bare_switches,
        legacy_tokens,
        read_key_values,
    )

    argv = sys.argv[1:] if argv is None else argv
    ours = [action.dest for action in parser._actions if action.option_strings]  # argparse has no public listing
    argv = legacy_tokens(bare_switches(argv, LEGACY_SWITCHES - set(ours)), ours)
    check_keys(argv, [*ours, *positionals], ULTRALYTICS_DEFAULTS)  # a misspelt key: one line, the closest name
    argv, notes = read_key_values(parser, argv, positionals)
    args = parser.parse_args(bare_nms(argv))
    check_weights(args.weights)
    weights = run_folder_weights(args.weights)
    if weights is not None:
        print(f"{args.weights}: a run folder; its weights {weights}", file=sys.stderr)
        args.weights = str(weights)
    data_note = imgsz_note = None
    if getattr(args, "data", None) is not None:  # None: the tool takes the data the weights were trained on
        args.data, data_note = resolve_data(args.data)
    if args.imgsz is not None:  # None: the training size recorded with the weights, else 640
        args.imgsz, imgsz_note = round_imgsz(args.imgsz)
    for note in (*notes, data_note, imgsz_note):
        if note:
            print(note, file=sys.stderr)
    return args
