"""JSON and YAML files: read as regular files of bounded size, YAML with ``safe_load``'s constructors (a
``!!python`` tag builds nothing, it is refused) and its aliases expanded under a budget."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError

from yolo11.gate.files import FileRefusedError, open_regular

# How a user writes a boolean in a flag, a key=value argument or a YAML value read as text
BOOL_WORDS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
MAX_TEXT_BYTES = 64 << 20  # JSON configs: 100k class names fit in a few MB
# YAML is parsed by PyYAML's pure-Python loader (the budget below needs its composer) at ~1 MB/s, so its caps are
# lower: 8 MB (100k class names are 1.6 MB) parse in seconds, 64 MB took a minute and a half.
MAX_YAML_BYTES = 8 << 20
# YAML nodes as a reader of the result meets them, an alias counting every node of what it repeats: 100k class
# names are 100k nodes, while 9 lines of 9 aliases each ("billion laughs") would be 9^9 = 387M; 1M flow nodes
# took 37 s.
MAX_YAML_NODES = 250_000
MAX_YAML_DEPTH = 100  # configs nest a few levels; the composer recurses (Python's limit is ~300 YAML levels)


def read_text(path: Path, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes`` (a config's ``MAX_TEXT_BYTES`` by default), without
    the byte-order mark that Windows tools write first (JSON refuses it)."""
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        raw = fh.read(min(size, max_bytes) + 1)  # one byte more: a file that grew since is still caught
    if len(raw) > max_bytes:
        limit = "for a config file (at most {})" if max_bytes == MAX_TEXT_BYTES else "to read (at most {} bytes)"
        raise FileRefusedError(path, f"{max(size, len(raw))} bytes: too large {limit.format(max_bytes)}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise FileRefusedError(path, f"not UTF-8 text ({err.reason} at byte {err.start})") from None


def read_json(path: str | Path, max_bytes: int = MAX_TEXT_BYTES, max_values: int | None = None,
              max_objects: int | None = None) -> Any:
    """The JSON value in the file; refused in one line when larger than ``max_bytes`` (configs by default; data
    files such as COCO annotations pass their own cap), not JSON, or nested too deeply. ``max_values`` bounds what
    the parse builds: arrays, objects and commas are counted in the text first (a file whose bytes are mostly one
    string may be large; 128 MB of ``[1,2],`` would parse into ~6 GB of Python objects); ``max_objects`` the
    objects alone, the costliest per byte (300 MB of ``{},`` took 15 GB)."""
    path = Path(path)
    text = read_text(path, max_bytes)
    if max_values is not None:
        values = text.count(",") + text.count("[") + text.count("{")
        if values > max_values:
            raise FileRefusedError(path, f"about {values:,} JSON values, more than the {max_values:,} such a file "
                                   "may hold; not parsed")
    if max_objects is not None and (objects := text.count("{")) > max_objects:
        raise FileRefusedError(path, f"about {objects:,} JSON objects, more than the {max_objects:,} such a file may "
                               "hold; not parsed")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise FileRefusedError(path, f"line {err.lineno}: not valid JSON ({err.msg})") from None
    except ValueError as err:  # an integer of more than 4,300 digits: Python's int-from-text limit, not a decode error
        raise FileRefusedError(path, f"not valid JSON ({str(err).split(':')[0]})") from None
    except RecursionError:
        raise FileRefusedError(path, "JSON nested too deeply") from None


class _BudgetLoader(yaml.SafeLoader):
    """``safe_load``'s loader, counting nodes and scalar characters with each alias expanded, as ``str()``, a
    merge key (``<<: *a``) or a copy of the result will meet them; refused past ``MAX_YAML_NODES`` nodes or
    ``MAX_YAML_BYTES`` characters, deeper than ``MAX_YAML_DEPTH``, and for an alias inside its own anchor (a
    structure that contains itself)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.expanded: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, characters) once composed
        self.nodes = self.chars = 0  # the document's so far, aliases expanded: a bomb stops at its first excess
        self.depth = 0

    def _size(self, node: yaml.Node) -> tuple[int, int]:
        """(nodes, characters) of a node just composed, from its children's."""
        nodes, chars = 1, len(node.value) if isinstance(node, yaml.ScalarNode) else 0
        children = node.value if isinstance(node, yaml.SequenceNode) else []
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        for child in children:
            nodes, chars = nodes + self.expanded[id(child)][0], chars + self.expanded[id(child)][1]
        return nodes, chars

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if self.depth >= MAX_YAML_DEPTH:
            raise ComposerError(None, None, f"nested more than MAX_YAML_DEPTH = {MAX_YAML_DEPTH} levels deep; "
                                "refused", event.start_mark)
        self.depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if id(node) in self.expanded:  # an alias of a finished node: all of it again
            nodes, chars = self.expanded[id(node)]
        elif isinstance(event, yaml.AliasEvent):
            raise ComposerError(None, None, f"alias *{event.anchor} lies inside its own anchor (a structure that "
                                "contains itself); refused", event.start_mark)
        else:  # a new node: its children were counted as they were composed
            self.expanded[id(node)] = self._size(node)
            nodes, chars = 1, len(node.value) if isinstance(node, yaml.ScalarNode) else 0
        self.nodes, self.chars = self.nodes + nodes, self.chars + chars
        if self.nodes > MAX_YAML_NODES or self.chars > MAX_YAML_BYTES:
            raise ComposerError(None, None, f"more than MAX_YAML_NODES = {MAX_YAML_NODES} nodes or MAX_YAML_BYTES "
                                f"= {MAX_YAML_BYTES} characters with aliases expanded; refused", event.start_mark)
        return node


class _TextWordsLoader(_BudgetLoader):
    """YAML 1.2's booleans: only ``true``/``false``; ``yes``, ``no``, ``on``, ``off``, ``y``, ``n`` stay text."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
        for first, resolvers in _BudgetLoader.yaml_implicit_resolvers.items()
    }


for _first in "tTfF":
    _TextWordsLoader.yaml_implicit_resolvers[_first].insert(
        0, ("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")))


def read_yaml(path: str | Path, text: str | None = None, *, words_as_text: bool = False) -> Any:
    """``yaml.safe_load`` of the file (or of ``text`` read from it) with aliases expanded under a budget; a
    ``!!python`` tag, an alias bomb or a syntax error is refused in one line with its line number.
    ``words_as_text``: YAML 1.2's booleans, for data YAMLs, whose class names ``no``, ``yes``, ``on``, ``off``
    are meant as written (YAML 1.1 reads them as False/True, so Ultralytics names such a class ``False``)."""
    path = Path(path)
    text = read_text(path, MAX_YAML_BYTES) if text is None else text
    loader = (_TextWordsLoader if words_as_text else _BudgetLoader)(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        if "python/" in str(err):
            problem = (f"{problem}; Python tags are refused: YAML files are read with safe_load, which builds no "
                       "Python objects")
        raise FileRefusedError(path, f"{where}{problem}") from None
    except RecursionError:
        raise FileRefusedError(path, "YAML nested too deeply") from None
    except ValueError as err:  # a constructor's (an integer of more than 4300 digits...)
        raise FileRefusedError(path, f"unreadable value ({str(err)[:200]})") from None
    finally:
        loader.dispose()
