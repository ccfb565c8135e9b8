"""Run models through Ultralytics' own runtime, in a subprocess of a test (its import sets global logging/settings).

    YOLO_OFFLINE=1 PYTHONPATH=<ultralytics> python tests/helpers/ultralytics_runtime.py \
        DATA_YAML IMAGE IMGSZ OUT MODEL...

Per model: ``YOLO(model).predict(IMAGE, conf=0.05)`` boxes, scores and classes, and ``YOLO(model).val(data=DATA_YAML,
rect=False)``'s mAP50 and mAP50-95 (square inputs for every format: a static ONNX graph takes nothing else);
printed as one JSON object {model: {...}} on the last line.
"""

from __future__ import annotations

import json
import sys

from ultralytics import YOLO


def main(data: str, image: str, imgsz: str, out: str, *models: str) -> None:
    report = {}
    for path in models:
        model = YOLO(path, task="detect")
        (result,) = model.predict(image, imgsz=int(imgsz), conf=0.05, device="cpu", verbose=False)
        boxes = result.boxes
        metrics = YOLO(path, task="detect").val(data=data, imgsz=int(imgsz), batch=1, device="cpu", plots=False,
                                                rect=False, project=out, name="val", exist_ok=True, verbose=False,
                                                workers=0)
        report[path] = {"boxes": boxes.xyxy.tolist(), "scores": boxes.conf.tolist(),
                        "classes": boxes.cls.int().tolist(), "names": {int(k): v for k, v in result.names.items()},
                        "map50": float(metrics.box.map50), "map50_95": float(metrics.box.map)}
    print(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:])
