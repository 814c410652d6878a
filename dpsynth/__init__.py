"""dpsynth: differentially private synthetic data releases.

The library is plain Python (no Prefect): schema, encoding, privacy accounting and
noise, methods, metrics and the release bundle. ``tasks/`` and ``flows/`` wrap it.
"""

__version__ = "0.1.0"
