"""Convert an Ultralytics YOLO11 or YOLO26 ``.pt`` checkpoint into our safetensors folder (with its class names).

    yolo11-convert yolo11n.pt weights/yolo11n        # -> weights/yolo11n/{model.safetensors, config.json, README.md}
    yolo11-convert yolo26n.pt weights/yolo26n        # both heads of YOLO26; the tools' --nms picks one
    yolo11-convert runs/detect/train/weights/best.pt weights/custom

An official name (``yolo11n.pt`` ... ``yolo11x.pt``, ``yolo26n.pt`` ... ``yolo26x.pt``) that is not a local file is
downloaded from the Hugging Face Hub (``Ultralytics/YOLO11``, ``Ultralytics/YOLO26``) into its cache.

The checkpoint is read through a restricted unpickler (``yolo11.weights.safe_pickle``): ultralytics is not
imported and no pickled code runs; a checkpoint naming any other global is refused.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from yolo11.arguments import ArgumentParser
from yolo11.preflight import check_weights
from yolo11.tools import cli


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("checkpoint", help="Ultralytics .pt file, e.g. yolo11n.pt, yolo26n.pt or "
                                           "runs/detect/train/weights/best.pt, or hf://owner/repo/file.pt")
    parser.add_argument("output", help="folder to write model.safetensors, config.json and README.md into")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    # before torch loads, so that a wrong path answers at once (one error: line, from cli)
    check_weights(args.checkpoint)
    return args


@cli
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from yolo11.weights import load_weights, save_pretrained  # torch: after the arguments are checked

    model = load_weights(args.checkpoint)
    directory = save_pretrained(model, args.output)
    params = sum(p.numel() for p in model.parameters())
    name, classes = model.config["name"], model.num_classes
    named = f" ({', '.join(model.names[:3])}, ...)" if model.names and classes > 3 else \
        f" ({', '.join(model.names)})" if model.names else ""
    heads = ", one-to-many and one-to-one heads" if model.end2end else ""
    print(f"{args.checkpoint} -> {directory}: {name}, {classes} classes{named}, {params:,} parameters{heads}")
    return 0


if __name__ == "__main__":
    from yolo11.program_exit import exit_process

    exit_process(main())
