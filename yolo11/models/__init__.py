"""YOLO11 / YOLO26 model parts. The ``yolo11*_backbone`` / ``yolo26*_backbone`` models are registered in timm as
soon as timm is imported (now, if it already is): ``timm.create_model("yolo11n_backbone")`` works after
``import yolo11.models`` in either order, and a run that never uses timm never pays for importing it."""

import importlib.abc
import importlib.util
import sys

from yolo11.models.detector import (
    MODEL_NAMES,
    SCALES,
    End2EndMaps,
    YOLO11Detector,
    YOLO26Detector,
    create_model,
)

__all__ = ["MODEL_NAMES", "SCALES", "End2EndMaps", "YOLO11Detector", "YOLO26Detector", "create_model"]


class _RegisterWhenTimmLoads(importlib.abc.MetaPathFinder):
    """A finder that lets the normal ones find ``timm`` and runs our registration right after it executes."""

    def find_spec(self, name, path=None, target=None):
        if name != "timm":
            return None
        sys.meta_path.remove(self)  # one-shot; also keeps find_spec below from finding this finder again
        spec = importlib.util.find_spec("timm")
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            importlib.import_module("yolo11.models.timm_registry")

        spec.loader.exec_module = exec_then_register
        return spec


if "timm" in sys.modules:
    importlib.import_module("yolo11.models.timm_registry")
elif not any(isinstance(finder, _RegisterWhenTimmLoads) for finder in sys.meta_path):
    sys.meta_path.insert(0, _RegisterWhenTimmLoads())
