"""``dpsynth release``: its options, the release on the local or the Prefect engine, and the
lines it prints (progress on stderr; the folder, the timings and the privacy line on stdout)."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
from pathlib import Path
from typing import Iterator

from .args import _finite, _parse_gate, _parse_kv


def _prefect_env() -> None:
    from ..orchestration.warm_client import PREFECT_DEFAULTS

    for key, value in PREFECT_DEFAULTS.items():
        os.environ.setdefault(key, value)


@contextlib.contextmanager
def _long_lived_imports() -> Iterator[None]:
    """The release command's heavy imports (the pipeline, Prefect) with the cyclic garbage
    collector paused, their objects frozen afterwards (once per process).

    The imports create about a million objects that live until the command exits; the
    collector traversed them again and again while they were made, and once more at exit
    (about a third of the import time here). Frozen, they are left out of every later
    collection, the method's included. Only the command does this, never the library.
    """
    if _FROZE or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
        _FROZE.append(True)


_FROZE: list[bool] = []


def _console(args: argparse.Namespace):
    """The progress reporter of a release command: stderr; only warnings with --quiet."""
    from ..progress import Console

    return Console(show=not args.quiet, warn_prefix="dpsynth: ")


def _cmd_release(args: argparse.Namespace) -> int:
    from ..progress import reporting

    with reporting(_console(args)), contextlib.ExitStack() as stack:
        return _release_command(args, stack)


def _release_command(args: argparse.Namespace, stack: contextlib.ExitStack) -> int:
    """The release itself, its progress going to the reporter :func:`_cmd_release` installed;
    a temporary Prefect server is entered on ``stack`` (stopped when the command ends)."""
    from .. import progress
    from ..gate import worker as gate_worker

    if args.engine != "local" and "prefect" not in sys.modules:  # a warm worker's child has them
        # handed over before any heavy import: the child runs the same public checks first
        if (code := _hand_off(args)) is not None:
            return code
        progress.say("loading the pipeline and Prefect...")
    held = _server_ahead(stack) if args.engine != "local" else None
    with _long_lived_imports():
        from ..publish.bundle import MANIFEST
        from ..pipeline import ReleaseConfig
        from ..rows.encoding import load_arrow

        settings = {k: v for k, v in vars(args).items() if k in ReleaseConfig.field_names()}
        settings.update(params=_parse_kv(args.param), gate=_parse_gate(args.gate))
        config = ReleaseConfig.from_arguments(**settings)
        if args.engine != "local":
            from ..pipeline.config import check_public

            check_public(config)  # a public error is refused now, not after Prefect's start-up
        load_arrow()  # pandas, pyarrow: the row modules import them where used; here, so the worker shares them
        # Great Expectations' import starts now, in a worker forked from this still
        # single-threaded process (it shares pandas and numpy, imported above), on the
        # other core while this one imports Prefect, prepares and runs the method.
        gate_worker.start()
        if args.engine != "local":
            from ..orchestration.server import api_server  # configured, running, else temporary (held, started now)

            server = stack.enter_context(api_server(held, say=progress.say))  # waited for at the flow's start
            from ..orchestration import release as _flow  # noqa: F401 - imports Prefect

    _say_auto(config)
    folder, ahead = _run_engine(config, args.engine, server if args.engine != "local" else None)
    total = progress.process_seconds()
    manifest = json.loads((Path(folder) / MANIFEST).read_text())
    timings = manifest["timings"]
    work = ahead + sum(v for k, v in timings.items() if k != "orchestration")
    print(f"published {folder}")
    print(f"wall {total:.2f} s since the command started: stage work {work:.2f} s, "
          f"start-up, imports and orchestration {max(0.0, total - work):.2f} s")
    dataset = manifest.get("privacy", {}).get("dataset") or {}
    if dataset and dataset.get("cap_epsilon") is None:
        from ..pipeline import no_cap_warning

        print(f"dpsynth: warning: {no_cap_warning(dataset)}", file=sys.stderr)
    print(_privacy_line(manifest))  # the last line: what the release guarantees
    return 0


def _say_auto(config) -> None:
    """One line on stderr: what ``--method auto`` chose and why (public facts only)."""
    from ..pipeline.config import auto_choice

    try:
        choice = auto_choice(config)
    except Exception:  # noqa: BLE001 - prepare raises the same problem with its own message
        return
    if choice is not None:
        print(f"dpsynth: {choice.preview()}", file=sys.stderr, flush=True)


def _run_engine(config, engine: str, server=None) -> tuple[str, float]:
    """The release on the chosen engine (Prefect: on ``server``, from :func:`dpsynth.orchestration.server.api_server`):
    its folder and the seconds of stage work done before the flow (an encode while the
    temporary server started); a refusal by the registry names the registry's file."""
    from ..privacy.registry import RegistryRefused, registry_path

    try:
        return (_release_local(config), 0.0) if engine == "local" else _release_prefect(config, server)
    except RegistryRefused as exc:
        where = registry_path(config.workspace).absolute()
        raise RegistryRefused(f"{str(exc).splitlines()[0]} (privacy registry {where})") from None


def _privacy_line(manifest: dict) -> str:
    privacy = manifest.get("privacy", {})
    headline = privacy.get("headline") or "privacy statement missing"
    if privacy.get("differentially_private"):
        return f"privacy: {headline}"
    return f"privacy: {headline}. The ledger records what was charged; it is NOT a DP guarantee."


def _hand_off(args: argparse.Namespace) -> int | None:
    """The release's exit code from the warm worker ``make serve`` runs (:mod:`dpsynth.orchestration.warm`);
    None when none takes it: this process then runs the release."""
    from ..orchestration.warm_client import hand_off

    return hand_off(args.argv) if getattr(args, "argv", None) is not None else None


def _release_local(config) -> str:
    from ..pipeline import run_release

    return str(run_release(config))


def _server_ahead(stack: contextlib.ExitStack):
    """A temporary Prefect server's process started before the pipeline's imports and held until
    the public checks pass (:func:`dpsynth.orchestration.server.launch_ahead`), or None."""
    _prefect_env()
    from ..orchestration.server import launch_ahead

    if (held := launch_ahead()) is not None:
        stack.callback(held.stop)  # a refused request stops it unstarted
    return held


def _release_prefect(config, server=None) -> tuple[str, float]:
    _prefect_env()
    from ..orchestration.runner import run_release_flow

    result = run_release_flow(config, server)
    return result["release"], result.get("encoded_ahead", 0.0)


def _add_release(sub: argparse._SubParsersAction) -> None:
    """``dpsynth release``: an option whose dest names a ReleaseConfig field sets that field
    (``--param`` and ``--gate`` are parsed into ``params`` and ``gate`` first); a new config
    field needs only its option here."""
    r = sub.add_parser("release", help="run a release: encode, measure (DP), synthesize, validate, publish")
    r.add_argument("--data", required=True, help="input table (.csv or .parquet, or a folder of them)")
    r.add_argument("--schema", required=True, help="schema YAML (the public domain)")
    r.add_argument("--method", default=None,
                   help="synthesis method (see `dpsynth methods`); default auto: chosen from the schema, "
                        "epsilon and delta only (docs/choosing.md)")
    r.add_argument("--epsilon", required=True, type=_finite,
                   help="privacy budget of this release (smaller: more private, noisier; 1 is a common choice)")
    r.add_argument("--delta", type=_finite, default=None,
                   help="default 1e-6; keep it well below 1/rows; 0 for pure epsilon-DP")
    r.add_argument("--rows", type=int, default=None, help="synthetic rows (default: the DP estimate of the input's)")
    r.add_argument("--seed-file", default=None, help="secret seed (>= 16 bytes) for a reproducible build")
    r.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="method parameter (repeatable)")
    r.add_argument("--out", default="releases", help="folder that receives the release folder (default: releases)")
    r.add_argument("--name", default=None, help="release name (default: SCHEMA-METHOD-epsE)")
    r.add_argument("--workspace", default=None,
                   help="private workspace, holding the privacy registry (default: $DPSYNTH_WORKSPACE, else one "
                        "per user: $XDG_DATA_HOME/dpsynth/workspace or ~/.local/share/dpsynth/workspace)")
    r.add_argument("--gate", action="append", default=[], metavar="KEY=VALUE",
                   help="override a validation threshold, e.g. max_tvd_k1=0.05 (repeatable)")
    r.add_argument("--sign-key", default=None,
                   help="secret key (>= 16 bytes) to sign the manifest (manifest.sig, HMAC-SHA256)")
    r.add_argument("--data-docs", action="store_true",
                   help="also publish Great Expectations' Data Docs of the validation gate (data-docs/, offline)")
    r.add_argument("--internal-report", action="store_true",
                   help="also score the release against the real table (every 2-way and a sample of 3-way "
                        "marginals): an HTML page in the private workspace, never published; its path is printed")
    r.add_argument("--engine", choices=("prefect", "local"), default="prefect",
                   help="prefect (default): run as a Prefect flow; local: the same stages in-process without Prefect")
    r.add_argument("--dataset", default=None,
                   help="dataset identity in the lifetime privacy registry (default: the schema's name)")
    r.add_argument("--chunk-rows", type=int, default=None,
                   help="rows read at once by encode and measure (memory bound; default 1048576)")
    r.add_argument("--dask-address", default=None,
                   help="run encode and measure per partition on a Dask cluster: a scheduler address "
                        "(tcp://host:8786) or local[:N] for a LocalCluster; same result (docs/scale.md)")
    r.add_argument("--accept-data-derived-schema", action="store_true",
                   help="publish on a schema still marked drafted_from_data (read from the rows): the release "
                        "is then labelled NOT differentially private; without it such a schema is refused")
    r.add_argument("--quiet", "-q", action="store_true",
                   help="no progress lines on stderr (warnings, errors and the result are still printed)")
    r.set_defaults(func=_cmd_release)
