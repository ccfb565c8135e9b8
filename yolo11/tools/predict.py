"""Detect objects in images and videos: drawn copies, a JSON of all detections and, optionally, YOLO txt files.

    yolo11-predict runs/train/exp/weights/best.safetensors photos/         # every image and video in photos/
    yolo11-predict yolo11n.pt bus.jpg 'clips/*.mp4' --conf 0.25 --save-txt
    yolo11-predict best.safetensors https://ultralytics.com/images/bus.jpg
    yolo11-predict best.safetensors 0                                       # webcam 0, until Ctrl-C

Sources (``predict_sources.expand_sources``): image files, folders (their images and videos, not subfolders),
quoted globs (``'data/**/*.jpg'`` recurses), videos (``.mp4 .avi .mov .mkv``... frame by frame), ``http(s)://``
image URLs, video URLs and ``rtsp://`` streams, webcam indices, ``.txt`` lists of these. Each image or frame is
letterboxed as Ultralytics' predict does and detected by ``yolo11.Detector``, whose Python API this tool wraps.

Weights: YOLO11 or YOLO26. A YOLO26 model predicts with its one-to-many head and NMS by default, as Ultralytics
8.4.190's predict (``nms`` unset); ``--nms false`` (``nms=false``) uses its NMS-free one-to-one head's top-k
instead (refused for YOLO11, which has no such head). The first line printed names the head used.

As Ultralytics' predict, a line per image or video frame (``image 1/4 /path/x.jpg: 640x512 1 person, 1 bowl,
10.4ms``: the network input's size, the detections by class, the forward pass's milliseconds), then the mean
``Speed: ...ms preprocess, ...ms inference, ...ms postprocess per image at shape (1, 3, 640, 512)`` and ``Results
saved to runs/predict/exp`` (``--no-verbose``: the last two only).

The input size is ``--imgsz`` if given, else the one the weights were trained at (a run's ``config.yaml`` beside
``weights/``, an Ultralytics checkpoint's ``train_args``, an ONNX export's metadata: ``tools/run_record.py``,
said in one line), else 640. An ``.onnx`` export runs in onnxruntime (``tools/onnx_model.py``).

Outputs go to ``runs/predict/exp``, or ``exp2``, ``exp3``... when it exists (``--project``, default
``runs/predict``, ``--name``, default ``exp``, as ``yolo11 train`` writes ``runs/train/exp``; ``--exist-ok`` reuses
it; ``--output DIR`` writes to DIR as is):

- ``<stem>.<its suffix>``: each image with its boxes drawn, in the input's format (JPEG in, JPEG out);
- ``<stem>.mp4``: each video with its boxes drawn, same frame size and rate (mp4v);
- ``predictions.json``: ``[{"file", "frame" (videos only, from 1), "width", "height", "detections": [{"box":
  [x1, y1, x2, y2] px, "score", "class", "name"}]}]``;
- with ``--save-txt``: ``labels/<stem>.txt`` (``labels/<stem>_<frame>.txt`` for videos), lines
  ``class xc yc w h`` normalised by the image size, ``... score`` with ``--save-conf`` (Ultralytics' defaults).

An input that cannot be read (a corrupt image, a failed download, a video OpenCV cannot open) is reported by name
and skipped; the tool fails only when nothing could be read, or a webcam cannot be opened (``predictions.json``
then holds what was predicted before). Ctrl-C (the way to stop a webcam) keeps the outputs too and exits 130.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from yolo11.arguments import ArgumentParser
from yolo11.preflight import parse_tool_args
from yolo11.run_folders import numbered_dir
from yolo11.tools import RUN_WEIGHTS_HELP, add_nms_flag, cli, threshold_value
from yolo11.tools.predict_sources import (
    Source,
    UnreadableSource,
    expand_sources,
    frame_chunks,
    open_video,
    read_image,
    video_fps,
)

if TYPE_CHECKING:  # torch and OpenCV load in main, after the arguments and sources are checked (--help is instant)
    import cv2

    from yolo11.predictor import Detections, Detector, ImageTiming

# Where outputs go without --output: PROJECT/NAME, then NAME2, NAME3... (yolo11.YOLO.predict(save=True) too).
PROJECT, NAME = Path("runs/predict"), "exp"


def json_record(detections: Detections, file: str, frame: int | None = None) -> dict:
    """One ``predictions.json`` entry: boxes rounded to 0.01 px, scores to 1e-5."""
    record = {"file": file} | ({} if frame is None else {"frame": frame}) | detections.to_dict()
    for det in record["detections"]:
        det["box"], det["score"] = [round(v, 2) for v in det["box"]], round(det["score"], 5)
    return record


class PredictionWriter:
    """Writes one run's outputs into ``directory`` (made at the first output): drawn images and videos, txt
    labels, and ``predictions.json`` at ``finish``."""

    def __init__(self, directory: Path, draw: bool = True, save_txt: bool = False, save_conf: bool = False) -> None:
        self.directory, self.draw, self.save_txt, self.save_conf = directory, draw, save_txt, save_conf
        self.records: list[dict] = []
        self.images = self.frames = self.skipped = 0
        self._stems: set[str] = set()

    def unique_stem(self, stem: str) -> str:
        """``stem``, or ``stem_2``, ``stem_3``... when two inputs share a name (``a/x.jpg``, ``b/x.jpg``)."""
        name, index = stem, 2
        while name in self._stems:
            name, index = f"{stem}_{index}", index + 1
        self._stems.add(name)
        return name

    def _folder(self, *parts: str) -> Path:
        folder = self.directory.joinpath(*parts)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def add(self, detections: Detections, file: str, stem: str, frame: int | None = None) -> None:
        """Record one image's (or one frame's) detections, and write its txt labels with ``--save-txt``."""
        self.records.append(json_record(detections, file, frame))
        if frame is None:
            self.images += 1
        else:
            self.frames += 1
        lines = detections.txt_lines(self.save_conf) if self.save_txt else []
        if lines:  # none for an image without detections, as Ultralytics
            name = stem if frame is None else f"{stem}_{frame}"
            (self._folder("labels") / f"{name}.txt").write_text("".join(f"{line}\n" for line in lines))

    def write_image(self, detections: Detections, stem: str, suffix: str) -> None:
        if self.draw:
            import cv2

            path = self._folder() / f"{stem}{suffix}"
            if not cv2.imwrite(str(path), cv2.cvtColor(detections.plot(), cv2.COLOR_RGB2BGR)):
                raise OSError(f"cannot write {path}")

    def open_video(self, stem: str, fps: float, size: tuple[int, int]) -> cv2.VideoWriter | None:
        """A video writer for ``<stem>.mp4`` of frames ``size`` (height, width); ``None`` when not drawing."""
        if not self.draw:
            return None
        import cv2

        path = self._folder() / f"{stem}.mp4"
        video = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (size[1], size[0]))
        if not video.isOpened():
            raise OSError(f"cannot write the video {path} (OpenCV has no mp4v encoder?)")
        return video

    def skip(self, source: Source, err: Exception) -> None:
        """Report an input that could not be read; the run goes on."""
        print(f"skipped {source.location}: {err}", file=sys.stderr)
        self.skipped += 1

    def finish(self) -> Path:
        path = self._folder() / "predictions.json"
        path.write_text(json.dumps(self.records, indent=1) + "\n")
        return path


class SpeedLog:
    """The console lines of Ultralytics' predict: one per image or frame (``verbose``), and the mean speeds per
    image at the end."""

    def __init__(self, verbose: bool = True) -> None:
        self.verbose = verbose
        self.totals = [0.0, 0.0, 0.0]  # preprocess, inference, postprocess milliseconds
        self.count = 0
        self.last_shape: tuple[int, int] | None = None
        self.batch = 0  # the largest number of images in one detector.predict call

    def add(self, prefix: str, detections: Detections, timing: ImageTiming) -> None:
        """``prefix``: ``image 1/4 /path/x.jpg: `` or ``video 1/1 (frame 3/100) /path/v.mp4: ``."""
        stages = (timing.preprocess_ms, timing.inference_ms, timing.postprocess_ms)
        self.totals = [total + ms for total, ms in zip(self.totals, stages, strict=True)]
        self.count += 1
        self.last_shape = timing.input_shape
        if self.verbose:
            height, width = timing.input_shape
            print(f"{prefix}{height}x{width} {detections.verbose()}{timing.inference_ms:.1f}ms", flush=True)

    def speed_line(self) -> str | None:
        if not self.count:
            return None
        pre, inference, post = (total / self.count for total in self.totals)
        shape = (min(self.batch, self.count), 3, *self.last_shape)
        return (f"Speed: {pre:.1f}ms preprocess, {inference:.1f}ms inference, {post:.1f}ms postprocess per image at "
                f"shape {shape}")


def predict_images(detector: Detector, sources: Sequence[Source | tuple[int, Source]], writer: PredictionWriter,
                   log: SpeedLog | None = None, total: int = 0) -> None:
    """Detect the images of ``sources`` in one batch, skipping those that cannot be read; a source may come with
    its number among all ``total`` sources, for the log (``image 3/10 ...``)."""
    log = log or SpeedLog(verbose=False)
    readable, arrays = [], []
    numbered = [item if isinstance(item, tuple) else (index, item) for index, item in enumerate(sources, start=1)]
    for number, source in numbered:
        try:
            arrays.append(read_image(source))
            readable.append((number, source))
        except UnreadableSource as err:
            writer.skip(source, err)
    results = detector.predict(arrays, batch=len(arrays) or 1, keep_images=writer.draw)
    log.batch = max(log.batch, len(arrays))
    for (number, source), detections, timing in zip(readable, results, detector.timings, strict=True):
        stem = writer.unique_stem(source.stem)
        writer.add(detections, source.location, stem)
        writer.write_image(detections, stem, source.image_suffix)
        log.add(f"image {number}/{total or len(sources)} {source.location}: ", detections, timing)


def predict_video(detector: Detector, source: Source, writer: PredictionWriter, log: SpeedLog | None = None,
                  number: int = 1, total: int = 1) -> None:
    """Detect every frame of a video, stream or webcam, ``detector.batch`` frames at a time (one for a webcam, to
    keep up with it), writing an annotated video."""
    import cv2

    log = log or SpeedLog(verbose=False)
    try:
        capture = open_video(source)
    except UnreadableSource as err:
        writer.skip(source, err)
        return
    frames = int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) if source.kind == "video" else 0
    stem, video, frame = writer.unique_stem(source.stem), None, 0
    try:
        for chunk in frame_chunks(capture, 1 if source.kind == "webcam" else detector.batch):
            if video is None:
                video = writer.open_video(stem, video_fps(capture), chunk[0].shape[:2])
            results = detector.predict(chunk, keep_images=video is not None)
            log.batch = max(log.batch, len(chunk))
            for detections, timing in zip(results, detector.timings, strict=True):
                frame += 1  # numbered from 1, as Ultralytics names its per-frame labels
                writer.add(detections, source.location, stem, frame)
                if video is not None:
                    video.write(cv2.cvtColor(detections.plot(), cv2.COLOR_RGB2BGR))
                of = f"/{frames}" if frames > 0 else ""
                log.add(f"video {number}/{total} (frame {frame}{of}) {source.location}: ", detections, timing)
    finally:
        capture.release()
        if video is not None:
            video.release()
    if not frame:
        writer.skip(source, UnreadableSource("no frames could be read"))


def predict_sources(detector: Detector, sources: Sequence[Source], writer: PredictionWriter,
                    log: SpeedLog | None = None) -> None:
    """Every source in order: runs of images in batches of ``detector.batch``, each video on its own."""
    pending: list[tuple[int, Source]] = []
    total = len(sources)
    for number, source in enumerate(sources, start=1):
        if source.is_video:
            predict_images(detector, pending, writer, log, total)
            predict_video(detector, source, writer, log, number, total)
            pending = []
            continue
        pending.append((number, source))
        if len(pending) == detector.batch:
            predict_images(detector, pending, writer, log, total)
            pending = []
    predict_images(detector, pending, writer, log, total)


def class_ids(text: str) -> list[int]:
    """``--classes``: ``0``, ``0,2`` or ``[0, 2]`` as a list of class ids."""
    ids = [part.strip() for part in text.strip().strip("[]").split(",") if part.strip()]
    if not ids or not all(part.isdigit() for part in ids):
        raise argparse.ArgumentTypeError(f"expected class ids such as 0 or 0,2, got {text!r}")
    return [int(part) for part in ids]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("weights", help=RUN_WEIGHTS_HELP)
    parser.add_argument("sources", nargs="+",
                        help="image or video files, folders, quoted globs, http(s)/rtsp URLs, webcam indices (0)")
    parser.add_argument("--project", type=Path, default=PROJECT, help="parent of the output folder")
    parser.add_argument("--name", default=NAME, help="output folder under --project (exp2, exp3... when it exists)")
    parser.add_argument("--exist-ok", action="store_true", help="write into --project/--name even if it exists")
    parser.add_argument("--output", type=Path, default=None, help="exact output folder (overrides --project/--name)")
    parser.add_argument("--imgsz", type=int, default=None,
                        help="letterboxed input size in pixels (multiple of 32; default: the training size "
                             "recorded with the weights, else 640)")
    parser.add_argument("--conf", type=threshold_value, default=0.25, help="score threshold")
    parser.add_argument("--iou", type=threshold_value, default=0.7, help="NMS IoU threshold")
    parser.add_argument("--max-det", type=int, default=300, help="detections kept per image")
    parser.add_argument("--rect", action=argparse.BooleanOptionalAction, default=True,
                        help="pad each image only up to a multiple of 32, as Ultralytics' predict (--no-rect: to "
                             "imgsz x imgsz)")
    parser.add_argument("--batch", type=int, default=8, help="images or video frames per forward pass")
    parser.add_argument("--names", default=None, help="class names: a comma list or a data YAML")
    parser.add_argument("--classes", type=class_ids, default=None,
                        help="keep only these class ids: 0, 0,2 or [0, 2] (Ultralytics' classes)")
    parser.add_argument("--save-txt", action="store_true", help="also write YOLO txt files under labels/")
    parser.add_argument("--save-conf", action="store_true", help="end each --save-txt line with the score")
    parser.add_argument("--no-draw", action="store_true", help="do not write drawn images and videos")
    parser.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    parser.add_argument("--verbose", action=argparse.BooleanOptionalAction, default=True,
                        help="a line per image or frame, as Ultralytics' predict (--no-verbose: the totals only)")
    add_nms_flag(parser)
    return parse_tool_args(parser, argv, {"model": "weights", "source": "sources"})


@cli
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sources = expand_sources(args.sources)  # a missing file is reported before the model loads
    from yolo11.predictor import Detector
    from yolo11.tools.run_record import settings_line, trained_with

    record = trained_with(args.weights)
    imgsz, recorded = record.pick("imgsz", args.imgsz, 640)
    line = settings_line({"imgsz": imgsz} if recorded else {}, record, args.weights)
    if line:
        print(line, file=sys.stderr)
    detector = Detector.from_pretrained(args.weights, names=args.names, device=args.device, imgsz=imgsz,
                                        conf=args.conf, iou=args.iou, max_det=args.max_det, rect=args.rect,
                                        batch=args.batch, nms=args.nms, classes=args.classes)
    print(detector.head)
    directory = args.output or numbered_dir(args.project / args.name, args.exist_ok)
    writer = PredictionWriter(directory, draw=not args.no_draw, save_txt=args.save_txt, save_conf=args.save_conf)
    log = SpeedLog(verbose=args.verbose)
    status = 0
    try:
        predict_sources(detector, sources, writer, log)
    except KeyboardInterrupt:  # a webcam runs until Ctrl-C
        status = 130
    finally:  # what was predicted before a Ctrl-C or an error (a camera that does not open) is kept
        if writer.records:
            writer.finish()
    if not writer.records and not status:
        raise ValueError(f"nothing was predicted: all {writer.skipped} inputs were skipped (see above)")
    total = sum(len(r["detections"]) for r in writer.records)
    skipped = f", {writer.skipped} skipped" if writer.skipped else ""
    print(f"{writer.images} images, {writer.frames} video frames, {total} detections{skipped}")
    speed = log.speed_line()
    if speed:
        print(speed)
    labels = directory / "labels"
    count = len(list(labels.glob("*.txt"))) if args.save_txt and labels.is_dir() else 0
    saved_labels = f"\n{count} label{'s' * (count != 1)} saved to {labels}" if count else \
        "\nno label files: nothing was detected (a file per image with detections, as Ultralytics)"
    print(f"Results saved to {directory}" + (saved_labels if args.save_txt else ""))
    return status

if __name__ == "__main__":
    from yolo11.program_exit import exit_process

    exit_process(main())
