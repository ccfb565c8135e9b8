"""Predicted data-parallel efficiency on 2, 4 and 8 GPUs from one-GPU measurements: the tables of docs/scaling.md.

    python3 benchmarks/scaling_model.py [--cores-per-gpu 2] [--loader-rate 80] [--sync-bn] [--no-overlap] ...

Efficiency = throughput on N GPUs / (N x one GPU's), each GPU keeping its batch (`--batch-size` = batch x N). A
cell "a / b" is against one GPU running the eager step (what DDP runs: the cost of scaling alone) / against one GPU
with the defaults (CUDA graphs). Pure Python; docs/scaling.md gives every term and where its number comes from.
"""

from __future__ import annotations

import argparse

MIB = 2**20
# ms per micro-batch, one H200, bf16, channels_last, synthetic batch, no loader (RESULTS.md, fig-step-graphed):
# (eager, graphed). Graphed = the one-GPU default, and the GPU time of the eager step's kernels.
MEASURED = {("yolo11n", 16): (78.0, 18.3), ("yolo11n", 64): (84.6, 56.2),
            ("yolo11s", 16): (68.7, 24.1), ("yolo11s", 64): (76.6, 77.0)}
# Host time of the eager step: its time at batch 16, where the GPU idles (graphed 18.3 / 24.1 ms). It hardly depends
# on the batch (the same kernels): yolo11n 74.3 / 78.0 ms at b8 / b16, yolo11s 70.5 / 68.7 / 66.0 at b8 / b16 / b32.
HOST_MS = {"yolo11n": 78.0, "yolo11s": 68.7}
GFLOPS = {"yolo11n": 6.6, "yolo11s": 21.7, "yolo11m": 68.5}  # 640 px (FIELD-NOTES, Ultralytics)
# trainable parameters, parameter tensors, BatchNorm buffers of create_model(name, num_classes=80) (counted)
MODELS = {"yolo11n": (2_624_064, 255, 243), "yolo11s": (9_458_736, 255, 243), "yolo11m": (20_114_672, 330, 318)}
M_EXPONENT = 0.5  # estimated: yolo11m's GPU time = yolo11s's x (GFLOPs ratio) ** this (n -> s measured: ~0.3)
FIRST_BUCKET, BUCKET = 1 * MIB, 25 * MIB  # torch DDP defaults (reducer.hpp kDefaultFirstBucketBytes, bucket_cap_mb)
NOMINAL_BATCH = 64  # accumulation = max(round(64 / global batch), 1) (yolo11/engine/plan.py)
OPTIMIZER_BYTES, HBM = 60, 3.35e12  # bytes moved per parameter by SGD + EMA + clip (assumed); H100 bytes/s
SYNC_BN_HOST_MS = 0.1  # extra host time per BatchNorm layer and micro-batch under --sync-bn (assumed)
EXPECTED_MAX = {1: 0.0, 2: 0.564, 4: 1.029, 8: 1.424}  # mean of the largest of N standard normal draws
# A COCO epoch: train / val images; validation forward ms per image for yolo11n (fig-validation: 22.5 s for 100 x
# 128 images, less scoring and loader wait); rank 0's scoring of 5000 images (fig-eval-gpu-machine); gather (assumed)
TRAIN_IMAGES, VAL_IMAGES, VAL_MS_N, SCORE_S, GATHER_S = 118_287, 5_000, 1.4, 4.15, 0.3


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nvlink-busbw", type=float, default=350, help="NCCL bus bandwidth, GB/s (250-370)")
    p.add_argument("--pcie-busbw", type=float, default=20, help="GB/s (Gen4 12-20, Gen5 25-40)")
    p.add_argument("--nvlink-hop-us", type=float, default=1.5, help="latency per ring step, us (1.5-10)")
    p.add_argument("--pcie-hop-us", type=float, default=3.0, help="us (3-25)")
    p.add_argument("--cores-per-gpu", type=float, default=16, help="CPU cores per GPU of the several-GPU host")
    p.add_argument("--baseline-cores", type=float, default=16, help="CPU cores of the one-GPU host")
    p.add_argument("--workers", type=int, default=8, help="loader workers per process (auto: 8, capped at cores)")
    p.add_argument("--loader-rate", type=float, default=180, help="img/s one core makes (cached 180, uncached ~80)")
    p.add_argument("--main-cores", type=float, default=1.2, help="cores the training process itself takes")
    p.add_argument("--launch-us", type=float, default=4.0, help="host us per kernel DDP issues from C++ (assumed)")
    p.add_argument("--opt-host-ms", type=float, default=2.0, help="host ms per optimizer step (assumed)")
    p.add_argument("--jitter", type=float, default=0.03, help="per-step spread of a rank's host time (assumed)")
    p.add_argument("--gpu-jitter", type=float, default=0.02, help="per-step spread of its GPU time (assumed)")
    p.add_argument("--sync-bn", action="store_true", help="the run uses --sync-bn")
    p.add_argument("--no-overlap", action="store_true", help="no all-reduce overlaps the backward (upper bound)")
    p.add_argument("--host-ms", type=float, help="every model's host time per step, ms (the eager step's too)")
    return p.parse_args()


def one_gpu_ms(model: str, batch: int, args) -> tuple[float, float, float]:
    """(eager, graphed, host) ms per micro-batch on one GPU; yolo11m estimated from n and s."""
    if model == "yolo11m":  # GPU time from yolo11s by GFLOPs; host time by parameter tensors (~ layers, kernels)
        graphed = MEASURED[("yolo11s", batch)][1] * (GFLOPS["yolo11m"] / GFLOPS["yolo11s"]) ** M_EXPONENT
        host = (HOST_MS["yolo11n"] + HOST_MS["yolo11s"]) / 2 * MODELS["yolo11m"][1] / MODELS["yolo11s"][1]
        eager = max(host, graphed)
    else:
        (eager, graphed), host = MEASURED[(model, batch)], HOST_MS[model]
    if args.host_ms:  # e.g. a compiled step (inductor's default mode: fewer kernels, the same GPU time assumed)
        host, eager = args.host_ms, max(args.host_ms, graphed)
    return eager, graphed, host


def allreduce_ms(nbytes: float, n: int, busbw: float, hop_us: float) -> float:
    """NCCL ring all-reduce: 2(N-1) steps of latency plus 2(N-1)/N x bytes at the bus bandwidth."""
    return 0.0 if n == 1 else 2 * (n - 1) * hop_us / 1e3 + 2 * (n - 1) / n * nbytes / (busbw * 1e9) * 1e3


def buckets(nbytes: int) -> list[int]:
    sizes = [min(nbytes, FIRST_BUCKET)]
    while sum(sizes) < nbytes:
        sizes.append(min(nbytes - sum(sizes), BUCKET))
    return sizes


def loader_ms(batch: int, cores: float, args) -> float:
    """ms the loader needs per batch: workers (at most the cores the training process leaves) x img/s per core."""
    return batch / (args.loader_rate * max(min(args.workers, cores - args.main_cores), 0.1)) * 1e3


def terms(model: str, batch: int, n: int, link: str, args) -> dict:
    """Every term of one GPU's micro-batch among N, in ms, and the one-GPU baselines."""
    eager, graphed, host = one_gpu_ms(model, batch, args)
    params, tensors, bn_buffers = MODELS[model]
    busbw, hop = (args.nvlink_busbw, args.nvlink_hop_us) if link == "NVLink" else (args.pcie_busbw, args.pcie_hop_us)
    sync = 1 / max(round(NOMINAL_BATCH / (batch * n)), 1)  # share of micro-batches that all-reduce and step
    t = {"eager": eager, "graphed": graphed, "host": host, "grad_mib": 4 * params / MIB}
    sizes = buckets(4 * params)  # fp32 gradients (bf16 autocast keeps fp32 weights)
    comm = [allreduce_ms(s, n, busbw, hop) for s in sizes]
    t["buckets"] = len(sizes)
    # the last bucket is ready when the backward ends; the others overlap its rest (~2/3 of the GPU time) if they fit
    t["exposed"] = sync * (sum(comm) if args.no_overlap else max(comm[-1], sum(comm) - 2 / 3 * graphed))
    flag = allreduce_ms(8, n, busbw, hop)  # latency-bound: the guard's and the stop agreement's, per step
    broadcasts = 2 * (n - 1) * hop / 1e3  # DDP's BatchNorm buffers (fp32, int64) from rank 0, every forward
    t["collectives"] = sync * 2 * flag + broadcasts
    # DDP's own kernels: each buffer copied back after its broadcast; each gradient into its bucket and back
    t["ddp_host"] = (bn_buffers + sync * 2 * tensors) * args.launch_us / 1e3 if n > 1 else 0.0
    more_steps = sync - 1 / max(round(NOMINAL_BATCH / batch), 1)  # a larger global batch accumulates less
    t["optimizer"] = more_steps * (args.opt_host_ms + params * OPTIMIZER_BYTES / HBM * 1e3)
    if args.sync_bn and n > 1:  # per BatchNorm layer: an all-gather forward, an all-reduce backward, in line
        t["ddp_host"] += bn_buffers // 3 * SYNC_BN_HOST_MS
        t["collectives"] += 2 * bn_buffers // 3 * flag
    host_n, gpu_n = host + t["ddp_host"] + t["optimizer"], graphed + t["exposed"] + t["collectives"]
    calibration = eager / max(host, graphed)  # the measured eager step against max(host, GPU)
    # every all-reduce waits for the slowest rank: the mean of the largest of N draws of each rank's time
    skewed = max(host_n * (1 + args.jitter * EXPECTED_MAX[n]), gpu_n * (1 + args.gpu_jitter * EXPECTED_MAX[n]))
    t["skew"] = calibration * (skewed - max(host_n, gpu_n))
    t["loader"] = loader_ms(batch, args.cores_per_gpu, args)
    t["step"] = max(calibration * skewed, t["loader"])
    base_loader = loader_ms(batch, args.baseline_cores, args)
    t["base_eager"], t["base_default"] = max(eager, base_loader), max(graphed, base_loader)
    return t


def epoch_efficiency(model: str, batch: int, t: dict, n: int, args) -> float:
    """Train and validate one COCO epoch on N GPUs against one eager GPU: the validation forward is split over the
    ranks, the gather and rank 0's scoring are not. Forward per image: yolo11n's x the model's graphed b16 step."""
    val_ms = VAL_MS_N * one_gpu_ms(model, 16, args)[1] / one_gpu_ms("yolo11n", 16, args)[1]
    one = TRAIN_IMAGES / batch * t["base_eager"] / 1e3 + VAL_IMAGES * val_ms / 1e3 + SCORE_S
    many = TRAIN_IMAGES / (batch * n) * t["step"] / 1e3 + VAL_IMAGES / n * val_ms / 1e3 + GATHER_S + SCORE_S
    return one / (n * many)


def main() -> None:
    args = parse_args()
    rows = [(m, b) for m in MODELS for b in (16, 64)]
    print(f"Inputs: {args.cores_per_gpu:g} cores per GPU ({args.baseline_cores:g} for one GPU), {args.workers} "
          f"workers, {args.loader_rate:g} img/s per loader core; busbw NVLink {args.nvlink_busbw:g} / PCIe "
          f"{args.pcie_busbw:g} GB/s; hop {args.nvlink_hop_us:g} / {args.pcie_hop_us:g} us"
          + ("; --sync-bn" if args.sync_bn else "") + ("; no overlap" if args.no_overlap else "")
          + ". yolo11m estimated.\n")
    print("Terms at N = 8, ms per micro-batch (NVLink / PCIe where they differ); E = efficiency against one eager "
          "GPU, of the step and of a COCO epoch with its validation:\n")
    print("| model | batch/GPU | 1 GPU eager / graphed | host | grad MiB (buckets) | exposed all-reduce | "
          "collectives | DDP host | more optimizer steps | rank skew | loader | step | E step | E epoch |")
    print("| --- " * 14 + "|")
    for model, batch in rows:
        nv, pc = terms(model, batch, 8, "NVLink", args), terms(model, batch, 8, "PCIe", args)
        epoch = [epoch_efficiency(model, batch, t, 8, args) for t in (nv, pc)]
        print(f"| {model} | {batch} | {nv['eager']:.1f} / {nv['graphed']:.1f} | {nv['host']:.1f} | "
              f"{nv['grad_mib']:.1f} ({nv['buckets']}) | {nv['exposed']:.2f} / {pc['exposed']:.2f} | "
              f"{nv['collectives']:.2f} / {pc['collectives']:.2f} | {nv['ddp_host']:.1f} | {nv['optimizer']:.1f} | "
              f"{nv['skew']:.1f} / {pc['skew']:.1f} | {nv['loader']:.1f} | {nv['step']:.1f} / {pc['step']:.1f} | "
              f"{nv['base_eager'] / nv['step']:.2f} / {pc['base_eager'] / pc['step']:.2f} | "
              f"{epoch[0]:.2f} / {epoch[1]:.2f} |")
    links = [(n, link) for link in ("NVLink", "PCIe") for n in (2, 4, 8)]
    print("\nEfficiency of the step, against one GPU eager / one GPU with the defaults (CUDA graphs):\n")
    print("| model | batch/GPU | " + " | ".join(f"N={n} {link}" for n, link in links) + " |")
    print("| --- " * (2 + len(links)) + "|")
    for model, batch in rows:
        cells = [terms(model, batch, n, link, args) for n, link in links]
        print(f"| {model} | {batch} | "
              + " | ".join(f"{t['base_eager'] / t['step']:.2f} / {t['base_default'] / t['step']:.2f}" for t in cells)
              + " |")


if __name__ == "__main__":
    main()
