"""Read what an offline W&B run logged, from its ``run-<id>.wandb`` stream (test helper).

W&B 0.31 has no reader for these files any more (FIELD-NOTES "W&B 0.31"); the format is a LevelDB log: a 7-byte
file header (``:W&B``, magic 0xBEE1, version), then 32 KiB blocks of chunks, each with a 7-byte header (CRC32 4,
length 2 little-endian, type 1: full / first / middle / last), a block tail shorter than 7 bytes being padding.
The reassembled records are ``wandb_internal_pb2.Record`` messages.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

from wandb.proto import wandb_internal_pb2

FILE_HEADER = 7
CHUNK_HEADER = 7
BLOCK = 32 * 1024
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path: Path) -> Iterator[wandb_internal_pb2.Record]:
    """Every record of the stream, in order."""
    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B stream (header {data[:4]!r})")
    pos, pending = FILE_HEADER, b""
    while pos + CHUNK_HEADER <= len(data):
        room = BLOCK - pos % BLOCK
        if room < CHUNK_HEADER:  # zero padding at the end of a block
            pos += room
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + CHUNK_HEADER])
        chunk = data[pos + CHUNK_HEADER:pos + CHUNK_HEADER + length]
        pos += CHUNK_HEADER + length
        if kind == 0 and length == 0:  # preallocated zeros after the last record
            break
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record
            pending = b""


def history(path: Path) -> list[dict]:
    """The logged history rows: ``{key: value}`` with JSON-decoded values (``_step`` included)."""
    rows = []
    for record in read_records(path):
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
    return rows


def artifacts(path: Path) -> list[wandb_internal_pb2.ArtifactRecord]:
    return [r.artifact for r in read_records(path) if r.WhichOneof("record_type") == "artifact"]


def find_stream(root: Path) -> Path:
    """The single ``.wandb`` stream under ``root``."""
    streams = sorted(Path(root).rglob("run-*.wandb"))
    if len(streams) != 1:
        raise FileNotFoundError(f"expected one .wandb stream under {root}, found {streams}")
    return streams[0]
