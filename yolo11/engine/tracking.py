"""Experiment trackers through Accelerate (W&B, TensorBoard): names, init kwargs, images with boxes, artifacts.

Accelerate runs trackers on the main process only; every function here is a no-op on the other ranks, so the
engine can call them on all ranks.
"""

from __future__ import annotations

import importlib.util
import json
import netrc
import os
from pathlib import Path

import numpy as np
from accelerate import Accelerator

from yolo11.evaluation.plots import DRAW_CONF, draw_sample
from yolo11.netprobe import url_answers

KNOWN_TRACKERS = ("wandb", "tensorboard")
WANDB_PROBE_TIMEOUT_S = 5.0  # wandb itself retries an unreachable server for ~90 s, then aborts the run
_MODULES = {"wandb": ("wandb",), "tensorboard": ("tensorboard", "tensorboardX")}


def tracker_installed(name: str) -> bool:
    return any(importlib.util.find_spec(module) is not None for module in _MODULES[name])


def resolve_report_to(value: str | None) -> list[str]:
    """``wandb``, ``tensorboard``, ``all`` (the installed ones), ``none`` or a comma list -> tracker names.

    Unknown names raise; so does asking explicitly for a tracker that is not installed.
    """
    names = [part.strip().lower() for part in (value or "none").split(",") if part.strip()]
    if not names or names == ["none"]:
        return []
    if "all" in names:
        return [name for name in KNOWN_TRACKERS if tracker_installed(name)]
    unknown = sorted(set(names) - set(KNOWN_TRACKERS))
    if unknown or "none" in names:
        raise ValueError(f"--report-to {value!r}: unknown tracker(s) {unknown or ['none']}; "
                         f"expected a comma list of {', '.join(KNOWN_TRACKERS)}, or all, or none")
    missing = [name for name in names if not tracker_installed(name)]
    if missing:
        raise ValueError(f"--report-to {value!r}: {', '.join(missing)} is not installed")
    return list(dict.fromkeys(names))


def wandb_base_url() -> str:
    return os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")


def wandb_logged_in() -> bool:
    """True when W&B has credentials: ``WANDB_API_KEY`` or a ``wandb login`` entry in ~/.netrc."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = wandb_base_url().split("://")[-1].split("/")[0]
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def wandb_server_reachable(timeout: float = WANDB_PROBE_TIMEOUT_S) -> bool:
    """Whether the W&B server (``WANDB_BASE_URL``) answers an HTTP request within ``timeout`` seconds.

    Any HTTP status counts as an answer; an open TCP port alone does not (a proxy may accept every connection).
    The name lookup has no timeout of its own, so the request runs in a daemon thread left behind after ``timeout``.
    """
    return url_answers(wandb_base_url(), timeout)


def tracker_init_kwargs(report_to: list[str], run_dir: Path, run_name: str,
                        resume_run_id: str | None = None) -> dict:
    """``init_kwargs`` for ``Accelerator.init_trackers``.

    W&B: ``dir`` = the run folder (Accelerate does not pass its project dir to wandb), ``name``, offline mode when
    ``WANDB_MODE`` is not set and there are no credentials or the server does not answer within
    ``WANDB_PROBE_TIMEOUT_S`` (said on stdout), and ``id`` + ``resume="allow"`` to continue the run recorded in a
    checkpoint. TensorBoard writes under Accelerate's ``logging_dir``: nothing to add. Call it on the main process
    only (the one that starts the trackers).
    """
    kwargs: dict = {}
    if "wandb" in report_to:
        wandb_kwargs: dict = {"dir": str(run_dir), "name": run_name}
        if not os.environ.get("WANDB_MODE"):
            if not wandb_logged_in():
                wandb_kwargs["mode"] = "offline"
            elif not wandb_server_reachable():
                wandb_kwargs["mode"] = "offline"
                print(f"W&B: the server {wandb_base_url()} did not answer within {WANDB_PROBE_TIMEOUT_S:g} s, "
                      f"logging offline instead; upload the run later with: wandb sync "
                      f"{Path(run_dir) / 'wandb' / 'offline-run-*'}", flush=True)
        if resume_run_id:
            wandb_kwargs.update(id=resume_run_id, resume="allow")
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        kwargs["wandb"] = wandb_kwargs
    return kwargs


def active_tracker(accelerator: Accelerator, name: str):
    """The unwrapped tracker object (wandb run, SummaryWriter) on the main process, else None."""
    if not accelerator.is_main_process or name not in {t.name for t in accelerator.trackers}:
        return None
    return accelerator.get_tracker(name, unwrap=True)


def current_run_id(accelerator: Accelerator) -> str | None:
    """The W&B run id (saved in checkpoints so a resumed training continues the same run), or None."""
    run = active_tracker(accelerator, "wandb")
    return None if run is None else run.id


def _wandb_boxes(boxes: np.ndarray, classes: np.ndarray, class_names: list[str],
                 scores: np.ndarray | None) -> dict:
    box_data = []
    for i, ((x1, y1, x2, y2), cls) in enumerate(zip(boxes.tolist(), classes.astype(int).tolist(), strict=True)):
        entry = {"position": {"minX": x1, "maxX": x2, "minY": y1, "maxY": y2}, "domain": "pixel",
                 "class_id": cls, "box_caption": class_names[cls]}
        if scores is not None:
            entry["scores"] = {"conf": float(scores[i])}
            entry["box_caption"] = f"{class_names[cls]} {float(scores[i]):.2f}"
        box_data.append(entry)
    return {"box_data": box_data, "class_labels": dict(enumerate(class_names))}


def wandb_image(sample: dict, class_names: list[str], conf: float = DRAW_CONF):
    """``wandb.Image`` of a validation sample with "predictions" (score >= ``conf``) and "ground_truth" boxes.

    ``sample``: ``image`` uint8 (3, H, W), ``predictions`` (n, 6), ``boxes`` (G, 4), ``labels`` (G,), input pixels.
    """
    import wandb

    pred = np.asarray(sample["predictions"], dtype=np.float64).reshape(-1, 6)
    pred = pred[pred[:, 4] >= conf]
    boxes = {"predictions": _wandb_boxes(pred[:, :4], pred[:, 5], class_names, pred[:, 4]),
             "ground_truth": _wandb_boxes(np.asarray(sample["boxes"], dtype=np.float64).reshape(-1, 4),
                                          np.asarray(sample["labels"]), class_names, None)}
    return wandb.Image(np.asarray(sample["image"]).transpose(1, 2, 0), boxes=boxes)


def log_validation_images(accelerator: Accelerator, samples: list[dict], class_names: list[str], step: int,
                          key: str = "val/images") -> None:
    """Log validation samples: W&B images with box overlays; TensorBoard ground truth | predictions drawings."""
    if not samples:
        return
    run = active_tracker(accelerator, "wandb")
    if run is not None:
        run.log({key: [wandb_image(sample, class_names) for sample in samples]}, step=step)
    writer = active_tracker(accelerator, "tensorboard")
    if writer is not None:
        for i, sample in enumerate(samples):
            truth, predicted = draw_sample(sample, class_names)
            writer.add_image(f"{key}/{i}", np.concatenate((truth, predicted), axis=1), step, dataformats="HWC")


def weights_metadata(path: Path) -> dict:
    """The model config of a weights file (architecture, class count, class ``names``), for the artifact."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            stored = handle.metadata() or {}
    except SafetensorError:  # not ours to judge here: the file is uploaded as it is
        return {}
    return json.loads(stored["config"]) if "config" in stored else {}


def log_best_weights_artifact(accelerator: Accelerator, path: Path, name: str = "best-weights") -> None:
    """Upload ``path`` (and its JSON config beside it, if any) as a W&B artifact of type "model"."""
    run = active_tracker(accelerator, "wandb")
    if run is None:
        return
    import wandb

    path = Path(path)
    artifact = wandb.Artifact(f"{name}-{run.id}", type="model", metadata=weights_metadata(path))
    artifact.add_file(str(path))
    for sibling in (path.with_suffix(".json"), path.parent / "config.json"):
        if sibling.is_file():
            artifact.add_file(str(sibling))
    run.log_artifact(artifact, aliases=["best"])


def offline_runs(run_dir: Path) -> list[Path]:
    """Offline W&B run folders under ``run_dir`` (``<run_dir>/wandb/offline-run-*``), oldest first."""
    return sorted((Path(run_dir) / "wandb").glob("offline-run-*"))


def final_message(report_to: list[str], run_dir: Path) -> str | None:
    """The ``wandb sync`` command to upload an offline run later, or None."""
    if "wandb" not in report_to:
        return None
    runs = offline_runs(run_dir)
    if not runs:
        return None
    return f"W&B ran offline; upload the run with:\n  wandb sync {runs[-1]}"
