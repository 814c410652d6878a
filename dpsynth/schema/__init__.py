"""Schemas: the public domain of every column, and drafting one from data.

* :mod:`.core`: :class:`Schema`, :class:`Column` (the model of a schema, and the file format);
* :mod:`.parse`: reading and checking a schema file (:func:`load_schema`, :func:`schema_from_dict`);
* :mod:`.timecols`: datetime columns as seconds since 1970-01-01 UTC;
* :mod:`.draft`: drafting a schema from a table already read (a reviewed draft becomes a
  schema). Reading the file is the rows package's work (:func:`dpsynth.rows.encoding.read_table`):
  drafting depends on reading, never the other way round, and nothing here imports it.

``from dpsynth.schema import Schema, SchemaError, load_schema, ...`` is the public path.
"""

from .core import (
    DRAFTED_FROM_DATA,
    Column,
    ColumnType,
    Schema,
    SchemaError,
    format_edges,
)
from .parse import load_schema, schema_from_dict

__all__ = ["Column", "ColumnType", "DRAFTED_FROM_DATA", "Schema", "SchemaError", "format_edges", "load_schema",
           "schema_from_dict"]
