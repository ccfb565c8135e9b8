"""Record Ultralytics 8.4.190's YOLO26 outputs and end-to-end loss for the parity tests that run without it.

Needs Ultralytics importable, never our package, so the recorded numbers are Ultralytics' own:

    YOLO_OFFLINE=1 PYTHONPATH=/work/ultra python tests/helpers/make_ultralytics_yolo26_reference.py

Writes ``tests/data/ultralytics_yolo26_cases.npz``:
- ``model/*``: a yolo26n with 5 classes whose every tensor is ``seeded_tensor(key, ...)`` (a function of the
  Ultralytics key alone, so the test rebuilds the same weights in our model through the key mapping), float64, on
  ``seeded_images()``: eval-mode raw boxes/scores of both branches, the decoded one-to-many output (NMS input), the
  end-to-end ``(B, k, 6)`` output, train-mode raw outputs, and the gradients of ``GRAD_KEYS`` for a seeded weighted
  sum of the train-mode outputs.
- ``loss/<case>/<seed>/<epoch>/*``: ``E2ELoss`` (epochs 10) on ``random_maps`` of both branches and ``CASES``'
  targets: the loss and its items, and for ``GRADS_FOR`` the gradient of the loss with respect to every map.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

OUT = Path(__file__).resolve().parents[1] / "data" / "ultralytics_yolo26_cases.npz"
NUM_CLASSES = 5
IMAGE_SHAPE = (2, 3, 64, 96)
# small tensors along the whole path: stem, SPPF, layer 22's attention, both head branches
GRAD_KEYS = ("model.0.conv.weight", "model.9.cv2.bn.bias", "model.22.m.0.1.attn.pe.bn.weight",
             "model.23.cv2.0.2.weight", "model.23.one2one_cv3.2.2.bias")
# Loss cases: targets per image as (class, x1, y1, x2, y2) in input pixels of a HEIGHT x WIDTH input.
HEIGHT, WIDTH = 128, 96
CASES = {
    "ordinary": [[(0, 10, 12, 60, 70), (2, 40, 50, 90, 120)], [(1, 5, 5, 30, 40)]],
    "tiny": [[(3, 20, 20, 23, 26), (1, 50, 60, 50.5, 60.5)], [(0, 70, 100, 74, 101)]],
    "border": [[(0, 0, 0, 30, 128), (1, 60, 100, 96, 128)], [(2, 0, 0, 96, 128)]],
    "overlapping": [[(0, 10, 10, 60, 60), (1, 12, 12, 62, 62), (0, 20, 20, 50, 50), (3, 10, 10, 60, 60)],
                    [(2, 30, 30, 80, 90), (2, 31, 29, 81, 91)]],
    "one_empty_image": [[(1, 15, 25, 70, 95)], []],
    "no_boxes": [[], []],
}
LOSS_CLASSES = 4
SEEDS = (0, 1, 2)
EPOCHS = (0, 4)
GRADS_FOR = (0, 4)  # (seed, epoch) whose map gradients are kept (1.2 MB for all; the live test checks every one)


def seeded_tensor(key: str, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """float64 values for the Ultralytics tensor ``key``: BatchNorm statistics and affines in plausible ranges,
    conv weights ~ N(0, 1 / fan_in), biases ~ N(0, 0.1)."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(key.encode()))
    uniform = torch.rand(shape, generator=generator, dtype=torch.float64)
    name = key.rsplit(".", 1)[-1]
    if ".bn." in key and name in ("weight", "running_var"):
        return uniform + 0.5
    if ".bn." in key and name in ("bias", "running_mean"):
        return uniform * 0.6 - 0.3
    normal = torch.randn(shape, generator=generator, dtype=torch.float64)
    if name == "weight":
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        return normal / fan_in**0.5
    return normal * 0.1


def seeded_images(seed: int = 0) -> torch.Tensor:
    return torch.rand(IMAGE_SHAPE, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def random_maps(seed: int, num_classes: int = LOSS_CLASSES) -> list[torch.Tensor]:
    """Per-level raw maps ``(2, 4 + C, H / s, W / s)``: distances -0.2..4 cells, logits ~ N(-2, 2)."""
    generator = torch.Generator().manual_seed(seed)
    maps = []
    for stride in (8, 16, 32):
        shape = (2, 4 + num_classes, HEIGHT // stride, WIDTH // stride)
        level = torch.randn(shape, generator=generator) * 2 - 2
        level[:, :4] = torch.rand(shape[:1] + (4,) + shape[2:], generator=generator) * 4.2 - 0.2
        maps.append(level.requires_grad_(True))
    return maps


def case_batch(case: str) -> dict[str, torch.Tensor]:
    """Ultralytics' batch for ``case``: ``batch_idx``, ``cls (N, 1)`` and normalised xywh ``bboxes``."""
    rows = [(i, *box) for i, image in enumerate(CASES[case]) for box in image]
    table = torch.tensor(rows, dtype=torch.float32).view(-1, 6)
    xyxy = table[:, 2:]
    scale = torch.tensor([WIDTH, HEIGHT, WIDTH, HEIGHT], dtype=torch.float32)
    xywh = torch.cat(((xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2]), 1) / scale
    return {"batch_idx": table[:, 0], "cls": table[:, 1:2], "bboxes": xywh}


def branch_preds(maps: list[torch.Tensor]) -> dict:
    """Ultralytics' training output of one branch from per-level maps (the same tensors, so one graph)."""
    flat = torch.cat([m.view(m.shape[0], m.shape[1], -1) for m in maps], 2)
    return {"boxes": flat[:, :4], "scores": flat[:, 4:], "feats": maps}


def record_model(out: dict[str, np.ndarray]) -> None:
    from ultralytics.nn.tasks import DetectionModel

    model = DetectionModel("yolo26n.yaml", nc=NUM_CLASSES, verbose=False).double()
    state = model.state_dict()
    model.load_state_dict({k: v if k.endswith("num_batches_tracked") else seeded_tensor(k, tuple(v.shape))
                           for k, v in state.items()})
    images = seeded_images()
    model.eval()
    with torch.no_grad():
        model.end2end = False
        decoded, raw = model(images)
        model.end2end = True
        topk, _ = model(images)
    out["model/decoded"], out["model/topk"] = decoded.numpy(), topk.numpy()
    for branch in ("one2many", "one2one"):
        for part in ("boxes", "scores"):
            out[f"model/eval/{branch}/{part}"] = raw[branch][part].numpy()
    model.train()
    train = model(images)
    generator = torch.Generator().manual_seed(1)
    total = 0
    for branch in ("one2many", "one2one"):
        for part in ("boxes", "scores"):
            value = train[branch][part]
            out[f"model/train/{branch}/{part}"] = value.detach().numpy()
            total = total + (torch.rand(value.shape, generator=generator, dtype=torch.float64) * value).sum()
    total.backward()
    params = dict(model.named_parameters())
    for key in GRAD_KEYS:
        out[f"model/grad/{key}"] = params[key].grad.numpy()


def record_loss(out: dict[str, np.ndarray]) -> None:
    from ultralytics.nn.tasks import DetectionModel
    from ultralytics.utils.loss import E2ELoss

    model = DetectionModel("yolo26n.yaml", nc=LOSS_CLASSES, verbose=False)
    model.args = SimpleNamespace(box=7.5, cls=0.5, dfl=1.5, epochs=10)  # Ultralytics' default gains
    for case in CASES:
        batch = case_batch(case)
        for seed in SEEDS:
            for epoch in EPOCHS:
                criterion = E2ELoss(model)
                for _ in range(epoch):
                    criterion.update()
                many, one = random_maps(seed), random_maps(seed + 100)
                loss, items = criterion({"one2many": branch_preds(many), "one2one": branch_preds(one)}, batch)
                prefix = f"loss/{case}/{seed}/{epoch}"
                out[f"{prefix}/loss"] = loss.sum().detach().numpy()
                out[f"{prefix}/items"] = torch.stack(list(items.values())).numpy()
                if (seed, epoch) == GRADS_FOR:
                    for i, grad in enumerate(torch.autograd.grad(loss.sum(), many + one)):
                        out[f"{prefix}/grad{i}"] = grad.numpy()


def main() -> None:
    os.environ.setdefault("YOLO_OFFLINE", "1")
    out: dict[str, np.ndarray] = {}
    record_model(out)
    record_loss(out)
    np.savez_compressed(OUT, **out)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(out)} arrays)")


if __name__ == "__main__":
    main()
