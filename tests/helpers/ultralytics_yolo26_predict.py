"""Ultralytics' own YOLO26 predictions, in a subprocess of a test (its import sets global logging/settings).

    YOLO_OFFLINE=1 PYTHONPATH=<ultralytics> python tests/helpers/ultralytics_yolo26_predict.py \
        OUT.json IMGSZ CONF RECT MODEL [IMAGE ...]

MODEL ending in ``.yaml`` (``yolo26n.yaml``): a fresh Ultralytics model built from it, made to give spread-out
scores (``spread_scores``: a fresh model's are all ~1e-4 and tied by the thousand), saved as Ultralytics saves a
finished run (``save_model``'s dict with the fp16 EMA, then ``strip_optimizer``) to ``OUT.json`` with the suffix
``.pt``; any other MODEL (a ``.pt`` or an ``.onnx``) is loaded as is. Then ``YOLO(model).predict(IMAGE, imgsz,
conf, rect)`` per image with ``nms`` unset (Ultralytics' default) and, for a ``.pt``, ``nms=False``: boxes, scores
and classes per image, written to ``OUT.json`` as ``{"default" | "nms_false": [{"boxes", "scores", "classes"},
...]}``.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch


def spread_scores(model: torch.nn.Module, images: list[str], imgsz: int, seed: int) -> None:
    """BatchNorm statistics measured on ``images`` (a fresh model's 0/1 statistics leave its features nearly
    constant over the image: thousands of tied scores), the class branches' last weights scaled up and their biases
    drawn low, so
    that a few dozen detections per image score above 0.5, spread out."""
    import cv2
    import numpy as np

    arrays = [cv2.resize(cv2.imread(path)[:, :, ::-1], (imgsz, imgsz)) for path in images]
    batch = torch.from_numpy(np.stack(arrays).copy()).permute(0, 3, 1, 2).float() / 255
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.reset_running_stats()
            module.momentum = None  # the plain average over the calibration batch
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.train()(batch)
        head = model.model[-1]
        for branch, low in ((head.cv3, -8.0), (head.one2one_cv3, -10.0)):  # one-to-one scores run higher
            for level in branch:
                level[-1].weight.mul_(30)  # scores spread over the image, not set by the biases alone
                level[-1].bias.copy_(torch.rand(level[-1].bias.shape, generator=generator) * 4 + low)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.momentum = 0.03  # Ultralytics' value, as a checkpoint holds it
            # channels nearly constant over 4 images would be scaled up ~30x each (eps 1e-3): float32 rounding
            # then differs by ~1e-3 in scores between two correct implementations (and fused vs unfused)
            module.running_var.clamp_(min=0.1)
    model.eval()


def build_checkpoint(yaml_name: str, path: Path, images: list[str], imgsz: int, seed: int = 0) -> Path:
    from ultralytics.nn.tasks import DetectionModel
    from ultralytics.utils.torch_utils import strip_optimizer

    torch.manual_seed(seed)
    model = DetectionModel(yaml_name, nc=80, verbose=False)
    spread_scores(model, images, imgsz, seed)
    model.names = {k: f"class{k}" for k in range(80)}
    torch.save({"epoch": 0, "best_fitness": None, "model": None, "ema": copy.deepcopy(model).half(), "updates": 1,
                "optimizer": None, "train_args": {"model": yaml_name}, "date": "2026-12-05", "version": "8.4.190"},
               path)
    strip_optimizer(path)
    return path


def main(out: str, imgsz: str, conf: str, rect: str, model: str, *images: str) -> None:
    from ultralytics import YOLO

    if model.endswith(".yaml"):
        model = str(build_checkpoint(model, Path(out).with_suffix(".pt"), list(images), int(imgsz)))
    report = {}
    for key, nms in (("default", None), ("nms_false", False)):
        if nms is False and not model.endswith(".pt"):
            continue  # an exported graph has its head built in
        kwargs = {} if nms is None else {"nms": nms}
        detector = YOLO(model, task="detect")
        # one image per call: given a list, Ultralytics letterboxes every image to the square (its rect needs
        # one shape per batch), which is not what a single image gets
        results = [detector.predict(image, imgsz=int(imgsz), conf=float(conf), rect=rect == "rect", device="cpu",
                                    verbose=False, **kwargs)[0] for image in images]
        report[key] = [{"boxes": r.boxes.xyxy.tolist(), "scores": r.boxes.conf.tolist(),
                        "classes": r.boxes.cls.int().tolist()} for r in results]
    Path(out).write_text(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:])
