"""Initialising a model from weights of the same architecture, possibly trained for other classes.

The tensors whose shapes depend on the class count all lie in the head's class branch (``head.cv3``: its last
conv has one output per class, and its width is ``max(P3 channels, min(classes, 100))``). With the same
architecture, those are the only tensors that may differ; they keep their fresh initialisation. Anything else
that differs (another scale, another backbone) is transferred only when ``allow_partial`` is given, and every
tensor left out is named.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from yolo11.models.detector import YOLO11Detector, create_model

CLASS_BRANCH = "head.cv3."


@dataclass(frozen=True)
class TransferReport:
    transferred: list[str]
    class_dependent: list[str]  # class-branch tensors of another shape: re-initialised
    other: list[str]  # tensors missing from the weights or of another shape outside the class branch
    total: int


def _shape(tensor: torch.Tensor | None) -> str:
    return "missing" if tensor is None else "x".join(map(str, tensor.shape))


def transfer_weights(source: YOLO11Detector, target: YOLO11Detector, allow_partial: bool) -> TransferReport:
    """Copy into ``target`` every tensor of ``source`` with the same name and shape; raises ``ValueError`` when
    tensors outside the class branch differ, unless ``allow_partial``."""
    theirs, ours = source.state_dict(), target.state_dict()
    matched = {k: v for k, v in theirs.items() if k in ours and v.shape == ours[k].shape}
    differing = [k for k in ours if k not in matched]
    # the target's architecture with the weights' class count: where that has the weights' shape, only the
    # class count makes the difference
    with torch.device("meta"):
        config = {**target.config, "num_classes": source.num_classes, "names": None}
        same_classes = create_model(**config).state_dict()
    class_dependent = [k for k in differing if k.startswith(CLASS_BRANCH) and k in theirs
                       and theirs[k].shape == same_classes[k].shape]
    other = [k for k in differing if k not in class_dependent]
    report = TransferReport(sorted(matched, key=list(ours).index), class_dependent, other, len(ours))
    if other and not allow_partial:
        examples = ", ".join(f"{k} ({_shape(theirs.get(k))} in the weights, {_shape(ours[k])} in the model)"
                             for k in other[:3])
        raise ValueError(f"the weights fit {len(matched)}/{len(ours)} tensors of the model; {len(other)} outside "
                         f"the class branch differ, e.g. {examples}. Use weights of the same architecture, or add "
                         "--partial-weights true to transfer only the matching tensors")
    if not matched:
        raise ValueError("no tensor of the weights matches the model (another architecture?)")
    target.load_state_dict(matched, strict=False)
    return report


def describe_transfer(report: TransferReport, source: YOLO11Detector, target: YOLO11Detector) -> list[str]:
    """What was transferred and what was re-initialised, as printed lines."""
    lines = [f"transferred {len(report.transferred)}/{report.total} tensors"]
    if report.class_dependent:
        lines[0] += (f"; re-initialised {len(report.class_dependent)} class-dependent head tensors "
                     f"({source.num_classes} -> {target.num_classes} classes): {', '.join(report.class_dependent)}")
    if report.other:
        lines.append(f"--partial-weights: re-initialised {len(report.other)} other tensors (missing from the "
                     f"weights or of another shape): {', '.join(report.other)}")
    return lines
