"""Whole runs as users type them, ours against Ultralytics 8.4.190, one at a time on the same GPU.

Each trainer gets only the flags a user types (data, model, epochs, batch, imgsz, seed): every other setting is
its default. Wall time runs from the command's start to its exit (imports, caching, compile or graph capture,
every epoch and validation, plots, saving). The final mAP50-95 is each trainer's own last validation
(``results.csv``); ``accuracy_parity.py`` scores both with one ruler.

    python benchmarks/user_runs.py --dataset coco128 --epochs 100 --batch 16 --imgsz 640 --seeds 0
    python benchmarks/user_runs.py --dataset generated --epochs 30 --batch 32 --imgsz 320 --seeds 0

``generated``: 2,000 train and 500 val images written once as a YOLO-format folder (the shapes of
``yolo11.data.sources.synthetic``, 1-8 objects on a textured background, 480 px JPEGs), the kind of custom dataset
a user brings. ``--variants`` picks among ultralytics, ours (README's ``accelerate launch --config_file
accelerate_configs/1gpu.yaml train_accelerate.py``, through Accelerate's own CLI, whose start imports every
``accelerate`` subcommand: timm with torchvision among them), ours-cli (``yolo11 train key=value``, one process and
no launcher, as Ultralytics' ``yolo train``), ours-cli-at-once (the same with every epoch scored before the next
one trains, ``trainer.score_beside_training`` off: the A/B of scoring beside training), ours-eager
(``--cuda-graphs false``), ours-fp16 and ours-bf16 (the launcher's ``--mixed_precision`` over the config's) and
ours-cudnn-v7 (``TORCH_CUDNN_V8_API_DISABLED=1``: cuDNN's older convolution API, whose
algorithm choice per new shape is a lookup rather than a plan build).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def generated_dataset(root: Path, train: int = 2000, val: int = 500, imgsz: int = 480) -> Path:
    import cv2
    import numpy as np

    from yolo11.data.sources.synthetic import SHAPES, SyntheticOptions, synthetic_image

    yaml_path = root / "data.yaml"
    if yaml_path.is_file():
        return yaml_path
    options = SyntheticOptions(num_images=train, num_val=val, imgsz=imgsz, max_objects=8, min_size=0.08,
                               max_size=0.35)
    for split, count, seed in (("train", train, 0), ("val", val, 1_000_003)):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        for index in range(count):
            image, boxes, classes = synthetic_image(np.random.default_rng([seed, index]), options)
            cv2.imwrite(str(root / "images" / split / f"{index:06d}.jpg"), image, [cv2.IMWRITE_JPEG_QUALITY, 92])
            lines = [f"{c} {(b[0] + b[2]) / 2 / imgsz:.6f} {(b[1] + b[3]) / 2 / imgsz:.6f} "
                     f"{(b[2] - b[0]) / imgsz:.6f} {(b[3] - b[1]) / imgsz:.6f}" for b, c in zip(boxes, classes)]
            (root / "labels" / split / f"{index:06d}.txt").write_text("\n".join(lines) + "\n")
    names = "\n".join(f"  {i}: {name}" for i, name in enumerate(SHAPES))
    yaml_path.write_text(f"path: {root.resolve()}\ntrain: images/train\nval: images/val\nnames:\n{names}\n")
    return yaml_path


def data_yaml(args) -> Path:
    if args.dataset == "generated":
        return generated_dataset(args.out / "generated")
    from accuracy_parity import absolute_data_yaml

    path = Path(args.dataset)
    if not path.suffix:  # a name: the shared samples beside the checkout
        path = ROOT.parent / "shared" / "data" / f"{args.dataset}.yaml"
    return absolute_data_yaml(path, args.out)


def command(args, variant: str, data: Path, seed: int) -> tuple[list[str], Path]:
    name = f"{variant}_seed{seed}"
    if variant == "ultralytics":
        train = dict(data=str(data), epochs=args.epochs, batch=args.batch, imgsz=args.imgsz, seed=seed,
                     project=str(args.out.resolve()), name=name, exist_ok=True)
        script = f"from ultralytics import YOLO; YOLO({args.model + '.yaml'!r}).train(**{train!r})"
        return [sys.executable, "-c", script], args.out / name / "results.csv"
    if variant in ("ours-cli", "ours-cli-at-once"):
        keys = dict(data=data, model=args.model, epochs=args.epochs, batch=args.batch, imgsz=args.imgsz, seed=seed,
                    project=args.out, name=name, exist_ok="true")
        keys = [f"{k}={v}" for k, v in keys.items()]
        if variant == "ours-cli":
            return [sys.executable, "-m", "yolo11.cli", "train", *keys], args.out / name / "results.csv"
        # every epoch scored before the next one trains (trainer.score_beside_training off): its A/B partner
        script = ("import sys; from yolo11.engine import trainer; trainer.score_beside_training = lambda *a: False; "
                  "from yolo11.cli import main; from yolo11.program_exit import exit_process; "
                  "exit_process(main(sys.argv[1:]))")
        return [sys.executable, "-c", script, "train", *keys], args.out / name / "results.csv"
    flags = ["--cuda-graphs", "false"] if variant == "ours-eager" else []
    # ours-fp16 / ours-bf16: the launcher's --mixed_precision over the config's
    precision = ["--mixed_precision", variant[5:]] if variant in ("ours-fp16", "ours-bf16") else []
    # the `accelerate` console script is this module's main(): the same imports, wherever the script lies
    return ([sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", *precision, "--config_file",
             str(ROOT / "accelerate_configs" / "1gpu.yaml"), str(ROOT / "train_accelerate.py"), "--model", args.model,
             "--data", str(data), "--epochs", str(args.epochs), "--batch-size", str(args.batch), "--imgsz",
             str(args.imgsz), "--seed", str(seed), "--output-dir", str(args.out), "--name", name, "--exist-ok", "true",
             *flags], args.out / name / "results.csv")


def final_map(results_csv: Path) -> float | None:
    if not results_csv.is_file():
        return None
    rows = list(csv.DictReader(results_csv.open()))
    if not rows:
        return None
    row = {k.strip(): v for k, v in rows[-1].items()}
    for key in ("metrics/mAP50-95(B)", "mAP50-95", "map50_95", "metrics/mAP50-95"):
        if key in row:
            return float(row[key])
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="coco128",
                        help="coco128, coco8 (../shared/data), a data YAML, or generated")
    parser.add_argument("--variants", nargs="+", default=["ultralytics", "ours"],
                        choices=["ultralytics", "ours", "ours-cli", "ours-cli-at-once", "ours-eager", "ours-cudnn-v7",
                                 "ours-fp16", "ours-bf16"])
    parser.add_argument("--model", default="yolo11n")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--out", type=Path, default=Path("runs/user_runs"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("YOLO_OFFLINE", "1")
    data = data_yaml(args)
    results = []
    for seed in args.seeds:
        for variant in args.variants:
            cmd, results_csv = command(args, variant, data, seed)
            log = args.out / f"{Path(args.dataset).stem}_{variant}_seed{seed}.log"
            started = time.perf_counter()
            with log.open("w") as f:
                env = dict(os.environ, TORCH_CUDNN_V8_API_DISABLED="1") if variant == "ours-cudnn-v7" else None
                rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=env).returncode
            wall = time.perf_counter() - started
            row = {"dataset": args.dataset, "variant": variant, "seed": seed, "rc": rc, "wall_s": round(wall, 1),
                   "final_map50_95": final_map(results_csv)}
            results.append(row)
            print(json.dumps(row), flush=True)
    (args.out / f"{Path(args.dataset).stem}_summary.json").write_text(json.dumps(results, indent=1) + "\n")
    return 1 if any(r["rc"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
