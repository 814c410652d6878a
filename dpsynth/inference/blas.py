"""One BLAS thread for the model's queries: OpenBLAS's threads cost more than they give there.

A query across cliques (:meth:`GraphicalModel.project_many`, AIM's scores) multiplies tables by
``np.matmul``; a product such as (17 x 4,896) by (4,896 x 17) is above OpenBLAS's threshold for
threads, so OpenBLAS splits it over every core and its worker threads then spin waiting for the
next one. On the 10M x 20 table that spinning doubled the CPU of AIM's queries and of the fits
between them (benchmarks/fit_speed.py, docs/scale.md "fit-speed"). OpenBLAS's threads share out
the result's rows and columns, each element summed as on one thread: measured, the same bits on
every query of that table's AIM rounds and on tests/test_fit_bytes.py's product.

:func:`one_blas_thread` sets OpenBLAS to one thread for a block and restores the count after. It
finds the OpenBLAS that numpy loaded among the process's mapped libraries (Linux); with another
BLAS, or elsewhere, it does nothing.
"""

from __future__ import annotations

import ctypes
import functools
from contextlib import contextmanager
from typing import Callable, Iterator

import numpy as np

__all__ = ["one_blas_thread", "blas_threads"]

# (prefix, suffix) of OpenBLAS's thread functions: numpy's wheels (scipy-openblas, 64-bit ints),
# then the plain names of a system OpenBLAS.
_NAMES = (("scipy_openblas", "64_"), ("scipy_openblas", ""), ("openblas", "64_"), ("openblas", ""))


@functools.lru_cache(maxsize=1)
def _openblas() -> tuple[Callable[[], int], Callable[[int], None]] | None:
    """OpenBLAS's (get, set) number of threads, or None when no OpenBLAS is loaded."""
    assert np.__version__  # numpy, and with it its BLAS, is loaded before the search
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "openblas" in line.lower() and ".so" in line})
    except OSError:
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix in _NAMES:
            get = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
            put = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
            if get is not None and put is not None:
                get.restype, get.argtypes = ctypes.c_int, []
                put.restype, put.argtypes = None, [ctypes.c_int]
                return get, put
    return None


def blas_threads() -> int | None:
    """OpenBLAS's current number of threads (None: no OpenBLAS found)."""
    fns = _openblas()
    return None if fns is None else int(fns[0]())


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """OpenBLAS on one thread inside the block (nested blocks are free); the count before is
    restored on the way out, also on an exception."""
    fns = _openblas()
    before = None if fns is None else fns[0]()
    if before is None or before == 1:
        yield
        return
    fns[1](1)
    try:
        yield
    finally:
        fns[1](before)
