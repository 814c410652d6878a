"""Handing memory a process freed back to the system: between a release's stages, and in the
gate's worker after each call.

Arrow's memory pool (mimalloc) and glibc's heap keep pages a process freed; what a later stage
allocates would otherwise be counted on top of what an earlier one left behind.
"""

from __future__ import annotations

__all__ = ["give_back_memory"]


def give_back_memory() -> None:
    """Hands memory this process freed back to the system: Arrow's pool's unused pages
    (mimalloc keeps them; a loaded 10M sds measurement left 200 MB there) and glibc's free
    heap (``malloc_trim``). What a later stage then allocates is counted from what is live,
    not from what an earlier stage left behind. Frees nothing live; never changes a byte."""
    import ctypes
    import gc

    gc.collect()
    try:
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    except (ImportError, AttributeError):  # an Arrow without the call: its pool keeps its pages
        pass
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim this way
        pass
