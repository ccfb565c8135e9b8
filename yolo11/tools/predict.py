"""Detect objects in images: drawn PNGs, a JSON of all detections and, optionally, YOLO txt files.

    yolo11-predict weights/best.safetensors photos/ --output runs/predict
    yolo11-predict yolo11n.pt bus.jpg zidane.jpg --conf 0.25 --save-txt

Each image is letterboxed as Ultralytics' predict does (long side scaled to ``--imgsz``, centred, grey 114
padding only up to a multiple of 32; ``--no-rect``: padded to a square), detected, and the boxes are mapped back to
its original pixels. Outputs in ``--output``: ``<stem>.png`` (boxes drawn),
``predictions.json`` (``[{"file", "width", "height", "detections": [{"box": [x1, y1, x2, y2] px, "score",
"class", "name"}]}]``) and with ``--save-txt`` ``labels/<stem>.txt`` lines ``class xc yc w h score`` (normalised).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np
import torch
import yaml

from yolo11.data.transforms import LetterBox
from yolo11.evaluation.plots import draw_detections
from yolo11.geometry import MAX_STRIDE, rect_input_size
from yolo11.postprocess import Postprocessor
from yolo11.tools import cli
from yolo11.weights import load_weights

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}


def list_images(inputs: Sequence[str | Path]) -> list[Path]:
    """Image files among ``inputs`` (files, or folders searched non-recursively), sorted per folder."""
    files: list[Path] = []
    for item in map(Path, inputs):
        if item.is_dir():
            files.extend(sorted(p for p in item.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES))
        elif item.is_file():
            files.append(item)
        else:
            raise FileNotFoundError(f"no such image or folder: {item}")
    if not files:
        raise FileNotFoundError(f"no images in {[str(i) for i in inputs]}")
    return files


def letterbox(image: np.ndarray, imgsz: int, rect: bool = False) -> tuple[np.ndarray, tuple[float, float, int, int]]:
    """Resize (H, W, 3) uint8 to fit ``imgsz`` x ``imgsz`` keeping the aspect ratio and pad with grey, to the square
    or, with ``rect``, only up to a multiple of 32 (``rect_input_size``); returns the image and
    ``(gain_h, gain_w, pad_top, pad_left)`` (``yolo11.geometry.letterbox_params``)."""
    shape = rect_input_size(image.shape[:2], imgsz) if rect else (imgsz, imgsz)
    no_boxes = {"boxes": np.zeros((0, 4), np.float32), "labels": np.zeros(0, np.int64)}
    image, target = LetterBox(shape)(image, no_boxes)
    gain_h, gain_w, top, left = target["letterbox"]
    return image, (gain_h, gain_w, int(top), int(left))


def read_rgb(path: Path) -> np.ndarray:
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise ValueError(f"cannot read image {path}")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def class_names_for(weights: Path, num_classes: int, names: str | None,
                    model_names: list[str] | None = None) -> list[str]:
    """``--names`` (comma list or a data YAML with ``names``), else the model's, else an Ultralytics checkpoint's
    names, else ids."""
    if not names and model_names:
        listed = list(model_names)
    elif names:
        path = Path(names)
        if path.suffix in (".yaml", ".yml") and path.is_file():
            listed = yaml.safe_load(path.read_text())["names"]
            listed = [listed[k] for k in sorted(listed)] if isinstance(listed, dict) else list(listed)
        else:
            listed = [n.strip() for n in names.split(",")]
    elif Path(weights).suffix == ".pt" and Path(weights).is_file():
        from yolo11.weights.ultralytics import read_checkpoint

        checkpoint = read_checkpoint(weights)
        stored = getattr(checkpoint.get("ema") or checkpoint.get("model"), "names", None) or {}
        listed = [stored[k] for k in sorted(stored)] if isinstance(stored, dict) else list(stored)
    else:
        listed = []
    if not listed:
        return [str(i) for i in range(num_classes)]
    if len(listed) != num_classes:
        raise ValueError(f"{len(listed)} class names for a model of {num_classes} classes")
    return listed


@torch.no_grad()
def predict_images(model: torch.nn.Module, files: list[Path], imgsz: int, postprocessor: Postprocessor,
                   batch: int = 8, device: torch.device | str = "cpu",
                   rect: bool = True) -> list[tuple[np.ndarray, torch.Tensor]]:
    """Per file: the RGB image and its ``(n, 6)`` detections ``[x1, y1, x2, y2, score, class]`` in its pixels.

    ``rect``: each image gets its own smallest input shape; the images of a chunk of ``batch`` that share a
    shape go through the model together.
    """
    model = model.to(device).eval()
    results = []
    for start in range(0, len(files), batch):
        originals = [read_rgb(path) for path in files[start:start + batch]]
        boxed = [letterbox(image, imgsz, rect) for image in originals]
        detections: list[torch.Tensor | None] = [None] * len(boxed)
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, (image, _) in enumerate(boxed):
            groups.setdefault(image.shape, []).append(i)
        for members in groups.values():
            # uint8 on the device (a quarter of float32's transfer); the model scales it to [0, 1]
            images = torch.from_numpy(np.stack([boxed[i][0] for i in members])).permute(0, 3, 1, 2).to(device)
            ratio_pad = torch.tensor([boxed[i][1] for i in members], dtype=torch.float32)
            sizes = torch.tensor([originals[i].shape[:2] for i in members])
            feats = [f.cpu() for f in model(images)]
            for i, det in zip(members, postprocessor(feats, ratio_pad, sizes), strict=True):
                detections[i] = det
        results.extend(zip(originals, detections, strict=True))
    return results


def yolo_txt_lines(det: torch.Tensor, width: int, height: int) -> list[str]:
    """``class xc yc w h score`` lines, coordinates normalised by the image size."""
    lines = []
    for x1, y1, x2, y2, score, cls in det.tolist():
        xc, yc, w, h = (x1 + x2) / 2 / width, (y1 + y2) / 2 / height, (x2 - x1) / width, (y2 - y1) / height
        lines.append(f"{int(cls)} {xc:.6f} {yc:.6f} {w:.6f} {h:.6f} {score:.5f}")
    return lines


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("weights", help="our .safetensors file or folder, an Ultralytics .pt, hf://owner/repo/file, "
                                        "a Hub repo owner/name, or yolo11n.pt ... yolo11x.pt")
    parser.add_argument("sources", nargs="+", help="image files and/or folders of images")
    parser.add_argument("--output", type=Path, default=Path("runs/predict"), help="output folder")
    parser.add_argument("--imgsz", type=int, default=640, help="letterboxed input size in pixels (multiple of 32)")
    parser.add_argument("--conf", type=float, default=0.25, help="score threshold")
    parser.add_argument("--iou", type=float, default=0.7, help="NMS IoU threshold")
    parser.add_argument("--max-det", type=int, default=300, help="detections kept per image")
    parser.add_argument("--rect", action=argparse.BooleanOptionalAction, default=True,
                        help="pad each image only up to a multiple of 32, as Ultralytics' predict (--no-rect: to "
                             "imgsz x imgsz)")
    parser.add_argument("--batch", type=int, default=8, help="images per forward pass (of one input shape)")
    parser.add_argument("--names", default=None, help="class names: a comma list or a data YAML")
    parser.add_argument("--save-txt", action="store_true", help="also write YOLO txt files under labels/")
    parser.add_argument("--no-draw", action="store_true", help="do not write drawn PNGs")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return parser.parse_args(argv)


@cli
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.imgsz % MAX_STRIDE:
        raise SystemExit(f"error: --imgsz must be a multiple of {MAX_STRIDE}, got {args.imgsz}")
    model = load_weights(args.weights).fuse()
    names = class_names_for(args.weights, model.num_classes, args.names, getattr(model, "names", None))
    files = list_images(args.sources)
    # Multi-label NMS is for mAP at a low threshold; a prediction shows one class per box, as Ultralytics.
    postprocessor = Postprocessor(conf=args.conf, iou=args.iou, max_det=args.max_det, multi_label=False,
                                  strides=model.strides, reg_max=model.reg_max)
    results = predict_images(model, files, args.imgsz, postprocessor, args.batch, args.device, args.rect)
    args.output.mkdir(parents=True, exist_ok=True)
    records = []
    for path, (image, det) in zip(files, results, strict=True):
        height, width = image.shape[:2]
        records.append({"file": str(path), "width": width, "height": height, "detections": [
            {"box": [round(v, 2) for v in row[:4]], "score": round(row[4], 5), "class": int(row[5]),
             "name": names[int(row[5])]} for row in det.tolist()]})
        if not args.no_draw:
            drawn = draw_detections(image, det[:, :4].numpy(), det[:, 5].numpy(), names, scores=det[:, 4].numpy())
            cv2.imwrite(str(args.output / f"{path.stem}.png"), cv2.cvtColor(drawn, cv2.COLOR_RGB2BGR))
        if args.save_txt:
            (args.output / "labels").mkdir(exist_ok=True)
            (args.output / "labels" / f"{path.stem}.txt").write_text(
                "".join(line + "\n" for line in yolo_txt_lines(det, width, height)))
    (args.output / "predictions.json").write_text(json.dumps(records, indent=1) + "\n")
    total = sum(len(r["detections"]) for r in records)
    print(f"{len(files)} images, {total} detections -> {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
