"""YOLO11 and YOLO26 models on the Hugging Face Hub: ``save_pretrained``, ``from_pretrained``, ``push_to_hub``.

A model folder in the Hub's conventions holds ``model.safetensors`` (config and class names in its metadata too),
``config.json`` (``create_model`` arguments, class names, task, strides) and ``README.md``, the model card
(YAML front matter with ``library_name``, tags, datasets and a ``model-index`` of the metrics; classes, usage,
training config; for YOLO26 its two heads and how the tools choose one).

    from yolo11.hub import from_pretrained, push_to_hub, save_pretrained
    save_pretrained(model, "my-model", metrics=metrics, dataset="cppe-5", train_config=config.to_dict())
    push_to_hub("my-model", "me/yolo11n-cppe5")          # or push_to_hub(model, "me/yolo11n-cppe5", ...)
    model = from_pretrained("me/yolo11n-cppe5")          # any reference load_weights takes
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from huggingface_hub import HfApi

from yolo11.models.detector import YOLO11Detector
from yolo11.weights import load_weights, save_pretrained
from yolo11.weights.resolve import HUB_FILES, hub_endpoint, hub_offline, hub_reachable
from yolo11.weights.safetensors_io import CONFIG_NAME, WEIGHTS_NAME

__all__ = ["from_pretrained", "push_to_hub", "save_pretrained"]


def from_pretrained(ref: str | Path, *, backbone: str | None = None) -> YOLO11Detector:
    """A ``save_pretrained`` folder, a Hub repo ``owner/name`` (or ``hf://owner/name``), or any file
    ``yolo11.weights.load_weights`` takes (through the loading gate; ``backbone``: a timm name the files may name
    even if timm would fetch it); the model is in train mode, as ``create_model`` returns it."""
    return load_weights(ref, backbone=backbone)


def push_to_hub(model_or_folder: YOLO11Detector | str | Path, repo_id: str, *, private: bool | None = None,
                token: str | None = None, commit_message: str = "Upload YOLO11 model",
                metrics: dict | None = None, dataset: str | None = None, train_config: dict | None = None) -> str:
    """Create ``repo_id`` (if needed) and upload the model folder's ``model.safetensors``, ``config.json`` and
    ``README.md``; a model is first written with ``save_pretrained`` (``metrics``, ``dataset``, ``train_config``
    go into its card). Returns the repo's URL. Raises ``ConnectionError`` at once when the Hub does not answer."""
    if hub_offline() or not hub_reachable():
        raise ConnectionError(f"cannot push to {repo_id}: the Hugging Face Hub ({hub_endpoint()}) does not answer "
                              "or HF_HUB_OFFLINE is set")
    if isinstance(model_or_folder, (str, Path)):
        return _upload(Path(model_or_folder), repo_id, private, token, commit_message)
    with tempfile.TemporaryDirectory(prefix="yolo11-hub-") as tmp:
        folder = save_pretrained(model_or_folder, tmp, metrics=metrics, dataset=dataset, train_config=train_config,
                                 repo_id=repo_id)
        return _upload(folder, repo_id, private, token, commit_message)


def _upload(folder: Path, repo_id: str, private: bool | None, token: str | None, commit_message: str) -> str:
    missing = [name for name in (WEIGHTS_NAME, CONFIG_NAME) if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{folder} is not a save_pretrained folder (no {' or '.join(missing)})")
    api = HfApi(token=token)
    url = api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    api.upload_folder(repo_id=repo_id, repo_type="model", folder_path=str(folder), allow_patterns=HUB_FILES,
                      commit_message=commit_message)
    return str(url)
