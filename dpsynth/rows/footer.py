"""Parquet footers read and written as bytes, and footers of a few row groups of a big file.

A Parquet file's footer (its file metadata) is Thrift compact protocol. This module reads
it field for field and writes it back (:mod:`dpsynth.pipeline.parts` joins part files by
moving their row groups), and maps where each row group sits in it (:func:`footer_map`).
A reader of a run of row groups of a file with many of them then decodes a footer of that
run alone (:func:`sliced_metadata`, a few of the file's bytes) instead of the whole
file's: what it holds no longer grows with the file's row groups.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence, TYPE_CHECKING

if TYPE_CHECKING:  # imported where used, so a release from codes loads neither pandas nor pyarrow
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["FooterMap", "FooterSlice", "MAGIC", "footer_bytes", "footer_map", "footer_of_groups", "read_footer",
           "sliced_footer", "sliced_metadata", "write_footer"]

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

    def skip(self, kind: int) -> None:
        """Moves past one value of type ``kind`` without building it (a bool in a list: one byte)."""
        if kind in (_TRUE, _FALSE, _BYTE):
            self.pos += 1
        elif kind in (_I16, _I32, _I64):
            while self.data[self.pos] & 0x80:
                self.pos += 1
            self.pos += 1
        elif kind == _DOUBLE:
            self.pos += 8
        elif kind == _BINARY:
            n = self.varint()
            self.pos += n
        elif kind in (_LIST, _SET):
            head = self.byte()
            size, elem = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            for _ in range(size):
                self.skip(elem)
        elif kind == _STRUCT:
            while head := self.byte():
                kind = head & 0x0F
                if not head >> 4:  # a long field id follows
                    self.varint()
                if kind not in (_TRUE, _FALSE):
                    self.skip(kind)
        else:
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
    data, start = footer_bytes(path)
    return _Reader(data).struct(), start


def footer_bytes(path: str | Path) -> tuple[bytes, int]:
    """A Parquet file's encoded file metadata and where it starts in the file."""
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
        return f.read(length), size - 8 - length


def write_footer(meta: Struct) -> bytes:
    """A Parquet footer: the encoded file metadata, its length and the magic."""
    body = _struct(meta)
    return body + struct.pack("<i", len(body)) + MAGIC


def _field(fields: Struct, fid: int) -> list | None:
    return next((f for f in fields if f[0] == fid), None)


def footer_of_groups(first: Struct, rows: int, count: int, encoded: bytes) -> bytes:
    """A footer: ``first``'s fields in their order, with the row count ``rows`` and the
    ``count`` row groups already encoded one after the other in ``encoded`` in place of
    its own (``first``'s field 4 is a placeholder)."""
    head = bytes([(count << 4) | _STRUCT]) if count < 15 else bytes([0xF0 | _STRUCT]) + _varint(count)
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


# --- footers of a run of row groups ------------------------------------------------------


@dataclass(frozen=True)
class FooterSlice:
    """Where in a Parquet file the footer of some consecutive row groups is found: the
    file metadata's fields before its row groups (``head``, file offsets ``[start,
    stop)``), the run's row groups (``groups``, ``count`` of them, ``rows`` rows) and the
    fields after them (``tail``)."""

    head: tuple[int, int]
    groups: tuple[int, int]
    count: int
    rows: int
    tail: tuple[int, int]


@dataclass(frozen=True)
class FooterMap:
    """A Parquet file's footer mapped once: the file offsets of its fields before and
    after the row groups, each row group's encoding (row group ``k`` is ``[bounds[k],
    bounds[k + 1])``), each row group's rows and the top-level column names."""

    head: tuple[int, int]
    bounds: tuple[int, ...]
    tail: tuple[int, int]
    rows: tuple[int, ...]
    names: tuple[str, ...]

    @property
    def row_groups(self) -> int:
        """The file's row groups."""
        return len(self.rows)

    def slice(self, groups: Sequence[int]) -> FooterSlice:
        """Where the footer of ``groups`` (consecutive row group indices) is found."""
        first, last = groups[0], groups[-1]
        if list(groups) != list(range(first, last + 1)) or first < 0 or last >= self.row_groups:
            raise ValueError(f"row groups {tuple(groups)}: not a run of this file's {self.row_groups}")
        return FooterSlice(head=self.head, groups=(self.bounds[first], self.bounds[last + 1]), count=len(groups),
                           rows=sum(self.rows[first:last + 1]), tail=self.tail)


def _field_id(r: _Reader, byte: int, last: int) -> int:
    return last + (byte >> 4) if byte >> 4 else r.zigzag()


def _group_rows(r: _Reader) -> int:
    """Reads past one encoded RowGroup; returns its rows (field 3)."""
    rows, last = 0, 0
    while byte := r.byte():
        kind, fid = byte & 0x0F, _field_id(r, byte, last)
        if fid == 3 and kind == _I64:
            rows = r.zigzag()
        elif kind not in (_TRUE, _FALSE):
            r.skip(kind)
        last = fid
    return rows


def _top_names(elements: list) -> tuple[str, ...]:
    """The top-level column names of a Parquet schema (a list of SchemaElement)."""
    def children(e: Struct) -> int:
        f = next((f for f in e if f[0] == 5), None)
        return f[2] if f else 0

    names, i = [], 1
    while i < len(elements):
        name = next((f[2] for f in elements[i] if f[0] == 4), b"")
        names.append(bytes(name).decode("utf-8"))
        left = children(elements[i])
        i += 1
        while left and i < len(elements):  # past this column's nested fields
            left += children(elements[i]) - 1
            i += 1
    return tuple(names)


def footer_map(path: str | Path) -> FooterMap:
    """Maps ``path``'s footer (reads it once; holds neither it nor its row groups decoded)."""
    data, start = footer_bytes(path)
    r = _Reader(data)
    last, bounds, rows, names = 0, [], [], ()
    head_end = tail_start = -1
    while True:
        at = r.pos
        byte = r.byte()
        if not byte:
            break
        kind, fid = byte & 0x0F, _field_id(r, byte, last)
        if fid == 4 and kind == _LIST:
            head_end = at
            head = r.byte()
            size = r.varint() if head >> 4 == 15 else head >> 4
            if size and head & 0x0F != _STRUCT:
                raise ValueError(f"{Path(path).name}: not a Parquet footer (row groups)")
            bounds.append(r.pos + start)
            for _ in range(size):
                rows.append(_group_rows(r))
                bounds.append(r.pos + start)
            tail_start = r.pos
        elif fid == 2 and kind == _LIST:
            names = _top_names(r.value(kind)[1])
        elif kind not in (_TRUE, _FALSE):
            r.skip(kind)
        last = fid
    if head_end < 0:
        raise ValueError(f"{Path(path).name}: not a Parquet footer (no row groups)")
    return FooterMap(head=(start, start + head_end), bounds=tuple(bounds), tail=(start + tail_start, start + len(data)),
                     rows=tuple(rows), names=names)


def _fields(data: bytes, last: int = 0) -> Struct:
    """The struct fields encoded in ``data`` (up to its end, or its end byte)."""
    r, out = _Reader(data), []
    while r.pos < len(data) and (byte := r.byte()):
        kind, fid = byte & 0x0F, _field_id(r, byte, last)
        out.append([fid, kind, kind == _TRUE if kind in (_TRUE, _FALSE) else r.value(kind)])
        last = fid
    return out


def sliced_footer(path: str | Path, part: FooterSlice) -> bytes:
    """The footer of the row groups ``part`` names: the file's own metadata with those
    row groups only (their offsets into the file unchanged) and their rows. Reads only
    those bytes of the file."""
    with open(path, "rb") as f:
        def read(span: tuple[int, int]) -> bytes:
            f.seek(span[0])
            return f.read(span[1] - span[0])

        head, groups, tail = read(part.head), read(part.groups), read(part.tail)
    first = _fields(head)
    first = first + [[4, _LIST, None]] + _fields(tail, last=4)
    return footer_of_groups(first, part.rows, part.count, groups)


def sliced_metadata(path: str | Path, part: FooterSlice) -> pq.FileMetaData:
    """:func:`sliced_footer` decoded by Arrow: ``pq.ParquetFile(path, metadata=...)``
    then reads those row groups (as indices 0, 1, ...) without reading the file's footer."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    return pq.read_metadata(pa.BufferReader(MAGIC + sliced_footer(path, part)))
