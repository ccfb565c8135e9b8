"""Wall time of a whole small training run, ours against Ultralytics, one run at a time on the same GPU.

The accuracy recipe of ``accuracy_parity.py`` (yolo11n from scratch on coco128, 150 epochs, batch 32, 640 px,
SGD lr0 0.01, validation every epoch), timed from the command's start to its exit: imports, data caching,
compilation, every epoch and its validation, as a user waits for it. Variants, in this order:

- ``ultralytics``: its trainer with its defaults (plots included, as ours draws its own by default);
- ``ours``: our trainer with its defaults (``--compile auto`` decides);
- ``ours-compiled-cold`` / ``ours-compiled-warm``: ``--compile true`` with an empty compile cache, then again
  with the cache the cold run filled (what a second run of the same shapes costs).

    python3 benchmarks/small_run_time.py --data coco128.yaml --variants ultralytics ours ours-compiled-cold \\
        ours-compiled-warm

Prints each run's wall time and the final mAP50-95 of its own validation log line; writes ``summary.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accuracy_parity import ROOT, absolute_data_yaml, ours_command, prepare_caches, ultralytics_command  # noqa: E402

VARIANTS = ("ultralytics", "ours", "ours-compiled-cold", "ours-compiled-warm")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--model", default="yolo11n")
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--lr0", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=8, help="loader workers of both trainers (Ultralytics' 8)")
    parser.add_argument("--ours-flags", default="")
    parser.add_argument("--accelerate-config", type=Path, default=ROOT / "accelerate_configs" / "1gpu.yaml")
    parser.add_argument("--ultralytics-device", default="0")
    parser.add_argument("--out", type=Path, default=Path("runs/small_run_time"))
    parser.add_argument("--cprofile", action="store_true",
                        help="run each trainer's main process under cProfile (ours without `accelerate launch`, in "
                             "the precision of --accelerate-config), writing <variant>.prof in --out")
    return parser.parse_args(argv)


def command_for(args: argparse.Namespace, variant: str) -> list[str]:
    profile = [sys.executable, "-m", "cProfile", "-o", str(args.out / f"{variant}.prof")]
    if variant == "ultralytics":
        command = ultralytics_command(args, args.seed, plots=True)[0]  # its default, as ours draws by default
        if not args.cprofile:
            return command
        script = args.out / "ultralytics_train.py"  # cProfile runs a file, not `python -c`
        script.write_text(command[-1] + "\n")
        return [*profile, str(script)]
    flags = args.ours_flags
    if variant.startswith("ours-compiled"):
        flags += f" --compile true --compile-cache-dir {args.out / 'compile_cache'}"
    command = ours_command(argparse.Namespace(**{**vars(args), "ours_flags": flags}), args.seed)[0]
    if args.cprofile:  # without the launcher and its flags: one process, the script itself
        command = [*profile, *command[command.index(str(ROOT / "train_accelerate.py")):]]
    return [*command, "--name", variant]  # the last --name wins: one run folder per variant


def environment_for(args: argparse.Namespace, variant: str) -> dict[str, str]:
    """Without the launcher, the config's mixed precision reaches the Accelerator through the variable it sets."""
    env = dict(os.environ)
    if args.cprofile and variant != "ultralytics":
        import yaml

        env["ACCELERATE_MIXED_PRECISION"] = yaml.safe_load(args.accelerate_config.read_text())["mixed_precision"]
    return env


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)  # the cold run must start from the empty --compile-cache-dir
    shutil.rmtree(args.out / "compile_cache", ignore_errors=True)
    args.data = absolute_data_yaml(args.data, args.out)
    prepare_caches(args, ["ours", "ultralytics"] if "ultralytics" in args.variants else ["ours"])
    results = []
    for variant in args.variants:
        log = args.out / f"{variant}.log"
        started = time.perf_counter()
        with log.open("w") as f:
            rc = subprocess.run(command_for(args, variant), stdout=f, stderr=subprocess.STDOUT, cwd=ROOT,
                                env=environment_for(args, variant)).returncode
        wall = time.perf_counter() - started
        results.append({"variant": variant, "rc": rc, "wall_s": wall})
        print(f"{variant:20s} rc {rc} wall {wall:7.1f} s  ({log})", flush=True)
    (args.out / "summary.json").write_text(json.dumps(results, indent=1) + "\n")
    return 1 if any(r["rc"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
