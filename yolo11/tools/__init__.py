"""The user CLIs: ``yolo11-val``, ``yolo11-predict``, ``yolo11-export``, ``yolo11-convert`` (and ``yolo11``, all of
them as subcommands). Each parses and checks its arguments before torch loads, so ``--help`` and a wrong flag or
path answer in well under a second."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence

from yolo11.gate import BOOL_WORDS
from yolo11.output_errors import WRITE_ERRNOS, error_text, write_error_message

# What a user can get wrong (paths, flags, weights, data): one ``error:`` line and exit 2, no traceback.
USER_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, MemoryError)
# The same for our own error classes, named by module so that catching them loads nothing (torch, datasets): an
# error of a module that was never imported cannot have been raised.
_USER_ERROR_CLASSES = {"yolo11.data.schema": "DataSourceError", "yolo11.weights.safe_pickle": "UnsafeCheckpointError",
                       "yolo11.engine.plan": "LaunchError"}


NMS_VALUES = BOOL_WORDS  # the words a boolean flag accepts, as the training flags read them


def nms_value(text: str) -> bool:
    """``--nms true|false`` (Ultralytics' ``nms`` argument); anything else is an argparse error."""
    value = NMS_VALUES.get(text.lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


def threshold_value(text: str) -> float:
    """``--conf`` / ``--iou``: a number in [0, 1], as Ultralytics checks them; ``conf=25`` (meant as 0.25) found
    nothing without a word before."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:  # nan fails too
        raise argparse.ArgumentTypeError(f"{text} is not in [0, 1] (a fraction: 0.25, not 25)")
    return value


# The weights argument of the tools that run a model (val, predict): every kind of reference they read
RUN_WEIGHTS_HELP = ("our .safetensors file or folder, an Ultralytics .pt, an .onnx export, a run folder (its best "
                    "weights), hf://owner/repo/file, a Hub repo owner/name, or yolo11n.pt ... yolo26x.pt")


def add_nms_flag(parser: argparse.ArgumentParser, help: str = "YOLO26's head, as Ultralytics' nms: unset (default) "
                 "or true = the one-to-many head with NMS; false = the NMS-free one-to-one head's top-k") -> None:
    """``--nms [true|false]``, default unset (``None``): Ultralytics 8.4.190's ``nms`` argument, whose ``False``
    selects YOLO26's NMS-free one-to-one head; ``--nms`` alone is ``true``."""
    parser.add_argument("--nms", type=nms_value, nargs="?", const=True, default=None, metavar="{true,false}",
                        help=help)


def is_user_error(err: BaseException) -> bool:
    if isinstance(err, USER_ERRORS) or (isinstance(err, OSError) and err.errno in WRITE_ERRNOS):
        return True
    return any(isinstance(err, getattr(sys.modules[module], name))
               for module, name in _USER_ERROR_CLASSES.items() if module in sys.modules)


def cli(main: Callable[[Sequence[str] | None], int]) -> Callable[[Sequence[str] | None], int]:
    """Wrap a tool's ``main``: user errors become one ``error:`` line on stderr and exit status 2."""

    @functools.wraps(main)
    def wrapper(argv: Sequence[str] | None = None) -> int:
        try:
            return main(argv)
        except Exception as err:
            if not is_user_error(err):
                raise
            message = write_error_message(err) if isinstance(err, OSError) and err.errno in WRITE_ERRNOS \
                else error_text(err)
            print(f"error: {message}", file=sys.stderr)
            return 2

    return wrapper
