"""Accuracy over seeds: our trainer against Ultralytics on the same recipe, both scored by ``yolo11-val``.

Default recipe (the parity check): yolo11n from scratch on coco128 (train = val), 150 epochs, batch 32, 640 px,
SGD lr0 0.01, every other setting each trainer's default. Each run's final EMA weights (ours:
``weights/last.safetensors``; Ultralytics: ``weights/last.pt``, which its trainer strips to the EMA) are scored by
the same ``yolo11-val`` (pycocotools), so the two trainers are compared by one ruler. Prints per-seed mAP50-95,
mAP50 and wall time, and mean +- sample standard deviation per trainer; writes ``summary.json`` in ``--out``.

Several runs share the GPU at once (``--parallel``): accuracy, not speed, is measured here, so the wall times are
those of runs sharing the machine. Needs a CUDA GPU and ``import ultralytics`` (8.4.190) for its side:

    python3 benchmarks/accuracy_parity.py --data coco128.yaml --seeds 0 1 2 3 --parallel 8 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="Ultralytics data YAML (train and val splits)")
    parser.add_argument("--model", default="yolo11n")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--lr0", type=float, default=0.01)
    parser.add_argument("--optimizer", default="SGD",
                        help="both trainers' optimizer with --lr0; auto: neither flag, each trainer's default choice")
    parser.add_argument("--workers", type=int, default=2, help="loader workers per run")
    parser.add_argument("--parallel", type=int, default=8, help="runs sharing the GPU at once")
    parser.add_argument("--trainers", default="ours,ultralytics", help="comma list: ours, ultralytics")
    parser.add_argument("--ours-flags", default="", help="extra flags for train_accelerate.py")
    parser.add_argument("--accelerate-config", type=Path, default=ROOT / "accelerate_configs" / "1gpu.yaml")
    parser.add_argument("--ultralytics-device", default="0", help="Ultralytics' device argument (cpu for a smoke run)")
    parser.add_argument("--out", type=Path, default=Path("runs/accuracy_parity"))
    return parser.parse_args(argv)


def ours_command(args: argparse.Namespace, seed: int) -> tuple[list[str], Path]:
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(args.accelerate_config),
               str(ROOT / "train_accelerate.py"), "--model", args.model, "--data", str(args.data),
               "--epochs", str(args.epochs), "--batch-size", str(args.batch), "--imgsz", str(args.imgsz),
               *optimizer_flags(args), "--seed", str(seed), "--workers", str(args.workers),
               "--output-dir", str(args.out), "--name", f"ours_seed{seed}", "--exist-ok", "true",
               "--cache-dir", str(args.out / "cache"), *args.ours_flags.split()]
    return command, args.out / f"ours_seed{seed}" / "weights" / "last.safetensors"


def optimizer_flags(args: argparse.Namespace) -> list[str]:
    return [] if args.optimizer == "auto" else ["--optimizer", args.optimizer, "--lr0", str(args.lr0)]


def ultralytics_command(args: argparse.Namespace, seed: int, plots: bool = False) -> tuple[list[str], Path]:
    """``plots``: Ultralytics' default (True) draws labels, batches and curves; the accuracy runs skip them."""
    train = dict(data=str(args.data.resolve()), epochs=args.epochs, batch=args.batch, imgsz=args.imgsz,
                 **({} if args.optimizer == "auto" else {"optimizer": args.optimizer, "lr0": args.lr0}),
                 seed=seed, workers=args.workers, project=str(args.out.resolve()),
                 name=f"ultralytics_seed{seed}", exist_ok=True, plots=plots,
                 device=args.ultralytics_device)
    script = f"from ultralytics import YOLO; YOLO({args.model + '.yaml'!r}).train(**{train!r})"
    return [sys.executable, "-c", script], args.out / f"ultralytics_seed{seed}" / "weights" / "last.pt"


def absolute_data_yaml(data: Path, out: Path) -> Path:
    """The data YAML with its ``path`` made absolute: we resolve a relative one from the YAML's folder, Ultralytics
    from its own datasets folder, so both trainers get the absolute one."""
    import yaml

    spec = yaml.safe_load(data.read_text())
    spec["path"] = str((data.resolve().parent / spec.get("path", ".")).resolve())
    target = out / f"{data.stem}.yaml"
    target.write_text(yaml.safe_dump(spec, sort_keys=False))
    return target.resolve()


def prepare_caches(args: argparse.Namespace, trainers: list[str]) -> None:
    """Convert/cache the dataset once before the parallel runs, which would otherwise race to write it."""
    if "ours" in trainers:
        from yolo11.data import load_source

        for split in ("train", "val"):
            load_source(str(args.data), split=split, cache_dir=args.out / "cache")
    if "ultralytics" in trainers:
        from ultralytics.cfg import get_cfg
        from ultralytics.data import build_yolo_dataset
        from ultralytics.data.utils import check_det_dataset

        data = check_det_dataset(str(args.data))
        for split in ("train", "val"):
            build_yolo_dataset(get_cfg(), data[split], args.batch, data, mode="train")


def run_one(args: argparse.Namespace, trainer: str, seed: int) -> dict:
    command, weights = (ours_command if trainer == "ours" else ultralytics_command)(args, seed)
    log = args.out / f"{trainer}_seed{seed}.log"
    started = time.perf_counter()
    with log.open("w") as f:
        rc = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    result = {"trainer": trainer, "seed": seed, "train_rc": rc, "wall_s": time.perf_counter() - started}
    if rc != 0 or not weights.is_file():
        result["error"] = f"training failed (rc {rc}, weights {'present' if weights.is_file() else 'missing'}): {log}"
        return result
    metrics_file = args.out / f"{trainer}_seed{seed}_metrics.json"
    score = [sys.executable, "-m", "yolo11.tools.val", str(weights), "--data", str(args.data), "--imgsz",
             str(args.imgsz), "--workers", str(args.workers), "--cache-dir", str(args.out / "cache"),
             "--json", str(metrics_file)]
    with log.open("a") as f:
        rc = subprocess.run(score, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    if rc != 0:
        result["error"] = f"yolo11-val failed (rc {rc}): {log}"
        return result
    metrics = json.loads(metrics_file.read_text())
    result.update(map50_95=metrics["map50_95"], map50=metrics["map50"])
    print(f"{trainer:12s} seed {seed}: mAP50-95 {result['map50_95']:.4f} mAP50 {result['map50']:.4f} "
          f"({result['wall_s']:.0f} s)", flush=True)
    return result


def summarise(results: list[dict], trainers: list[str]) -> dict:
    summary = {}
    for trainer in trainers:
        mine = [r for r in results if r["trainer"] == trainer and "map50_95" in r]
        stats = {}
        for key in ("map50_95", "map50", "wall_s"):
            values = [r[key] for r in mine]
            stats[key] = {"mean": statistics.mean(values) if values else float("nan"),
                          "std": statistics.stdev(values) if len(values) > 1 else float("nan")}
        summary[trainer] = {"runs": len(mine), **stats}
    return summary


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    trainers = [t.strip() for t in args.trainers.split(",") if t.strip()]
    unknown = set(trainers) - {"ours", "ultralytics"}
    if unknown:
        raise SystemExit(f"error: --trainers: unknown {sorted(unknown)} (expected ours, ultralytics)")
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("YOLO_OFFLINE", "1")
    args.data = absolute_data_yaml(args.data, args.out)
    prepare_caches(args, trainers)
    jobs = [(trainer, seed) for seed in args.seeds for trainer in trainers]
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        results = list(pool.map(lambda job: run_one(args, *job), jobs))
    print(f"\n{args.model} {args.epochs} epochs, batch {args.batch}, {args.imgsz} px, SGD lr0 {args.lr0}, "
          f"data {args.data}, {args.parallel} runs at a time")
    print(f"{'trainer':12s} {'seed':>4s} {'mAP50-95':>9s} {'mAP50':>8s} {'wall s':>7s}")
    for r in sorted(results, key=lambda r: (r["trainer"], r["seed"])):
        if "error" in r:
            print(f"{r['trainer']:12s} {r['seed']:>4d} FAILED: {r['error']}")
        else:
            print(f"{r['trainer']:12s} {r['seed']:>4d} {r['map50_95']:>9.4f} {r['map50']:>8.4f} {r['wall_s']:>7.0f}")
    summary = summarise(results, trainers)
    for trainer, s in summary.items():
        print(f"{trainer:12s} mean over {s['runs']} seeds: mAP50-95 {s['map50_95']['mean']:.4f} "
              f"+- {s['map50_95']['std']:.4f}, mAP50 {s['map50']['mean']:.4f} +- {s['map50']['std']:.4f}, "
              f"wall {s['wall_s']['mean']:.0f} +- {s['wall_s']['std']:.0f} s")
    (args.out / "summary.json").write_text(json.dumps({"runs": results, "summary": summary}, indent=1) + "\n")
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
