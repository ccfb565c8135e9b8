"""``yolo11``: every tool under one command, as Ultralytics' ``yolo``.

    yolo11 train data=coco8.yaml model=yolo11n imgsz=160 epochs=3     # = yolo11-train (one process, no launcher)
    yolo11 val best.safetensors data=coco8.yaml imgsz=160             # = yolo11-val
    yolo11 predict best.safetensors yolo11/assets/coco8/images/val    # = yolo11-predict
    yolo11 export best.safetensors imgsz=160                          # = yolo11-export
    yolo11 convert yolo11n.pt weights/yolo11n                         # = yolo11-convert
    yolo11 info [yolo26n | weights]                                   # versions and devices, or a model's summary
    yolo11 version                                                    # the package's version, as `yolo version`

Each subcommand takes its tool's flags and Ultralytics' ``key=value`` arguments; ``yolo11 detect train ...``
(Ultralytics' task word) is read as ``yolo11 train ...``. Nothing heavy loads before the subcommand parses.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from yolo11.arguments import closest
from yolo11.program_exit import exit_process, program

COMMANDS = {"train": "yolo11.train", "val": "yolo11.tools.val", "predict": "yolo11.tools.predict",
            "export": "yolo11.tools.export", "convert": "yolo11.tools.convert", "info": "yolo11.tools.info"}
USAGE = ("usage: yolo11 {train,val,predict,export,convert,info,version} [arguments]  (yolo11 <command> --help for "
         "each)")


def info(argv: Sequence[str]) -> int:
    """``yolo11 info [models]`` (``yolo11.tools.info``): versions and devices, or each model's summary."""
    from yolo11.tools import info as info_tool

    return info_tool.main(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["detect"]:  # `yolo detect train ...`: detection is the only task
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(f"{USAGE}\n\n{__doc__}" if argv else USAGE, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "version":
        from yolo11.tools.info import package_version

        print(package_version())
        return 0
    if command not in COMMANDS:
        commands = [*COMMANDS, "version"]
        close = closest(command, commands)
        hint = f"did you mean {close!r}?" if close else f"the commands: {', '.join(commands)}"
        print(f"error: unknown command {command!r}; {hint}", file=sys.stderr)
        return 2
    sys.argv[0] = f"yolo11 {command}"  # argparse names the program after it in usage and errors
    return importlib.import_module(COMMANDS[command]).main(rest)


# The console scripts (pyproject.toml): each program's main() on the command line, ended by exit_process.
run = program("yolo11.cli")
train = program("yolo11.train")
launch = program("yolo11.launch")
val = program("yolo11.tools.val")
predict = program("yolo11.tools.predict")
export = program("yolo11.tools.export")
convert = program("yolo11.tools.convert")

if __name__ == "__main__":
    exit_process(main())
