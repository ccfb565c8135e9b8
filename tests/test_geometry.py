"""yolo11.geometry: the stride rule, box formats, letterbox; the one module that defines them."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from yolo11 import geometry
from yolo11.data.transforms import LetterBox
from yolo11.geometry import (
    letterbox_params,
    ltrb_to_xyxy,
    rect_input_size,
    round_up_to_stride,
    scale_boxes,
    xywh_to_xyxy,
    xyxy_to_ltrb,
    xyxy_to_xywh,
)
from yolo11.postprocess import to_original_pixels

ROOT = Path(__file__).resolve().parents[1]


def test_round_up_to_stride():
    assert [round_up_to_stride(size) for size in (0, 1, 31, 32, 33, 426, 640)] == [0, 32, 32, 32, 64, 448, 640]
    assert round_up_to_stride(17, stride=8) == 24


def test_rect_input_size_pads_each_side_to_the_stride():
    assert rect_input_size((427, 640), 640) == (448, 640)
    assert rect_input_size((500, 333), 640) == (640, 448)
    with pytest.raises(ValueError, match="multiple of 32"):
        rect_input_size((427, 640), 600)


def test_box_formats_round_trip():
    xyxy = torch.tensor([[10.0, 20.0, 50.0, 80.0], [0.0, 0.0, 1.0, 3.0]])
    assert xyxy_to_xywh(xyxy).tolist() == [[30.0, 50.0, 40.0, 60.0], [0.5, 1.5, 1.0, 3.0]]
    assert torch.equal(xywh_to_xyxy(xyxy_to_xywh(xyxy)), xyxy)
    points = torch.tensor([[30.0, 50.0], [0.5, 1.0]])
    ltrb = xyxy_to_ltrb(xyxy, points, max_distance=100.0)
    assert ltrb.tolist() == [[20.0, 30.0, 20.0, 30.0], [0.5, 1.0, 0.5, 2.0]]
    assert torch.equal(ltrb_to_xyxy(ltrb, points), xyxy)
    assert xyxy_to_ltrb(xyxy, points, max_distance=25.0)[0].tolist() == [20.0, 25.0, 20.0, 25.0]


def test_letterbox_params():
    assert letterbox_params((480, 640), (640, 640)) == (1.0, 1.0, 80, 0)
    gain_h, gain_w, top, left = letterbox_params((427, 640), (640, 640))  # odd padding: round(106.5 - 0.1) = 106
    assert (gain_h, gain_w, top, left) == (1.0, 1.0, 106, 0)
    gain, _, top, left = letterbox_params((1000, 500), (640, 640))
    assert gain == pytest.approx(0.64) and (top, left) == (0, 160)


def test_scale_boxes_inverts_letterbox_and_clips():
    orig_size = (1000, 500)
    gain_h, gain_w, top, left = letterbox_params(orig_size, (640, 640))
    original = torch.tensor([[10.0, 20.0, 300.0, 900.0], [0.0, 0.0, 500.0, 1000.0]])
    letterboxed = original * torch.tensor([gain_w, gain_h, gain_w, gain_h]) + torch.tensor([left, top, left, top])
    ratio_pad = torch.tensor([gain_h, gain_w, top, left])
    torch.testing.assert_close(scale_boxes(letterboxed, ratio_pad, torch.tensor(orig_size)), original)
    outside = torch.tensor([[100.0, -20.0, 700.0, 660.0]])  # beyond the image on three sides
    assert scale_boxes(outside, ratio_pad, torch.tensor(orig_size)).tolist() == [[0.0, 0.0, 500.0, 1000.0]]


@pytest.mark.parametrize(("size", "shape"), [((300, 500), (640, 640)), ((427, 640), (448, 640)), ((75, 41), (64, 64))])
def test_data_letterbox_and_postprocessing_round_trip_a_box(size, shape):
    """A box letterboxed by the data transform comes back to its original pixels through the post-processing."""
    box = np.array([[5.0, 7.0, 36.0, 60.0]], np.float32)
    image = np.zeros((*size, 3), np.uint8)
    _, target = LetterBox(shape)(image, {"boxes": box, "labels": np.zeros(1, np.int64)})
    detection = torch.cat((torch.from_numpy(target["boxes"]), torch.tensor([[0.9, 2.0]])), dim=1)
    ratio_pad = torch.tensor([target["letterbox"]], dtype=torch.float32)
    (back,) = to_original_pixels([detection], ratio_pad, torch.tensor([size]))
    torch.testing.assert_close(back[:, :4], torch.from_numpy(box), rtol=0, atol=1e-4)
    assert back[:, 4:].tolist() == [[pytest.approx(0.9), 2.0]]


def test_geometry_is_defined_once():
    """No other module of the package defines (or copies under the same name) a geometry helper."""
    names = [name for name, value in vars(geometry).items()
             if callable(value) and getattr(value, "__module__", None) == "yolo11.geometry"]
    assert {"letterbox_params", "scale_boxes", "round_up_to_stride", "xywh_to_xyxy", "make_anchors"} <= set(names)
    pattern = re.compile(rf"^\s*def ({'|'.join(names)})\(", re.MULTILINE)
    defining = {path.relative_to(ROOT).as_posix() for path in (ROOT / "yolo11").rglob("*.py")
                if pattern.search(path.read_text())}
    assert defining == {"yolo11/geometry.py"}


def test_importing_data_imports_neither_postprocessing_nor_the_loss():
    code = ("import sys, yolo11.data; "
            "assert 'yolo11.loss' not in sys.modules and 'yolo11.postprocess' not in sys.modules, "
            "sorted(m for m in sys.modules if m.startswith('yolo11'))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
