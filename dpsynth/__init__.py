"""dpsynth: differentially private synthetic data releases.

The library is plain Python (no Prefect): schema, encoding, privacy accounting and
noise, methods, metrics and the release bundle. ``tasks/`` and ``flows/`` wrap it.

The Python API (imported on first use, so ``import dpsynth`` stays cheap)::

    rel = dpsynth.release(df, "schema.yaml", method="sds", epsilon=1.0)
    rel.synthetic, rel.manifest, rel.ledger, rel.report_path
    dpsynth.load_release("releases/NAME")           # verifies the hashes first
    dpsynth.Schema.from_dataframe(df)               # a draft to review
"""

from __future__ import annotations

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "release": "api",
    "load_release": "api",
    "Release": "api",
    "ReleaseVerificationError": "api",
    "ReleaseWarning": "api",
    "Schema": "schema",
    "SchemaError": "schema",
    "load_schema": "schema",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dpsynth' has no attribute {name!r}")
    from importlib import import_module  # here, so that `import dpsynth` itself imports nothing

    value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
