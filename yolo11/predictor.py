"""Python prediction API: a ``Detector`` loads weights once and turns images into ``Detections``.

    import yolo11
    detector = yolo11.Detector.from_pretrained("runs/train/exp/weights/best.safetensors", conf=0.25)
    for result in detector.predict(["bus.jpg", "zidane.jpg"]):
        print(result.box_names, result.scores, result.boxes)  # boxes (N, 4) xyxy in the image's own pixels
    drawn = detector.predict(rgb_array)[0].plot()  # (H, W, 3) uint8 RGB with the boxes drawn

Each image is letterboxed as Ultralytics' predict does (long side scaled to ``imgsz``, centred, grey 114 padding
only up to a multiple of 32; ``rect=False``: padded to a square), the images of a chunk that share an input shape
go through the model together, and the boxes are mapped back to each image's original pixels. ``yolo11-predict``
is built on this class: the model is called in one place, ``Detector.detect``.
"""

from __future__ import annotations

import json
import numbers
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

from yolo11.data.image_io import load_bgr
from yolo11.data.transforms import LetterBox
from yolo11.devices import select_device
from yolo11.gate import check_class_names, read_yaml
from yolo11.geometry import MAX_STRIDE, rect_input_size
from yolo11.models import YOLO11Detector
from yolo11.postprocess import Postprocessor, head_line, select_head
from yolo11.weights import load_weights

# One image: a file path, an (H, W, 3) uint8 RGB array (or (H, W) grey, or RGBA), or a PIL image.
ImageInput = str | Path | np.ndarray | Any


def read_rgb(path: str | Path) -> np.ndarray:
    """(H, W, 3) uint8 RGB of an image file, its EXIF orientation applied (``image_io.load_bgr``)."""
    return cv2.cvtColor(load_bgr(path), cv2.COLOR_BGR2RGB)


def as_rgb(image: ImageInput) -> np.ndarray:
    """Any ``ImageInput`` as a contiguous (H, W, 3) uint8 RGB array."""
    if isinstance(image, (str, Path)):
        return read_rgb(image)
    if hasattr(image, "convert") and hasattr(image, "mode"):  # a PIL image, without importing PIL
        image = np.asarray(image.convert("RGB"))
    array = np.asarray(image)
    if array.dtype != np.uint8:
        raise ValueError(f"images must be uint8 (0-255), got an array of {array.dtype}")
    if array.ndim == 2:
        array = np.repeat(array[:, :, None], 3, axis=2)
    elif array.ndim == 3 and array.shape[2] == 4:
        array = array[:, :, :3]
    if array.ndim != 3 or array.shape[2] != 3 or min(array.shape[:2]) == 0:
        raise ValueError(f"images must be (H, W, 3) RGB arrays, got shape {array.shape}")
    return np.ascontiguousarray(array)


def letterbox(image: np.ndarray, imgsz: int, rect: bool = False) -> tuple[np.ndarray, tuple[float, float, int, int]]:
    """Resize (H, W, 3) uint8 to fit ``imgsz`` x ``imgsz`` keeping the aspect ratio and pad with grey, to the square
    or, with ``rect``, only up to a multiple of 32 (``rect_input_size``); returns the image and
    ``(gain_h, gain_w, pad_top, pad_left)`` (``yolo11.geometry.letterbox_params``)."""
    shape = rect_input_size(image.shape[:2], imgsz) if rect else (imgsz, imgsz)
    no_boxes = {"boxes": np.zeros((0, 4), np.float32), "labels": np.zeros(0, np.int64)}
    image, target = LetterBox(shape)(image, no_boxes)
    gain_h, gain_w, top, left = target["letterbox"]
    return image, (gain_h, gain_w, int(top), int(left))


def _as_name_list(names: Any) -> list[str]:
    """Names stored as a list or as ``{class_id: name}`` (Ultralytics, data YAMLs) -> a list in class order."""
    if isinstance(names, dict):
        return [str(names[k]) for k in sorted(names)]
    return [str(n) for n in names or []]


def parse_names(names: str | Sequence[str]) -> list[str]:
    """A list of names, a comma-separated string, or a data YAML (its ``names``)."""
    if not isinstance(names, str):
        return _as_name_list(names)
    path = Path(names)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise FileNotFoundError(f"--names: no such data YAML {path}")
        data = read_yaml(path, words_as_text=True) or {}
        if not isinstance(data, dict) or "names" not in data:
            raise ValueError(f"--names: {path} has no 'names' key")
        return check_class_names(data["names"], path)  # the gate: a list, bounded in count and size
    return [n.strip() for n in names.split(",")]


def class_names_for(model: YOLO11Detector, ref: str | Path | None = None,
                    names: str | Sequence[str] | None = None) -> list[str]:
    """The class names to report: ``names`` (list, comma list or data YAML), else the model's (``model.names`` or
    ``model.config["names"]``), else those stored in an Ultralytics ``.pt`` at ``ref``, else the class ids."""
    if names is not None:
        listed = parse_names(names)
    else:
        listed = _as_name_list(getattr(model, "names", None) or model.config.get("names"))
    if not listed and names is None and ref is not None and str(ref).endswith(".pt") and Path(ref).is_file():
        from yolo11.weights.ultralytics import class_names, read_checkpoint

        checkpoint = read_checkpoint(Path(ref))
        listed = class_names(checkpoint.get("ema") or checkpoint.get("model"), ref) or []
    if not listed:
        return [str(i) for i in range(model.num_classes)]
    if len(listed) != model.num_classes:
        raise ValueError(f"{len(listed)} class names for a model of {model.num_classes} classes")
    return listed


class Boxes(np.ndarray):
    """``Detections.boxes``: the ``(N, 4)`` float32 ``x1, y1, x2, y2`` pixels as a NumPy array, which also answers
    Ultralytics' ``Results.boxes`` views as CPU torch tensors: ``xyxy (N, 4)``, ``conf (N,)``, ``cls (N,)`` (float,
    as Ultralytics'), ``xywh``, ``xyxyn``, ``xywhn``, ``data (N, 6)``. Its rows (``boxes[i]``, ``for box in boxes``)
    and row selections answer them too, for their boxes: ``box.xyxy[0]``, ``float(box.conf)``, ``int(box.cls)``."""

    def __new__(cls, xyxy: np.ndarray, scores: np.ndarray, class_ids: np.ndarray, image_size: tuple[int, int]):
        boxes = np.asarray(xyxy, dtype=np.float32).reshape(-1, 4).view(cls)
        boxes._scores, boxes._class_ids, boxes._image_size = scores, class_ids, image_size
        return boxes

    def __array_finalize__(self, parent) -> None:
        # a view or a computed array (boxes[:, :2], boxes.T, boxes * 2) has no scores of its own: row selections
        # (__getitem__) and copies (copy) set theirs
        self._scores = self._class_ids = None
        self._image_size = getattr(parent, "_image_size", None)
        self._numpy = getattr(parent, "_numpy", False)  # .numpy(): the views below as NumPy arrays

    # Ultralytics' Boxes moves between devices and array kinds: these boxes live on the CPU already
    def cpu(self) -> Boxes:
        return self

    def cuda(self, *args, **kwargs) -> Boxes:
        return self

    def to(self, *args, **kwargs) -> Boxes:
        return self

    def numpy(self) -> Boxes:
        """These boxes with ``xyxy``, ``conf``, ``cls``... as NumPy arrays (``r.boxes.cpu().numpy().xyxy``)."""
        out = self.copy()
        out._numpy = True
        return out

    @property
    def id(self) -> None:
        """Track ids: none (no tracker here), as Ultralytics' ``boxes.id`` of a prediction."""
        return None

    @property
    def is_track(self) -> bool:
        return False

    @property
    def orig_shape(self) -> tuple[int, int]:
        """``(height, width)`` of the image, as Ultralytics' ``boxes.orig_shape``."""
        return self._image_size

    def _out(self, values: torch.Tensor):
        return values.numpy() if self._numpy else values

    def copy(self, order: str = "C") -> Boxes:
        out = super().copy(order)
        out._scores, out._class_ids, out._numpy = self._scores, self._class_ids, self._numpy
        return out

    def __copy__(self) -> Boxes:
        return self.copy()

    def __deepcopy__(self, memo: dict) -> Boxes:
        return Boxes(np.array(self), None if self._scores is None else self._scores.copy(),
                     None if self._class_ids is None else self._class_ids.copy(), self._image_size)

    def __reduce__(self):
        return Boxes, (np.asarray(self), self._scores, self._class_ids, self._image_size)

    def __getitem__(self, key):
        out = super().__getitem__(key)
        rows = isinstance(key, int | np.integer | slice) or (not isinstance(key, tuple) and np.ndim(key) == 1)
        if isinstance(out, Boxes) and self._scores is not None and self.ndim == 2 and rows:  # boxes[i], [mask]
            out._scores, out._class_ids = np.atleast_1d(self._scores[key]), np.atleast_1d(self._class_ids[key])
        return out

    def __iter__(self):
        return (self[i] for i in range(len(self))) if self.ndim == 2 else super().__iter__()

    def _rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._scores is None:
            raise AttributeError("these boxes are not rows of a Detections' boxes (a computed array or a column "
                                 "view): take xyxy, conf and cls from r.boxes, r.boxes[i] or r.boxes[mask]")
        return np.asarray(self, dtype=np.float32).reshape(-1, 4), self._scores, self._class_ids

    @property
    def xyxy(self) -> torch.Tensor:
        return self._out(torch.from_numpy(self._rows()[0].copy()))

    @property
    def conf(self) -> torch.Tensor:
        return self._out(torch.from_numpy(np.asarray(self._rows()[1], dtype=np.float32).copy()))

    @property
    def cls(self) -> torch.Tensor:
        return self._out(torch.from_numpy(np.asarray(self._rows()[2], dtype=np.float32)))

    @property
    def data(self) -> torch.Tensor:
        """``(N, 6)`` rows ``x1, y1, x2, y2, conf, cls``."""
        return self._out(torch.cat((self._tensor("xyxy"), self._tensor("conf")[:, None],
                                    self._tensor("cls")[:, None]), 1))

    @property
    def xywh(self) -> torch.Tensor:
        x1, y1, x2, y2 = self._tensor("xyxy").unbind(1)
        return self._out(torch.stack(((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1), 1))

    @property
    def xyxyn(self) -> torch.Tensor:
        return self._out(self._tensor("xyxy") / self._image_scale())

    @property
    def xywhn(self) -> torch.Tensor:
        return self._out(self._tensor("xywh") / self._image_scale())

    def _tensor(self, name: str) -> torch.Tensor:
        """The view ``name`` as a tensor, whatever ``.numpy()`` made of this object."""
        return torch.as_tensor(getattr(self, name))

    def _image_scale(self) -> torch.Tensor:
        height, width = self._image_size
        return torch.tensor([width, height, width, height], dtype=torch.float32)


def yolo_txt_lines(boxes: Sequence, scores: Sequence, class_ids: Sequence, image_size: tuple[int, int],
                   save_conf: bool = False) -> list[str]:
    """``class xc yc w h`` lines (``... score`` with ``save_conf``, as Ultralytics' ``save_conf``) of xyxy pixel
    ``boxes``, coordinates normalised by the image's ``(height, width)``: without scores the files are YOLO labels,
    reusable as pseudo-labels (``yolo11 predict`` and ``yolo11 val`` ``--save-txt``)."""
    height, width = image_size
    lines = []
    for (x1, y1, x2, y2), score, cls in zip(boxes, scores, class_ids, strict=True):
        xc, yc, w, h = (x1 + x2) / 2 / width, (y1 + y2) / 2 / height, (x2 - x1) / width, (y2 - y1) / height
        lines.append(f"{int(cls)} {xc:.6f} {yc:.6f} {w:.6f} {h:.6f}" + (f" {score:.5f}" if save_conf else ""))
    return lines


@dataclass(frozen=True, eq=False)
class Detections:
    """The detections of one image, best score first.

    Attributes:
        boxes: ``(N, 4)`` float32 ``x1, y1, x2, y2`` in the original image's pixels (a ``Boxes``: a NumPy array
            that also has Ultralytics' ``r.boxes.xyxy``, ``.conf``, ``.cls`` ... as torch tensors).
        scores: ``(N,)`` float32 confidences.
        class_ids: ``(N,)`` int64 class indices.
        names: the class map ``{class id: name}`` of the model, as Ultralytics' ``Results.names``.
        image_size: the original image's ``(height, width)``.
        image: the (H, W, 3) uint8 RGB image that was detected (for ``plot``); ``None`` when not kept.
        source: the file the image came from, when it came from a file.
        speed: ``{"preprocess", "inference", "postprocess"}`` milliseconds (``YOLO.predict``'s results), as
            Ultralytics' ``Results.speed``.
    """

    boxes: np.ndarray
    scores: np.ndarray
    class_ids: np.ndarray
    names: dict[int, str]
    image_size: tuple[int, int]
    image: np.ndarray | None = field(default=None, repr=False)
    source: str | None = None
    # milliseconds of the image's share of its batch, as Ultralytics' Results.speed (YOLO.predict's results)
    speed: dict[str, float] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.boxes, Boxes):  # made from plain arrays: the boxes answer Ultralytics' views too
            object.__setattr__(self, "boxes", Boxes(self.boxes, self.scores, self.class_ids, self.image_size))

    @classmethod
    def from_rows(cls, rows: torch.Tensor, class_names: Sequence[str], image_size: Sequence[int],
                  image: np.ndarray | None = None, source: str | None = None) -> Detections:
        """From ``(N, 6)`` rows ``[x1, y1, x2, y2, score, class]`` (``Postprocessor``'s output) of an image of
        ``image_size`` (height, width)."""
        rows = rows.detach().cpu()
        return cls(boxes=rows[:, :4].to(torch.float32).numpy(), scores=rows[:, 4].to(torch.float32).numpy(),
                   class_ids=rows[:, 5].to(torch.int64).numpy(), names=dict(enumerate(class_names)),
                   image_size=(int(image_size[0]), int(image_size[1])), image=image, source=source)

    def __len__(self) -> int:
        return len(self.scores)

    @property
    def box_names(self) -> tuple[str, ...]:
        """The class name of each box, in box order (``names[class_id]`` per box)."""
        return tuple(self.names.get(int(k), str(int(k))) for k in self.class_ids)

    def to_dict(self) -> dict:
        """``{"width", "height", "detections": [{"box": [x1, y1, x2, y2] px, "score", "class", "name"}]}`` (JSON)."""
        return {"width": self.image_size[1], "height": self.image_size[0], "detections": [
            {"box": [float(v) for v in box], "score": float(score), "class": int(cls), "name": name}
            for box, score, cls, name in zip(self.boxes, self.scores, self.class_ids, self.box_names, strict=True)]}

    def plot(self, image: np.ndarray | None = None, *, conf: bool = True, labels: bool = True,
             line_width: int | None = None) -> np.ndarray:
        """A copy of the image (``image``, else the one kept) with boxes and ``name score`` captions, RGB uint8;
        Ultralytics' ``conf=False`` leaves the scores out, ``labels=False`` the captions, ``line_width`` sets the
        boxes' lines."""
        from yolo11.evaluation.plots import draw_detections  # matplotlib's import only when drawing

        image = self.image if image is None else image
        if image is None:
            raise ValueError("no image to draw on: pass one to plot(image)")
        # draw_detections indexes the names by class id: the class map's list, not the per-box names
        class_list = [self.names.get(k, str(k)) for k in range(max(self.names, default=-1) + 1)]
        return draw_detections(image, self.boxes, self.class_ids, class_list, scores=self.scores if conf else None,
                               labels=labels, line_width=line_width)

    # Ultralytics' Results.boxes views as NumPy arrays, from the boxes' own (Boxes): normalised by the image size
    # (xyxyn, xywhn) and centre-size pixels (xywh), each (N, 4) float32.
    @property
    def xyxyn(self) -> np.ndarray:
        return self.boxes.xyxyn.numpy()

    @property
    def xywh(self) -> np.ndarray:
        return self.boxes.xywh.numpy()

    @property
    def xywhn(self) -> np.ndarray:
        return self.boxes.xywhn.numpy()

    # Ultralytics' Results names for the image, its size and its file, which a typical snippet reads.
    @property
    def orig_shape(self) -> tuple[int, int]:
        return self.image_size

    @property
    def path(self) -> str | None:
        return self.source

    @property
    def orig_img(self) -> np.ndarray | None:
        """The image in BGR, as Ultralytics' ``orig_img`` (``image`` is RGB)."""
        return None if self.image is None else np.ascontiguousarray(self.image[..., ::-1])

    def save(self, path: str | Path | None = None, filename: str | Path | None = None) -> Path:
        """Write ``plot()`` to ``path`` (or ``filename``, Ultralytics' keyword; any format OpenCV writes, by its
        suffix; default ``results_<source's name>`` in the current folder, as Ultralytics' ``Results.save()``);
        returns the path."""
        path = Path(path or filename or f"results_{Path(self.source or 'image0.jpg').name}")
        path.parent.mkdir(parents=True, exist_ok=True)
        if not cv2.imwrite(str(path), cv2.cvtColor(self.plot(), cv2.COLOR_RGB2BGR)):
            raise OSError(f"cannot write {path} (an image suffix OpenCV knows: .jpg, .png ...)")
        return path

    def txt_lines(self, save_conf: bool = False) -> list[str]:
        """``yolo_txt_lines`` of these detections."""
        return yolo_txt_lines(self.boxes.tolist(), self.scores.tolist(), self.class_ids.tolist(), self.image_size,
                              save_conf)

    def save_txt(self, txt_file: str | Path, save_conf: bool = False) -> Path:
        """Append ``txt_lines`` to ``txt_file``, as Ultralytics' ``Results.save_txt`` does and ``yolo11 predict
        --save-txt`` writes them: nothing (no file) without detections."""
        path = Path(txt_file)
        lines = self.txt_lines(save_conf)
        if lines:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as fh:
                fh.writelines(line + "\n" for line in lines)
        return path

    def verbose(self) -> str:
        """``1 person, 2 cars, `` (Ultralytics' ``Results.verbose``: by class id, an ``s`` for more than one) or
        ``(no detections), ``: the counts of a predict line."""
        if not len(self):
            return "(no detections), "
        counts = Counter(int(k) for k in self.class_ids)
        return "".join(f"{counts[k]} {self.names.get(k, str(k))}{'s' * (counts[k] > 1)}, " for k in sorted(counts))

    def to_json(self, normalize: bool = False, decimals: int = 5) -> str:
        """``summary()`` as JSON text, as Ultralytics' ``Results.to_json``."""
        return json.dumps(self.summary(normalize, decimals), indent=2)

    def summary(self, normalize: bool = False, decimals: int = 5) -> list[dict]:
        """Ultralytics' ``Results.summary()``: per box ``{"name", "class", "confidence", "box": {"x1", "y1", "x2",
        "y2"}}``, best first; ``normalize``: the box as fractions of the image's width and height."""
        height, width = self.image_size
        scale = np.array([width, height, width, height], np.float64) if normalize else np.ones(4)
        return [{"name": name, "class": int(cls), "confidence": round(float(score), decimals),
                 "box": dict(zip(("x1", "y1", "x2", "y2"), (round(float(v), decimals) for v in box / scale),
                                 strict=True))}
                for box, score, cls, name in zip(self.boxes, self.scores, self.class_ids, self.box_names, strict=True)]

    def cpu(self) -> Detections:
        """Itself: the detections are host arrays already (Ultralytics' ``r.cpu()`` / ``r.numpy()`` habits)."""
        return self

    numpy = cpu

    def show(self) -> None:
        """Open ``plot()`` in the system's image viewer (PIL's ``Image.show``, as Ultralytics' ``Results.show``)."""
        from PIL import Image

        Image.fromarray(self.plot()).show()


@dataclass(frozen=True)
class ImageTiming:
    """One image's network input ``(height, width)`` and its milliseconds in each stage of ``Detector.detect``
    (its share of the batch it went through, as Ultralytics' ``Results.speed``)."""

    input_shape: tuple[int, int]
    preprocess_ms: float  # letterbox, stacking, the copy to the device
    inference_ms: float
    postprocess_ms: float  # NMS (or top-k) and the mapping back to the image's pixels


class Detector:
    """A model with its class names and prediction settings; ``predict`` images, get ``Detections``."""

    def __init__(self, model: YOLO11Detector, class_names: Sequence[str] | None = None, *, imgsz: int | None = None,
                 conf: float = 0.25, iou: float = 0.7, max_det: int = 300, rect: bool = True, batch: int = 8,
                 device: str | torch.device | None = None, nms: bool | None = None,
                 classes: Sequence[int] | int | None = None) -> None:
        """``model`` is moved to ``device`` and put in eval mode (``from_pretrained`` also fuses it). ``nms`` picks a
        YOLO26 model's head as Ultralytics' predict does: ``None`` (default) or ``True`` the one-to-many head with
        NMS, ``False`` the one-to-one head's top-k without NMS (a ``ValueError`` for YOLO11, which has no such
        head); ``head`` says which in one line. ``classes``: keep only detections of these class ids, as
        Ultralytics' ``classes`` (each box's best class filtered before ``max_det``). ``imgsz`` default 640; an
        ONNX export with a static input runs at its own size, square, as Ultralytics' runtime (a line says so where
        another size was asked)."""
        if getattr(model, "exported", False):
            imgsz, rect, note = model.input_settings(imgsz, rect)
            if note:
                print(note, file=sys.stderr)
        imgsz = 640 if imgsz is None else imgsz
        for name, value, kind in (("imgsz", imgsz, numbers.Integral), ("batch", batch, numbers.Integral),
                                  ("max_det", max_det, numbers.Integral), ("conf", conf, numbers.Real),
                                  ("iou", iou, numbers.Real)):
            if isinstance(value, bool) or not isinstance(value, kind):  # '640' or None compared with ints below
                raise ValueError(f"{name}={value!r} is not {'an integer' if kind is numbers.Integral else 'a number'}")
        if imgsz <= 0 or imgsz % MAX_STRIDE:
            raise ValueError(f"imgsz must be a positive multiple of {MAX_STRIDE}, got {imgsz}")
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        for name, value in (("conf", conf), ("iou", iou)):  # as Ultralytics checks them: conf=25 found nothing
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value} is not in [0, 1] (a fraction: 0.25, not 25)")
        self.classes = None if classes is None else torch.tensor([classes] if isinstance(classes, int) else
                                                                 list(classes), dtype=torch.int64)
        if self.classes is not None and not all(0 <= k < model.num_classes for k in self.classes.tolist()):
            raise ValueError(f"classes={self.classes.tolist()}: class ids of this model are 0-{model.num_classes - 1}")
        if max_det < 1:
            raise ValueError(f"max_det must be at least 1, got {max_det}")
        self.max_det = max_det
        self.device = select_device(device)
        self.model = model.to(self.device).eval()
        self.class_names = list(class_names) if class_names else [str(i) for i in range(model.num_classes)]
        if len(self.class_names) != model.num_classes:
            raise ValueError(f"{len(self.class_names)} class names for a model of {model.num_classes} classes")
        self.imgsz, self.rect, self.batch = imgsz, rect, batch
        self.timings: list[ImageTiming] = []  # per image of the last predict() call, in order
        self.detect_timings: list[ImageTiming] = []  # per image of the last detect() call
        name = model.config.get("name", type(model).__name__)
        # an exported graph (tools/onnx_model.py) has the head it was exported with; our model picks by nms
        self.end2end = model.select_head(nms) if hasattr(model, "select_head") else \
            select_head(name, model.end2end, nms)
        self.head = head_line(name, model.end2end, self.end2end)
        # Multi-label NMS is for mAP at a low threshold; a prediction shows one class per box, as Ultralytics.
        # The one-to-one top-k keeps max(max_det, 300) candidates before the conf filter, as Ultralytics' predict.
        # With classes, every detection leaves the postprocessor and max_det applies after the class filter, as
        # Ultralytics filters before it (its NMS keeps at most max_nms candidates: 30000).
        self.postprocessor = Postprocessor(conf=conf, iou=iou, max_det=max_det if classes is None else 30000,
                                           multi_label=False, strides=model.strides, reg_max=model.reg_max,
                                           end2end=self.end2end, topk=max(max_det, 300))

    @classmethod
    def from_pretrained(cls, ref: str | Path, *, names: str | Sequence[str] | None = None,
                        device: str | torch.device | None = None, imgsz: int | None = None, conf: float = 0.25,
                        iou: float = 0.7, max_det: int = 300, rect: bool = True, batch: int = 8,
                        nms: bool | None = None, classes: Sequence[int] | int | None = None) -> Detector:
        """Load weights through ``yolo11.weights.load_weights(ref)`` (a ``.safetensors`` file, a
        ``save_pretrained`` folder, an Ultralytics ``.pt``..., YOLO11 or YOLO26; an ``.onnx`` export runs in
        onnxruntime, ``yolo11.tools.onnx_model``), fuse them, and take the class
        names from ``names``, else the model, else the Ultralytics checkpoint, else the class ids; ``imgsz``
        default: the size the weights were trained at where their run recorded it (as ``yolo11-predict`` and
        Ultralytics' ``YOLO(...).predict``), else 640; ``nms`` and ``classes``: see ``Detector``."""
        from yolo11.tools.onnx_model import OnnxModel, is_onnx
        from yolo11.tools.run_record import trained_with

        if imgsz is None:
            imgsz = trained_with(ref).imgsz or 640

        model = OnnxModel(ref, device) if is_onnx(ref) else load_weights(ref).fuse()  # an export runs in onnxruntime
        return cls(model, class_names_for(model, ref, names), imgsz=imgsz, conf=conf, iou=iou, max_det=max_det,
                   rect=rect, batch=batch, device=device, nms=nms, classes=classes)

    @torch.inference_mode()
    def detect(self, images: Sequence[np.ndarray]) -> list[torch.Tensor]:
        """Per (H, W, 3) uint8 RGB image: ``(n, 6)`` CPU rows ``[x1, y1, x2, y2, score, class]`` in its pixels.

        All images go through the model at once, in groups of one input shape (with ``rect`` each image gets its
        own smallest shape); callers chunk them.
        """
        started = time.perf_counter()
        boxed = [letterbox(image, self.imgsz, self.rect) for image in images]
        letterbox_s = (time.perf_counter() - started) / max(len(images), 1)
        detections: list[torch.Tensor | None] = [None] * len(boxed)
        timings: list[ImageTiming | None] = [None] * len(boxed)
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, (image, _) in enumerate(boxed):
            groups.setdefault(image.shape, []).append(i)
        for members in groups.values():
            started = time.perf_counter()
            # uint8 on the device (a quarter of float32's transfer); the model scales it to [0, 1]
            batch = torch.from_numpy(np.stack([boxed[i][0] for i in members])).permute(0, 3, 1, 2).to(self.device)
            ratio_pad = torch.tensor([boxed[i][1] for i in members], dtype=torch.float32)
            sizes = torch.tensor([images[i].shape[:2] for i in members])
            moved = time.perf_counter()
            maps = self.model(batch)
            if self.device.type == "cuda":  # the forward's own time, not the copy that waits for it
                torch.cuda.synchronize(self.device)
            inferred = time.perf_counter()
            if hasattr(maps, "one2one"):  # a YOLO26 model's End2EndMaps: only the chosen branch leaves the device
                maps = maps.one2one if self.end2end else maps.one2many
            feats = maps.cpu() if isinstance(maps, torch.Tensor) else [f.cpu() for f in maps]  # a graph's output0
            for i, det in zip(members, self.postprocessor(feats, ratio_pad, sizes), strict=True):
                detections[i] = det if self.classes is None else det[torch.isin(det[:, 5].long(),
                                                                                 self.classes)][:self.max_det]
            share = 1e3 / len(members)  # each image's part of its group's milliseconds
            for i in members:
                timings[i] = ImageTiming(tuple(batch.shape[2:]), letterbox_s * 1e3 + (moved - started) * share,
                                         (inferred - moved) * share, (time.perf_counter() - inferred) * share)
        self.detect_timings = timings
        return detections

    def predict(self, images: ImageInput | Iterable[ImageInput], batch: int | None = None,
                keep_images: bool = True) -> list[Detections]:
        """Detect objects in one image or an iterable of them (paths, arrays, PIL images; a ``(B, H, W, 3)`` array
        is a list), ``batch`` (default: the detector's) at a time; one ``Detections`` per image, in order.
        ``keep_images=False`` does not keep each image in its result (less memory; ``plot`` then needs one)."""
        if isinstance(images, np.ndarray) and images.ndim == 4:
            images = list(images)
        elif isinstance(images, (str, Path, np.ndarray)) or hasattr(images, "convert"):  # one image (or PIL's)
            images = [images]
        else:
            images = list(images)
        step = batch or self.batch
        results: list[Detections] = []
        self.timings = []  # this call's, image by image
        for start in range(0, len(images), step):
            chunk = images[start:start + step]
            arrays = [as_rgb(image) for image in chunk]
            rows_per_image = self.detect(arrays)
            self.timings += self.detect_timings
            for item, array, rows in zip(chunk, arrays, rows_per_image, strict=True):
                source = str(item) if isinstance(item, (str, Path)) else None
                results.append(Detections.from_rows(rows, self.class_names, array.shape[:2],
                                                    array if keep_images else None, source))
        return results
