"""The training micro-step (HSV, forward, loss, backward) replayed as CUDA graphs: one launch instead of ~2000.

At the batch sizes most runs use (8-32), the eager step is bound by the Python thread that launches its kernels
(benchmarks/RESULTS.md): yolo11n at batch 16 needs a few ms of H200 compute but ~65 ms of launching. Capturing the
micro-step once per input shape with ``torch.cuda.graph`` and replaying it removes that cost, and the capture
takes about as long as one eager step (no code generation, unlike inductor's minutes).

How it stays equal to the eager step:

- The captured function is the eager one (``micro_step``), run on the same modules and parameters; the first
  micro-batch of each shape runs it eagerly (warming cuDNN, cuBLAS and the allocator on the capture stream, as
  capture requires), the second is captured, then replayed; every later one is replayed.
- Gradients accumulate in place into ``.grad`` tensors that live for the whole run (the optimizer zeroes them
  with ``set_to_none=False``), so accumulation micro-steps are plain replays.
- Shapes are made static by bucketing: the box rows of a batch are padded (label -1, which the loss ignores: the
  loss and its gradients are bitwise those of the unpadded batch, tested) to the next power of two, at least
  ``MIN_BOX_ROWS``; each (image shape, box bucket) pair gets its own graph, all in one memory pool. No box is ever
  dropped; ``--max-boxes`` still truncates as it says.
- Hyper-parameters that change per step (lr, momentum, EMA decay) are outside: the optimizer and EMA run eagerly
  after the replays, as a handful of fused/foreach kernels.
- fp16: the graph multiplies the loss by the GradScaler's scale tensor, which the scaler updates in place, so each
  replay backpropagates at the current scale; unscaling, the overflow check and the skip stay on the device
  (fused optimizers take ``found_inf``), outside the graph.

What is not captured, and runs the eager micro-step instead: multi-process runs (DDP's all-reduce hooks),
DeepSpeed; the trainer decides (``plan.decide_cuda_graphs``) and says why in the run's first lines.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from yolo11.data import model_input

MIN_BOX_ROWS = 16  # the smallest box bucket: most batches of small datasets fit in one or two graphs
# The loader's pin-memory thread allocates pinned host memory while the main thread captures: under the default
# "global" mode that call invalidates the capture; "thread_local" checks only the capturing thread.
_CAPTURE_MODE = "thread_local"


def box_bucket(rows: int) -> int:
    """The static box-row count for a batch with ``rows`` rows: the next power of two, at least ``MIN_BOX_ROWS``."""
    return max(MIN_BOX_ROWS, 1 << max(rows - 1, 0).bit_length())


def pad_targets(boxes: torch.Tensor, labels: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``boxes (B, M, 4)`` and ``labels (B, M)`` padded to ``rows`` rows (zeros and -1, as the collate pads)."""
    extra = rows - boxes.shape[1]
    if extra <= 0:
        return boxes, labels
    boxes = torch.nn.functional.pad(boxes, (0, 0, 0, extra))
    labels = torch.nn.functional.pad(labels, (0, extra), value=-1)
    return boxes, labels


@dataclass
class MicroStep:
    """The eager micro-step: what a graph captures and what runs where nothing is captured.

    ``autocast``: the mixed-precision context (Accelerate's, with the weight-cast cache off under capture, where a
    cache entry would outlive the graph); ``backward``: ``accelerator.backward``; ``loss_factor``: see
    ``TrainStep.loss_factor``.
    """

    model: nn.Module
    criterion: nn.Module
    batch_hsv: nn.Module
    autocast: Callable
    backward: Callable
    loss_factor: float
    channels_last: bool

    def __call__(self, images: torch.Tensor, gains: torch.Tensor | None, boxes: torch.Tensor,
                 labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns the detached loss (for the non-finite check) and its parts (box, cls, dfl)."""
        if gains is not None:
            images = self.batch_hsv(images, gains)  # uint8 travelled to the device; augment and normalise there
        images = model_input(images, self.channels_last)
        with self.autocast():
            feats = self.model(images)
        loss, parts = self.criterion(feats, boxes, labels)  # upcasts the maps itself
        self.backward(loss * self.loss_factor)
        return loss.detach(), parts


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    inputs: dict[str, torch.Tensor]  # static buffers the graph reads
    outputs: tuple[torch.Tensor, torch.Tensor]  # static buffers the graph writes (loss, parts)


class GraphedMicroStep:
    """``MicroStep`` replayed as one CUDA graph per (image shape, box bucket, HSV on device).

    ``__call__(batch)`` takes a training batch on the device and returns ``(loss, parts)``, as ``MicroStep`` does.
    The returned tensors are the graph's static outputs: read them (or copy them) before the next call.
    """

    def __init__(self, step: MicroStep, device: torch.device):
        self.step = step
        self.device = device
        self.stream = torch.cuda.Stream(device)  # warm-up and capture run here, as torch.cuda.graph requires
        self.pool = torch.cuda.graph_pool_handle()  # one pool for all graphs: they never run concurrently
        self.graphs: dict[tuple, _Captured] = {}
        self._warmed: set[tuple] = set()
        self.captures = 0
        self.capture_seconds = 0.0  # host time of the captures (instantiation included): the run's summary

    def __call__(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        boxes, labels = pad_targets(batch["boxes"], batch["labels"], box_bucket(batch["boxes"].shape[1]))
        inputs = {"images": batch["images"], "gains": batch.get("hsv_gains"), "boxes": boxes, "labels": labels}
        key = tuple((name, tuple(t.shape), t.stride(), t.dtype) for name, t in inputs.items() if t is not None)
        captured = self.graphs.get(key)
        if captured is not None:
            for name, static in captured.inputs.items():
                static.copy_(inputs[name], non_blocking=True)
            captured.graph.replay()
            return captured.outputs
        if key not in self._warmed:  # first batch of this shape: the eager step, on the capture stream
            self._warmed.add(key)
            return self._on_side_stream(lambda: self.step(**inputs))
        captured = self._capture(inputs)
        self.graphs[key] = captured
        captured.graph.replay()  # capturing records the work without running it
        return captured.outputs

    def _on_side_stream(self, fn):
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            out = fn()
        current.wait_stream(self.stream)
        return out

    def _capture(self, inputs: dict) -> _Captured:
        started = time.perf_counter()
        for param in self.step.model.parameters():  # accumulation into gradients that outlive the graph
            if param.requires_grad and param.grad is None:
                param.grad = torch.zeros_like(param)
        static = self._on_side_stream(lambda: {k: v.clone() for k, v in inputs.items() if v is not None})
        graph = torch.cuda.CUDAGraph()
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.graph(graph, pool=self.pool, stream=self.stream, capture_error_mode=_CAPTURE_MODE):
            outputs = self.step(static["images"], static.get("gains"), static["boxes"], static["labels"])
        current.wait_stream(self.stream)
        self.captures += 1
        self.capture_seconds += time.perf_counter() - started
        return _Captured(graph, static, outputs)


class GraphedValStep:
    """``ValStep`` replayed as one CUDA graph per (input shape, box bucket): validation during training.

    Validation batches come in a few rect shapes (and box counts) that repeat every epoch; each pair runs eagerly
    the first time, is captured the second and replayed from then on, so a pass costs a few launches per batch
    instead of the forward's and the loss's hundreds. ``model`` must keep its parameter and buffer tensors (the
    EMA updates them in place). The returned maps and parts are the graph's static outputs: use them before the
    next call. The maps come back as the model returns them: YOLO11's list, or YOLO26's ``End2EndMaps``.
    """

    def __init__(self, step: Callable, device: torch.device):
        """``step``: a ``yolo11.evaluation.runner.ValStep``."""
        self.step = step
        self.device = device
        self.stream = torch.cuda.Stream(device)
        self.pool = torch.cuda.graph_pool_handle()
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, dict[str, torch.Tensor], tuple]] = {}
        self._warmed: set[tuple] = set()
        self.capture_seconds = 0.0  # as GraphedMicroStep's

    def __call__(self, images: torch.Tensor, boxes: torch.Tensor | None = None,
                 labels: torch.Tensor | None = None) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        inputs = {"images": images}
        if self.step.criterion is not None:  # padded rows (label -1) leave the loss bitwise unchanged
            inputs["boxes"], inputs["labels"] = pad_targets(boxes, labels, box_bucket(boxes.shape[1]))
        key = tuple((name, tuple(t.shape), t.stride(), t.dtype) for name, t in inputs.items())
        if key in self.graphs:
            graph, static, outputs = self.graphs[key]
            for name, tensor in static.items():
                tensor.copy_(inputs[name], non_blocking=True)
            graph.replay()
            return outputs
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        if key not in self._warmed:  # first batch of this shape: eager, on the capture stream
            self._warmed.add(key)
            with torch.cuda.stream(self.stream):
                outputs = self.step(**inputs)
            current.wait_stream(self.stream)
            return outputs
        started = time.perf_counter()
        with torch.cuda.stream(self.stream):
            static = {name: tensor.clone() for name, tensor in inputs.items()}
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, stream=self.stream, capture_error_mode=_CAPTURE_MODE):
            outputs = self.step(**static)
        current.wait_stream(self.stream)
        self.graphs[key] = (graph, static, outputs)
        self.capture_seconds += time.perf_counter() - started
        graph.replay()
        return outputs
