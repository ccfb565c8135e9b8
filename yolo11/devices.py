"""The device a model runs on, named as Ultralytics users name it (``device=0``): one rule for the predictor and
onnxruntime's providers. A leaf: torch only."""

from __future__ import annotations

import torch


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def select_device(device: str | int | torch.device | None) -> torch.device:
    """The device a user names as in Ultralytics (``device=0``, ``"0"``, ``"0,1"``: the first of them, ``"cpu"``,
    ``"CPU"``, ``"cuda:1"``, ``"mps"``); None or "" the default. ``ValueError`` naming the value for one that is
    not a device or a GPU torch does not see, where ``torch.device`` raised mid-call with a traceback."""
    if isinstance(device, torch.device):
        return device
    if device is None or (isinstance(device, str) and not device.strip()):
        return torch.device(default_device())
    text = str(device).strip().lower().replace(" ", "")
    if text.replace(",", "").isdigit():  # GPU indices; a prediction runs on one: the first
        text = f"cuda:{text.split(',')[0]}"
    try:
        chosen = torch.device(text)
    except RuntimeError:
        raise ValueError(f"device={device!r} is not a device: cpu, cuda, cuda:N, N (a GPU index) or mps") from None
    if chosen.type == "cuda" and (not torch.cuda.is_available() or (chosen.index or 0) >= torch.cuda.device_count()):
        seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
        raise ValueError(f"device={device!r}: torch sees {seen} CUDA GPU(s); use device=cpu")
    if chosen.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device={device!r}: torch sees no MPS device (Apple silicon's GPU); use device=cpu")
    if chosen.type not in ("cpu", "cuda", "mps"):  # xpu, meta...: neither the trainer nor the predictor runs there
        raise ValueError(f"device={device!r}: runs take cpu, cuda, cuda:N, N (a GPU index) or mps")
    return chosen
