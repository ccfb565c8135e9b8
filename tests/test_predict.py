"""yolo11-predict and the Python API: sources (files, folders, globs, videos, URLs, webcams), output folders and
formats, skipped inputs, and the API's results against the CLI's predictions.json."""

from __future__ import annotations

import copy
import io
import json
import re
import urllib.error
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

import yolo11
from yolo11 import create_model
from yolo11.predictor import Detections, Detector, class_names_for
from yolo11.tools import predict, predict_sources
from yolo11.weights import load_weights, save_weights

IMGSZ, CONF = 64, 0.2


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    """yolo11n weights of 3 classes whose detections depend on the image: random init, BatchNorm statistics of
    one batch of noise (at init they are identity and the head sees almost nothing), small box distributions."""
    torch.manual_seed(0)
    model = create_model("yolo11n", num_classes=3)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.momentum = None  # a cumulative average: one batch sets the statistics
                module.reset_running_stats()
        model.train()(torch.randint(0, 255, (4, 3, IMGSZ, IMGSZ), dtype=torch.uint8))
        for box, cls in zip(model.head.cv2, model.head.cv3, strict=True):
            box[2].weight.mul_(0.02)
            box[2].bias.copy_((-0.7 * torch.arange(16.0)).repeat(4))  # distances of about one cell
            cls[2].weight.mul_(0.2)
    return save_weights(model.eval(), tmp_path_factory.mktemp("weights") / "tiny.safetensors")


@pytest.fixture(scope="module")
def fused(weights) -> torch.nn.Module:
    return load_weights(weights).fuse()


@pytest.fixture
def loaded_once(weights, fused, monkeypatch) -> None:
    """CLI runs get the module's fused model instead of loading and fusing it again (seconds on 2 shared cores):
    the tests using this are about sources and outputs; the first test loads for real."""
    monkeypatch.setattr("yolo11.predictor.load_weights", lambda ref: fused if Path(ref) == weights else 1 / 0)


def noise_image(seed: int, height: int = 48, width: int = 64) -> np.ndarray:
    """RGB uint8 with a few filled rectangles on noise."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
    for _ in range(3):
        x, y = int(rng.integers(0, width - 16)), int(rng.integers(0, height - 16))
        cv2.rectangle(image, (x, y), (x + 16, y + 12), [int(v) for v in rng.integers(0, 255, 3)], -1)
    return image


def write_image(path: Path, seed: int, **size) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), cv2.cvtColor(noise_image(seed, **size), cv2.COLOR_RGB2BGR))
    return path


def run_cli(weights: Path, *args: str) -> int:
    return predict.main([str(weights), *args, "--imgsz", str(IMGSZ), "--conf", str(CONF), "--device", "cpu"])


def rows_of(record: dict) -> np.ndarray:
    return np.array([d["box"] + [d["score"], d["class"]] for d in record["detections"]]).reshape(-1, 6)


def assert_same(result: Detections, record: dict) -> None:
    """API result == CLI record, to the JSON's rounding (0.01 px, 1e-5 score)."""
    assert [record["height"], record["width"]] == list(result.image_size)
    got = rows_of(record)
    assert got.shape[0] == len(result)
    np.testing.assert_allclose(got[:, :4], result.boxes, atol=0.0051)
    np.testing.assert_allclose(got[:, 4], result.scores, atol=6e-6)
    np.testing.assert_array_equal(got[:, 5], result.class_ids)
    assert [d["name"] for d in record["detections"]] == list(result.box_names)


def test_api_results_equal_the_cli_predictions_json(weights, tmp_path):
    files = [write_image(tmp_path / "in" / "a.jpg", 1), write_image(tmp_path / "in" / "b.png", 2, height=64),
             write_image(tmp_path / "in" / "c.jpg", 3, height=32, width=60)]
    out = tmp_path / "out"
    assert run_cli(weights, *map(str, files), "--output", str(out), "--batch", "2", "--names", "ant,bee,cat") == 0
    records = json.loads((out / "predictions.json").read_text())

    detector = yolo11.Detector.from_pretrained(weights, names=["ant", "bee", "cat"], imgsz=IMGSZ, conf=CONF,
                                               batch=2, device="cpu")
    results = detector.predict([str(f) for f in files])
    assert sum(len(r) for r in results) >= 5  # the comparison has boxes to compare
    for result, record, file in zip(results, records, files, strict=True):
        assert record["file"] == str(file) and result.source == str(file)
        assert_same(result, record)
        assert result.boxes.dtype == np.float32 and result.scores.dtype == np.float32
        assert result.class_ids.dtype == np.int64 and result.names == {0: "ant", 1: "bee", 2: "cat"}
        assert result.to_dict()["detections"][0]["name"] == result.box_names[0]
        assert result.plot().shape == result.image.shape
    # one image as an array, as a PIL image, and a (B, H, W, 3) batch: the same detections as from its file; a batch
    # of one runs other conv kernels than the batch of two above, so scores agree to float rounding, not bit for bit
    Image = pytest.importorskip("PIL.Image")
    rgb = cv2.cvtColor(cv2.imread(str(files[0])), cv2.COLOR_BGR2RGB)
    for (single,) in (detector.predict(rgb), detector.predict(Image.fromarray(rgb)), detector.predict(rgb[None]),
                      detector.predict(iter([files[0]]))):
        assert single.image_size == results[0].image_size and single.names == results[0].names
        np.testing.assert_allclose(single.boxes, results[0].boxes, atol=1e-2)  # pixels: 0.002 px seen
        np.testing.assert_allclose(single.scores, results[0].scores, atol=1e-5)
        np.testing.assert_array_equal(single.class_ids, results[0].class_ids)
    assert detector.predict(rgb, keep_images=False)[0].image is None


def captions_drawn(monkeypatch) -> list[str]:
    """The text of every caption the drawing writes, in order (cv2.putText as the plots module calls it)."""
    captions: list[str] = []
    real = cv2.putText
    monkeypatch.setattr("yolo11.evaluation.plots.cv2.putText",
                        lambda img, text, *args, **kw: (captions.append(text), real(img, text, *args, **kw))[1])
    return captions


def test_drawn_captions_name_each_box_by_its_class_id(monkeypatch):
    """A person (class 0) and a car (class 2) in that order: the captions are "person" and "car", not the per-box
    names indexed by class id ("car" and a bare "2")."""
    rows = torch.tensor([[2.0, 2.0, 30.0, 30.0, 0.9, 0.0], [20.0, 20.0, 60.0, 44.0, 0.8, 2.0]])
    result = Detections.from_rows(rows, ["person", "bicycle", "car"], (48, 64), image=noise_image(0))
    assert result.names == {0: "person", 1: "bicycle", 2: "car"}  # the class map, as Ultralytics' Results.names
    assert result.box_names == ("person", "car")
    captions = captions_drawn(monkeypatch)
    result.plot()
    assert captions == ["person 0.90", "car 0.80"]


def test_the_cli_draws_the_json_names(weights, loaded_once, tmp_path, monkeypatch):
    image = write_image(tmp_path / "a.jpg", 1)
    captions = captions_drawn(monkeypatch)
    assert run_cli(weights, str(image), "--output", str(tmp_path / "out"), "--names", "ant,bee,cat") == 0
    (record,) = json.loads((tmp_path / "out" / "predictions.json").read_text())
    assert len({d["class"] for d in record["detections"]}) > 1  # more than one class: an index mix-up shows
    assert captions == [f"{d['name']} {d['score']:.2f}" for d in record["detections"]]


def test_class_names_come_from_the_flag_the_model_or_the_ids(fused, monkeypatch):
    assert class_names_for(fused) == ["0", "1", "2"]
    assert class_names_for(fused, names="a, b ,c") == ["a", "b", "c"]
    with pytest.raises(ValueError, match="2 class names for a model of 3 classes"):
        class_names_for(fused, names="a,b")
    with pytest.raises(ValueError, match="multiple of 32"):
        Detector(fused, imgsz=100)
    # names the weights loader gives the model (``model.names`` reads its config): a list, or Ultralytics' dict
    named, configured = copy.copy(fused), copy.copy(fused)
    named.config = {**fused.config, "names": ["x", "y", "z"]}
    configured.config = {**fused.config, "names": {2: "c", 0: "a", 1: "b"}}
    for model, expected in ((named, ["x", "y", "z"]), (configured, ["a", "b", "c"])):
        monkeypatch.setattr("yolo11.predictor.load_weights", lambda ref, model=model: model)
        assert Detector.from_pretrained("owner/repo", imgsz=IMGSZ, device="cpu").class_names == expected
        # --names wins over the model's
        assert Detector.from_pretrained("owner/repo", names="p,q,r", imgsz=IMGSZ).class_names == ["p", "q", "r"]


def write_video(path: Path, frames: int, fps: float = 10.0) -> list[np.ndarray]:
    """A 64 x 64 MJPG video; returns its frames as read back (what a decoder gives, not what was written)."""
    video = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (64, 64))
    assert video.isOpened()
    for i in range(frames):
        video.write(cv2.cvtColor(noise_image(10 + i, 64, 64), cv2.COLOR_RGB2BGR))
    video.release()
    return read_frames(path)


def read_frames(path: Path) -> list[np.ndarray]:
    capture, frames = cv2.VideoCapture(str(path)), []
    while (read := capture.read())[0]:
        frames.append(cv2.cvtColor(read[1], cv2.COLOR_BGR2RGB))
    capture.release()
    return frames


def test_a_video_is_predicted_frame_by_frame_and_written_as_a_video(weights, loaded_once, tmp_path):
    clip = tmp_path / "clip.avi"
    frames = write_video(clip, 5)
    assert len(frames) == 5
    out = tmp_path / "out"
    assert run_cli(weights, str(clip), "--output", str(out), "--batch", "2", "--save-txt") == 0

    capture = cv2.VideoCapture(str(out / "clip.mp4"))
    assert capture.get(cv2.CAP_PROP_FPS) == pytest.approx(10.0)
    capture.release()
    written = read_frames(out / "clip.mp4")
    assert len(written) == 5 and all(frame.shape == (64, 64, 3) for frame in written)

    records = json.loads((out / "predictions.json").read_text())
    assert [(r["file"], r["frame"]) for r in records] == [(str(clip), k) for k in range(1, 6)]
    detector = Detector.from_pretrained(weights, imgsz=IMGSZ, conf=CONF, batch=2, device="cpu")
    as_images = detector.predict(frames)
    assert sum(len(r) for r in as_images) >= 5
    for result, record in zip(as_images, records, strict=True):
        assert_same(result, record)
        labels = (out / "labels" / f"clip_{record['frame']}.txt").read_text().splitlines()
        assert len(labels) == len(result)


def test_an_unopenable_video_is_skipped_and_named(weights, loaded_once, tmp_path, capsys):
    (tmp_path / "broken.mp4").write_bytes(b"not a video")
    good = write_image(tmp_path / "good.jpg", 4)
    assert run_cli(weights, str(tmp_path / "broken.mp4"), str(good), "--output", str(tmp_path / "out")) == 0
    captured = capsys.readouterr()
    assert f"skipped {tmp_path / 'broken.mp4'}" in captured.err
    assert "1 images, 0 video frames" in captured.out and "1 skipped" in captured.out


def test_folders_are_not_recursive_and_globs_are_expanded(tmp_path):
    for name in ("a.jpg", "b.PNG", "clip.mp4", "sub/c.jpg", "sub/deeper/d.jpg"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not an input")
    folder = predict_sources.expand_sources([str(tmp_path)])
    assert [(Path(s.location).name, s.kind) for s in folder] == [("a.jpg", "image"), ("b.PNG", "image"),
                                                               ("clip.mp4", "video")]
    recursive = predict_sources.expand_sources([f"{tmp_path}/**/*.jpg"])
    assert [Path(s.location).relative_to(tmp_path).as_posix() for s in recursive] == [
        "a.jpg", "sub/c.jpg", "sub/deeper/d.jpg"]
    with pytest.raises(FileNotFoundError, match=r"no images or videos match .*\*\.gif"):
        predict_sources.expand_sources([f"{tmp_path}/*.gif"])
    with pytest.raises(FileNotFoundError, match="no such image, video or folder: .*missing.jpg"):
        predict_sources.expand_sources([str(tmp_path / "missing.jpg")])
    assert predict_sources.expand_sources(["0"]) == [predict_sources.Source("0", "webcam")]
    kinds = [s.kind for s in predict_sources.expand_sources(["https://x.org/a.jpg", "https://x.org/v.mp4",
                                                             "rtsp://cam/live"])]
    assert kinds == ["url", "stream", "stream"]


def test_cli_predicts_a_quoted_glob(weights, loaded_once, tmp_path):
    for i, name in enumerate(("x1.jpg", "x2.jpg", "y.jpg")):
        write_image(tmp_path / "in" / name, i)
    out = tmp_path / "out"
    assert run_cli(weights, str(tmp_path / "in" / "x*.jpg"), "--output", str(out)) == 0
    records = json.loads((out / "predictions.json").read_text())
    assert [Path(r["file"]).name for r in records] == ["x1.jpg", "x2.jpg"]


def test_output_folders_are_numbered_unless_exist_ok(weights, loaded_once, tmp_path, capsys):
    image = write_image(tmp_path / "a.jpg", 5)
    for _ in range(2):
        assert run_cli(weights, str(image), "--project", str(tmp_path / "runs"), "--no-draw") == 0
    assert run_cli(weights, str(image), "--project", str(tmp_path / "runs"), "--exist-ok", "--no-draw") == 0
    assert run_cli(weights, str(image), "--project", str(tmp_path / "runs"), "--name", "mine", "--no-draw") == 0
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["exp", "exp2", "mine"]
    assert capsys.readouterr().out.splitlines()[-1] == f"Results saved to {tmp_path / 'runs' / 'mine'}"


def test_cli_prints_ultralytics_lines_and_writes_runs_predict_name(weights, loaded_once, tmp_path, capsys,
                                                                   monkeypatch):
    """As Ultralytics' ``yolo predict``: ``image 1/3 /path/a.jpg: 64x64 1 ant, 2 bees, 10.4ms`` per image (the
    network input's size, counts by class id with Ultralytics' plural, the forward's milliseconds), ``Speed: ...
    per image at shape (3, 3, 64, 64)`` and ``Results saved to runs/predict/x``: ``name=x`` is a folder under
    ``runs/predict`` (it was ``runs/x``), as ``yolo11 train name=x`` writes ``runs/train/x``."""
    monkeypatch.chdir(tmp_path)
    files = [write_image(tmp_path / "in" / f"{name}.jpg", seed) for name, seed in (("a", 1), ("b", 2), ("c", 3))]
    assert run_cli(weights, *map(str, files), "name=x", "--names", "ant,bee,cat", "save_txt=true") == 0
    out = capsys.readouterr().out.splitlines()
    records = json.loads((tmp_path / "runs" / "predict" / "x" / "predictions.json").read_text())
    lines = [line for line in out if line.startswith("image ")]
    assert len(lines) == 3
    for number, (line, record, file) in enumerate(zip(lines, records, files, strict=True), start=1):
        names = [d["name"] for d in record["detections"]]
        counts = "".join(f"{names.count(n)} {n}{'s' * (names.count(n) > 1)}, " for n in ("ant", "bee", "cat")
                         if n in names) or "(no detections), "
        assert re.fullmatch(rf"image {number}/3 {re.escape(str(file))}: 64x64 {re.escape(counts)}\d+\.\dms", line)
    assert re.fullmatch(r"Speed: \d+\.\dms preprocess, \d+\.\dms inference, \d+\.\dms postprocess per image at "
                        r"shape \(3, 3, 64, 64\)", out[-3])
    assert out[-2:] == [f"Results saved to {Path('runs/predict/x')}",
                        f"3 labels saved to {Path('runs/predict/x/labels')}"]
    assert run_cli(weights, str(files[0]), "--no-draw", "verbose=false") == 0  # the default name: exp
    out = capsys.readouterr().out.splitlines()
    assert not any(line.startswith("image ") for line in out) and out[-1] == "Results saved to runs/predict/exp"
    assert run_cli(weights, str(files[0]), "--no-draw", "save_txt=true", "conf=1.0") == 0  # nothing detected
    assert capsys.readouterr().out.splitlines()[-1] == ("no label files: nothing was detected (a file per image with "
                                                        "detections, as Ultralytics)")
    assert not (tmp_path / "runs" / "predict" / "exp2" / "labels").exists()


def test_drawn_images_keep_the_input_format(weights, loaded_once, tmp_path):
    inputs = [write_image(tmp_path / "in" / "photo.jpg", 6), write_image(tmp_path / "in" / "chart.png", 7),
              write_image(tmp_path / "in" / "scan.bmp", 8), write_image(tmp_path / "other" / "photo.jpg", 9)]
    out = tmp_path / "out"
    assert run_cli(weights, *map(str, inputs), "--output", str(out)) == 0
    assert sorted(p.name for p in out.iterdir()) == ["chart.png", "photo.jpg", "photo_2.jpg", "predictions.json",
                                                     "scan.bmp"]
    assert (out / "photo.jpg").read_bytes()[:3] == b"\xff\xd8\xff"  # JPEG, not a PNG named .jpg
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "scan.bmp").read_bytes()[:2] == b"BM"
    assert cv2.imread(str(out / "photo_2.jpg")).shape == (48, 64, 3)


def test_unreadable_images_are_skipped_by_name(weights, loaded_once, tmp_path, capsys):
    """Each named with what is wrong with it, as the data conversion says it."""
    (tmp_path / "corrupt.jpg").write_bytes(b"\xff\xd8 truncated")
    (tmp_path / "empty.jpg").write_bytes(b"")
    good = write_image(tmp_path / "good.png", 10)
    out = tmp_path / "out"
    assert run_cli(weights, str(tmp_path / "corrupt.jpg"), str(tmp_path / "empty.jpg"), str(good),
                   "--output", str(out)) == 0
    captured = capsys.readouterr()
    assert f"skipped {tmp_path / 'corrupt.jpg'}: unreadable or corrupt image" in captured.err
    assert f"skipped {tmp_path / 'empty.jpg'}: empty file" in captured.err
    assert "1 images" in captured.out and "2 skipped" in captured.out
    assert [Path(r["file"]).name for r in json.loads((out / "predictions.json").read_text())] == ["good.png"]
    # nothing readable at all: one error line, exit 2
    assert run_cli(weights, str(tmp_path / "corrupt.jpg"), "--output", str(tmp_path / "none")) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: nothing was predicted: all 1 inputs were skipped (see above)")


class FakeResponse(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_an_image_url_is_downloaded_and_predicted(weights, loaded_once, tmp_path, monkeypatch):
    ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(noise_image(11), cv2.COLOR_RGB2BGR))
    requests = []

    def fake_urlopen(request, timeout):
        requests.append((request.full_url, timeout))
        return FakeResponse(jpeg.tobytes())

    monkeypatch.setattr(predict_sources.urllib.request, "urlopen", fake_urlopen)
    url = "https://example.com/images/bus.jpg?size=small"
    out = tmp_path / "out"
    assert run_cli(weights, url, "--output", str(out)) == 0
    assert requests == [(url, predict_sources.DOWNLOAD_TIMEOUT_S)]
    (record,) = json.loads((out / "predictions.json").read_text())
    assert record["file"] == url and (record["height"], record["width"]) == (48, 64)
    assert (out / "bus.jpg").read_bytes()[:3] == b"\xff\xd8\xff"


class EndlessResponse:
    """A server that sends without end."""

    def read1(self, size: int) -> bytes:
        return b"\xff" * size

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("limit", ["bytes", "deadline"])
def test_a_download_without_end_stops_at_a_bound(monkeypatch, limit):
    """The body was read whole with ``response.read()``: an endless answer grew past 2.7 GB of memory; the
    per-read time-out never fires for a server that keeps sending."""
    monkeypatch.setattr(predict_sources.urllib.request, "urlopen", lambda request, timeout: EndlessResponse())
    monkeypatch.setattr(predict_sources, "MAX_DOWNLOAD_BYTES", 8 << 20)
    if limit == "deadline":
        monkeypatch.setattr(predict_sources, "DOWNLOAD_DEADLINE_S", -1.0)
    said = "more than 8 MB" if limit == "bytes" else "still sending after -1 s"
    with pytest.raises(predict_sources.UnreadableSource, match=f"cannot download https://example.com/x.jpg: {said}"):
        predict_sources.download("https://example.com/x.jpg")


def test_an_unreachable_url_is_one_error_line(weights, loaded_once, tmp_path, monkeypatch, capsys):
    def offline(request, timeout):
        raise urllib.error.URLError(OSError(-3, "Temporary failure in name resolution"))

    monkeypatch.setattr(predict_sources.urllib.request, "urlopen", offline)
    assert run_cli(weights, "https://example.com/bus.jpg", "--output", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[0].startswith("skipped https://example.com/bus.jpg: cannot download")
    assert "name resolution" in err.splitlines()[0]
    assert err.splitlines()[-1].startswith("error: nothing was predicted")
    assert not (tmp_path / "out").exists()


def test_a_missing_webcam_is_one_error_line(weights, loaded_once, tmp_path, capfd):
    image = write_image(tmp_path / "before.jpg", 12)
    # index 99: no machine has it, so the test does not depend on whether this one has a camera
    assert run_cli(weights, str(image), "99", "--output", str(tmp_path / "out")) == 2
    err = capfd.readouterr().err.strip().splitlines()  # the file descriptor: OpenCV's own warnings count too
    assert err == ["error: source 99: no camera with index 99 could be opened"]
    # what was predicted before the error is kept
    assert [r["file"] for r in json.loads((tmp_path / "out" / "predictions.json").read_text())] == [str(image)]


@pytest.mark.parametrize("given, expected", [(None, None), ("", None), ("cpu", "cpu"), ("CPU", "cpu"),
                                             (" cpu ", "cpu"), (torch.device("cpu"), "cpu")])
def test_devices_are_named_as_ultralytics_users_name_them(given, expected):
    from yolo11.devices import default_device, select_device

    assert select_device(given) == torch.device(expected or default_device())


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusals of CUDA GPUs torch does not see")
@pytest.mark.parametrize("given", [0, "0", "0,1", "cuda:0"])
def test_a_gpu_torch_does_not_see_is_one_error_naming_the_value(weights, loaded_once, tmp_path, capsys, given):
    """``device=0`` raised torch's 'Invalid device string' with a traceback (and, from Python, 0 was taken for
    'no device'): now one error line, exit 2, from the tool and the API alike."""
    from yolo11.devices import select_device

    with pytest.raises(ValueError, match=rf"device={re.escape(repr(given))}: torch sees 0 CUDA GPU\(s\)"):
        select_device(given)
    image = tmp_path / "a.jpg"
    cv2.imwrite(str(image), np.zeros((64, 64, 3), np.uint8))
    from yolo11.cli import main as cli

    assert cli(["predict", f"model={weights}", f"source={image}", "imgsz=64", f"device={given}",
                f"project={tmp_path}"]) == 2
    assert "torch sees 0 CUDA GPU(s)" in capsys.readouterr().err
    from yolo11.api import UsageError

    with pytest.raises(UsageError, match="torch sees 0 CUDA"):
        yolo11.YOLO(str(weights)).predict(str(image), imgsz=64, device=given)


def test_a_device_that_is_no_device_is_named():
    from yolo11.devices import select_device

    with pytest.raises(ValueError, match=r"device='gpu0' is not a device: cpu, cuda, cuda:N, N"):
        select_device("gpu0")


@pytest.mark.parametrize("tool", ["predict", "val", "export"])
@pytest.mark.parametrize("key, value", [("conf", "25"), ("iou", "7"), ("conf", "-0.1"), ("iou", "nan")])
def test_thresholds_outside_zero_to_one_are_refused_by_name(tool, key, value, capsys):
    """Ultralytics refuses conf=25 (meant as 0.25); it found nothing here, exit 0, without a word."""
    from yolo11.cli import main as cli

    with pytest.raises(SystemExit) as exit_:
        cli([tool, "model=w.safetensors", f"{key}={value}"])
    assert exit_.value.code == 2
    assert f"argument --{key}: {value} is not in [0, 1]" in capsys.readouterr().err


def test_the_api_refuses_thresholds_outside_zero_to_one(weights):
    from yolo11.api import UsageError

    with pytest.raises(UsageError, match=r"conf=25 is not in \[0, 1\]"):
        yolo11.YOLO(str(weights)).predict(np.zeros((64, 64, 3), np.uint8), conf=25, device="cpu")


def test_source_without_model_names_the_missing_key_and_plain_weights_mix_with_keys(weights, loaded_once, tmp_path,
                                                                                   capsys):
    """``yolo11 predict source=a.jpg`` said 'required: sources' (the source was taken for the weights); weights given
    plainly beside ``source=`` were put after it."""
    from yolo11.cli import main as cli

    image = tmp_path / "a.jpg"
    cv2.imwrite(str(image), np.zeros((64, 64, 3), np.uint8))
    with pytest.raises(SystemExit) as exit_:
        cli(["predict", f"source={image}"])
    assert exit_.value.code == 2 and "model= is missing" in capsys.readouterr().err
    assert cli(["predict", str(weights), f"source={image}", "imgsz=64", "device=cpu", f"project={tmp_path}"]) == 0
    assert (tmp_path / "exp" / "a.jpg").is_file()


def test_save_false_writes_no_drawn_image_and_formats_take_any_case(weights, loaded_once, tmp_path):
    """Ultralytics' ``save=False`` was ignored with a note (the drawn image written all the same), and
    ``yolo11 export format=ONNX`` refused the upper case its Python API and Ultralytics accept."""
    from yolo11.cli import main as cli
    from yolo11.tools import export

    image = tmp_path / "a.jpg"
    cv2.imwrite(str(image), np.zeros((64, 64, 3), np.uint8))
    assert cli(["predict", f"model={weights}", f"source={image}", "imgsz=64", "device=cpu", "save=False",
                f"project={tmp_path}"]) == 0
    assert (tmp_path / "exp" / "predictions.json").is_file() and not (tmp_path / "exp" / "a.jpg").exists()
    assert export.parse_args([str(weights), "--format", "ONNX"]).format == "onnx"


def test_detector_from_a_run_predicts_at_its_training_size(tiny_trained_run):
    """``Detector.from_pretrained(<run>/weights/best.safetensors)`` takes the size the run trained at (64 here), as
    ``yolo11-predict`` and Ultralytics' ``YOLO(...).predict`` do; it took 640 whatever the run, and so detected
    other things than the command on the same weights. A size given wins; weights without a run record get 640."""
    from yolo11 import Detector
    from yolo11.models import create_model
    from yolo11.weights import save_weights

    best = tiny_trained_run / "weights" / "best.safetensors"
    assert Detector.from_pretrained(best).imgsz == 64
    assert Detector.from_pretrained(best, imgsz=96).imgsz == 96
    bare = save_weights(create_model("yolo11n", num_classes=2), tiny_trained_run.parent / "bare.safetensors")
    assert Detector.from_pretrained(bare).imgsz == 640
