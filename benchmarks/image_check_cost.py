"""CPU time per image of the conversion's image check: this checkout's ``image_io.image_size`` against another
checkout's (``--before``: a worktree of an older commit, its ``yolo11/data/sources/checks.py`` or
``yolo11/data/image_io.py``), on the images of ``conversion_speed.py``'s generated datasets.

    git worktree add /tmp/before 924a924
    python benchmarks/conversion_speed.py --num-images 10000 --root /tmp/convbench-jpg --format jpg --processes 1
    python benchmarks/image_check_cost.py --before /tmp/before --images /tmp/convbench-jpg /tmp/convbench-png

The two run interleaved in chunks of 100 images, in alternating order, and are timed by process CPU time, so that
the load of a shared machine falls on both alike (a whole-process wall-time run on 2 shared cores varied by 2x).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_image_size(checkout: Path):
    """``image_size`` of a checkout, from its image module (``image_io.py``, else the older ``checks.py``)."""
    for relative in ("yolo11/data/image_io.py", "yolo11/data/sources/checks.py"):
        path = checkout / relative
        if path.is_file():
            spec = importlib.util.spec_from_file_location(f"image_size_{abs(hash(path))}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module.image_size
    raise FileNotFoundError(f"{checkout}: no yolo11/data/image_io.py or yolo11/data/sources/checks.py")


def measure(functions: dict, files: list[Path], rounds: int) -> dict:
    seconds, refused = dict.fromkeys(functions, 0.0), dict.fromkeys(functions, 0)
    for round_ in range(rounds):
        for start in range(0, len(files), 100):
            order = list(functions) if (start // 100 + round_) % 2 == 0 else list(reversed(functions))
            for name in order:
                began = time.process_time()
                for path in files[start:start + 100]:
                    try:
                        functions[name](path)
                    except ValueError:
                        refused[name] += 1
                seconds[name] += time.process_time() - began
    count = rounds * len(files)
    return {name: {"cpu_ms_per_image": round(1000 * seconds[name] / count, 4), "refused": refused[name]}
            for name in functions} | {"images": count}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout of the older code")
    parser.add_argument("--images", type=Path, nargs="+", required=True, help="dataset roots of conversion_speed.py")
    parser.add_argument("--limit", type=int, default=3000, help="images per dataset")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    sys.path.insert(0, str(args.before))  # the older image module's own imports (yolo11.*) resolve there first
    before = load_image_size(args.before)
    sys.path[0] = str(ROOT)
    for name in [m for m in sys.modules if m == "yolo11" or m.startswith("yolo11.")]:
        del sys.modules[name]  # this checkout's package from here on
    after = importlib.import_module("yolo11.data.image_io").image_size
    results = {}
    for root in args.images:
        files = sorted(p for p in (root / "images" / "train").iterdir() if p.is_file())[:args.limit]
        results[root.name] = measure({"before": before, "after": after}, files, args.rounds)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
