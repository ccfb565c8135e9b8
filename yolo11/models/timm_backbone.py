"""Any timm model as the YOLO11 backbone, through ``timm.create_model(..., features_only=True)``.

The levels with reductions 8, 16 and 32 are taken from ``feature_info`` (the deepest one of each, when a model
reports several). The detector then sizes the YOLO11 neck from their widths (``feature_info.channels()``) and
keeps the neck and head widths of the requested scale; the native SPPF and C2PSA are not added, since they are
part of the native backbone, not of the neck.

A detector sees many input sizes (square training batches, rectangular validation batches, any image at
prediction), so the backbone is built for them and tried once on a small rectangular input: a model that accepts
``dynamic_img_size`` (Swin, the ViT family) gets it; features laid out NHWC (Swin, MambaOut) are read as NCHW;
features of another size than the input's over 8/16/32 (Inception's unpadded convolutions) are resized to it; a
model that takes only its fixed input size is refused by name. Images (RGB in ``[0, 1]``) are normalised by the
mean and std of the model's pretrained configuration, as timm's own transforms would.
"""

from __future__ import annotations

import contextlib
import math
import os
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from yolo11.architecture import STRIDES

REDUCTIONS = STRIDES  # the levels the neck reads


class BackboneError(ValueError):
    """A timm backbone that cannot serve here: unknown name, no levels at strides 8/16/32, or pretrained weights
    that cannot be downloaded."""


def select_levels(
    reductions: list[int], wanted: tuple[int, ...] = REDUCTIONS, name: str = "backbone"
) -> tuple[int, ...]:
    """Indices into ``feature_info`` of the deepest level at each wanted reduction; ValueError when one is missing."""
    indices = []
    for reduction in wanted:
        matches = [i for i, r in enumerate(reductions) if r == reduction]
        if not matches:
            raise BackboneError(
                f"{name} offers feature reductions {reductions}; YOLO11 needs levels at {list(wanted)}"
            )
        indices.append(matches[-1])
    return tuple(indices)


PROBE_SIZE = (160, 128)  # multiples of 32, rectangular: the shapes a validation batch has


@contextlib.contextmanager
def _from_the_hub(name: str, what: str | None):
    """Around a ``timm.create_model`` that reads ``what`` from the Hugging Face Hub (pretrained weights, an
    ``hf-hub:`` model's configuration; ``None``: nothing): an unanswering Hub read from the cache alone, at once,
    and a failure a ``BackboneError`` saying what to do."""
    if what is None:
        yield
        return
    from huggingface_hub import constants as hub_constants

    from yolo11 import netprobe  # not yolo11.weights: its package init imports the models

    offline = netprobe.hub_offline()
    unreachable = not offline and not netprobe.hub_reachable()
    kept = hub_constants.HF_HUB_OFFLINE
    # an unanswering Hub: the cache only, at once (huggingface_hub reads this flag per request), instead of its
    # retries, about a minute of them
    hub_constants.HF_HUB_OFFLINE = kept or unreachable
    try:
        yield
    except OSError as error:  # huggingface_hub's offline, not-cached and HTTP errors are all OSErrors
        reason = str(error).rstrip(".") + (" (HF_HUB_OFFLINE is set)" if offline else "") + (
            f" (the Hub did not answer within {netprobe.HUB_PROBE_TIMEOUT_S:.0f} s)" if unreachable else "")
        instead = ("start from random weights (no --pretrained; pretrained=False) or from a file of ours (--weights; "
                   "yolo11.weights.load_weights)" if what == "pretrained weights" else "name a model timm has locally")
        raise BackboneError(
            f"could not download {what} for timm backbone {name!r}: {reason}. Run once with network access to fill "
            f"the Hugging Face cache, or {instead}."
        ) from None
    finally:
        hub_constants.HF_HUB_OFFLINE = kept


class TimmBackbone(nn.Module):
    """A timm feature extractor returning ``[P3, P4, P5]`` at strides 8/16/32 for ``(B, 3, H, W)`` input."""

    def __init__(self, name: str, pretrained: bool = False) -> None:
        import timm  # here, not at the top: a run with the native backbone never loads it (~2.7 s)

        super().__init__()
        # Probe the level layout without weights, then build once with only the levels we use.
        options = {"dynamic_img_size": True}  # any input size for the models that offer it (Swin, ViT)
        on_the_hub = name.startswith(("hf-hub:", "hf_hub:"))  # its configuration too is read from the Hub
        try:
            with _from_the_hub(name, "the configuration" if on_the_hub else None):
                try:
                    probe = timm.create_model(name, pretrained=False, features_only=True, **options)
                except TypeError:  # no such option: it takes any size already, or the probe below says not
                    options = {}
                    probe = timm.create_model(name, pretrained=False, features_only=True)
        except RuntimeError as error:
            if not str(error).startswith("Unknown model"):
                raise
            close = timm.list_models(f"*{name.split('.')[0][:12]}*")[:8]
            hint = f"similar names: {', '.join(close)}" if close else "timm.list_models('*pattern*') lists them"
            raise BackboneError(f"timm has no model {name!r}; {hint}") from None
        all_indices = tuple(probe.feature_info.out_indices)
        chosen = select_levels(probe.feature_info.reduction(), name=f"timm model {name!r}")
        del probe
        with _from_the_hub(name, "pretrained weights" if pretrained else "the configuration" if on_the_hub else None):
            self.body = timm.create_model(name, pretrained=pretrained, features_only=True,
                                          out_indices=tuple(all_indices[i] for i in chosen), **options)
        self.out_channels: tuple[int, ...] = tuple(self.body.feature_info.channels())
        self.reductions: tuple[int, ...] = tuple(self.body.feature_info.reduction())
        # The input as the model was pretrained on it (ImageNet's mean and std for most; identity for ours), whether
        # or not these weights are loaded: a file saved from a pretrained run rebuilds without them, and must compute
        # the same. Not in the state dict: a property of the architecture.
        config = getattr(self.body, "pretrained_cfg", None) or {}
        mean, std = config.get("mean", (0.0,) * 3), config.get("std", (1.0,) * 3)
        if len(mean) != 3 or len(std) != 3:  # a one-channel model's statistics: leave the RGB input as it is
            mean, std = (0.0,) * 3, (1.0,) * 3
        self.register_buffer("mean", torch.tensor(mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("inv_std", 1 / torch.tensor(std).view(1, 3, 1, 1), persistent=False)
        self.channels_last_output = getattr(self.body, "output_fmt", "NCHW") == "NHWC"  # timm.layers.Format: a str
        self.resize = False  # read by the probe's forward
        self.resize = self._probe_sizes(name)

    def _probe_sizes(self, name: str) -> bool:
        """Run one small rectangular batch; True when the features need resizing to the input's size over the
        strides. A model that fails on it serves no detector: BackboneError naming it and timm's reason."""
        training = self.body.training
        self.body.eval()  # no BatchNorm statistics from a probe
        try:
            with torch.no_grad():
                features = self(torch.zeros(1, 3, *PROBE_SIZE))
        except Exception as error:  # timm's fixed-size asserts, window sizes, position embeddings: any of them
            frames = traceback.extract_tb(error.__traceback__)  # a bare assert says nothing else: name timm's line
            where = next((f for f in reversed(frames) if f"{os.sep}timm{os.sep}" in f.filename), frames[-1])
            reason = str(error)[:200] or f"{Path(where.filename).name}:{where.lineno}: {where.line}"
            raise BackboneError(
                f"timm model {name!r} fails on a {PROBE_SIZE[0]}x{PROBE_SIZE[1]} input ({type(error).__name__}: "
                f"{reason}); a detector needs a backbone that takes any size, multiples of 32"
            ) from None
        finally:
            self.body.train(training)
        expected = [tuple(math.ceil(side / r) for side in PROBE_SIZE) for r in REDUCTIONS]
        sizes = [tuple(f.shape[-2:]) for f in features]
        for got, width in zip(features, self.out_channels):
            if got.shape[1] != width:
                raise BackboneError(f"timm model {name!r} gives features of {got.shape[1]} channels where its "
                                    f"feature_info says {width}")
        return sizes != expected

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        features = list(self.body((x - self.mean) * self.inv_std))
        if self.channels_last_output:
            features = [f.permute(0, 3, 1, 2) for f in features]  # a view: NCHW indexing, channels_last memory
        if self.resize:  # the head's anchor grid and the neck's concatenations need exactly ceil(side / stride)
            # ceil(side / r) as the shape of a strided view, not Python arithmetic: an ONNX export traces it as the
            # input's shape, so a --dynamic graph resizes to each input's size instead of the export's
            features = [F.interpolate(f, size=x[..., ::r, ::r].shape[-2:], mode="bilinear", align_corners=False)
                        for f, r in zip(features, REDUCTIONS)]
        return features
