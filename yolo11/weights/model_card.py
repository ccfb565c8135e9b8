"""The model card (``README.md``) of a ``save_pretrained`` folder, in the Hugging Face Hub's conventions.

YAML front matter (``huggingface_hub.ModelCardData``): ``library_name``, ``tags``, ``pipeline_tag``, ``datasets``
(when the training data is a Hub dataset), and a ``model-index`` holding the validation metrics; then a body with
the classes, metrics, dataset, a usage snippet and the training config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import EvalResult, ModelCardData

LIBRARY_NAME = "yolo11-accelerate"
LICENSE = "apache-2.0"  # the code's (pyproject.toml); the card's License section covers Ultralytics-derived weights
TAGS = ["object-detection", "yolo", "vision", "pytorch", "safetensors"]  # + the family and the model name
# our metric keys -> the names shown on the Hub (Ultralytics' spelling)
METRIC_NAMES = {"map50_95": "mAP50-95", "map50": "mAP50", "map75": "mAP75", "precision": "precision",
                "recall": "recall"}


def hub_dataset_id(dataset: str | None) -> str | None:
    """``dataset`` when it names a Hub dataset (``cppe-5``, ``owner/name``), None for local files and synthetic."""
    if not dataset or dataset.startswith("synthetic") or Path(dataset).suffix or Path(dataset).exists():
        return None
    parts = dataset.split("/")
    return dataset if len(parts) <= 2 and all(parts) and not dataset.startswith((".", "~")) else None


def dataset_label(dataset: str | None) -> str | None:
    """What the card shows for ``--data``: a Hub id or ``synthetic`` as given, a local file or folder by its name
    only (``coco8.yaml``, not the path on the machine that trained it)."""
    if not dataset or hub_dataset_id(dataset) or dataset.startswith("synthetic"):
        return dataset
    return Path(dataset.rstrip("/")).name


def card_data(config: dict, metrics: dict | None, dataset: str | None, model_name: str) -> ModelCardData:
    hub_id, dataset = hub_dataset_id(dataset), dataset_label(dataset)
    results = [EvalResult(task_type="object-detection", dataset_type=hub_id or dataset or "unknown",
                          dataset_name=dataset or "unknown", metric_type=shown, metric_name=shown,
                          metric_value=round(float(metrics[key]), 5))
               for key, shown in METRIC_NAMES.items() if metrics and isinstance(metrics.get(key), (int, float))]
    family = config["name"][:-1]
    return ModelCardData(library_name=LIBRARY_NAME, license=LICENSE,
                         tags=[TAGS[0], family, *TAGS[1:], config["name"]],
                         pipeline_tag="object-detection",
                         datasets=[hub_id] if hub_id else None, model_name=model_name,
                         eval_results=results or None)


def render_model_card(config: dict, *, metrics: dict | None = None, dataset: str | None = None,
                      train_config: dict | None = None, repo_id: str | None = None) -> str:
    """The README text for a model with ``config`` (``model.config``: name, num_classes, backbone, names)."""
    model_name = repo_id or config["name"]
    data = card_data(config, metrics, dataset, model_name)
    names = config.get("names") or [str(k) for k in range(config["num_classes"])]
    backbone = f" with a timm `{config['backbone']}` backbone" if config.get("backbone") else ""
    reference = repo_id or "path/to/this/folder"
    family, scale = config["name"][:-1], config["name"][-1]
    title = family.upper()  # yolo26 -> YOLO26
    lines = [
        "---", data.to_yaml(), "---", "",
        f"# {model_name}", "",
        f"A {title}{scale} object detector{backbone} for {config['num_classes']} "
        f"classes, made with {LIBRARY_NAME} (the Ultralytics {title} architecture layer for layer, trained with "
        "Hugging Face Accelerate). Weights: `model.safetensors`; architecture and class names: `config.json`.", "",
        *_head_section(family, reference),
        "## Usage", "",
        f"Install {LIBRARY_NAME} (`pip install -e .` in a clone of its repository: the package and the "
        "`yolo11-*` commands), then:", "",
        "```python",
        "from yolo11.hub import from_pretrained",
        "",
        f'model = from_pretrained("{reference}").eval()  # YOLO11Detector; model.names are the class names',
        "```", "",
        "```bash",
        f"yolo11-predict {reference} images/ --output predictions/",
        f"yolo11-val {reference} --data your-data.yaml",
        f"yolo11-export {reference} --output model.onnx",
        "```", "",
        "## Classes", "",
        ", ".join(f"{k}: {name}" for k, name in enumerate(names)), "",
    ]
    if metrics:
        shown = [(label, metrics[key]) for key, label in METRIC_NAMES.items()
                 if isinstance(metrics.get(key), (int, float))]
        lines += ["## Validation metrics", "", "COCO box metrics (pycocotools' definitions) on the validation split "
                  "of the best epoch.", "", "| metric | value |", "| --- | --- |"]
        lines += [f"| {label} | {value:.4f} |" for label, value in shown] + [""]
    if dataset:
        lines += ["## Dataset", "", f"Trained on `{dataset_label(dataset)}`.", ""]
    if train_config:
        lines += ["## Training config", "", "```yaml", _yaml(_without_paths(train_config)).rstrip(), "```", ""]
    lines += ["## License", "", f"{LIBRARY_NAME} is Apache-2.0. Weights fine-tuned from Ultralytics' checkpoints "
              "(`yolo11n.pt` ...) are derived from them and come under Ultralytics' license (AGPL-3.0 or an "
              "Ultralytics Enterprise license).", ""]
    return "\n".join(lines)


def _head_section(family: str, reference: str) -> list[str]:
    """YOLO26's two heads and how the tools choose between them (YOLO11 has one head: nothing to say)."""
    if family != "yolo26":
        return []
    return ["## Heads", "",
            "YOLO26 has two detection heads on the same features (`config.json`: `\"head\": \"End2EndDetect\"`): "
            "the one-to-many head, decoded with NMS, which the tools use by default as Ultralytics 8.4.190 does for "
            "predict, val and export (its `nms` argument unset); and the one-to-one head, whose top-k detections "
            "need no NMS: `--nms false` on the command line, `Detector.from_pretrained(..., nms=False)` in Python "
            "(Ultralytics' `nms=False`).", "",
            "```bash",
            f"yolo11-predict {reference} images/ --nms false   # NMS-free",
            f"yolo11-export {reference} --nms false --output model.onnx   # output0 (1, 300, 6)",
            "```", ""]


def _without_paths(train_config: dict) -> dict:
    """The config with the data and image locations shown by name, as ``dataset_label`` does."""
    data = dict(train_config.get("data", {}))
    for key in ("data", "images"):
        if isinstance(data.get(key), str):
            data[key] = dataset_label(data[key])
    return {**train_config, "data": data} if "data" in train_config else train_config


def _yaml(values: Any) -> str:
    return yaml.safe_dump(values, sort_keys=False)
