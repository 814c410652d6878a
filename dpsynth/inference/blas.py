"""One BLAS thread for the model's queries, and dot products whose bits do not depend on the cores.

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

:func:`fixed_dot` is the estimator's dot product (its loss and step test). OpenBLAS splits a dot
of more than :data:`THREADED_DOT` elements over its threads and adds their partial sums, so its
last bits depended on the machine's core count, and with them a seeded release's bytes once its
measured cells passed 10,000. Longer vectors are summed in fixed slices below that size instead.
"""

from __future__ import annotations

import ctypes
import functools
from contextlib import contextmanager
from typing import Callable, Iterator

import numpy as np

__all__ = ["one_blas_thread", "blas_threads", "fixed_dot", "THREADED_DOT"]

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


#: The longest dot product OpenBLAS computes on one thread whatever its thread count (its
#: ``interface/dot.c``); measured here: 18 of 20 random vectors of 10,001 elements summed to other
#: bits on two threads than on one, none of 10,000 or fewer.
THREADED_DOT = 10_000
_DOT_SLICE = 8_192


def fixed_dot(a: np.ndarray, b: np.ndarray) -> float:
    """``float(np.dot(a, b))`` of two vectors, the same bits whatever OpenBLAS's thread count:
    up to :data:`THREADED_DOT` elements exactly ``np.dot`` (the bits of every fit so far);
    longer ones as the sum, in order, of ``np.dot`` over slices of 8,192 elements."""
    n = a.shape[0]
    if n <= THREADED_DOT:
        return float(np.dot(a, b))
    total = 0.0
    for i in range(0, n, _DOT_SLICE):
        total += float(np.dot(a[i : i + _DOT_SLICE], b[i : i + _DOT_SLICE]))
    return total
