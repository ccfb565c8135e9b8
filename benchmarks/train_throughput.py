"""Training throughput of yolo11-accelerate and, when importable, of Ultralytics, on the same GPU and data.

    python benchmarks/train_throughput.py --mode step --model yolo11n --batch 128            # model step only
    python benchmarks/train_throughput.py --mode e2e --model yolo11n --batch 128 --workers 16 # whole trainer

``step``: a synthetic uint8 batch already on the GPU, ~8 boxes per image; forward, loss (assigner included),
backward, optimizer step; median over timed steps after warm-up; peak memory. ``e2e``: coco128 replicated to
``--images`` images (symlinks), mosaic on, 640 px: our ``train_accelerate.py`` through ``accelerate launch`` and
Ultralytics' trainer, each for ``--steps`` batches, img/s over the steady-state window. Prints both and the ratio.
Our trainer plans an ``--epochs`` run (default 100), as a real run would be planned; ``--steps`` ends it.

``--variants`` runs our side several times in one call, Ultralytics once; each variant is a string of flags:
step mode takes ``--compile``, ``--compile-loss``, ``--compile-mode MODE``, ``--plain-layers``, ``--boxes N``,
``--profile`` (``--kernels-file PATH``), ``--inductor KEY=VALUE`` (see ``step_variant``); e2e mode passes
the string to ``train_accelerate.py``, e.g. ``--variants="; --compile; --compile --compile-loss --workers 12"``
(with ``=``: the value starts with dashes).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))


def synthetic_targets(batch: int, imgsz: int, boxes_per_image: int, generator: torch.Generator):
    centres = torch.rand(batch, boxes_per_image, 2, generator=generator) * imgsz
    sizes = (torch.rand(batch, boxes_per_image, 2, generator=generator) * 0.3 + 0.05) * imgsz
    xyxy = torch.cat([centres - sizes / 2, centres + sizes / 2], -1).clamp(0, imgsz)
    labels = torch.randint(0, 80, (batch, boxes_per_image), generator=generator)
    return xyxy, labels


def time_steps(step, warmup: int, steps: int) -> list[float]:
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return times


def step_variant(args, flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="step variant")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--compile-loss", action="store_true")
    parser.add_argument("--compile-mode", default=None)
    parser.add_argument("--plain-layers", action="store_true",
                        help="with --compile: keep the plain blocks (no yolo11.models.fast_layers swap)")
    parser.add_argument("--cudnn-benchmark", action="store_true", help="cuDNN picks conv algorithms by timing them")
    parser.add_argument("--boxes", type=int, default=8, help="synthetic boxes per image (target rows M)")
    parser.add_argument("--profile", action="store_true", help="after timing, print the kernels of 3 steps")
    parser.add_argument("--kernels-file", default=None, help="with --profile: every kernel's time, to this file")
    parser.add_argument("--inductor", action="append", default=[], metavar="KEY=VALUE",
                        help="an inductor option for the model's compile, over the trainer's "
                             "(yolo11.engine.compile.MODEL_INDUCTOR_OPTIONS), e.g. realize_reads_threshold=4 or "
                             "coordinate_descent_tuning=True; repeatable")
    variant = parser.parse_args(shlex.split(flags))
    try:
        variant.inductor = {key: ast.literal_eval(value) for key, value in (o.split("=", 1) for o in variant.inductor)}
    except (ValueError, SyntaxError) as err:
        parser.error(f"--inductor takes KEY=VALUE with a Python literal value: {err}")
    return argparse.Namespace(**vars(args), **vars(variant))


def ours_step(args) -> dict:
    import yolo11
    from yolo11.engine.build import build_criterion
    from yolo11.engine.optim import OptimizerChoice, build_optimizer

    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    model = yolo11.create_model(args.model, num_classes=80).to(device).train()
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    criterion = build_criterion(model, device)  # YOLO26: both heads' End2EndLoss, as training
    optimizer = build_optimizer(model, OptimizerChoice("SGD", 0.01, 0.937), 5e-4)
    if args.compile:
        from yolo11.engine.compile import compile_model

        # as train_accelerate.py --compile on CUDA
        model = compile_model(model, args.compile_mode, fast_layers=not args.plain_layers, **args.inductor)
    if args.compile_loss:
        from yolo11.engine.compile import CompiledLoss

        criterion = CompiledLoss(criterion)  # as train_accelerate.py --compile-loss
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (args.batch, 3, args.imgsz, args.imgsz), dtype=torch.uint8, generator=g)
    images = images.to(device)
    boxes, labels = (t.to(device) for t in synthetic_targets(args.batch, args.imgsz, args.boxes, g))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]

    if args.channels_last:
        images = images.contiguous(memory_format=torch.channels_last)

    def step():
        with torch.autocast("cuda", dtype=dtype):
            feats = model(images)  # uint8: the model scales it (as in training)
        loss, _ = criterion(feats, boxes, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    torch._dynamo.reset()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    times = time_steps(step, args.warmup, args.steps)
    result = {"img_s": args.batch / statistics.median(times), "peak_gb": torch.cuda.max_memory_allocated() / 2**30,
              "wall_s": time.perf_counter() - started}
    if args.profile:
        print_kernel_profile(step, statistics.median(times), steps=3, kernels_file=args.kernels_file)
    return result


KERNEL_GROUPS = (  # first match wins; lower-case substrings of kernel names
    ("topk/sort", ("topk", "sort", "radix", "gatherTopK", "bitonic")),
    ("Triton (inductor)", ("triton",)),
    ("optimizer/clip/ema (foreach)", ("multi_tensor", "foreach", "sgd", "lerp")),
    ("convolution (cuDNN/CUTLASS)", ("conv", "cudnn", "xmma", "implicit", "sm90", "sm80", "cutlass", "gemm",
                                    "wgrad", "dgrad", "nhwc", "nchw")),
    ("copy/fill", ("memcpy", "memset", "copy", "fill")),
)


def print_kernel_profile(step, step_seconds: float, steps: int, kernels_file: str | None = None) -> None:
    """GPU kernels of ``steps`` steps: per-step time by group and the 30 busiest kernels (all of them to
    ``kernels_file``)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA and e.self_device_time_total > 0]
    kernels.sort(key=lambda e: -e.self_device_time_total)
    total = sum(e.self_device_time_total for e in kernels) / 1e3 / steps
    groups: dict[str, float] = {}
    for event in kernels:
        name = event.key.lower()
        group = next((g for g, keys in KERNEL_GROUPS if any(k.lower() in name for k in keys)), "other")
        groups[group] = groups.get(group, 0.0) + event.self_device_time_total / 1e3 / steps
    print(f"kernel time {total:.2f} ms per step of {step_seconds * 1e3:.2f} ms (median timed step)")
    for group, ms in sorted(groups.items(), key=lambda item: -item[1]):
        print(f"  {group:34s} {ms:8.2f} ms")
    lines = [f"{event.self_device_time_total / 1e3 / steps:7.3f} ms x{event.count // steps:<4d} {event.key}"
             for event in kernels]
    for line in lines[:30]:
        print(f"  {line[:130]}")
    if kernels_file:
        Path(kernels_file).write_text("\n".join(lines) + "\n")
    print_copy_sources(prof, steps)


def print_copy_sources(prof, steps: int) -> None:
    """Which operators launched the copy kernels (``direct_copy_kernel``: layout changes, ``.contiguous()``,
    dtype casts), by operator chain and input shapes: copies are pure memory traffic, so each is a lead."""
    sources: dict[tuple[str, str], list[float]] = {}
    for event in prof.events():
        copy_us = sum(k.duration for k in event.kernels if "copy" in k.name.lower())
        if not copy_us or event.name != "aten::copy_":
            continue
        chain, parent = [], event.cpu_parent
        while parent is not None and len(chain) < 4:
            chain.append(parent.name)
            parent = parent.cpu_parent
        key = (" < ".join(chain) or "(top level)", str(event.input_shapes))
        sources.setdefault(key, []).append(copy_us)
    if not sources:
        return
    print("copy kernels by launching operator chain (ms per step, launches per step, input shapes):")
    for (chain, shapes), times in sorted(sources.items(), key=lambda item: -sum(item[1]))[:15]:
        print(f"  {sum(times) / 1e3 / steps:7.3f} ms x{len(times) // steps:<3d} {chain[:90]}  {shapes[:120]}")


def ultralytics_step(args) -> dict:
    from ultralytics.cfg import get_cfg
    from ultralytics.nn.tasks import DetectionModel

    device = torch.device("cuda")
    model = DetectionModel(f"{args.model}.yaml", nc=80, verbose=False).to(device).train()
    model.args = get_cfg()
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.937, nesterov=True)
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (args.batch, 3, args.imgsz, args.imgsz), dtype=torch.uint8, generator=g).to(device)
    xyxy, labels = synthetic_targets(args.batch, args.imgsz, 8, g)
    xywh = torch.cat([(xyxy[..., :2] + xyxy[..., 2:]) / 2, xyxy[..., 2:] - xyxy[..., :2]], -1) / args.imgsz
    batch = {"batch_idx": torch.arange(args.batch).repeat_interleave(8).float().to(device),
             "cls": labels.reshape(-1, 1).float().to(device), "bboxes": xywh.reshape(-1, 4).to(device)}
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)

    def step():
        x = images.float() / 255
        if args.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=dtype):
            loss, _ = model.loss({**batch, "img": x})
        scaler.scale(loss.sum()).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()

    torch.cuda.reset_peak_memory_stats()
    times = time_steps(step, args.warmup, args.steps)
    return {"img_s": args.batch / statistics.median(times), "peak_gb": torch.cuda.max_memory_allocated() / 2**30}


def replicated_coco128(images: int, root: Path, source: Path) -> Path:
    """A data YAML over coco128 (``source``, beside its ``coco128.yaml``) repeated (symlinks) to at least ``images``
    images."""
    source = source.resolve()  # the links are absolute: a relative --coco128 would dangle from the temp folder
    files = sorted((source / "images" / "train2017").glob("*.jpg"))
    for sub in ("images", "labels"):
        (root / sub / "train").mkdir(parents=True, exist_ok=True)
    for i in range(images):
        image = files[i % len(files)]
        name = f"{i:06d}_{image.stem}"
        (root / "images" / "train" / f"{name}.jpg").symlink_to(image)
        label = source / "labels" / "train2017" / f"{image.stem}.txt"
        if label.exists():
            (root / "labels" / "train" / f"{name}.txt").symlink_to(label)
    names = (source.parent / "coco128.yaml").read_text().split("names:", 1)[1]
    yaml_path = root / "data.yaml"
    yaml_path.write_text(f"path: {root}\ntrain: images/train\nval: images/train\nnames:{names}")
    return yaml_path


def ours_e2e(args, data: Path, out: Path, flags: str, index: int) -> dict:
    command = ["accelerate", "launch", "--config_file", str(ROOT / "accelerate_configs" / "1gpu.yaml"),
               str(ROOT / "train_accelerate.py"), "--model", args.model, "--data", str(data), "--imgsz",
               str(args.imgsz), "--batch-size", str(args.batch), "--workers", str(args.workers), "--epochs",
               str(args.epochs),
               "--max-steps", str(args.steps), "--val-interval", "0", "--log-interval", "5", "--plots", "false",
               "--output-dir", str(out), "--name", "ours", "--optimizer", "SGD", "--cache-dir", str(out / "cache"),
               "--grad-accum", "1", "--close-mosaic", "0", "--exist-ok", "true", *shlex.split(flags)]
    log = Path(os.environ.get("OUT") or out, f"ours{index}.log")  # $OUT: the device tool brings it back
    started = time.perf_counter()
    with log.open("w") as stream:  # streamed, so that a run cut short still leaves its lines
        result = subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    text = log.read_text()
    summary = out / "ours" / "profile" / "summary.txt"
    if summary.exists():  # --profile true
        (log.parent / f"profile{index}.txt").write_text(summary.read_text())
        summary.unlink()
    if result.returncode:
        print(f"our trainer failed with {flags!r} (see {log}):\n{text[-3000:]}", file=sys.stderr)
        return {"error": text[-500:], "wall_s": time.perf_counter() - started}
    # the progress windows: "| 532 img/s data 2% |" (older logs: "| 532 img/s | data 2%")
    rates = [float(m) for m in re.findall(r"\| ([\d.]+) img/s (?:\| )?data", text)]
    waits = [float(m) / 100 for m in re.findall(r"img/s (?:\| )?data (\d+)%", text)]
    half = len(rates) // 2  # skip compile/warm-up lines and the batches the loader queued meanwhile
    steady = rates[half:] or rates
    return {"img_s": statistics.median(steady), "mean_img_s": statistics.harmonic_mean(steady),
            "data_wait": statistics.median(waits[half:] or [0]), "wall_s": time.perf_counter() - started,
            "windows": rates}


def ultralytics_e2e(args, data: Path, out: Path) -> dict:
    from ultralytics import YOLO

    model = YOLO(f"{args.model}.yaml")
    stamps: list[float] = []

    def on_batch_end(trainer):
        stamps.append(time.perf_counter())
        if len(stamps) >= args.steps:
            raise KeyboardInterrupt  # stop after the same number of batches as ours

    model.add_callback("on_train_batch_end", on_batch_end)
    try:
        model.train(data=str(data), epochs=1, batch=args.batch, imgsz=args.imgsz, workers=args.workers, val=False,
                    plots=False, amp=True, project=str(out), name="ultralytics", exist_ok=True, verbose=False,
                    optimizer="SGD", seed=0, deterministic=False, close_mosaic=0,
                    cache="ram" if args.ultralytics_cache else False)
    except KeyboardInterrupt:
        pass
    gaps = [b - a for a, b in zip(stamps[len(stamps) // 2:], stamps[len(stamps) // 2 + 1:])]
    if not gaps:
        return {"img_s": float("nan")}
    return {"img_s": args.batch / statistics.median(gaps), "mean_img_s": args.batch / statistics.mean(gaps)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("step", "e2e"), default="step")
    parser.add_argument("--model", default="yolo11n")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--precision", choices=("bf16", "fp16"), default="bf16")
    parser.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--variants", default="", help="our side's flag strings separated by ';' (see above)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--coco128", type=Path, default=SHARED / "coco128" if (SHARED / "coco128").is_dir()
                        else ROOT / ".data" / "coco128", help="coco128 folder (its coco128.yaml beside it)")
    parser.add_argument("--epochs", type=int, default=100, help="e2e: the run length our trainer plans for (its "
                        "--compile auto weighs epochs x images, as for a real run); --steps stops it")
    parser.add_argument("--images", type=int, default=4096, help="replicated coco128 size (>= steps x batch)")
    parser.add_argument("--skip-ultralytics", action="store_true")
    parser.add_argument("--skip-ours", action="store_true", help="time Ultralytics alone")
    parser.add_argument("--ultralytics-cache", action="store_true", help="Ultralytics with cache='ram' (e2e), "
                        "to compare with our --cache-images")
    args = parser.parse_args(argv)
    args.variants = [] if args.skip_ours else [flags.strip() for flags in args.variants.split(";")]
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU")
    try:
        import ultralytics  # noqa: F401

        have_ultralytics = not args.skip_ultralytics
    except ImportError:
        have_ultralytics = False
    report = {"mode": args.mode, "model": args.model, "batch": args.batch, "imgsz": args.imgsz,
              "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    report["ours"] = {}
    if args.mode == "step":
        report.update(precision=args.precision, channels_last=args.channels_last)
        if have_ultralytics:  # first: its peak memory is then not inflated by our variants' leftovers
            report["ultralytics"] = ultralytics_step(args)
        for flags in args.variants:
            name = flags or "eager"
            try:
                report["ours"][name] = ours_step(step_variant(args, flags))
            except Exception as err:  # one failing variant (a compiler error) must not lose the others
                report["ours"][name] = {"error": f"{type(err).__name__}: {str(err)[-800:]}"}
            print(name, report["ours"][name], flush=True)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            data = replicated_coco128(args.images, Path(tmp) / "data", args.coco128)
            for index, flags in enumerate(args.variants):
                name = flags or "default"
                report["ours"][name] = ours_e2e(args, data, Path(tmp), flags, index)
                print(name, report["ours"][name], flush=True)
            if have_ultralytics:
                report["ultralytics"] = ultralytics_e2e(args, data, Path(tmp))
    print(json.dumps(report, indent=1))
    reference = report.get("ultralytics", {}).get("img_s")
    print(f"\n{args.mode} {args.model} batch {args.batch} {args.imgsz}px on {report['gpu']}")
    for name, result in report["ours"].items():
        ratio = f"{result['img_s'] / reference:.2f}x" if reference and "img_s" in result else "-"
        figure = f"{result['img_s']:.0f} img/s" if "img_s" in result else "FAILED"
        extra = f", peak {result['peak_gb']:.1f} GiB" if "peak_gb" in result else ""
        extra += f", data wait {result['data_wait']:.0%}" if "data_wait" in result else ""
        extra += f", mean {result['mean_img_s']:.0f} img/s" if "mean_img_s" in result else ""
        print(f"  ours {name:40s} {figure:>12s} {ratio:>7s}{extra}")
    if reference:
        theirs = report["ultralytics"]
        extra = f", peak {theirs['peak_gb']:.1f} GiB" if "peak_gb" in theirs else ""
        extra += f", mean {theirs['mean_img_s']:.0f} img/s" if "mean_img_s" in theirs else ""
        print(f"  {'ultralytics':45s} {reference:>8.0f} img/s{extra}")


if __name__ == "__main__":
    main()
