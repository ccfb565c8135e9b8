"""Versions and devices (what a bug report needs) or, for each model named, its summary in Ultralytics' format.

    yolo11 info                                        # Python, packages, CUDA devices
    yolo11 info yolo26n                                # a scale name: the model built, no weights
    yolo11 info runs/train/exp/weights/best.safetensors
    yolo11 info runs/train/exp                         # a run folder: its best weights, else its last
    yolo11 info model=best.safetensors imgsz=320       # Ultralytics' key form

Per model, Ultralytics' ``model.info()`` line (``YOLO11n summary: ... layers, 2,624,080 parameters, 2,624,064
gradients, 6.7 GFLOPs``: its parameter count and GFLOPs, see ``yolo11.models.summary``) and one line of classes,
strides and heads.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

from yolo11.arguments import ArgumentParser
from yolo11.tools import cli

PACKAGE = "yolo11-accelerate"
SCALE_SUFFIXES = ("", ".yaml", ".yml")  # yolo26n, or Ultralytics' yolo26n.yaml


def package_version() -> str:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    from yolo11.arguments import check_keys
    from yolo11.engine.ultralytics_args import read_key_values

    parser = ArgumentParser(prog="yolo11 info", description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("models", nargs="*", help="scale names (yolo11n ... yolo26x) or weights (.safetensors, a "
                                                  "save_pretrained folder, an Ultralytics .pt, hf://...)")
    parser.add_argument("--imgsz", type=int, default=640, help="image size of the GFLOPs count (Ultralytics': 640)")
    argv = list(sys.argv[1:] if argv is None else argv)
    check_keys(argv, ["model", "imgsz"])
    argv, _ = read_key_values(parser, argv, {"model": "models"})
    return parser.parse_args(argv)


def scale_name(ref: str) -> str | None:
    """``yolo26n`` (or ``yolo26n.yaml``) when ``ref`` names a scale and no file of that name exists, else None."""
    from yolo11.gate import SCALE_NAMES

    if Path(ref).exists():
        return None
    stem, suffix = Path(ref).stem, Path(ref).suffix
    return stem if stem in SCALE_NAMES and suffix in SCALE_SUFFIXES else None


def print_versions() -> None:
    import torch

    versions = {PACKAGE: None, "torch": None, "torchvision": None, "accelerate": None, "timm": None,
                "datasets": None, "onnxruntime": None}
    for package in versions:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    print(f"Python {platform.python_version()} on {platform.platform()}")
    print(", ".join(f"{package} {version}" for package, version in versions.items()))
    devices = [torch.cuda.get_device_name(k) for k in range(torch.cuda.device_count())]
    print(f"CUDA: {len(devices)} device(s){': ' + ', '.join(devices) if devices else ''}")


def describe(ref: str, imgsz: int = 640) -> list[str]:
    """The summary line of the model ``ref`` names and one line of its classes, strides and heads."""
    from yolo11.models.summary import model_summary

    scale = scale_name(ref)
    if scale is not None:
        from yolo11.models import create_model

        model, origin = create_model(scale), "built from its scale, no weights"
    else:
        from yolo11.preflight import check_weights, run_folder_weights
        from yolo11.weights import load_weights

        check_weights(ref)
        weights = run_folder_weights(ref)  # a run folder: its best weights, else its last
        model, origin = load_weights(weights or ref), f"weights {weights}" if weights else "weights"
    names = list(model.names or [])
    listed = f" ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})" if names else ""
    heads = ", one-to-many and one-to-one heads" if model.end2end else ""
    backbone = f", timm backbone {model.config['backbone']}" if model.config.get("backbone") else ""
    return [model_summary(model, imgsz).line(),
            f"  {ref} ({origin}): {model.num_classes} classes{listed}, strides {tuple(model.strides)}{heads}"
            f"{backbone}; GFLOPs at {imgsz}x{imgsz}"]


@cli
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.models:
        print_versions()
    for ref in args.models:
        print("\n".join(describe(ref, args.imgsz)))
    return 0


if __name__ == "__main__":
    from yolo11.program_exit import exit_process

    exit_process(main())
