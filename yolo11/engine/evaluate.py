"""Validation during training: the ``yolo11-val`` runner on the model being trained, with the validation losses."""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from copy import deepcopy

import torch
from accelerate import Accelerator
from accelerate.utils import AutocastKwargs, broadcast
from torch import nn

from yolo11.data import DetectionSource, LoaderConfig, build_val_stream
from yolo11.engine.compile import CompiledLoss
from yolo11.engine.config import TrainConfig
from yolo11.engine.cuda_graphs import GraphedValStep
from yolo11.engine.device_feed import DeviceFeed, TimedIterable
from yolo11.engine.plan import RunPlan
from yolo11.evaluation import CocoEvaluator, EvaluationResult, ValidationStopped, predict_and_score
from yolo11.evaluation.runner import ValStep
from yolo11.postprocess import Postprocessor


@dataclasses.dataclass
class PendingValidation:
    """A validation whose predictions are in while the evaluator scores them on another thread."""

    scored: Future  # of the EvaluationResult
    data_seconds: float  # waiting for the loader's batches

    def result(self) -> EvaluationResult:
        """The validation, once scored (a scoring error is raised here)."""
        return dataclasses.replace(self.scored.result(), data_seconds=self.data_seconds)


class Validator:
    """The validation loader, post-processor and evaluator of a training run, built once.

    The loader is a ``build_val_stream``, iterated once for the whole run: each validation takes one pass of
    batches from it, which its workers prepared while the model trained."""

    def __init__(self, accelerator: Accelerator, loader, postprocessor: Postprocessor, evaluator: CocoEvaluator,
                 channels_last: bool, num_samples: int, cuda_graphs: bool = False,
                 trained_channels_last: bool | None = None):
        """``channels_last``: the layout validation runs in; ``trained_channels_last``: the trained model's (None:
        the same). Where they differ, validation runs a copy of the model in its own layout."""
        self.accelerator = accelerator
        self.loader = loader
        self._batches = None  # the loader's iterator, started by the first validation
        self.postprocessor = postprocessor
        self.evaluator = evaluator
        self.channels_last = channels_last
        self.trained_channels_last = channels_last if trained_channels_last is None else trained_channels_last
        # id(model) -> (model, its copy in our layout, their state tensors paired in _foreach_groups)
        self._copies: dict[int, tuple[nn.Module, nn.Module, list]] = {}
        self.num_samples = num_samples
        self.cuda_graphs = cuda_graphs
        self._graphed: dict[tuple, GraphedValStep] = {}  # by ids of the validated module and the criterion
        self._scoring: ThreadPoolExecutor | None = None  # run(score_later=True)'s thread, started by the first

    @classmethod
    def build(cls, config: TrainConfig, plan: RunPlan, source: DetectionSource, accelerator: Accelerator,
              model: nn.Module) -> Validator:
        """Ultralytics' rect validation batches (``plan.val_batch_size`` per process); the post-processor decodes
        with ``model``'s strides and ``reg_max``; a YOLO26 ``model``'s head as ``--val-nms`` says (default: the
        one-to-many head with NMS; false: the one-to-one top-k)."""
        run, data = config.run, config.data
        loader_config = LoaderConfig(imgsz=data.imgsz, batch_size=plan.val_batch_size, workers=plan.workers,
                                     augment=False, shuffle=False, seed=run.seed, max_boxes=data.max_boxes,
                                     rect=run.val_rect, cache_images=plan.cache_images and run.val_interval > 0,
                                     pin_memory=plan.pin_memory)
        loader = build_val_stream(source, loader_config, num_processes=accelerator.num_processes,
                                  process_index=accelerator.process_index)
        if not run.val_nms and not model.end2end:
            raise ValueError(f"--val-nms false selects YOLO26's one-to-one head; {model.config['name']} has none "
                             "(it validates with NMS)")
        postprocessor = Postprocessor(conf=run.val_conf, iou=run.val_iou, max_det=run.max_det,
                                      strides=model.strides, reg_max=model.reg_max,
                                      end2end=model.end2end and not run.val_nms)
        # the run plan's choice of where to score: this process's device, or the CPU
        device = accelerator.device if plan.eval_device != "cpu" else "cpu"
        evaluator = CocoEvaluator(source.dataset, source.class_names, backend="fast", device=device)
        return cls(accelerator, loader, postprocessor, evaluator, plan.val_channels_last, run.val_images,
                   cuda_graphs=plan.cuda_graphs.enabled, trained_channels_last=plan.channels_last)

    def capture_seconds(self) -> float:
        """Host seconds spent capturing validation's CUDA graphs so far."""
        return sum(step.capture_seconds for step in self._graphed.values())

    def close(self) -> None:
        """Stop the loader's workers (and drop the batches they built ahead) and the scoring thread."""
        self._batches = None
        if self._scoring is not None:
            self._scoring.shutdown()
            self._scoring = None

    def run(self, model: nn.Module, criterion: nn.Module, plots: bool = True, images: bool = True,
            all_stats: bool = True, stop: Callable[[], bool] | None = None,
            score_later: bool = False) -> EvaluationResult | PendingValidation:
        """Validate ``model`` (the EMA's or the trained one, wrapped or not) with ``criterion`` for the losses.
        ``plots``: the metrics carry the data of the plots (PR curve, confusion matrix); ``images``: the result
        carries sample images with their predictions; ``all_stats``: the 12 COCO stats, not only the headline
        ones that an epoch logs. Each costs milliseconds that most epochs of a small dataset need not pay.

        Neither is compiled: rect batches come in many shapes, and each would be another compiled graph, for a
        pass that runs once per epoch without gradients. Where the run has CUDA graphs (``--cuda-graphs``), the
        forward and the loss are replayed as one graph per rect shape and box bucket (``GraphedValStep``): they
        repeat every epoch.

        With several processes, every process first takes the main process's buffers: each one's BatchNorm
        running statistics (and so its EMA's) follow its own batches, DDP re-syncs them only at the next forward,
        and the checkpoint holds the main process's, which ``yolo11-val`` scores.

        ``stop``: this process's stop request; raises ``ValidationStopped`` on every process when one asked.

        ``score_later`` (one process): return once the predictions are in, the evaluator scoring them on this
        validator's thread (``PendingValidation``); nothing may use the evaluator until its ``result()``."""
        model = self.accelerator.unwrap_model(model, keep_torch_compile=False)
        if self.accelerator.num_processes > 1:
            broadcast(list(model.buffers()), from_process=0)
        model = self._in_layout(model)
        criterion = criterion.loss if isinstance(criterion, CompiledLoss) else criterion
        if self._batches is None:
            self._batches = iter(self.loader)
        batches = self.loader.batch_sampler.batches_per_pass
        one_pass = TimedIterable(DeviceFeed(itertools.islice(self._batches, batches), self.accelerator.device))
        step = None
        if self.cuda_graphs:
            step = self._graphed.get((id(model), id(criterion)))
            if step is None:
                autocast = functools.partial(self.accelerator.autocast, AutocastKwargs(cache_enabled=False))
                step = self._graphed[id(model), id(criterion)] = GraphedValStep(ValStep(model, autocast, criterion),
                                                                                self.accelerator.device)
        if score_later and self._scoring is None:
            self._scoring = ThreadPoolExecutor(1, thread_name_prefix="scoring")
        try:
            result = predict_and_score(self.accelerator, model, one_pass, self.postprocessor, self.evaluator,
                                       criterion=criterion, channels_last=self.channels_last,
                                       num_samples=self.num_samples if images else 0, batches=batches,
                                       plot_data=plots, all_stats=all_stats, step=step, stop=stop,
                                       scoring=self._scoring if score_later else None)
        except ValidationStopped:
            self._batches = None  # part of a pass was taken: a later validation starts a fresh one
            raise
        if score_later:
            return PendingValidation(result, one_pass.seconds)
        return dataclasses.replace(result, data_seconds=one_pass.seconds)

    def _in_layout(self, model: nn.Module) -> nn.Module:
        """``model`` itself where it is in validation's layout; else its copy in that layout, made at the first
        validation and refreshed from ``model`` at each (one batched copy of its tensors): the same object every
        time, so its graphs are captured once."""
        if self.trained_channels_last == self.channels_last:
            return model
        kept = self._copies.get(id(model))
        if kept is None:
            layout = torch.channels_last if self.channels_last else torch.contiguous_format
            copy = deepcopy(model).requires_grad_(False).to(memory_format=layout)
            for parameter in copy.parameters():
                parameter.grad = None  # deepcopy copies a trained model's gradients too: validation needs none
            # the tensors paired once: both models keep theirs (updated in place), and a state_dict walk per
            # validation costs milliseconds on the host
            groups = _foreach_groups(list(model.state_dict().values()), list(copy.state_dict().values()))
            self._copies[id(model)] = (model, copy, groups)  # the model kept: its id names it meanwhile
            return copy
        _, copy, groups = kept
        with torch.no_grad():
            for sources, targets in groups:
                torch._foreach_copy_(targets, sources)
        return copy


def _foreach_groups(sources: list[torch.Tensor], targets: list[torch.Tensor]) -> list[tuple[list, list]]:
    """The (source, target) pairs grouped by dtype and by whether their strides agree: a ``_foreach_copy_`` takes
    its fused path only where every pair of its lists shares one dtype and one layout, and copies tensor by tensor
    otherwise (one launch each: ~500 for yolo11n, whose int64 BatchNorm counters and channels_last convolution
    weights would send every tensor the slow way)."""
    groups: dict[tuple, tuple[list, list]] = {}
    for source, target in zip(sources, targets, strict=True):
        group = groups.setdefault((source.dtype, target.dtype, source.stride() == target.stride()), ([], []))
        group[0].append(source)
        group[1].append(target)
    return list(groups.values())
