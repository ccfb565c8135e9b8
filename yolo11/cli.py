"""``yolo11``: every tool under one command, as Ultralytics' ``yolo``.

    yolo11 train data=coco8.yaml model=yolo11n imgsz=160 epochs=3     # = yolo11-train (one process, no launcher)
    yolo11 val best.safetensors data=coco8.yaml imgsz=160             # = yolo11-val
    yolo11 predict best.safetensors yolo11/assets/coco8/images/val    # = yolo11-predict
    yolo11 export best.safetensors imgsz=160                          # = yolo11-export
    yolo11 convert yolo11n.pt weights/yolo11n                         # = yolo11-convert
    yolo11 info [weights]                                             # versions, devices; the model's summary

Each subcommand takes its tool's flags and Ultralytics' ``key=value`` arguments; ``yolo11 detect train ...``
(Ultralytics' task word) is read as ``yolo11 train ...``. Nothing heavy loads before the subcommand parses.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import platform
import sys
from collections.abc import Sequence

from yolo11.engine.ultralytics_args import did_you_mean

COMMANDS = {"train": "yolo11.train", "val": "yolo11.tools.val", "predict": "yolo11.tools.predict",
            "export": "yolo11.tools.export", "convert": "yolo11.tools.convert"}
USAGE = "usage: yolo11 {train,val,predict,export,convert,info} [arguments]  (yolo11 <command> --help for each)"


def info(argv: Sequence[str]) -> int:
    """Versions and devices (what a bug report needs), and with a weights argument, the model's summary."""
    import torch

    versions = {"yolo11-accelerate": None, "torch": None, "torchvision": None, "accelerate": None, "timm": None,
                "datasets": None}
    for package in versions:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    print(f"Python {platform.python_version()} on {platform.platform()}")
    print(", ".join(f"{package} {version}" for package, version in versions.items()))
    devices = [torch.cuda.get_device_name(k) for k in range(torch.cuda.device_count())]
    print(f"CUDA: {len(devices)} device(s){': ' + ', '.join(devices) if devices else ''}")
    for ref in argv:
        from yolo11.preflight import check_weights
        from yolo11.weights import load_weights

        check_weights(ref)
        model = load_weights(ref)
        params = sum(p.numel() for p in model.parameters())
        names = list(model.names or [])
        listed = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        print(f"{ref}: {model.config.get('name', 'YOLO11')}, {model.num_classes} classes ({listed}), "
              f"{params:,} parameters, strides {tuple(model.strides)}"
              f"{', one-to-many and one-to-one heads' if model.end2end else ''}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["detect"]:  # `yolo detect train ...`: detection is the only task
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(f"{USAGE}\n\n{__doc__}" if argv else USAGE, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "info":
        from yolo11.tools import cli

        return cli(info)(rest)
    if command not in COMMANDS:
        print(f"{USAGE}\nyolo11: error: unknown command {command!r}{did_you_mean(command, [*COMMANDS, 'info'])}",
              file=sys.stderr)
        return 2
    sys.argv[0] = f"yolo11 {command}"  # argparse names the program after it in usage and errors
    return importlib.import_module(COMMANDS[command]).main(rest)


if __name__ == "__main__":
    raise SystemExit(main())
