"""torch ``.pt``/``.bin``/``.pkl`` files: read by ``weights/torch_zip.py`` (never ``torch.load``) under bounds that
keep a small hostile pickle from costing minutes or gigabytes.

Before unpickling, ``scan_pickle`` runs the opcodes on sizes instead of objects (``pickletools``, nothing built):
at most ``MAX_PICKLE_OPS`` of them, every argument inside the pickle, no memo index beyond the operations before
it, and no tuple or frozenset that counts more than ``MAX_PICKLE_NODES`` objects with its shared references
expanded (the unpickler hashes dict keys and set members: a tuple holding the previous level twice, 40 levels
deep, hashes in 2**40 steps). After unpickling, ``check_object_graph`` visits each object once and counts what a
reader that does not track identity (``str()``, a copy, a recursive walk) would meet.
"""

from __future__ import annotations

import pickletools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from yolo11.gate.files import FileRefusedError

# A YOLO11n checkpoint's data.pkl has ~130 KB and ~53k opcodes building ~7k objects, ~21k when every shared
# reference is counted again, with ~155k characters of strings, at most ~20 deep; a training checkpoint of a large
# scale (EMA, optimizer state) a few times that. Each limit leaves ~20x or more over YOLO11n.
MAX_PICKLE_BYTES = 64 << 20
MAX_PICKLE_OPS = 1_000_000
MAX_PICKLE_NODES = 2_000_000
MAX_PICKLE_TEXT = 64 << 20
MAX_PICKLE_DEPTH = 100  # below Python's recursion limit, for readers that recurse
# Opcodes that store into the memo at an index they name: the C unpickler grows its table to twice that index, so
# the 9 bytes of `LONG_BINPUT 2**31` would allocate 32 GB.
_PUT_OPCODES = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_GET_OPCODES = frozenset({"GET", "BINGET", "LONG_BINGET"})
_TUPLE_OPCODES = frozenset({"TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "FROZENSET"})  # immutable, so hashable
_ATOMS = (str, bytes, bytearray, int, float, complex, type(None), type)
# Each opcode's stack effect: (pops up to a mark?, items popped besides, items pushed).
_EFFECTS = {op.name: (pickletools.markobject in op.stack_before,
                      op.stack_before.index(pickletools.markobject) if pickletools.markobject in op.stack_before
                      else len(op.stack_before), len(op.stack_after)) for op in pickletools.opcodes}


class _SizeMachine:
    """The C unpickler's object stack, mark stack and memo, holding sizes instead of objects: a tuple or frozenset
    counts itself and its items with shared references expanded, any other object 1 (it hashes by identity, or
    not at all)."""

    def __init__(self) -> None:
        self.stack: list[int] = []
        self.marks: list[int] = []  # stack positions, as the C unpickler keeps them
        self.memo: dict[int, int] = {}

    def _pop(self) -> int:
        if len(self.stack) <= (self.marks[-1] if self.marks else 0):  # nor does the unpickler pop below a mark
            raise ValueError("stack underflow")
        return self.stack.pop()

    def _pop_to_mark(self) -> list[int]:
        position = self.marks.pop()  # IndexError without a mark
        items = self.stack[position:]
        del self.stack[position:]
        return items

    def run(self, opcode: pickletools.OpcodeInfo, arg: Any) -> int:
        """Apply one operation; returns the size of the object it built (1 for all but tuples and frozensets)."""
        name = opcode.name
        if name == "MARK":
            self.marks.append(len(self.stack))
        elif name in _GET_OPCODES:
            self.stack.append(self.memo.get(arg, 1))
        elif name in _PUT_OPCODES or name == "MEMOIZE":
            self.memo[len(self.memo) if name == "MEMOIZE" else arg] = self.stack[-1]
        elif name == "DUP":
            self.stack.append(self.stack[-1])
        elif name == "POP" and self.marks and self.marks[-1] == len(self.stack):
            self.marks.pop()  # POP right after MARK drops the mark
        else:
            marked, fixed, pushed = _EFFECTS[name]
            popped = self._pop_to_mark() if marked else []
            popped += [self._pop() for _ in range(fixed)]
            size = 1 + sum(popped) if name in _TUPLE_OPCODES else 1
            self.stack += [size] * pushed
            return size
        return 1


def scan_pickle(path: str | Path, data: bytes, name: str = "data.pkl") -> None:
    """Refuse the pickle ``data`` (the member ``name`` of the file at ``path``) before anything is unpickled: more
    than ``MAX_PICKLE_OPS`` operations, a memo index beyond the operations before it, a tuple or frozenset of more
    than ``MAX_PICKLE_NODES`` objects with shared references expanded, or anything ``pickletools`` cannot parse (an
    argument claiming more bytes than the pickle has: the C unpickler allocates the claim first)."""
    sizes = _SizeMachine()
    try:
        for count, (opcode, arg, _) in enumerate(pickletools.genops(data)):
            if count >= MAX_PICKLE_OPS:
                raise FileRefusedError(path, f"{name} runs more than MAX_PICKLE_OPS = {MAX_PICKLE_OPS} pickle "
                                             "operations (a YOLO11n checkpoint runs ~53k); refused")
            if opcode.name in _PUT_OPCODES and arg > count:
                raise FileRefusedError(path, f"{name} stores memo entry {arg} after {count} operations (a pickler "
                                             "numbers them in order; the unpickler would allocate a table that "
                                             "large); refused")
            if sizes.run(opcode, arg) > MAX_PICKLE_NODES:
                raise FileRefusedError(path, f"{name} builds a tuple that holds more than MAX_PICKLE_NODES = "
                                             f"{MAX_PICKLE_NODES} objects with its shared references expanded (hashing "
                                             "or printing it would take as many steps); refused")
    except FileRefusedError:
        raise
    except Exception as err:  # noqa: BLE001 - whatever pickletools finds wrong is the file's fault
        first = str(err).splitlines()[0][:200] if str(err) else ""
        raise FileRefusedError(path, f"{name} is not a readable checkpoint pickle ({type(err).__name__}"
                                     f"{': ' + first if first else ''})") from None


def _children(obj: Any) -> list:
    """What a walk over ``obj`` meets next: a container's items (a dict's keys and values), an instance's
    attributes (a module stub's ``__dict__``)."""
    if isinstance(obj, _ATOMS):
        return []
    items = [*obj.keys(), *obj.values()] if isinstance(obj, dict) else []
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = list(obj)
    attributes = getattr(obj, "__dict__", None)
    if type(attributes) is dict:
        items += [*attributes.keys(), *attributes.values()]
    return items


def _expanded(obj: Any, children: list, sizes: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """(objects, characters) of ``obj`` with every reference counted again, from its children's."""
    nodes, chars = 1, len(obj) if isinstance(obj, (str, bytes, bytearray)) else 0
    for child in children:
        child_nodes, child_chars = sizes[id(child)]
        nodes, chars = nodes + child_nodes, chars + child_chars
    return nodes, chars


def check_object_graph(path: str | Path, root: Any, check_leaf: Callable[[Any], str | None] | None = None,
                       name: str = "data.pkl") -> None:
    """Refuse an unpickled ``root`` that would cost a reader more than its file: counting every shared reference
    again, more than ``MAX_PICKLE_NODES`` objects or ``MAX_PICKLE_TEXT`` characters of strings; nested deeper than
    ``MAX_PICKLE_DEPTH``; or containing itself. ``check_leaf(obj)`` returns the problem of an object (a tensor), or
    None. Each object is visited once (by ``id``), without recursion."""
    sizes: dict[int, tuple[int, int]] = {}  # id -> expanded (objects, characters), once all children are done
    on_path: set[int] = set()
    stack: list[list] = []  # [object, its children, index of the next child]

    def enter(obj: Any) -> None:
        problem = check_leaf(obj) if check_leaf is not None else None
        if problem:
            raise FileRefusedError(path, f"{name}: {problem}; refused")
        if len(stack) >= MAX_PICKLE_DEPTH:
            raise FileRefusedError(path, f"{name} nests objects more than MAX_PICKLE_DEPTH = {MAX_PICKLE_DEPTH} "
                                         "deep; refused")
        on_path.add(id(obj))
        stack.append([obj, _children(obj), 0])

    enter(root)
    while stack:
        frame = stack[-1]
        obj, children, index = frame
        if index < len(children):
            frame[2] += 1
            child = children[index]
            if id(child) in on_path:
                raise FileRefusedError(path, f"{name} holds an object that contains itself (a reference cycle, "
                                             "which no checkpoint has); refused")
            if id(child) not in sizes:
                enter(child)
            continue
        stack.pop()
        on_path.discard(id(obj))
        nodes, chars = sizes[id(obj)] = _expanded(obj, children, sizes)
        if nodes > MAX_PICKLE_NODES or chars > MAX_PICKLE_TEXT:
            raise FileRefusedError(path, f"{name}: objects shared through the pickle memo expand to more than "
                                         f"MAX_PICKLE_NODES = {MAX_PICKLE_NODES} objects or MAX_PICKLE_TEXT = "
                                         f"{MAX_PICKLE_TEXT} characters when each reference is counted; refused")
