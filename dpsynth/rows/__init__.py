"""Reading and encoding rows: the only code that touches the private table's rows.

* :mod:`.table`: the integer codes of a table (:class:`~.table.EncodedTable`), all that work on codes needs;
* :mod:`.encoding`: reading CSV/Parquet, encoding to integer codes, decoding back;
* :mod:`.encode_parts`: encoding an input partition by partition to Parquet files of codes;
* :mod:`.rowsource`: encoded rows read in bounded chunks, and exact counts over them;
* :mod:`.counting`: the counting engine (exact k-way marginals of integer codes);
* :mod:`.dask_runner`: the same row passes on a Dask cluster.

Nothing is imported here, so that importing one module does not load the others.
"""
