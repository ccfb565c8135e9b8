"""Class names from a file (a data YAML's ``names``, an Ultralytics checkpoint's ``model.names``): a list by class
id, bounded in count and size before anything copies them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from yolo11.gate.files import FileRefusedError

# The largest class count a file may claim. Big detection vocabularies have 1-22k classes (LVIS 1203,
# ImageNet-21k 21841); at 100k the head's class branch is ~30M parameters for yolo11n, while a crafted
# 1e9 would have create_model allocate ~400 GB before any other check could run.
MAX_CLASSES = 100_000
# All names together, in characters: 100k names of 80 characters. One long string shared through YAML aliases or
# the pickle memo costs a file nothing and every copy of the list (joins, JSON, plots) its full size.
MAX_NAMES_CHARS = 8_000_000


def _names_by_id(names: Any, source: str | Path) -> list | tuple:
    """``names`` as a sequence indexed by class id (a dict's values in key order); the count checked first."""
    if isinstance(names, str):
        preview = names[:40]
        raise FileRefusedError(source, f"'names' is the string {preview!r}, which would be {len(names)} classes of "
                                       f"one letter each; names must be a list, e.g. [{preview}]")
    if not isinstance(names, (list, tuple, dict)):
        raise FileRefusedError(source, f"'names' is a {type(names).__name__}; names must be a list, e.g. [person, "
                                       "car], or a mapping from class id, e.g. {0: person, 1: car}")
    if len(names) > MAX_CLASSES:
        raise FileRefusedError(source, f"{len(names)} class names, more than MAX_CLASSES = {MAX_CLASSES}")
    if not isinstance(names, dict):
        return names
    if not all(type(key) is int for key in names) or set(names) != set(range(len(names))):
        raise FileRefusedError(source, f"'names' keys must be the class ids 0..{len(names) - 1}")
    return [names[k] for k in range(len(names))]


def check_class_names(names: Any, source: str | Path) -> list[str]:
    """The class names of ``names`` (a list of strings or numbers, or a dict ``{0: name, 1: name, ...}``) as a
    list of strings by class id; ``source`` is the file they came from, for the refusal (``FileRefusedError``, one
    line): a plain string (``names: person`` would be six classes p, e, r, s, o, n), more than ``MAX_CLASSES``
    names, a name that is not a string or a number, or more than ``MAX_NAMES_CHARS`` characters in all."""
    listed, total = [], 0
    for class_id, name in enumerate(_names_by_id(names, source)):
        if name is None:  # `- null`, `- ~` or a bare `-` in a YAML list
            raise FileRefusedError(source, f"class name {class_id} is empty (null, ~ or nothing); write a name, "
                                           "quoted if it is one of these words")
        if not isinstance(name, (str, int, float)):
            raise FileRefusedError(source, f"class name {class_id} is a {type(name).__name__}, not a string")
        try:
            text = name if isinstance(name, str) else str(name)  # a str is not copied
        except ValueError:  # an int of more than 4300 digits
            raise FileRefusedError(source, f"class name {class_id} is a number too long to print") from None
        total += len(text)
        if total > MAX_NAMES_CHARS:
            raise FileRefusedError(source, f"class names 0..{class_id} add up to more than MAX_NAMES_CHARS = "
                                           f"{MAX_NAMES_CHARS} characters")
        listed.append(text)
    return listed
