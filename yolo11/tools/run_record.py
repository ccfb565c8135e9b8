"""What a weights file says about the run that trained it, so that ``yolo11 val best.safetensors`` needs no
``data=`` and ``predict``/``export`` of a model trained at 160 px run at 160, as Ultralytics reads ``imgsz`` and
``data`` from a checkpoint's ``train_args``.

Where it is recorded, by kind of weights:

- our ``.safetensors`` (and ``save_pretrained`` folders): their metadata holds the model config only, so the run's
  ``config.yaml`` is read, beside the ``weights/`` folder the file lies in (``<run>/weights/best.safetensors``,
  ``<run>/hub``): ``data.imgsz``, ``data.data``, ``data.val_split``, ``data.images``, ``data.bbox_format``,
  ``data.single_cls`` and ``run.val_nms`` (the head training validated);
- an Ultralytics ``.pt``: ``train_args`` ``imgsz`` and ``data`` (and ``split``, ``single_cls``), what Ultralytics'
  own ``YOLO(pt)`` takes from it;
- an ``.onnx`` export: its metadata ``imgsz`` (the graph's input size).

A value given on the command line always wins; the tools print one line naming the values taken and where from.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

RUN_CONFIG = "config.yaml"  # yolo11.engine.resume.RUN_CONFIG: written into every run folder when training starts


@dataclass(frozen=True)
class TrainedWith:
    """The settings recorded for the run that trained some weights (``None``: not recorded) and where they were
    found (``origin``: a file, or a part of one)."""

    imgsz: int | None = None  # pixels
    data: str | None = None  # the --data spec as training resolved it
    split: str | None = None  # the split training validated on
    images: str | None = None  # the image folder of a COCO json --data
    bbox_format: str | None = None
    nms: bool | None = None  # False: training validated YOLO26's NMS-free one-to-one head
    single_cls: bool | None = None  # True: trained (and validated) as one class
    origin: str = ""

    def pick(self, name: str, given: Any, default: Any = None) -> tuple[Any, bool]:
        """``given`` if set, else the recorded value, else ``default``; and whether the recorded one was taken."""
        if given is not None:
            return given, False
        recorded = getattr(self, name)
        return (recorded, True) if recorded is not None else (default, False)


def run_folder(weights: Path) -> Path | None:
    """The run folder of weights saved by training (``<run>/weights/*.safetensors``, ``<run>/hub``), when its
    ``config.yaml`` is there."""
    weights = weights.resolve()
    for candidate in (weights.parent.parent if weights.parent.name == "weights" else None,
                      weights.parent if weights.is_dir() and weights.name == "hub" else None):
        if candidate is not None and (candidate / RUN_CONFIG).is_file():
            return candidate
    return None


def read_run_config(path: Path) -> TrainedWith:
    """The settings of a run's ``config.yaml`` (sections ``data`` and ``run``, as ``engine.config.save_config``
    writes them)."""
    from yolo11.gate import read_yaml

    config = read_yaml(path) or {}
    data = config.get("data") if isinstance(config, dict) else None
    run = config.get("run") if isinstance(config, dict) else None
    data, run = data if isinstance(data, dict) else {}, run if isinstance(run, dict) else {}
    return _checked(TrainedWith(imgsz=data.get("imgsz"), data=data.get("data"), split=data.get("val_split"),
                                images=data.get("images"), bbox_format=data.get("bbox_format"),
                                nms=run.get("val_nms"), single_cls=data.get("single_cls"), origin=str(path)))


def read_train_args(path: Path) -> TrainedWith:
    """``imgsz``, ``data`` and ``split`` of an Ultralytics checkpoint's ``train_args`` (restricted unpickling)."""
    from yolo11.weights.ultralytics import read_checkpoint

    args = read_checkpoint(path).get("train_args") or {}
    if not isinstance(args, dict):
        return TrainedWith()
    imgsz = args.get("imgsz")
    if isinstance(imgsz, (list, tuple)) and imgsz:  # Ultralytics allows [h, w]; ours are square
        imgsz = max(imgsz)
    return _checked(TrainedWith(imgsz=imgsz, data=args.get("data"), split=args.get("split"),
                                single_cls=args.get("single_cls"), origin=f"{path}'s train_args"))


def read_onnx_imgsz(path: Path) -> TrainedWith:
    """The ``imgsz`` of an ONNX export's metadata (``tools/onnx_export.onnx_metadata``, Ultralytics' keys)."""
    from yolo11.tools.onnx_model import read_metadata

    metadata = read_metadata(path)
    return _checked(TrainedWith(imgsz=max(metadata.imgsz) if metadata.imgsz else None,
                                origin=f"{path}'s metadata"))


def _checked(record: TrainedWith) -> TrainedWith:
    """Values of the wrong type (a hand-edited file) count as not recorded."""
    types = {"imgsz": int, "data": str, "split": str, "images": str, "bbox_format": str, "nms": bool,
             "single_cls": bool}
    values = {f.name: getattr(record, f.name) for f in fields(record)}
    for name, kind in types.items():
        value = values[name]
        if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
            values[name] = None
    return TrainedWith(**values)


def trained_with(ref: str | Path) -> TrainedWith:
    """What the weights ``ref`` record about their training (nothing for Hub references and official names:
    Ultralytics' own checkpoints are read once they are local files)."""
    path = Path(ref).expanduser()
    if not path.exists():
        return TrainedWith()
    from yolo11.tools.onnx_model import is_onnx

    if is_onnx(path):
        return read_onnx_imgsz(path)
    from yolo11.weights.torch_zip import is_zip

    if path.is_file() and (path.suffix in (".pt", ".pth") or is_zip(path)):
        return read_train_args(path)
    folder = run_folder(path)
    return read_run_config(folder / RUN_CONFIG) if folder is not None else TrainedWith()


def settings_line(taken: dict[str, Any], record: TrainedWith, weights: str) -> str | None:
    """The one line that says which values came from the weights' record: ``imgsz 160, data coco8.yaml from
    runs/train/exp/config.yaml (the run of best.safetensors; imgsz=, data= override)``; None when none did."""
    if not taken:
        return None
    listed = ", ".join(f"{name} {value}" for name, value in taken.items())
    overrides = ", ".join(f"{name}=" for name in taken)
    return f"{listed} from {record.origin} (recorded for {weights}; {overrides} to override)"
