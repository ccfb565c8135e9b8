"""Evaluate YOLO11 or YOLO26 weights on a dataset: COCO metrics (pycocotools' numbers) printed and written as JSON.

    yolo11-val weights/best.safetensors --data ../shared/data/coco128.yaml
    yolo11-val yolo11n.pt --data detection-datasets/coco --split val --batch 32 --json metrics.json
    accelerate launch -m yolo11.tools.val best.safetensors --data coco128.yaml   # sharded over processes

A YOLO26 model is scored with its one-to-many head and NMS by default, as Ultralytics 8.4.190's val (``nms`` unset);
``--nms false`` (``nms=false``) scores its NMS-free one-to-one head's top-k (refused for YOLO11). The line
``head: ...`` says which.

Each process runs its shard of the loader (``accelerator.prepare``, batches dealt out in turn); predictions are
gathered and the main process computes the metrics, so the numbers do not depend on the number of processes as
long as the per-process batch (``--batch / processes``) is the same (it fixes the rect batch shapes).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from yolo11.engine.ultralytics_args import ArgumentParser
from yolo11.preflight import parse_tool_args
from yolo11.tools import add_nms_flag, cli

if TYPE_CHECKING:  # torch and the data stack load in main, after the arguments are checked (--help is instant)
    import torch
    from accelerate import Accelerator
    from torch import nn

    from yolo11.data import DetectionSource

# yolo11.data.sources.BBOX_FORMATS and yolo11.evaluation.coco.BACKENDS, which load torch (tests check they agree)
BBOX_FORMATS = ("auto", "xywh", "xyxy")
BACKENDS = ("fast", "pycocotools", "faster_coco_eval")

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("weights", help="our .safetensors file or folder, an Ultralytics .pt, hf://owner/repo/file, "
                                        "a Hub repo owner/name, or yolo11n.pt ... yolo26x.pt")
    parser.add_argument("--data", required=True, help="source: data YAML, COCO json, save_to_disk folder, Hub id")
    parser.add_argument("--split", default="val", help="dataset split (val falls back to validation, valid, test)")
    parser.add_argument("--images", default=None, help="image folder of a COCO json source ({split}: the split)")
    parser.add_argument("--bbox-format", default="auto", choices=BBOX_FORMATS,
                        help="how a Hub dataset or folder stores boxes (auto: read from the boxes)")
    parser.add_argument("--cache-dir", default=None, help="where converted datasets are cached")
    parser.add_argument("--imgsz", type=int, default=640, help="letterboxed input size in pixels")
    parser.add_argument("--batch", type=int, default=16, help="global batch size (split over processes)")
    parser.add_argument("--workers", type=int, default=2, help="data loader workers per process")
    parser.add_argument("--rect", action=argparse.BooleanOptionalAction, default=True,
                        help="batches of similar aspect ratio, each letterboxed to its own shape (Ultralytics' val)")
    parser.add_argument("--conf", type=float, default=0.001, help="score threshold before NMS")
    parser.add_argument("--iou", type=float, default=0.7, help="NMS IoU threshold")
    parser.add_argument("--max-det", type=int, default=300, help="detections kept per image")
    parser.add_argument("--backend", default="fast", choices=BACKENDS,
                        help="fast: our torch evaluator, pycocotools' numbers; or the library itself")
    parser.add_argument("--json", type=Path, default=None, help="write the metrics here (default: none)")
    parser.add_argument("--predictions-json", type=Path, default=None,
                        help="also write the predictions as COCO results (category = class + 1)")
    parser.add_argument("--plots-dir", type=Path, default=None,
                        help="write the PR/F1/P/R curves and confusion matrices (Ultralytics' file names) here")
    add_nms_flag(parser)
    return parse_tool_args(parser, argv, {"model": "weights"})


def evaluate_weights(accelerator: Accelerator, model: nn.Module, source: DetectionSource, *, imgsz: int,
                     batch: int, workers: int, conf: float, iou: float, max_det: int, rect: bool = True,
                     backend: str = "fast", end2end: bool = False) -> tuple[dict, list[tuple[int, torch.Tensor]],
                                                                             dict]:
    """Metrics (same dict on every process), all gathered predictions of ``model`` on ``source`` and the COCO
    ground truth they were scored against; ``end2end``: a YOLO26 ``model``'s one-to-one head's top-k without NMS
    (``yolo11.postprocess.select_head``), else its one-to-many head with NMS.

    With ``rect``, batches are formed per process (``batch // num_processes`` images): the padding, hence the
    predictions, are those of a single process with that batch size.
    """
    import torch

    from yolo11.data import LoaderConfig, build_dataloader
    from yolo11.data.collate import CHANNELS_LAST_DEVICES
    from yolo11.evaluation import CocoEvaluator, predict_and_score
    from yolo11.evaluation.coco import evaluation_device
    from yolo11.postprocess import Postprocessor

    if model.num_classes != len(source.class_names):
        raise ValueError(f"the weights predict {_classes(getattr(model, 'names', None), model.num_classes)}, "
                         f"the dataset has {_classes(source.class_names, len(source.class_names))}")
    config = LoaderConfig(imgsz=imgsz, batch_size=max(batch // accelerator.num_processes, 1), workers=workers,
                          augment=False, shuffle=False, rect=rect)
    loader = build_dataloader(source, "val", config)
    postprocessor = Postprocessor(conf=conf, iou=iou, max_det=max_det, strides=model.strides, reg_max=model.reg_max,
                                  end2end=end2end)
    device = evaluation_device(accelerator.device, len(source.dataset))
    evaluator = CocoEvaluator(source.dataset, source.class_names, backend=backend, device=device)
    channels_last = accelerator.device.type in CHANNELS_LAST_DEVICES
    model = model.to(accelerator.device).eval()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    result = predict_and_score(accelerator, model, accelerator.prepare(loader), postprocessor, evaluator,
                               channels_last=channels_last)
    return result.metrics, result.predictions, evaluator.ground_truth


def _classes(names: list[str] | None, count: int, limit: int = 4) -> str:
    listed = f" ({', '.join(names[:limit])}{', ...' if len(names) > limit else ''})" if names else ""
    return f"{count} classes{listed}"


@cli
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from accelerate import Accelerator, DataLoaderConfiguration

    from yolo11.data import load_source
    from yolo11.data.sources import VAL_FALLBACKS
    from yolo11.evaluation import plots
    from yolo11.evaluation.coco import coco_results
    from yolo11.evaluation.table import format_table
    from yolo11.postprocess import head_line, select_head
    from yolo11.weights import load_weights

    # No even_batches padding: a rect batch padded with images of the first batch would mix letterbox shapes, and
    # ranks with one batch fewer are fine here (the only collective is the gather after the loop).
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(even_batches=False))
    model = load_weights(args.weights).fuse()  # before the data: a wrong path fails at once
    end2end = select_head(model.config["name"], model.end2end, args.nms)
    source = load_source(args.data, split=args.split, cache_dir=args.cache_dir, images=args.images,
                         bbox_format=args.bbox_format, fallback_splits=VAL_FALLBACKS, split_flag="--split")
    if model.num_classes != len(source.class_names):
        raise ValueError(f"{args.weights} predicts {_classes(model.names, model.num_classes)}; --data {args.data} "
                         f"has {_classes(source.class_names, len(source.class_names))}")
    start = time.perf_counter()
    metrics, predictions, ground_truth = evaluate_weights(
        accelerator, model, source, imgsz=args.imgsz, batch=args.batch, workers=args.workers, conf=args.conf,
        iou=args.iou, max_det=args.max_det, rect=args.rect, backend=args.backend, end2end=end2end)
    if accelerator.is_main_process:
        print(head_line(model.config["name"], model.end2end, end2end))
        print(format_table(metrics, source.class_names, ground_truth))
        print(f"{len(predictions)} images in {time.perf_counter() - start:.1f} s on {accelerator.num_processes} "
              f"process(es); mAP50-95 {metrics['map50_95']:.5f} mAP50 {metrics['map50']:.5f}")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(metrics) + "\n")
        if args.plots_dir:
            plots.save_validation_plots(args.plots_dir, metrics, [], source.class_names)
        if args.predictions_json:
            args.predictions_json.parent.mkdir(parents=True, exist_ok=True)
            args.predictions_json.write_text(json.dumps(coco_results(dict(predictions))) + "\n")
    accelerator.wait_for_everyone()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
