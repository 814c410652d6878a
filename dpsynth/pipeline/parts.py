"""Joining part files into one published file by copying bytes, never re-encoding.

The synthesize stage may write its table as contiguous parts (one per task, on a local
process pool or Dask workers). A CSV is joined by writing the header once and then each
part's lines. A Parquet file is joined by copying each part's row groups (the bytes
between its leading magic and its footer) and writing one footer: part 0's file metadata
with every part's row groups, their offsets moved by the bytes before them, their
ordinals renumbered and the row count summed. The footer is Thrift compact protocol,
read and written back field for field (:mod:`dpsynth.rows.footer`), so a file joined from parts holds the same bytes
as one writer writing the same row groups in order (``tests/test_synthetic_parts.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Sequence

from ..rows.footer import MAGIC, Struct, _field, _struct, footer_of_groups, read_footer, write_footer

__all__ = ["append_file", "concat_csv", "concat_parquet", "read_footer", "write_footer"]


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
        f.write(footer_of_groups(first, rows, len(groups), b"".join(groups)))
    return rows


def concat_csv(header: str, parts: Sequence[str | Path], out: str | Path) -> None:
    """Writes ``header`` (one line, UTF-8) and then each part's bytes to ``out``."""
    with open(out, "wb") as f:
        f.write(header.encode("utf-8"))
        for path in parts:
            append_file(path, f)
