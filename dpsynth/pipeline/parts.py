"""Joining part files into one published file by copying bytes, never re-encoding.

The synthesize stage may write its table as contiguous parts (one per task, on a local
process pool or Dask workers). A CSV is joined by writing the header once and then each
part's lines. A Parquet file is joined by copying each part's row groups (the bytes
between its leading magic and its footer) and writing one footer: part 0's file metadata
with every part's row groups, their offsets moved by the bytes before them, their
ordinals renumbered and the row count summed. The footer is Thrift compact protocol,
read and written back field for field, so a file joined from parts holds the same bytes
as one writer writing the same row groups in order (``tests/test_synthetic_parts.py``).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any, BinaryIO, Sequence

__all__ = ["append_file", "concat_csv", "concat_parquet", "read_footer", "write_footer"]

MAGIC = b"PAR1"

# Thrift compact protocol type ids.
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)

# A decoded struct: its fields in the order they were read, as [field id, type, value].
Struct = list


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = out = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, kind: int) -> Any:
        if kind in (_TRUE, _FALSE):  # a bool inside a list: one byte
            return self.byte() == _TRUE
        if kind == _BYTE:
            return self.byte()
        if kind in (_I16, _I32, _I64):
            return self.zigzag()
        if kind == _DOUBLE:
            self.pos += 8
            return self.data[self.pos - 8:self.pos]
        if kind == _BINARY:
            n = self.varint()
            self.pos += n
            return self.data[self.pos - n:self.pos]
        if kind in (_LIST, _SET):
            head = self.byte()
            size, elem = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            return (elem, [self.value(elem) for _ in range(size)])
        if kind == _STRUCT:
            return self.struct()
        raise ValueError(f"Parquet footer: unsupported Thrift type {kind}")

    def struct(self) -> Struct:
        fields: Struct = []
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return fields
            kind, delta = head & 0x0F, head >> 4
            fid = last + delta if delta else self.zigzag()
            value = kind == _TRUE if kind in (_TRUE, _FALSE) else self.value(kind)
            fields.append([fid, kind, value])
            last = fid


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _zigzag(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))


def _value(kind: int, value: Any) -> bytes:
    if kind in (_TRUE, _FALSE):
        return bytes([_TRUE if value else _FALSE])
    if kind == _BYTE:
        return bytes([value])
    if kind in (_I16, _I32, _I64):
        return _zigzag(value)
    if kind == _DOUBLE:
        return bytes(value)
    if kind == _BINARY:
        return _varint(len(value)) + bytes(value)
    if kind in (_LIST, _SET):
        elem, items = value
        head = bytes([(len(items) << 4) | elem]) if len(items) < 15 else bytes([0xF0 | elem]) + _varint(len(items))
        return head + b"".join(_value(elem, v) for v in items)
    if kind == _STRUCT:
        return _struct(value)
    raise ValueError(f"Parquet footer: unsupported Thrift type {kind}")


def _struct(fields: Struct) -> bytes:
    out = bytearray()
    last = 0
    for fid, kind, value in fields:
        wire = (_TRUE if value else _FALSE) if kind in (_TRUE, _FALSE) else kind
        delta = fid - last
        out += bytes([(delta << 4) | wire]) if 0 < delta <= 15 else bytes([wire]) + _zigzag(fid)
        if kind not in (_TRUE, _FALSE):
            out += _value(kind, value)
        last = fid
    out.append(0)
    return bytes(out)


def read_footer(path: str | Path) -> tuple[Struct, int]:
    """The file metadata of a Parquet file (decoded Thrift fields) and where its footer
    starts (the end of its row groups)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        if size < 12:
            raise ValueError(f"{Path(path).name}: not a Parquet file (too short)")
        f.seek(size - 8)
        tail = f.read(8)
        (length,) = struct.unpack("<i", tail[:4])
        if tail[4:] != MAGIC or length < 0 or length > size - 12:
            raise ValueError(f"{Path(path).name}: not a Parquet file (bad footer)")
        f.seek(size - 8 - length)
        reader = _Reader(f.read(length))
        return reader.struct(), size - 8 - length


def write_footer(meta: Struct) -> bytes:
    """A Parquet footer: the encoded file metadata, its length and the magic."""
    body = _struct(meta)
    return body + struct.pack("<i", len(body)) + MAGIC


def _field(fields: Struct, fid: int) -> list | None:
    return next((f for f in fields if f[0] == fid), None)


# Offsets into the file: RowGroup.file_offset (5); ColumnChunk.file_offset (2);
# ColumnMetaData data (9), index (10) and dictionary (11) page offsets.
_ROW_GROUP_OFFSETS, _CHUNK_OFFSETS, _META_OFFSETS = (5,), (2,), (9, 10, 11)
# Structures a plain copy of the row groups would leave behind: page indexes (4, 6) and
# bloom filters (14) sit between the row groups and the footer.
_CHUNK_REFUSED, _META_REFUSED = (4, 6), (14,)


def _moved_row_group(group: Struct, shift: int, ordinal: int) -> Struct:
    out = []
    for fid, kind, value in group:
        if fid in _ROW_GROUP_OFFSETS:
            value = value + shift
        elif fid == 7:  # ordinal
            value = ordinal
        elif fid == 1:  # columns
            value = (value[0], [_moved_chunk(c, shift) for c in value[1]])
        out.append([fid, kind, value])
    return out


def _moved_chunk(chunk: Struct, shift: int) -> Struct:
    out = []
    for fid, kind, value in chunk:
        if fid in _CHUNK_REFUSED:
            raise ValueError("Parquet part has a page index: cannot join it by copying row groups")
        if fid in _CHUNK_OFFSETS and value:  # Arrow writes 0 in this deprecated field: keep it
            value = value + shift
        elif fid == 3:  # ColumnMetaData
            meta = []
            for mfid, mkind, mvalue in value:
                if mfid in _META_REFUSED:
                    raise ValueError("Parquet part has a bloom filter: cannot join it by copying row groups")
                meta.append([mfid, mkind, mvalue + shift if mfid in _META_OFFSETS else mvalue])
            value = meta
        out.append([fid, kind, value])
    return out


def append_file(src: str | Path, dst: BinaryIO, start: int = 0, end: int | None = None) -> None:
    """Copies bytes ``[start, end)`` of ``src`` to the end of the open file ``dst``
    (in the kernel where it can: ``os.copy_file_range``)."""
    dst.flush()
    with open(src, "rb") as f:
        stop = os.fstat(f.fileno()).st_size if end is None else end
        left, offset = stop - start, start
        fast = hasattr(os, "copy_file_range")
        while left > 0:
            n = 0
            if fast:
                try:
                    n = os.copy_file_range(f.fileno(), dst.fileno(), min(left, 1 << 30), offset)
                except OSError:
                    fast = False
            if not fast or n == 0:
                f.seek(offset)
                n = len(block := f.read(min(left, 1 << 23)))
                if not n:
                    raise ValueError(f"{Path(src).name}: shorter than expected")
                dst.write(block)
                dst.flush()
            left, offset = left - n, offset + n
    # copy_file_range writes at the descriptor's offset and moves it; keep Python's view in step
    dst.seek(0, os.SEEK_END)


def concat_parquet(parts: Sequence[str | Path], out: str | Path) -> int:
    """Joins Parquet ``parts`` (same schema, same writer settings) into ``out``, row groups
    in the order given; returns the rows. Refuses parts whose schemas differ.

    One part's decoded footer is held at a time: each part's row groups are encoded back
    to bytes as soon as they are moved, so what is held grows with the row groups by
    their encoded size only (the size of the joined footer), not by their decoded form."""
    if not parts:
        raise ValueError("no Parquet parts to join")
    first: Struct | None = None
    groups: list[bytes] = []
    rows = 0
    shift = 0  # bytes of row groups written before this part's
    with open(out, "wb") as f:
        f.write(MAGIC)
        for path in parts:
            meta, end = read_footer(path)
            if first is None:
                first = [[fid, kind, None if fid == 4 else value] for fid, kind, value in meta]  # groups: below
            elif any(_field(meta, fid) != _field(first, fid) for fid in (2, 5)):
                # the schema, the key-value metadata (the Arrow schema)
                raise ValueError("Parquet parts disagree on their schema: cannot join them")
            row_groups = _field(meta, 4)
            for group in (row_groups[2][1] if row_groups else []):
                groups.append(_struct(_moved_row_group(group, shift, len(groups))))
            rows += _field(meta, 3)[2]
            del meta, row_groups
            append_file(path, f, 4, end)
            shift += end - 4
        assert first is not None
        f.write(_joined_footer(first, rows, groups))
    return rows


def _joined_footer(first: Struct, rows: int, groups: list[bytes]) -> bytes:
    """The footer of the joined file: ``first``'s fields in their order, with the row count
    ``rows`` and the row groups ``groups`` (each already encoded) in place of its own."""
    head = bytes([(len(groups) << 4) | _STRUCT]) if len(groups) < 15 else bytes([0xF0 | _STRUCT]) + _varint(len(groups))
    encoded = b"".join(groups)
    body = bytearray()
    last = 0
    for fid, kind, value in first:
        value = rows if fid == 3 else value
        wire = (_TRUE if value else _FALSE) if kind in (_TRUE, _FALSE) else kind
        delta = fid - last
        body += bytes([(delta << 4) | wire]) if 0 < delta <= 15 else bytes([wire]) + _zigzag(fid)
        if fid == 4:
            body += head + encoded
        elif kind not in (_TRUE, _FALSE):
            body += _value(kind, value)
        last = fid
    body.append(0)
    return bytes(body) + struct.pack("<i", len(body)) + MAGIC


def concat_csv(header: str, parts: Sequence[str | Path], out: str | Path) -> None:
    """Writes ``header`` (one line, UTF-8) and then each part's bytes to ``out``."""
    with open(out, "wb") as f:
        f.write(header.encode("utf-8"))
        for path in parts:
            append_file(path, f)
