"""Record Ultralytics' loss, map gradients and initial head biases for the parity tests (tests/data).

Needs Ultralytics 8.4.190 importable, never our package, so the recorded numbers are Ultralytics' own:

    pip install --no-deps --target /tmp/ultra ultralytics==8.4.190 ultralytics-thop
    YOLO_OFFLINE=1 PYTHONPATH=/tmp/ultra python tests/helpers/make_ultralytics_reference.py

Writes ``tests/data/ultralytics_loss_cases.npz``: for each seed, random raw maps (regenerated in the test from the
seed with ``random_maps``), the target rows ``[image, class, cx, cy, w, h]`` normalised to the input, Ultralytics'
``loss_items`` (box, cls, dfl) and the gradient of its returned loss (summed) with respect to each map. The targets
mix 2-8 px, 8-16 px, medium and large boxes, boxes touching the image border and overlapping pairs; the last
image of every batch has no box. Also ``ultralytics_head_bias.json``: the box and class biases of the last layer
of each Detect branch of a fresh ``yolo11n.yaml`` model for several class counts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch

IMGSZ = 128
BATCH = 3
NUM_CLASSES = 5
REG_MAX = 16
STRIDES = (8, 16, 32)
SEEDS = (0, 1, 2, 3, 4)
HEAD_BIAS_CLASSES = (1, 5, 80)
OUT = Path(__file__).resolve().parents[1] / "data"


def random_maps(seed: int, batch: int = BATCH, imgsz: int = IMGSZ,
                num_classes: int = NUM_CLASSES) -> list[torch.Tensor]:
    """The raw head maps of one case, ``(B, 4 * reg_max + nc, H / s, W / s)`` per stride; std 2 spreads the
    predicted boxes and scores widely."""
    gen = torch.Generator().manual_seed(seed)
    return [2 * torch.randn(batch, 4 * REG_MAX + num_classes, imgsz // s, imgsz // s, generator=gen) for s in STRIDES]


def random_targets(seed: int, batch: int = BATCH, imgsz: int = IMGSZ, num_classes: int = NUM_CLASSES) -> np.ndarray:
    """Rows ``[image, class, cx, cy, w, h]`` normalised; every size class, border boxes and an overlapping pair on
    each image but the last."""
    rng = np.random.default_rng(1000 + seed)
    rows = []
    for image in range(batch - 1):
        sides = [rng.uniform(2, 8, 2), rng.uniform(2, 8, 2), rng.uniform(8, 16, 2), rng.uniform(8, 16, 2),
                 [rng.uniform(2, 8), rng.uniform(8, 16)], rng.uniform(16, 48, 2), rng.uniform(48, imgsz, 2)]
        for w, h in sides:
            cx, cy = rng.uniform(w / 2, imgsz - w / 2), rng.uniform(h / 2, imgsz - h / 2)
            rows.append([image, rng.integers(num_classes), cx, cy, w, h])
        for w, h in (rng.uniform(4, 30, 2), rng.uniform(4, 30, 2)):  # touching the left/top, right/bottom borders
            rows.append([image, rng.integers(num_classes), w / 2, h / 2, w, h])
            rows.append([image, rng.integers(num_classes), imgsz - w / 2, imgsz - h / 2, w, h])
        cx, cy = rng.uniform(30, imgsz - 30, 2)
        for shift in (0.0, 3.0):  # two heavily overlapping boxes: anchors claimed by both
            rows.append([image, rng.integers(num_classes), cx + shift, cy + shift, 24.0, 20.0])
    rows = np.asarray(rows, dtype=np.float64)
    rows[:, 2:] /= imgsz
    return rows.astype(np.float32)


def ultralytics_loss(maps: list[torch.Tensor], rows: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Ultralytics' (box, cls, dfl) loss items and the gradient of its summed returned loss w.r.t. each map."""
    from types import SimpleNamespace

    from ultralytics.cfg import get_cfg
    from ultralytics.utils.loss import v8DetectionLoss

    detect = SimpleNamespace(stride=torch.tensor(STRIDES, dtype=torch.float32), nc=maps[0].shape[1] - 4 * REG_MAX,
                             reg_max=REG_MAX)
    model = SimpleNamespace(args=get_cfg(), model=[detect], parameters=lambda: iter([torch.zeros(1)]))
    criterion = v8DetectionLoss(model)
    maps = [m.clone().requires_grad_() for m in maps]
    batch_size = maps[0].shape[0]
    preds = {"boxes": torch.cat([m[:, : 4 * REG_MAX].reshape(batch_size, 4 * REG_MAX, -1) for m in maps], -1),
             "scores": torch.cat([m[:, 4 * REG_MAX:].reshape(batch_size, detect.nc, -1) for m in maps], -1),
             "feats": maps}
    targets = torch.from_numpy(rows)
    batch = {"batch_idx": targets[:, 0], "cls": targets[:, 1:2], "bboxes": targets[:, 2:]}
    loss, items = criterion(preds, batch)
    loss.sum().backward()
    items = torch.stack([items[name] for name in ("box_loss", "cls_loss", "dfl_loss")])
    return items.detach().numpy(), [m.grad.numpy() for m in maps]


def head_biases() -> dict:
    from ultralytics.nn.tasks import DetectionModel

    out = {}
    for nc in HEAD_BIAS_CLASSES:
        detect = DetectionModel("yolo11n.yaml", nc=nc, verbose=False).model[-1]
        out[str(nc)] = {"box": [branch[-1].bias.tolist() for branch in detect.cv2],
                        "cls": [branch[-1].bias.tolist() for branch in detect.cv3]}
    return out


def main() -> None:
    import ultralytics

    torch.manual_seed(0)
    arrays = {}
    for seed in SEEDS:
        rows = random_targets(seed)
        items, grads = ultralytics_loss(random_maps(seed), rows)
        arrays[f"targets_{seed}"] = rows
        arrays[f"loss_items_{seed}"] = items
        for level, grad in enumerate(grads):
            arrays[f"grad_{seed}_p{level + 3}"] = grad
    arrays["produced_by"] = np.array(f"ultralytics {ultralytics.__version__}, torch {torch.__version__}, CPU")
    np.savez_compressed(OUT / "ultralytics_loss_cases.npz", **arrays)
    biases = {"produced_by": f"ultralytics {ultralytics.__version__} DetectionModel('yolo11n.yaml', nc=...)",
              "classes": head_biases()}
    (OUT / "ultralytics_head_bias.json").write_text(json.dumps(biases) + "\n")
    print(f"wrote {OUT / 'ultralytics_loss_cases.npz'} and ultralytics_head_bias.json")


if __name__ == "__main__":
    os.environ.setdefault("YOLO_OFFLINE", "1")
    main()
