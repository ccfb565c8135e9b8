"""Pascal VOC xml annotations -> each image's named boxes (the rows are built by ``per_image.py``).

Two layouts hold them (``layouts.py`` finds them): the VOC devkit's, as the devkit and CVAT's "PASCAL VOC 1.1"
export write it (``Annotations/<id>.xml``, ``JPEGImages/<id>.jpg``, ``ImageSets/Main/<split>.txt`` listing ids),
and an xml beside each image, as LabelImg and Roboflow's "Pascal VOC" export write it.

A VOC box is 1-based inclusive pixel corners (``xmin=1, xmax=W`` covers the whole image), so it is read as
``(xmin - 1, ymin - 1, xmax, ymax)`` in the continuous frame the other sources use (detectron2 reads VOC so;
Ultralytics' VOC converter also subtracts 1 from ``xmax``/``ymax``, a box one pixel narrower); a 0-based tool's
``xmin=0`` stays 0. Objects marked ``difficult`` are left out, as Ultralytics' converter leaves them out. Class
names come from CVAT's ``labelmap.txt`` when there is one, else they are every object name in the folder's files,
sorted (VOC's 20 classes then come in the order of Ultralytics' ``VOC.yaml``).
"""

from __future__ import annotations

import codecs
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path, PurePosixPath

import numpy as np

from yolo11.data.image_io import read_regular_file
from yolo11.data.schema import DataSourceError
from yolo11.data.sources.named_boxes import ImageAnnotation, NamedBox, read_list_file

MAX_VOC_XML_BYTES = 4 << 20  # a VOC file of 10,000 objects is ~3 MB; more is not an annotation file
MAX_XML_DEPTH = 32  # VOC nests 4 deep (annotation/object/bndbox/xmin, parts one more)
MAX_XML_ELEMENTS = 200_000  # 12 per object: ~16,000 objects
XML_CHUNK_CHARS = 1 << 16
MAX_SPLIT_LIST_BYTES = 64 << 20  # ImageSets/Main/train.txt: VOC2012's 5,717 ids are 70 KB
MAX_LABEL_MAP_BYTES = 8 << 20
_DECLARED_ENCODING = re.compile(rb"""^<\?xml[^>]*encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")
_VOC_ROOT_TAG = re.compile(r"<annotation[\s>]")


def _encoding(data: bytes) -> str:
    """How the file is written: a byte-order mark decides (UTF-16 from Windows tools), else a first ``<`` written in
    two bytes (UTF-16 without a mark, as the XML spec detects it), else the XML declaration, else UTF-8."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    if data.startswith((b"<\0", b"\0<")):
        return "utf-16-le" if data[0] else "utf-16-be"
    if data.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    declared = _DECLARED_ENCODING.match(data)
    return declared.group(1).decode() if declared else "utf-8"


def _decode(data: bytes) -> str:
    """The file's text. Text holding a NUL is refused: the parser, fed it, would take ``<\0`` for UTF-16 and read
    what the DOCTYPE check did not."""
    encoding = _encoding(data)
    try:
        text = data.decode(encoding)
    except LookupError:
        raise ValueError(f"unknown encoding {encoding!r} in its XML declaration") from None
    if "\0" in text:
        raise ValueError("not XML text (it holds NUL characters: UTF-32, or UTF-16 not starting with '<'?)")
    return text


def is_voc(head: bytes) -> bool:
    """Whether the first bytes of a file hold VOC's ``<annotation>`` root (not CVAT's ``<annotations>``), in any
    encoding ``read_voc_xml`` reads."""
    try:
        return _VOC_ROOT_TAG.search(head.decode(_encoding(head), errors="ignore")) is not None
    except LookupError:
        return False


def read_voc_xml(path: Path) -> ImageAnnotation:
    """One VOC annotation file; ``ValueError`` saying why for a file that is not one. Bounded: at most
    ``MAX_VOC_XML_BYTES``, and no DOCTYPE or entity declarations (no VOC tool writes them, and entity expansion
    turns a small file into gigabytes)."""
    try:
        text = _decode(read_regular_file(path, MAX_VOC_XML_BYTES))
    except UnicodeDecodeError as err:
        raise ValueError(f"not text in its encoding ({err.reason} at byte {err.start})") from None
    if "<!DOCTYPE" in text or "<!ENTITY" in text:
        raise ValueError("declares a DOCTYPE or entities, which VOC files never do (refused: entities can expand "
                         "without bound)")
    root = _parse_bounded(text)
    if root.tag != "annotation":
        raise ValueError(f"not a Pascal VOC file (its root element is <{root.tag}>, not <annotation>)")
    objects = tuple(_read_object(element) for element in root.findall("object"))
    return ImageAnnotation(os.fspath(path), _stated_size(root), objects)


def _parse_bounded(text: str) -> ET.Element:
    """The element tree of ``text``, fed in chunks and stopped past ``MAX_XML_DEPTH`` or ``MAX_XML_ELEMENTS``: a
    4 MB file of nested tags would otherwise build a tree of ~800 MB."""
    parser, depth, elements, root = ET.XMLPullParser(events=("start", "end")), 0, 0, None
    try:
        for start in range(0, len(text), XML_CHUNK_CHARS):
            parser.feed(text[start:start + XML_CHUNK_CHARS])
            for event, element in parser.read_events():
                root = element if root is None else root  # the pull parser's close() returns nothing
                depth += 1 if event == "start" else -1
                elements += event == "start"
                if depth > MAX_XML_DEPTH or elements > MAX_XML_ELEMENTS:
                    raise ValueError(f"more than {MAX_XML_DEPTH} levels or {MAX_XML_ELEMENTS} elements, not a VOC "
                                     "annotation")
        parser.close()
    except ET.ParseError as err:
        raise ValueError(f"not XML ({err})") from None
    if root is None:
        raise ValueError("not XML (no element)")
    return root


def _stated_size(root: ET.Element) -> tuple[int, int] | None:
    try:
        width, height = (int(float(root.findtext(f"size/{key}", ""))) for key in ("width", "height"))
    except (ValueError, OverflowError):  # OverflowError: "1e400" is infinity to float, which int refuses
        return None
    return (width, height) if width > 0 and height > 0 else None


def _read_object(element: ET.Element) -> NamedBox:
    name = (element.findtext("name") or "").strip()
    difficult = (element.findtext("difficult") or "0").strip().lower() in ("1", "true")
    if not name:
        return NamedBox(name, None, "no <name>", difficult)
    box = element.find("bndbox")
    if box is None:
        return NamedBox(name, None, "no <bndbox>", difficult)
    try:
        xmin, ymin, xmax, ymax = (float(box.findtext(key, "")) for key in ("xmin", "ymin", "xmax", "ymax"))
    except ValueError:
        return NamedBox(name, None, "<bndbox> needs numbers xmin, ymin, xmax and ymax", difficult)
    if not np.isfinite([xmin, ymin, xmax, ymax]).all():
        return NamedBox(name, None, "non-finite coordinates", difficult)
    if xmax < xmin or ymax < ymin:
        return NamedBox(name, None, f"xmax/ymax ({xmax:g}, {ymax:g}) before xmin/ymin ({xmin:g}, {ymin:g})",
                         difficult)
    # 1-based corners; a 0 can only come from a 0-based tool and stays at the image's edge
    x1, y1 = (v - 1 if v >= 1 else min(v, 0.0) for v in (xmin, ymin))
    return NamedBox(name, (x1, y1, xmax, ymax), "", difficult)


def read_label_map(path: Path) -> list[str]:
    """Class names of CVAT's ``labelmap.txt`` (``name:r,g,b:parts:actions`` per line, ``#`` comments), without its
    ``background`` entry, in the file's order."""
    text = read_list_file(path, MAX_LABEL_MAP_BYTES)
    names = [line.split(":", 1)[0].strip() for line in text.splitlines() if line.strip() and
             not line.lstrip().startswith("#")]
    names = [name for name in names if name and name != "background"]
    if not names:
        raise DataSourceError(f"{path}: no class names (a line 'name:r,g,b::' per class)")
    return names


def read_split_list(path: Path) -> list[str]:
    """The ids of an ``ImageSets/Main/<split>.txt``: the first field of each line (class lists add a second). An id
    that is a path leaving ``Annotations/`` (``../x``, ``/etc/x``) is refused: no list makes the reader open a file
    outside the dataset."""
    text = read_list_file(path, MAX_SPLIT_LIST_BYTES)
    ids = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.split():
            continue
        image_id = line.split()[0]
        if Path(image_id).is_absolute() or ".." in PurePosixPath(image_id.replace("\\", "/")).parts:
            raise DataSourceError(f"{path}: line {number}: {image_id[:200]!r} is not an image id (a path leaving "
                                  "Annotations/ and JPEGImages/)")
        ids.append(image_id)
    return ids
