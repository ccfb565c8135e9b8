"""Evaluate YOLO11 or YOLO26 weights on a dataset: COCO metrics (pycocotools' numbers) printed and written as JSON.

    yolo11-val runs/train/exp/weights/best.safetensors            # the data and imgsz it was trained with
    yolo11-val weights/best.safetensors --data ../shared/data/coco128.yaml
    yolo11-val yolo11n.pt --data detection-datasets/coco --split val --batch 32 --json metrics.json
    yolo11 val best.onnx data=coco8.yaml                           # an ONNX export, through onnxruntime
    accelerate launch -m yolo11.tools.val best.safetensors --data coco128.yaml   # sharded over processes

Without ``--data`` (``data=``), the data the weights were trained on: the run's ``config.yaml`` beside their
``weights/`` folder, or an Ultralytics checkpoint's ``train_args`` (``tools/run_record.py``); ``--imgsz``, the
split and, for YOLO26, the head default to the run's too. One line says which values came from where.

As Ultralytics' val, each run writes a folder, ``runs/val/exp``, then ``exp2``... (``--project``, ``--name``,
``--exist-ok``): the PR/F1/P/R curves and confusion matrices (``--plots``, on by default), ``predictions.json``
(COCO results, category = class + 1; ``--save-json``, on by default), ``metrics.json`` and, with ``--save-txt``,
``labels/<image>.txt`` (``class xc yc w h`` normalised, ``... score`` with ``--save-conf``).

A YOLO26 model is scored with its one-to-many head and NMS by default, as Ultralytics 8.4.190's val (``nms`` unset);
``--nms false`` (``nms=false``) scores its NMS-free one-to-one head's top-k (refused for YOLO11). The line
``head: ...`` says which.

Each process runs its shard of the loader (``accelerator.prepare``, batches dealt out in turn); predictions are
gathered and the main process computes the metrics, so the numbers do not depend on the number of processes as
long as the per-process batch (``--batch / processes``) is the same (it fixes the rect batch shapes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from yolo11.arguments import ArgumentParser
from yolo11.preflight import parse_tool_args
from yolo11.run_folders import numbered_dir
from yolo11.tools import RUN_WEIGHTS_HELP, add_nms_flag, cli, threshold_value

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
    parser.add_argument("weights", help=RUN_WEIGHTS_HELP)
    parser.add_argument("--data", default=None, help="source: data YAML, COCO json, save_to_disk folder, Hub id "
                                                     "(default: the data the weights were trained on)")
    parser.add_argument("--split", default=None, help="dataset split (val falls back to validation, valid, test; "
                                                      "default: the split the run validated on, else val)")
    parser.add_argument("--images", default=None, help="image folder of a COCO json source ({split}: the split)")
    parser.add_argument("--bbox-format", default=None, choices=BBOX_FORMATS,
                        help="how a Hub dataset or folder stores boxes (auto, the default: read from the boxes)")
    parser.add_argument("--single-cls", action=argparse.BooleanOptionalAction, default=None,
                        help="score every class as one, 'item' (default: as the run trained)")
    parser.add_argument("--cache-dir", default=None, help="where converted datasets are cached")
    parser.add_argument("--imgsz", type=int, default=None,
                        help="letterboxed input size in pixels (default: the training size, else 640)")
    parser.add_argument("--batch", type=int, default=16, help="global batch size (split over processes)")
    parser.add_argument("--workers", type=int, default=2, help="data loader workers per process")
    parser.add_argument("--rect", action=argparse.BooleanOptionalAction, default=True,
                        help="batches of similar aspect ratio, each letterboxed to its own shape (Ultralytics' val)")
    parser.add_argument("--conf", type=threshold_value, default=0.001, help="score threshold before NMS")
    parser.add_argument("--iou", type=threshold_value, default=0.7, help="NMS IoU threshold")
    parser.add_argument("--max-det", type=int, default=300, help="detections kept per image")
    parser.add_argument("--backend", default="fast", choices=BACKENDS,
                        help="fast: our torch evaluator, pycocotools' numbers; or the library itself")
    parser.add_argument("--project", type=Path, default=Path("runs/val"), help="parent of the run folder")
    parser.add_argument("--name", default="exp", help="run folder under --project (exp2, exp3... when it exists)")
    parser.add_argument("--exist-ok", action="store_true", help="write into --project/--name even if it exists")
    parser.add_argument("--plots", action=argparse.BooleanOptionalAction, default=True,
                        help="the PR/F1/P/R curves and confusion matrices in the run folder (Ultralytics' names)")
    parser.add_argument("--save-json", action=argparse.BooleanOptionalAction, default=True,
                        help="predictions.json in the run folder: COCO results (category = class + 1)")
    parser.add_argument("--save-txt", action="store_true", help="labels/<image>.txt: class xc yc w h, normalised")
    parser.add_argument("--save-conf", action="store_true", help="end each --save-txt line with the score")
    parser.add_argument("--json", type=Path, default=None, help="also write the metrics here")
    parser.add_argument("--predictions-json", type=Path, default=None,
                        help="also write the predictions here as COCO results (category = class + 1)")
    parser.add_argument("--plots-dir", type=Path, default=None,
                        help="also write the curves and confusion matrices here")
    add_nms_flag(parser)
    return parse_tool_args(parser, argv, {"model": "weights"})


def fit_max_det(max_det: int, source: DetectionSource, split: str, say: bool, flag: str = "--max-det") -> int:
    """``max_det`` for ``source``'s images (``postprocess.max_det_for_data``: the default raised where an image
    holds more objects), its line printed where ``say`` (the main process)."""
    from yolo11.data import most_objects
    from yolo11.postprocess import max_det_for_data

    max_det, note = max_det_for_data(max_det, {split: most_objects(source.dataset)}, flag=flag)
    if note and say:
        print(note, file=sys.stderr)
    return max_det


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
    from yolo11.data.collate import INFERENCE_CHANNELS_LAST_DEVICES
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
    channels_last = accelerator.device.type in INFERENCE_CHANNELS_LAST_DEVICES
    model = model.to(accelerator.device).eval()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    step = None
    if getattr(model, "exported", False):  # an ONNX graph (tools/onnx_model.py): its output0 goes to the postprocessor

        def step(images: torch.Tensor, boxes: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, None]:
            return model(images), None

    result = predict_and_score(accelerator, model, accelerator.prepare(loader), postprocessor, evaluator,
                               channels_last=channels_last, step=step)
    return result.metrics, result.predictions, evaluator.ground_truth


def run_settings(model: nn.Module, imgsz: int, rect: bool, nms: bool | None) -> tuple[int, bool, bool, str | None]:
    """``(imgsz, rect, end2end, note)`` that ``model`` validates with: an ONNX export's size, rect and head are
    those it was exported with (``note`` says where they differ from the asked), our model's head as ``nms``
    picks it."""
    from yolo11.postprocess import select_head

    if getattr(model, "exported", False):
        imgsz, rect, note = model.input_settings(imgsz, rect)
        return imgsz, rect, model.select_head(nms), note
    return imgsz, rect, select_head(model.config["name"], model.end2end, nms), None


def names_differ(weights: list[str] | None, data: list[str]) -> str:
    """The first class the weights and the data name differently (``"class 0: 'cat' in the weights, 'dog' in the
    data"``), else ``""``; weights without names of their own (class ids, ``class_N``) name nothing."""
    if not weights or all(re.fullmatch(r"(class_)?\d+", name) for name in weights):
        return ""
    index = next((i for i, (ours, theirs) in enumerate(zip(weights, data, strict=False)) if ours != theirs), None)
    return "" if index is None else f"class {index}: {weights[index]!r} in the weights, {data[index]!r} in the data"


def validation_source(data: str, split: str, *, cache_dir: str | None, images: str | None, bbox_format: str,
                      single_cls: bool, split_flag: str) -> DetectionSource:
    """The split to validate on (``load_source`` with the validation fallbacks), every class as one where the run
    trained so (``single_cls``): ``yolo11 val``'s and the API's."""
    from yolo11.data import load_source
    from yolo11.data.schema import single_class
    from yolo11.data.sources import VAL_FALLBACKS

    source = load_source(data, split=split, cache_dir=cache_dir, images=images, bbox_format=bbox_format,
                         fallback_splits=VAL_FALLBACKS, split_flag=split_flag)
    return single_class(source) if single_cls else source


def _classes(names: list[str] | None, count: int, limit: int = 4) -> str:
    listed = f" ({', '.join(names[:limit])}{', ...' if len(names) > limit else ''})" if names else ""
    return f"{count} class{'es' * (count != 1)}{listed}"


# Printed with the metrics: where the numbers come from, and why Ultralytics' val prints others for the same boxes.
METRICS_NOTE = ("mAP: COCO's, as pycocotools computes it (precision read at 101 recall points, detections matched "
                "greedily by score); Ultralytics' val matches by IoU and integrates a linearly interpolated PR "
                "curve, so on a small dataset its mAP can differ by a point or more")


def load_model(ref: str, device: torch.device | None = None) -> nn.Module:
    """Our model (fused) from weights, or an ``.onnx`` export run by onnxruntime (``tools/onnx_model.py``)."""
    from yolo11.tools.onnx_model import OnnxModel, is_onnx
    from yolo11.weights import load_weights

    return OnnxModel(ref, device) if is_onnx(ref) else load_weights(ref).fuse()


def resolve_settings(args: argparse.Namespace) -> tuple[dict, str | None]:
    """The data, split, image folder, box format, imgsz and head to validate with: the arguments given, else
    those recorded for the weights' training (``tools/run_record.py``), else the defaults; and the line saying
    which came from the record. Raises when no data is known, or the recorded data is not on this machine."""
    from yolo11.preflight import resolve_data
    from yolo11.tools.run_record import settings_line, trained_with

    record = trained_with(args.weights)
    if record.nms:  # training validated with NMS, the default: nothing to say
        record = dataclasses.replace(record, nms=None)
    if args.data is not None:  # the split, image folder and box format recorded belong to the recorded data
        record = dataclasses.replace(record, split=None, images=None, bbox_format=None)
    taken, settings = {}, {}
    for name, given, default in (("data", args.data, None), ("imgsz", args.imgsz, 640), ("nms", args.nms, None),
                                 ("split", args.split, "val"), ("images", args.images, None),
                                 ("bbox_format", args.bbox_format, "auto"), ("single_cls", args.single_cls, False)):
        settings[name], recorded = record.pick(name, given, default)
        if recorded and (name in ("data", "imgsz", "nms") or settings[name] != default):
            taken[name] = settings[name]
    if settings["data"] is None:
        raise ValueError(f"--data (data=) is needed: {args.weights} records no training data (a run's config.yaml "
                         f"beside its weights/ folder, or an Ultralytics checkpoint's train_args)")
    if "data" in taken:
        try:
            settings["data"], _ = resolve_data(settings["data"])
        except FileNotFoundError:
            raise FileNotFoundError(f"{args.weights} was trained on {settings['data']} ({record.origin}), which is "
                                    "not on this machine: pass data=...") from None
    return settings, settings_line(taken, record, args.weights)


def output_folder(args: argparse.Namespace) -> Path:
    """``--project/--name``, numbered (exp2, exp3...) unless ``--exist-ok``: Ultralytics' ``runs/detect/val``."""
    return numbered_dir(args.project / args.name, args.exist_ok)


def write_labels(folder: Path, predictions: list[tuple[int, torch.Tensor]], dataset, save_conf: bool) -> int:
    """``labels/<image stem>.txt`` per validated image with detections (Ultralytics' val ``save_txt``, which writes
    none for an image without): ``yolo11.predictor.yolo_txt_lines``. Returns the number of files."""
    from yolo11.predictor import yolo_txt_lines

    rows = {int(row["image_id"]): row for row in dataset.select_columns(["image_id", "image", "width", "height"])}
    (folder / "labels").mkdir(parents=True, exist_ok=True)
    written = 0
    for image_id, det in predictions:
        row = rows[image_id]
        path = (row["image"] or {}).get("path")
        stem = Path(path).stem if path else str(image_id)
        lines = yolo_txt_lines(det[:, :4].tolist(), det[:, 4].tolist(), det[:, 5].tolist(),
                               (row["height"], row["width"]), save_conf)
        if lines:
            (folder / "labels" / f"{stem}.txt").write_text("".join(f"{line}\n" for line in lines))
            written += 1
    return written


@cli
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings, record_line = resolve_settings(args)
    from accelerate import Accelerator, DataLoaderConfiguration

    from yolo11.engine.process_group import launch_state, share_gpu_note
    from yolo11.evaluation.table import format_table
    from yolo11.postprocess import head_line

    sharing = share_gpu_note(launch_state())  # the process group's timeout, YOLO11_SHARE_GPU
    # No even_batches padding: a rect batch padded with images of the first batch would mix letterbox shapes, and
    # ranks with one batch fewer are fine here (the only collective is the gather after the loop).
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(even_batches=False))
    if accelerator.is_main_process and record_line:
        print(record_line, file=sys.stderr)
    if accelerator.is_main_process and sharing:
        print(sharing, file=sys.stderr)
    model = load_model(args.weights, accelerator.device)  # before the data: a wrong path fails at once
    imgsz, rect, end2end, note = run_settings(model, settings["imgsz"], args.rect, settings["nms"])
    if note and accelerator.is_main_process:
        print(note, file=sys.stderr)
    source = validation_source(settings["data"], settings["split"], cache_dir=args.cache_dir,
                               images=settings["images"], bbox_format=settings["bbox_format"],
                               single_cls=settings["single_cls"], split_flag="--split")
    if model.num_classes != len(source.class_names):
        hint = "; single_cls=True scores its classes as one" if model.num_classes == 1 else ""
        raise ValueError(f"{args.weights} predicts {_classes(model.names, model.num_classes)}; --data "
                         f"{settings['data']} has {_classes(source.class_names, len(source.class_names))}{hint}")
    renamed = names_differ(model.names, source.class_names)
    if renamed and accelerator.is_main_process:
        print(f"warning: {args.weights} and --data {settings['data']} name the classes differently ({renamed}); the "
              "scores pair the weights' class ids with the data's names: right for a renamed dataset, wrong for "
              "one whose classes are listed in another order", file=sys.stderr)
    max_det = fit_max_det(args.max_det, source, settings["split"], accelerator.is_main_process)
    start = time.perf_counter()
    metrics, predictions, ground_truth = evaluate_weights(
        accelerator, model, source, imgsz=imgsz, batch=args.batch, workers=args.workers, conf=args.conf,
        iou=args.iou, max_det=max_det, rect=rect, backend=args.backend, end2end=end2end)
    if accelerator.is_main_process:
        print(head_line(model.config["name"], model.end2end, end2end))
        print(format_table(metrics, source.class_names, ground_truth))
        print(f"{len(predictions)} images in {time.perf_counter() - start:.1f} s on {accelerator.num_processes} "
              f"process(es); mAP50-95 {metrics['map50_95']:.5f} mAP50 {metrics['map50']:.5f}")
        print(METRICS_NOTE)
        write_outputs(args, metrics, predictions, source)
    accelerator.wait_for_everyone()
    return 0


def write_outputs(args: argparse.Namespace, metrics: dict, predictions: list, source: DetectionSource) -> Path:
    """The files of a validation, as Ultralytics' val writes them, and the line saying where: the ``--project/--name``
    folder (metrics.json; the plots, predictions.json and labels/ as ``--plots``, ``--save-json`` and
    ``--save-txt`` ask), ``--json``, ``--predictions-json`` and ``--plots-dir``. Returns the folder."""
    from yolo11.evaluation import plots
    from yolo11.evaluation.coco import coco_results

    folder = output_folder(args)
    folder.mkdir(parents=True, exist_ok=True)
    results = coco_results(dict(predictions))
    outputs = {folder / "metrics.json": metrics, args.json: metrics, args.predictions_json: results}
    if args.save_json:
        outputs[folder / "predictions.json"] = results
    for path, content in outputs.items():
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(content) + "\n")
    for plots_dir in ([folder] if args.plots else []) + ([args.plots_dir] if args.plots_dir else []):
        plots.save_validation_plots(plots_dir, metrics, [], source.class_names)
    labels = write_labels(folder, predictions, source.dataset, args.save_conf) if args.save_txt else 0
    print(f"Results saved to {folder}" + (f"\n{labels} label{'s' * (labels != 1)} saved to {folder / 'labels'}"
                                          if args.save_txt else ""))
    return folder


if __name__ == "__main__":
    from yolo11.program_exit import exit_process

    exit_process(main())
