"""What ``yolo11-predict`` reads: image files, folders, globs, videos, image URLs, video streams and webcams.

``expand_sources`` turns the command line's strings into ``Source`` items without opening them; ``read_image``
and ``open_video`` open one, raising ``UnreadableSource`` for an input to report and skip.
"""

from __future__ import annotations

import glob
import http.client
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

if TYPE_CHECKING:  # OpenCV and numpy load when an input is opened: expand_sources runs before them (--help too)
    import cv2
    import numpy as np

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}
# Ultralytics' video formats: read frame by frame with OpenCV's FFmpeg backend
VIDEO_SUFFIXES = {".asf", ".avi", ".gif", ".m4v", ".mkv", ".mov", ".mp4", ".mpeg", ".mpg", ".ts", ".wmv", ".webm"}
STREAM_SCHEMES = ("rtsp://", "rtmp://", "tcp://")
DOWNLOAD_TIMEOUT_S = 30.0  # per connection attempt and per read
DOWNLOAD_DEADLINE_S = 300.0  # the whole download: a server trickling bytes would otherwise never time out
MAX_DOWNLOAD_BYTES = 256 << 20  # no photo is larger; a server sending without end would fill the memory


class UnreadableSource(ValueError):
    """An input that exists but cannot be read (a corrupt image, a failed download): reported and skipped."""


@dataclass(frozen=True)
class Source:
    """One input. ``kind``: ``image`` (file), ``url`` (image to download), ``video`` (file), ``stream`` (video
    URL, read by OpenCV) or ``webcam`` (``location`` is the camera index)."""

    location: str
    kind: str

    @property
    def is_video(self) -> bool:
        return self.kind in ("video", "stream", "webcam")

    @property
    def stem(self) -> str:
        """Base name of its output files."""
        if self.kind == "webcam":
            return f"webcam{self.location}"
        if self.kind in ("url", "stream"):
            return Path(urlparse(self.location).path).stem or "stream"
        return Path(self.location).stem

    @property
    def image_suffix(self) -> str:
        """The suffix its drawn image is written with: the input's format (``.jpg`` when it has none)."""
        path = urlparse(self.location).path if self.kind == "url" else self.location
        suffix = Path(path).suffix.lower()
        return suffix if suffix in IMAGE_SUFFIXES else ".jpg"


def _file_source(path: Path) -> Source:
    return Source(str(path), "video" if path.suffix.lower() in VIDEO_SUFFIXES else "image")


def _folder_sources(folder: Path) -> list[Source]:
    """The images and videos directly in ``folder`` (not its subfolders, as Ultralytics), sorted by name."""
    media = IMAGE_SUFFIXES | VIDEO_SUFFIXES
    found = [_file_source(p) for p in sorted(folder.iterdir()) if p.is_file() and p.suffix.lower() in media]
    if not found:
        raise FileNotFoundError(f"no images or videos in folder {folder}")
    return found


def _glob_sources(pattern: str) -> list[Source]:
    """Files matching a glob (``**`` recurses); images and videos by suffix, other files are not inputs."""
    media = IMAGE_SUFFIXES | VIDEO_SUFFIXES
    matches = sorted(Path(p) for p in glob.glob(pattern, recursive=True))
    found = [_file_source(p) for p in matches if p.is_file() and p.suffix.lower() in media]
    if not found:
        raise FileNotFoundError(f"no images or videos match {pattern!r}")
    return found


def _listed_specs(listing: Path) -> list[str]:
    """The sources a ``.txt`` file lists, one a line (Ultralytics' ``source=list.txt``); an entry that does not
    exist as given is read relative to the file's folder, as Ultralytics does. Read by the gate: bounded in size,
    a byte-order mark dropped, one line naming the file for anything else."""
    from yolo11.gate.text import read_text

    specs = []
    for line in read_text(listing).splitlines():
        line = line.strip()
        if not line:
            continue
        found = glob.glob(line, recursive=True) if glob.has_magic(line) else Path(line).exists()
        remote = line.isdigit() or line.startswith(("http://", "https://", *STREAM_SCHEMES))
        specs.append(line if found or remote else str(listing.parent / line))
    return specs


def expand_sources(specs: Sequence[str], lists: bool = True) -> list[Source]:
    """Command-line sources -> inputs, in order: a file, a folder (its images and videos, not recursive), a glob
    (quote it: ``'images/*.jpg'``, ``'data/**/*.png'``), an ``http(s)://`` image URL or video URL (by suffix), an
    ``rtsp://``/``rtmp://`` stream, a webcam index (``0``), or (with ``lists``) a ``.txt`` file of any of these, one a
    line. A path that does not exist is an error."""
    sources: list[Source] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            sources.extend(_folder_sources(path))
        elif lists and path.is_file() and path.suffix.lower() == ".txt":  # Ultralytics' list of sources (not nested)
            sources.extend(expand_sources(_listed_specs(path), lists=False))
        elif path.is_file():
            sources.append(_file_source(path))
        elif spec.startswith(STREAM_SCHEMES):
            sources.append(Source(spec, "stream"))
        elif spec.startswith(("http://", "https://")):
            suffix = Path(urlparse(spec).path).suffix.lower()
            sources.append(Source(spec, "stream" if suffix in VIDEO_SUFFIXES else "url"))
        elif spec.isdigit():
            sources.append(Source(spec, "webcam"))
        elif glob.has_magic(spec):
            sources.extend(_glob_sources(spec))
        else:
            raise FileNotFoundError(f"no such image, video or folder: {spec}")
    return sources


def download(url: str, timeout: float = DOWNLOAD_TIMEOUT_S) -> bytes:
    """The body of ``url``, read in chunks up to ``MAX_DOWNLOAD_BYTES`` and ``DOWNLOAD_DEADLINE_S``; a failure
    (offline, 404, time-out, too large) is an ``UnreadableSource`` naming it."""
    request = urllib.request.Request(url, headers={"User-Agent": "yolo11-predict"})
    deadline = time.monotonic() + DOWNLOAD_DEADLINE_S
    chunks, received = [], 0
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            # read1: what one socket read brings (read(n) waits for n bytes), so the deadline is checked as they come
            while chunk := response.read1(1 << 20):
                received += len(chunk)
                if received > MAX_DOWNLOAD_BYTES:
                    raise UnreadableSource(f"cannot download {url}: more than {MAX_DOWNLOAD_BYTES >> 20} MB, "
                                           "not an image to predict on")
                if time.monotonic() > deadline:
                    raise UnreadableSource(f"cannot download {url}: still sending after {DOWNLOAD_DEADLINE_S:.0f} s")
                chunks.append(chunk)
    except (OSError, http.client.HTTPException) as err:  # URLError, HTTPError and time-outs are OSErrors
        reason = getattr(err, "reason", None) or err
        raise UnreadableSource(f"cannot download {url}: {reason}") from None
    return b"".join(chunks)


def read_image(source: Source) -> np.ndarray:
    """(H, W, 3) uint8 RGB of an image file or URL."""
    import cv2
    import numpy as np

    if source.kind == "url":
        image = cv2.imdecode(np.frombuffer(download(source.location), np.uint8), cv2.IMREAD_COLOR)
        if image is None:
            raise UnreadableSource(f"{source.location} is not an image OpenCV can decode")
        return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    from yolo11.predictor import read_rgb  # torch: only once predicting (the sources are checked before)

    try:
        return read_rgb(source.location)
    except ValueError as err:
        from yolo11.data.image_io import image_size

        try:  # the conversion's checks name what is wrong: an empty file, a truncated JPEG, too many pixels
            image_size(source.location)
        except (ValueError, OSError) as why:
            raise UnreadableSource(str(why)) from None  # the skip line names the file
        raise UnreadableSource(f"{err} (not an image, or corrupt)") from None


def open_video(source: Source) -> cv2.VideoCapture:
    """An opened capture. A camera that does not open is an error (a ``ValueError``: nothing else to predict);
    a video file or stream that does not open is an ``UnreadableSource``."""
    import cv2

    if source.kind == "webcam":
        # OpenCV logs a warning per backend it tries; the error below says it in one line
        level = cv2.utils.logging.getLogLevel()
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)
        try:
            capture = cv2.VideoCapture(int(source.location))
        finally:
            cv2.utils.logging.setLogLevel(level)
        if not capture.isOpened():
            raise ValueError(f"source {source.location}: no camera with index {source.location} could be opened")
        return capture
    capture = cv2.VideoCapture(source.location)
    if not capture.isOpened():
        raise UnreadableSource(f"cannot open video {source.location} (not a video, or a codec OpenCV lacks)")
    return capture


def video_fps(capture: cv2.VideoCapture, default: float = 30.0) -> float:
    """Frames per second the capture reports; cameras and some streams report 0 or nonsense."""
    import cv2

    fps = capture.get(cv2.CAP_PROP_FPS)
    return fps if 0 < fps <= 1000 else default


def frame_chunks(capture: cv2.VideoCapture, size: int) -> Iterator[list[np.ndarray]]:
    """The capture's frames as (H, W, 3) uint8 RGB, ``size`` at a time (the last chunk may be shorter)."""
    import cv2

    chunk: list[np.ndarray] = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        chunk.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
