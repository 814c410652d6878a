"""The warm release worker's entry point: ``python -m dpsynth.warm --socket PATH``.

``deployments/serve.sh`` (``make serve``) starts it beside the Prefect server; the worker
itself is :mod:`dpsynth.orchestration.warm`, the CLI's side :mod:`dpsynth.orchestration.warm_client`.
It lives here, above both the CLI and the orchestration, because each child it forks runs
the CLI's ``main``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Imports what a Prefect-engine release needs, then serves until SIGTERM (or a stale request)."""
    from .orchestration.warm_client import code_fingerprint

    ap = argparse.ArgumentParser(prog="python -m dpsynth.warm", description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True, help="the socket's path (its folder is made 0700)")
    args = ap.parse_args(argv)
    fingerprint = code_fingerprint()  # before the imports: an edit made during them is seen as stale
    from . import cli
    from .orchestration import warm

    log = logging.getLogger("dpsynth.warm")
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s warm: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False  # Prefect's console handlers (configured at its import) would repeat each line
    warm.warm_imports()
    parent = os.getpid()
    request = warm.serve(Path(args.socket), fingerprint)
    if request is None:
        return 0
    return warm.run_child(request, parent, cli.main)


if __name__ == "__main__":
    sys.exit(main())
