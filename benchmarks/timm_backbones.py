"""Which timm models serve as the YOLO11 backbone: one model per timm family, built and run on a rectangular batch.

    python benchmarks/timm_backbones.py [--families conv,swin,...] [--size 96 160]

A family is the name up to its first digit or underscore (``convnext``, ``swin``, ``efficientnet``); its model is
the first one whose name says it is small (``atto``, ``tiny``, ``b0``...), else its first. Each is built with
random weights by ``yolo11.create_model("yolo11n", backbone=name)`` and run forward in training mode on a batch of
two; a line per model says OK (with whether its features were NHWC or resized) or the refusal. The summary
counts the models that serve, those without levels at strides 8/16/32 (ViTs), those of one input size only, and
any other failure (a bug here, or in timm).
"""

from __future__ import annotations

import argparse
import re
import signal
import time
from collections import Counter

import timm
import torch

import yolo11

SMALL = re.compile(r"(atto|femto|pico|nano|tiny|small|_s\b|_t\b|b0|_xs|xxs|_050|_100|18|_s0|_t8|_002)")


def family_models(families: set[str] | None) -> list[str]:
    by_family: dict[str, list[str]] = {}
    for name in timm.list_models():
        by_family.setdefault(re.split(r"[_\d]", name)[0], []).append(name)
    picked = []
    for family, names in by_family.items():
        if families is None or family in families:
            picked.append(next((n for n in names if SMALL.search(n)), names[0]))
    return picked


class TimedOut(Exception):
    pass


def _alarm(*_) -> None:
    raise TimedOut


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=None, help="comma-separated timm families (default: all)")
    parser.add_argument("--size", type=int, nargs=2, default=(96, 160), metavar=("H", "W"))
    parser.add_argument("--timeout", type=int, default=60, help="seconds per model (1B parameters build slowly)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    signal.signal(signal.SIGALRM, _alarm)
    height, width = args.size
    expected = [(height // r, width // r) for r in (8, 16, 32)]
    outcomes: Counter[str] = Counter()
    for name in family_models(set(args.families.split(",")) if args.families else None):
        started = time.perf_counter()
        signal.alarm(args.timeout)
        try:
            model = yolo11.create_model("yolo11n", num_classes=2, backbone=name).train()
            maps = model(torch.rand(2, 3, height, width))
            sizes = [tuple(m.shape[-2:]) for m in maps]
            outcome = "ok" if sizes == expected else "wrong sizes"
            detail = (f"NHWC={model.backbone.channels_last_output} resized={model.backbone.resize}" if outcome == "ok"
                      else f"{sizes}, expected {expected}")
        except TimedOut:
            outcome, detail = "timed out", f"over {args.timeout} s"
        except Exception as error:  # the survey goes on; the line says why
            text = str(error)
            outcome = ("no 8/16/32 levels" if "offers feature reductions" in text
                       else "one input size" if "fails on a" in text else "other failure")
            detail = f"{type(error).__name__}: {text[:200]}"
        finally:
            signal.alarm(0)
        outcomes[outcome] += 1
        print(f"{outcome:17} {name:36} {time.perf_counter() - started:5.1f} s  {detail}", flush=True)
    print(f"\n{sum(outcomes.values())} families at {height}x{width}: "
          + ", ".join(f"{count} {outcome}" for outcome, count in outcomes.most_common()))


if __name__ == "__main__":
    main()
