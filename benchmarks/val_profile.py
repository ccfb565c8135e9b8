"""Where training's validation spends its time: the trainer's ``Validator`` on a dataset, as an epoch runs it
(EMA-like weights, the loss, rect batches, CUDA graphs where the run would have them), timed per pass and
profiled once with ``torch.profiler`` (host time by op, with the GPU time beside it).

    python benchmarks/val_profile.py --data coco128.yaml --imgsz 640 --batch 16 --passes 20

Prints the mean seconds of a pass (after two warm-up passes that capture the graphs; ``--gap`` seconds before each,
as training leaves the loader between two validations), the scoring and data parts,
and the 25 ops with the most host time in one profiled pass. The model is freshly built (its detections are as
few as a model at its first epoch gives); ``--weights`` (a weights file, e.g. a finished run's
``weights/last.safetensors``) validates trained weights instead, whose detections at conf 0.001 are as many as
training's later validations see (up to 300 per image), so NMS and scoring do their most work. Last, the
post-processing (decode, NMS) of one validation batch alone, as a pass runs it and with torchvision's NMS one
image at a time (on CUDA a host sync per image).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="coco8.yaml")
    parser.add_argument("--model", default="yolo11n")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--batch", type=int, default=16, help="the training batch (validation uses twice it)")
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--channels-last", default="true", help="the trainer's --channels-last")
    parser.add_argument("--gap", type=float, default=0.2, help="seconds between passes, as an epoch's training "
                        "leaves the loader's workers to build the next pass (0: back to back, loader-bound)")
    parser.add_argument("--weights", default=None, help="a weights file, e.g. <run>/weights/last.safetensors "
                        "(default: a fresh model)")
    args = parser.parse_args()

    import torch
    from accelerate import Accelerator

    from yolo11.data import load_source
    from yolo11.engine.build import build_criterion
    from yolo11.engine.config import parse_config
    from yolo11.engine.evaluate import Validator
    from yolo11.engine.plan import plan_run
    from yolo11.models import create_model

    accelerator = Accelerator(mixed_precision="bf16" if torch.cuda.is_available() else "no")
    config = parse_config(["--data", args.data, "--imgsz", str(args.imgsz), "--batch-size", str(args.batch),
                           "--model", args.model, "--channels-last", args.channels_last])
    source = load_source(config.data.data, split="val")
    plan = plan_run(config, 1, len(source.dataset), len(source.class_names), accelerator.device.type,
                    mixed_precision=accelerator.mixed_precision)
    if args.weights:
        from yolo11.weights import load_weights

        model = load_weights(args.weights).float().to(accelerator.device)  # unfused, as training validates it
    else:
        model = create_model(args.model, num_classes=len(source.class_names)).to(accelerator.device)
    if plan.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.eval()
    criterion = build_criterion(model, accelerator.device)
    validator = Validator.build(config, plan, source, accelerator, model)
    sync = torch.cuda.synchronize if accelerator.device.type == "cuda" else (lambda: None)
    for _ in range(2):  # warm-up: cuDNN's first use, graph capture
        validator.run(model, criterion, plots=False, images=False, all_stats=False)
    sync()
    seconds, scoring, data = [], 0.0, 0.0
    for _ in range(args.passes):
        time.sleep(args.gap)
        start = time.perf_counter()
        result = validator.run(model, criterion, plots=False, images=False, all_stats=False)
        sync()
        seconds.append(time.perf_counter() - start)
        scoring += result.score_seconds
        data += result.data_seconds
    mean = sum(seconds) / len(seconds)
    print(f"{args.model} on {args.data} ({len(source.dataset)} images, {args.imgsz} px, val batch "
          f"{plan.val_batch_size}, CUDA graphs {plan.cuda_graphs.enabled}): {mean * 1000:.1f} ms a pass "
          f"({mean / len(source.dataset) * 1000:.2f} ms an image), scoring {scoring / args.passes * 1000:.1f} ms, "
          f"waiting for data {data / args.passes * 1000:.1f} ms")
    # as training runs most epochs' validations (score_beside_training): the pass returns once the candidates are
    # gathered; their suppression and the scoring follow on the scoring thread (waited for outside the clock)
    later = []
    for _ in range(args.passes):
        time.sleep(args.gap)
        start = time.perf_counter()
        pending = validator.run(model, criterion, plots=False, images=False, all_stats=False, score_later=True)
        later.append(time.perf_counter() - start)
        pending.result()
    print(f"the same pass scored later (suppression and scoring on the scoring thread): "
          f"{sum(later) / len(later) * 1000:.1f} ms until it returns")
    activities = [torch.profiler.ProfilerActivity.CPU]
    if accelerator.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    time.sleep(args.gap)
    with torch.profiler.profile(activities=activities) as profile:
        validator.run(model, criterion, plots=False, images=False, all_stats=False)
        sync()
    print(profile.key_averages().table(sort_by="cpu_time_total", row_limit=25, max_name_column_width=60))
    postprocessing(validator, model, accelerator, sync)


def postprocessing(validator, model, accelerator, sync) -> None:
    """Milliseconds of the post-processor on one batch's maps: as validation runs it, and with each image's NMS
    through torchvision (``_batchable`` refusing every group)."""
    import time

    import torch

    import yolo11.postprocess as postprocess_module
    from yolo11.data import model_input
    from yolo11.evaluation.runner import float_maps

    batch = next(iter(validator.loader))
    images = model_input(batch["images"].to(accelerator.device), validator.channels_last)
    with torch.no_grad(), accelerator.autocast():
        feats = float_maps(model(images))
    timings = {}
    for name, batchable in (("as validation runs it", postprocess_module._batchable),
                            ("torchvision per image", lambda *_: False)):
        postprocess_module._batchable, kept = batchable, postprocess_module._batchable
        try:
            runs = []
            for _ in range(10):
                sync()
                start = time.perf_counter()
                detections = validator.postprocessor(feats)
                sync()
                runs.append(time.perf_counter() - start)
        finally:
            postprocess_module._batchable = kept
        timings[name] = (sorted(runs)[len(runs) // 2], sum(len(d) for d in detections))
    post = validator.postprocessor
    if not post.end2end:  # NMS's work: each image's (anchor, class) candidates above conf
        scores = postprocess_module.decode(feats, post.strides, post.reg_max)[:, 4:]
        counts = sorted((scores > post.conf).flatten(1).sum(1).tolist())
        print(f"NMS candidates per image of that batch: min {counts[0]}, median {counts[len(counts) // 2]}, "
              f"max {counts[-1]}")
    print(f"post-processing one batch of {images.shape[0]} (median of 10): " + "; ".join(
        f"{name} {seconds * 1000:.2f} ms ({count} detections)" for name, (seconds, count) in timings.items()))


if __name__ == "__main__":
    main()
