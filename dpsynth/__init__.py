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


def lazy_exports(package: str, exports: dict[str, str]):
    """A package's ``__getattr__`` and ``__dir__`` that import ``exports`` (public name ->
    module of ``package`` defining it) on first use, so importing the package stays cheap."""
    from importlib import import_module  # here, so that `import dpsynth` itself imports nothing
    import sys

    def getattr_(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f".{exports[name]}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return getattr_, dir_


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
