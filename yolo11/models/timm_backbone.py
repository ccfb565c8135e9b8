"""Any timm model as the YOLO11 backbone, through ``timm.create_model(..., features_only=True)``.

The levels with reductions 8, 16 and 32 are taken from ``feature_info`` (the deepest one of each, when a model
reports several). The detector then sizes the YOLO11 neck from their widths (``feature_info.channels()``) and
keeps the neck and head widths of the requested scale; the native SPPF and C2PSA are not added, since they are
part of the native backbone, not of the neck.
"""

from __future__ import annotations

import torch
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


def _create_features(name: str, pretrained: bool, out_indices: tuple[int, ...]) -> nn.Module:
    import timm

    if not pretrained:
        return timm.create_model(name, features_only=True, out_indices=out_indices)
    from huggingface_hub import constants as hub_constants

    from yolo11 import netprobe  # not yolo11.weights: its package init imports the models

    offline = netprobe.hub_offline()
    unreachable = not offline and not netprobe.hub_reachable()
    kept = hub_constants.HF_HUB_OFFLINE
    # an unanswering Hub: the cache only, at once (huggingface_hub reads this flag per request), instead of its
    # retries, about a minute of them
    hub_constants.HF_HUB_OFFLINE = kept or unreachable
    try:
        return timm.create_model(name, pretrained=True, features_only=True, out_indices=out_indices)
    except OSError as error:  # huggingface_hub's offline, not-cached and HTTP errors are all OSErrors
        reason = str(error).rstrip(".") + (" (HF_HUB_OFFLINE is set)" if offline else "") + (
            f" (the Hub did not answer within {netprobe.HUB_PROBE_TIMEOUT_S:.0f} s)" if unreachable else "")
        raise BackboneError(
            f"could not download pretrained weights for timm backbone {name!r}: {reason}. Run once with network "
            "access to fill the Hugging Face cache, or start from random weights (no --pretrained; "
            "pretrained=False) or from a file of ours (--weights; yolo11.weights.load_weights)."
        ) from None
    finally:
        hub_constants.HF_HUB_OFFLINE = kept


class TimmBackbone(nn.Module):
    """A timm feature extractor returning ``[P3, P4, P5]`` at strides 8/16/32 for ``(B, 3, H, W)`` input."""

    def __init__(self, name: str, pretrained: bool = False) -> None:
        import timm  # here, not at the top: a run with the native backbone never loads it (~2.7 s)

        super().__init__()
        # Probe the level layout without weights, then build once with only the levels we use.
        try:
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
        self.body = _create_features(name, pretrained, tuple(all_indices[i] for i in chosen))
        self.out_channels: tuple[int, ...] = tuple(self.body.feature_info.channels())
        self.reductions: tuple[int, ...] = tuple(self.body.feature_info.reduction())

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return list(self.body(x))
