"""Export a YOLO11 or YOLO26 model to ONNX with decoded outputs, or to an Ultralytics ``.pt`` checkpoint.

    yolo11-export weights/best.safetensors --imgsz 640 --output yolo11n.onnx
    yolo11-export yolo11n.pt --imgsz 640 --check
    yolo11-export yolo26n.pt --nms false          # YOLO26's NMS-free graph: output0 (1, 300, 6)
    yolo11-export weights/best.safetensors --format pt --output best.pt   # for Ultralytics' YOLO(...)

The ONNX graph takes ``images`` float32 ``(batch, 3, imgsz, imgsz)`` in [0, 1] and returns ``output0``
``(batch, 4 + nc, A)``: xywh in input pixels and sigmoid class scores per anchor, A = sum of (imgsz / s)^2 over
strides 8, 16, 32 (8400 at 640), i.e. ``yolo11.postprocess.decode`` of the raw maps. BatchNorms are folded first.
As Ultralytics' export, every dimension is static by default (``--batch``, default 1: ``(1, 84, 8400)`` for COCO
at 640), which Ultralytics' runtime (``YOLO("model.onnx")``) needs to predict and validate with it; ``--dynamic``
makes batch, height and width dynamic (``output0`` ``(batch, 4 + nc, anchors)``), as Ultralytics' ``dynamic=True``.
``--half`` stores the weights in float16 (inputs and outputs stay float32, as Ultralytics' CPU ``half=True``).

With ``--nms`` the graph ends in NMS, as Ultralytics 8.4.190's ``nms=True`` export (``NMSModel``), and returns
``output0`` ``(B, max_det, 6)`` rows ``[x1, y1, x2, y2, score, class]`` in input pixels: per image, each anchor's
best class above ``--conf``, class-wise NMS at ``--iou`` (ONNX ``NonMaxSuppression``), the first ``--max-det`` by
decreasing score, then zero rows. Its metadata's ``args`` say ``nms: True``: Ultralytics' runtime and ours read the
rows as they are (no NMS of their own); ``--dynamic`` with it needs ``--batch``, the largest batch it takes (the
per-image loop is unrolled), as Ultralytics'.

YOLO26 (two heads), as Ultralytics 8.4.190's ONNX export with its ``nms`` argument (``engine/exporter.py``:
``model.end2end = args.nms is False``): unset (default), the graph above of the one-to-many head; ``--nms``, that
head with the NonMaxSuppression graph; ``--nms false``, the end-to-end graph of the one-to-one head:
``output0`` ``(batch, k, 6)`` rows ``[x1, y1, x2, y2, score, class]`` in input pixels by decreasing score,
k = min(``--max-det``, A), no threshold applied (``yolo11.postprocess.end2end_topk``), metadata ``end2end`` True.
``--nms false`` is refused for YOLO11 (it has no such head). The line ``head: ...`` printed says which.

The ONNX model's metadata (``metadata_props``) has Ultralytics' keys and formats, so tools that read Ultralytics
exports read ours (Ultralytics' ``AutoBackend`` reads ``stride``, ``batch``, ``imgsz``, ``names``, ``task``,
``args``, ``channels``, ``end2end``): ``names`` (``{0: 'person', ...}``), ``stride`` (32), ``imgsz``
(``[640, 640]``), ``task`` (``detect``), ``head`` (``Detect``), ``batch``, ``channels`` (3), ``end2end`` (False;
True for ``--nms false``),
``args`` (``{'batch': 1, 'half': False, 'dynamic': False, 'nms': False, 'opset': 17}``), ``author``, ``version``,
``license``, ``date`` and ``description``.

``--format pt`` writes an Ultralytics checkpoint (``yolo11.weights.ultralytics_writer``); it needs the ultralytics
package importable, see there. Its ``train_args`` record the training size and data, so Ultralytics predicts at
that size and validates on that data by default.

``--imgsz`` defaults to the size the weights were trained at (a run's ``config.yaml`` beside ``weights/``, an
Ultralytics checkpoint's ``train_args``: ``tools/run_record.py``, said in one line), else 640.

The legacy TorchScript-based exporter (``dynamo=False``) is used: it handles this graph and dynamic axes in
torch 2.14 without extra dependencies.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from yolo11.arguments import ArgumentParser
from yolo11.preflight import parse_tool_args
from yolo11.tools import add_nms_flag, cli, threshold_value

EXPORT_FORMATS = ("onnx", "pt", "safetensors")  # the tool's and YOLO.export's
OPSET, MIN_OPSET = 17, 13  # the default and the lowest opset (yolo11.tools.onnx_export's, which loads torch)
# The graph code loads torch and onnx: it is imported in main, after the arguments are checked (--help is instant).
_GRAPH_NAMES = ("DecodedDetector", "End2EndDetector", "NmsDetector", "check_onnx",
                "export_onnx", "onnx_metadata")


def __getattr__(name: str) -> Any:
    if name in _GRAPH_NAMES:
        from yolo11.tools import onnx_export

        return getattr(onnx_export, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def default_output(ref: str, suffix: str = ".onnx") -> Path:
    """``best.safetensors`` -> ``best.onnx`` (or ``suffix``) beside it, ``best_export.safetensors`` where that would
    be the weights file itself; a Hub reference -> ``<its last part>.onnx`` here."""
    local = Path(ref)
    if local.exists():
        output = local.with_suffix(suffix) if local.is_file() else local.with_name(local.name + suffix)
        same = output.resolve() == local.resolve()  # a link to the weights too: never written over
        return output.with_name(f"{output.stem}_export{output.suffix}") if same else output
    return Path(Path(ref.rstrip("/")).name).with_suffix(suffix)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("weights", help="our .safetensors file or folder, an Ultralytics .pt, hf://owner/repo/file, "
                                        "a Hub repo owner/name, or yolo11n.pt ... yolo26x.pt")
    parser.add_argument("--format", type=str.lower, choices=EXPORT_FORMATS, default="onnx",  # format=ONNX too
                        help="onnx; pt: an Ultralytics checkpoint for YOLO(...) (needs ultralytics installed); "
                             "safetensors: ours (--half: float16)")
    parser.add_argument("--output", type=Path, default=None,
                        help="output file (default: the weights name + .onnx/.pt, in the current folder for Hub "
                             "weights)")
    parser.add_argument("--imgsz", type=int, default=None,
                        help="square input size in pixels, multiple of 32 (default: the training size recorded "
                             "with the weights, else 640)")
    parser.add_argument("--batch", type=int, default=1, help="the static ONNX batch size, as Ultralytics' export")
    parser.add_argument("--dynamic", action="store_true",
                        help="ONNX with dynamic batch, height and width (Ultralytics' dynamic=True)")
    parser.add_argument("--static-batch", action="store_true", help=argparse.SUPPRESS)  # the default since 2026-12
    parser.add_argument("--half", action="store_true", help="float16 weights (ONNX inputs and outputs stay float32)")
    parser.add_argument("--opset", type=int, default=OPSET, help="ONNX opset (13 or more; 17 by default)")
    parser.add_argument("--check", action="store_true", help="compare onnxruntime with PyTorch after export")
    add_nms_flag(parser, "as Ultralytics' nms: unset (default) = output0 decoded (YOLO26: its one-to-many head); "
                         "--nms / true = the graph ends in ONNX NonMaxSuppression; false = YOLO26's NMS-free "
                         "one-to-one head, output0 (batch, max-det, 6)")
    parser.add_argument("--conf", type=threshold_value, default=0.25, help="--nms score threshold")
    parser.add_argument("--iou", type=threshold_value, default=0.7, help="--nms IoU threshold")
    parser.add_argument("--max-det", type=int, default=300,
                        help="--nms: detections kept per class and image; --nms false: rows of output0")
    args = parse_tool_args(parser, argv, {"model": "weights"})
    if args.opset < MIN_OPSET:
        parser.error(f"--opset must be >= {MIN_OPSET}, got {args.opset}")
    return args


@cli
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.format != "onnx" and (args.nms is not None or args.dynamic or args.check):
        raise ValueError(f"--nms, --dynamic and --check are ONNX options, not for --format {args.format}")
    from yolo11.postprocess import head_line, select_head
    from yolo11.tools.onnx_export import check_onnx, export_onnx  # torch and onnx: after the arguments
    from yolo11.tools.run_record import settings_line, trained_with
    from yolo11.weights import load_weights

    record = trained_with(args.weights)
    args.imgsz, recorded = record.pick("imgsz", args.imgsz, 640)
    line = settings_line({"imgsz": args.imgsz} if recorded else {}, record, args.weights)
    if line:
        print(line, file=sys.stderr)
    model = load_weights(args.weights).eval()
    name = model.config["name"]
    output = args.output or default_output(args.weights, f".{args.format}")
    if Path(args.weights).is_file() and output.resolve() == Path(args.weights).resolve():
        raise ValueError(f"--output {output} is the weights file read; name another")
    if args.format == "safetensors":
        from yolo11.weights import save_weights

        path = save_weights(model, output, half=args.half)
        print(f"{args.weights} -> {path}: {name} weights{' in float16' if args.half else ''} (yolo11.YOLO, "
              "Detector.from_pretrained)")
        return 0
    if args.format == "pt":
        from yolo11.weights.ultralytics_writer import save_ultralytics

        # the training data too, in train_args: Ultralytics' val then needs no data= either
        path = save_ultralytics(model, output, imgsz=args.imgsz, half=args.half, data=record.data)
        heads = " with both heads (Ultralytics' nms picks one at predict/val)" if model.end2end else ""
        print(f"{args.weights} -> {path}: an Ultralytics {name} checkpoint{heads} (YOLO({str(path)!r}).predict/val)")
        return 0
    end2end = select_head(name, model.end2end, args.nms)
    nms_settings = (args.conf, args.iou, args.max_det) if args.nms else None
    path = export_onnx(model, output, args.imgsz, args.opset, batch=args.batch, dynamic=args.dynamic,
                       half=args.half, nms=nms_settings, end2end=end2end, max_det=args.max_det)
    anchors = sum((args.imgsz // s) ** 2 for s in model.strides)
    batch, side = ("batch", "H") if args.dynamic else (args.batch, args.imgsz)
    if end2end or args.nms:
        what = "after NMS, zero rows after the last" if args.nms else "rows"
        shapes = f"output0 ({batch}, {min(args.max_det, anchors)}, 6) {what}: x1 y1 x2 y2 score class"
    else:
        shapes = f"output0 ({batch}, {4 + model.num_classes}, {anchors if not args.dynamic else 'anchors'})"
    where_nms = "" if end2end else " (in the graph)" if args.nms else " (after the graph, by its runtime; --nms: in it)"
    print(head_line(name, model.end2end, end2end) + where_nms)
    print(f"{args.weights} -> {path}: images ({batch}, 3, {side}, {side if not args.dynamic else 'W'}) -> {shapes}")
    if args.check:
        boxes, scores = check_onnx(model, path, args.imgsz, batch=2 if args.dynamic else args.batch,
                                   end2end=end2end, max_det=args.max_det, nms=nms_settings, dynamic=args.dynamic)
        what = " (the rows after NMS, on random images)" if args.nms else ""
        print(f"onnxruntime vs PyTorch{what}: max |difference| boxes {boxes:.2e} px, scores {scores:.2e}")
    return 0


if __name__ == "__main__":
    from yolo11.program_exit import exit_process

    exit_process(main())
