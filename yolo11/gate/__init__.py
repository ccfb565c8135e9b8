"""The loading gate: every file the project reads from a user (weights, checkpoints, training state, configs,
YAML) is checked here before anything is built or allocated from it, and refused with one line naming the file
and what is wrong (``FileRefusedError``, a ``ValueError``: the CLIs print it as ``error: ...`` and exit 2). A
hostile file costs seconds and megabytes, never minutes or gigabytes.

- ``files``: only regular files are opened (``open_regular``, ``check_regular_file``): a FIFO, a device, a socket,
  a directory or a symbolic link loop is refused, never read.
- ``pickles``: torch ``.pt``/``.bin``/``.pkl`` files, read by ``weights/torch_zip.py``'s ``read_torch_file``, never
  ``torch.load``: TorchScript and any zip that is not a plain ``torch.save`` checkpoint are refused before a byte
  is unpickled, ``data.pkl`` is scanned (``scan_pickle``: operations, memo indices) and goes through a restricted
  unpickler (``weights/safe_pickle.py``) into storages that cannot grow, and the result is walked once
  (``check_object_graph``: objects and text with shared references expanded, depth, every tensor's view inside its
  record).
- ``safetensors``: ``read_safetensors_header`` checks the header length against the file size before reading it,
  then every entry's dtype, shape and byte range; ``check_tensors`` compares names, shapes and dtypes with what the
  model expects (no silent cast) before any tensor is read; ``check_finite`` refuses NaN/inf.
- ``config``: model configs (``config.json``, safetensors metadata): ``check_model_config``: a JSON object of known
  keys, a known scale, ``num_classes`` an int in 1..``MAX_CLASSES``, names matching it, and a timm backbone
  resolved among local timm names only (no network decided by a file) unless the user named it.
- ``names``: ``check_class_names``: a list (or ``{id: name}``) of at most ``MAX_CLASSES`` scalar names of bounded
  total size; a plain string is refused (``names: person`` is not six classes).
- ``text``: JSON and YAML: ``read_json`` / ``read_yaml`` (``safe_load``'s constructors: a ``!!python`` tag builds
  nothing, it is refused; aliases expanded under ``MAX_YAML_NODES``), sizes capped.

This package imports only the standard library and PyYAML at import time (the training CLI parses its flags
before torch loads); torch and timm are imported where a check needs them.
"""

from yolo11.gate.config import FAMILY_HEAD, FAMILY_REG_MAX, SCALE_NAMES, check_backbone_name, check_model_config
from yolo11.gate.files import FileRefusedError, check_regular_file, open_regular, read_regular
from yolo11.gate.names import MAX_CLASSES, MAX_NAMES_CHARS, check_class_names
from yolo11.gate.pickles import (
    MAX_PICKLE_BYTES,
    MAX_PICKLE_DEPTH,
    MAX_PICKLE_NODES,
    MAX_PICKLE_OPS,
    MAX_PICKLE_TEXT,
    check_object_graph,
    scan_pickle,
)
from yolo11.gate.safetensors import (
    MAX_SAFETENSORS_HEADER,
    SAFETENSORS_DTYPES,
    SafetensorsHeader,
    check_finite,
    check_tensors,
    read_safetensors,
    read_safetensors_header,
    safetensors_dtype,
    tensor_layout,
)
from yolo11.gate.text import (
    BOOL_WORDS,
    MAX_TEXT_BYTES,
    MAX_YAML_BYTES,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    read_json,
    read_yaml,
)

__all__ = [
    "BOOL_WORDS",
    "FAMILY_HEAD",
    "FAMILY_REG_MAX",
    "MAX_CLASSES",
    "MAX_NAMES_CHARS",
    "MAX_PICKLE_BYTES",
    "MAX_PICKLE_DEPTH",
    "MAX_PICKLE_NODES",
    "MAX_PICKLE_OPS",
    "MAX_PICKLE_TEXT",
    "MAX_SAFETENSORS_HEADER",
    "MAX_TEXT_BYTES",
    "MAX_YAML_BYTES",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "SAFETENSORS_DTYPES",
    "SCALE_NAMES",
    "FileRefusedError",
    "SafetensorsHeader",
    "check_backbone_name",
    "check_class_names",
    "check_finite",
    "check_model_config",
    "check_object_graph",
    "check_regular_file",
    "check_tensors",
    "open_regular",
    "read_regular",
    "read_json",
    "read_safetensors",
    "read_safetensors_header",
    "read_yaml",
    "safetensors_dtype",
    "scan_pickle",
    "tensor_layout",
]
