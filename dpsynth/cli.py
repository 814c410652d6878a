"""The ``dpsynth`` command line.

``dpsynth release`` is a contract other tools script against: it prints stage
progress, exits 0 on success, and on failure exits non-zero with a one-line reason
on stderr. Exit 2: the request itself is wrong (schema, parameters, budget, input
columns or types) and nothing was measured. Exit 1: the run failed; if it failed
after the measure stage began, the line says that the release's privacy budget was
spent. Error messages never quote a data row.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import sys
from pathlib import Path
from typing import Iterator, Sequence

__all__ = ["main"]

# Errors of the request (public problems): nothing was spent.
_REQUEST_ERRORS = ("SchemaError", "DataError", "ParamError", "BudgetExceeded", "ReleaseError", "PublishError")


class UsageError(ValueError):
    """A malformed command-line value (exit 2: nothing was read or spent)."""


def _parse_kv(items: Sequence[str], option: str = "--param") -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{option} expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _finite(text: str) -> float:
    """A command-line number: NaN and infinities are refused (argparse exits 2 naming the option)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _parse_gate(items: Sequence[str]) -> dict[str, float]:
    out = {}
    for key, value in _parse_kv(items, "--gate").items():
        try:
            out[key] = _finite(value)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"--gate {key} {exc}") from None
    return out


def _exit_code(exc: BaseException) -> int:
    """2: a public problem, nothing was measured; 1: the run failed (the budget may be spent)."""
    from .pipeline import BudgetSpent

    if isinstance(exc, BudgetSpent):
        return 1
    kind = type(exc).__name__
    return 2 if kind in _REQUEST_ERRORS or isinstance(exc, (ValueError, FileNotFoundError)) else 1


def _prefect_env() -> None:
    from .orchestration.warm_client import PREFECT_DEFAULTS

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
    from .progress import Console

    return Console(show=not args.quiet, warn_prefix="dpsynth: ")


def _cmd_release(args: argparse.Namespace) -> int:
    from .progress import reporting

    with reporting(_console(args)), contextlib.ExitStack() as stack:
        return _release_command(args, stack)


def _release_command(args: argparse.Namespace, stack: contextlib.ExitStack) -> int:
    """The release itself, its progress going to the reporter :func:`_cmd_release` installed;
    a temporary Prefect server is entered on ``stack`` (stopped when the command ends)."""
    from . import progress
    from .gate import worker as gate_worker

    if args.engine != "local" and "prefect" not in sys.modules:  # a warm worker's child has them
        # handed over before any heavy import: the child runs the same public checks first
        if (code := _hand_off(args)) is not None:
            return code
        progress.say("loading the pipeline and Prefect...")
    held = _server_ahead(stack) if args.engine != "local" else None
    with _long_lived_imports():
        from .publish.bundle import MANIFEST
        from .pipeline import ReleaseConfig
        from .privacy.accounting import load_solver
        from .rows.encoding import load_arrow

        settings = {k: v for k, v in vars(args).items() if k in ReleaseConfig.field_names()}
        settings.update(params=_parse_kv(args.param), gate=_parse_gate(args.gate))
        config = ReleaseConfig.from_arguments(**settings)
        if args.engine != "local":
            from .pipeline.config import check_public

            check_public(config)  # a public error is refused now, not after Prefect's start-up
        load_solver()  # scipy.optimize: the budget's conversion needs it here, GE's scipy.stats in the worker
        load_arrow()  # pandas, pyarrow: the row modules import them where used; here, so the worker shares them
        # Great Expectations' import starts now, in a worker forked from this still
        # single-threaded process (it shares pandas and numpy, imported above), on the
        # other core while this one imports Prefect, prepares and runs the method.
        gate_worker.start()
        if args.engine != "local":
            from .orchestration.server import api_server  # configured, running, else temporary (held, started now)

            server = stack.enter_context(api_server(held, say=progress.say))  # waited for at the flow's start
            from .orchestration import release as _flow  # noqa: F401 - imports Prefect

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
        from .pipeline import no_cap_warning

        print(f"dpsynth: warning: {no_cap_warning(dataset)}", file=sys.stderr)
    print(_privacy_line(manifest))  # the last line: what the release guarantees
    return 0


def _say_auto(config) -> None:
    """One line on stderr: what ``--method auto`` chose and why (public facts only)."""
    from .pipeline.config import auto_choice

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
    from .privacy.registry import RegistryRefused, registry_path

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


def _budget_workspace(args: argparse.Namespace) -> Path:
    """The workspace of a budget command; says on stderr which registry it reads or writes."""
    from .privacy.registry import registry_path
    from .privacy.workspace import default_workspace

    workspace = Path(args.workspace) if args.workspace else default_workspace()
    print(f"dpsynth: privacy registry {registry_path(workspace).absolute()}", file=sys.stderr)
    return workspace


def _cmd_budget_set(args: argparse.Namespace) -> int:
    from .privacy.registry import Cap, set_cap, state

    cap = Cap(epsilon=args.epsilon, delta=args.delta, period=args.period, period_epsilon=args.period_epsilon)
    workspace = _budget_workspace(args)
    _warn_near_twin(workspace, args.dataset)
    set_cap(workspace, args.dataset, cap)
    _print_budget(state(workspace, args.dataset))
    return 0


def _cmd_budget_show(args: argparse.Namespace) -> int:
    from .pipeline import DEFAULT_DELTA
    from .privacy.registry import state

    workspace = _budget_workspace(args)
    _warn_near_twin(workspace, args.dataset)
    _print_budget(state(workspace, args.dataset, delta=DEFAULT_DELTA))
    return 0


def _warn_near_twin(workspace: Path, dataset: str) -> None:
    """A stderr warning when the registry holds a dataset whose name differs only by case,
    spaces or Unicode form (refuses a misspelt name first)."""
    from .privacy.registry import check_dataset_name, near_twin_warning

    check_dataset_name(dataset)
    if (twin := near_twin_warning(workspace, dataset)) is not None:
        print(f"dpsynth: warning: {twin}", file=sys.stderr)


def _print_budget(st) -> None:
    """Cap, spend, and every release name with its noise draws (count, times, costs);
    names and numbers only, never data or keys."""
    if st.cap is None:
        print(f"dataset {st.dataset}: no lifetime cap declared")
    else:
        print(f"dataset {st.dataset}: cap epsilon {st.cap.epsilon:g}, delta {st.cap.delta:g}")
        if st.cap.period:
            print(f"period budget: epsilon {st.cap.period_epsilon:g} per {st.cap.period} "
                  f"(spent this {st.cap.period}: {st.period_spent_epsilon:.6g})")
    print(f"spent: epsilon {st.spent_epsilon:.6g} at delta {st.delta:g} over {len(st.draws)} noise draw(s) "
          f"of {st.release_count} release(s)")
    if st.remaining_epsilon is not None:
        print(f"remaining: epsilon {st.remaining_epsilon:.6g}")
    by_name: dict[str, list] = {}
    for d in st.draws:
        by_name.setdefault(d.name, []).append(d)
    for name, draws in by_name.items():
        print(f"  {name}: {len(draws)} draw(s)")
        for d in draws:
            print(f"    {d.charged_at}  epsilon {d.epsilon:.6g} (delta {d.delta:g}; rho {d.rho:.6g}, "
                  f"pure epsilon {d.pure_epsilon:.6g})")


def _hand_off(args: argparse.Namespace) -> int | None:
    """The release's exit code from the warm worker ``make serve`` runs (:mod:`dpsynth.orchestration.warm`);
    None when none takes it: this process then runs the release."""
    from .orchestration.warm_client import hand_off

    return hand_off(args.argv) if getattr(args, "argv", None) is not None else None


def _release_local(config) -> str:
    from .pipeline import run_release

    return str(run_release(config))


def _server_ahead(stack: contextlib.ExitStack):
    """A temporary Prefect server's process started before the pipeline's imports and held until
    the public checks pass (:func:`dpsynth.orchestration.server.launch_ahead`), or None."""
    _prefect_env()
    from .orchestration.server import launch_ahead

    if (held := launch_ahead()) is not None:
        stack.callback(held.stop)  # a refused request stops it unstarted
    return held


def _release_prefect(config, server=None) -> tuple[str, float]:
    _prefect_env()
    from .orchestration.runner import run_release_flow

    result = run_release_flow(config, server)
    return result["release"], result.get("encoded_ahead", 0.0)


def _cmd_schema_infer(args: argparse.Namespace) -> int:
    if args.epsilon is not None:
        return _schema_infer_dp(args)
    if args.dataset is not None or args.delta is not None:
        raise UsageError("--dataset and --delta go with --epsilon (a DP draft)")
    from .rows.encoding import read_table
    from .schema.draft import WARNING, draft_from_table

    print(WARNING, file=sys.stderr)
    draft = draft_from_table(read_table(args.data), args.name or Path(args.data).stem,
                             max_categories=args.max_categories, bins=args.bins, min_count=args.min_count)
    text = draft.to_yaml()
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}: review it, replace what was read from the rows, then remove the line "
              "'draft: true' (or draft with DP: --epsilon E --dataset NAME)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _schema_infer_dp(args: argparse.Namespace) -> int:
    """``schema infer --epsilon``: a DP draft, charged to the dataset's registry."""
    from .pipeline import DEFAULT_DELTA
    from .privacy.registry import RegistryRefused, registry_path
    from .privacy.rng import read_seed_file
    from .privacy.schema_draft import dp_draft_from_table
    from .rows.encoding import read_table

    if not args.dataset:
        raise UsageError("a DP draft (--epsilon) needs --dataset NAME: its cost is charged to that dataset")
    workspace = _budget_workspace(args)  # says which registry it charges (the console only)
    seed = read_seed_file(args.seed_file) if args.seed_file else None
    try:
        draft = dp_draft_from_table(read_table(args.data), epsilon=args.epsilon,
                                    delta=DEFAULT_DELTA if args.delta is None else args.delta,
                                    dataset=args.dataset, workspace=workspace, name=args.name,
                                    max_categories=args.max_categories, bins=args.bins, seed=seed)
    except RegistryRefused as exc:
        where = registry_path(workspace).absolute()
        raise RegistryRefused(f"{str(exc).splitlines()[0]} (privacy registry {where})") from None
    text = draft.to_yaml()
    d = draft.schema["dp_draft"]
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    print(f"DP schema draft{' written to ' + args.out if args.out else ''}: spent epsilon {d['epsilon']:g} at "
          f"delta {d['delta']:g} (rho {d['rho']:.6g}), charged to dataset {args.dataset!r}", file=sys.stderr)
    return 0


def _cmd_schema_check(args: argparse.Namespace) -> int:
    """Validates a schema file; a draft read from the rows is reported with what is left to
    review, and exits 1 (a release would refuse it)."""
    from .schema import load_schema
    from .privacy.schema_source import schema_source

    schema = load_schema(args.schema)
    summary = {"name": schema.name, "columns": len(schema.columns),
               "cardinalities": dict(zip(schema.names, schema.cardinalities)), "source": schema_source(schema)}
    if schema.dp_draft is not None:
        summary["dp_draft"] = {k: schema.dp_draft[k] for k in ("epsilon", "delta", "rho", "dataset")}
    derived = schema.data_derived_columns
    if schema.draft or derived:
        summary["to_review"] = {name: list(what) for name, what in derived.items()}
        print(json.dumps(summary))
        print(f"{args.schema}: a DRAFT read from the private data" + (" (draft: true)" if schema.draft else "")
              + f"; {len(derived)} column(s) left to review:", file=sys.stderr)
        for name, what in derived.items():
            print(f"  {name}: {', '.join(what)} derived from the rows", file=sys.stderr)
        print("replace them with public knowledge and delete each drafted_from_data (and draft: true), or "
              "draft with DP: dpsynth schema infer DATA --epsilon E --dataset NAME", file=sys.stderr)
        return 1
    print(json.dumps(summary))
    return 0


def _cmd_methods(args: argparse.Namespace) -> int:
    from .methods import METHODS
    from .methods.catalog import describe_method, method_order, methods_table

    if args.verbose:
        for name in method_order(METHODS):
            print("\n".join(describe_method(name, METHODS[name])) + "\n")
        print("Pass parameters as --param key=value (Python: params={...}). Which method for which data: "
              "docs/choosing.md")
        return 0
    print("\n".join(methods_table(METHODS)))
    return 0


def _cmd_bounds(args: argparse.Namespace) -> int:
    from .methods.private_sampling import bounds_report

    report = bounds_report(n=args.n, p=args.p, d=args.d, m=args.m, delta=args.delta, Delta=args.Delta,
                           gamma=args.gamma, epsilon=args.epsilon, k=args.k)
    print(json.dumps(report, indent=2, sort_keys=True))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from .publish.verify import verify_release

    from .publish.bundle import read_sign_key

    key = read_sign_key(args.key) if args.key else None
    problems = verify_release(args.release, key=key)
    for p in problems:
        print(f"FAIL {p}")
    if problems:
        print(f"dpsynth: error: {len(problems)} problem(s) in {args.release}", file=sys.stderr)
        return 1
    origin = "signed with the given key" if key else "not signed: this proves consistency, not origin"
    manifest = json.loads((Path(args.release) / "manifest.json").read_text())
    print(f"OK {args.release}: files match the manifest, CSV equals Parquet, the table fits the schema, "
          f"the ledger matches measurement.json and is within budget; {origin}")
    print(_privacy_line(manifest))
    return 0


def _cmd_test_two_proportions(args: argparse.Namespace) -> int:
    import numpy as np

    from .onestep.tulap import two_proportions_test

    rng = np.random.default_rng(args.seed)
    r = two_proportions_test(args.x, args.n, args.y, args.m, args.epsilon, rng, replicates=args.replicates)
    print(json.dumps({"hypothesis": "H0: theta_X = theta_Y vs H1: theta_Y > theta_X", "theta_hat": r.theta_hat,
                      "p_value_one_step": r.p_one_step, "p_value_bootstrap": r.p_bootstrap,
                      "replicates": r.replicates}, indent=2, allow_nan=False))  # valid JSON or an error
    return 0


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


def build_parser() -> argparse.ArgumentParser:
    """The ``dpsynth`` argument parser with every subcommand."""
    ap = argparse.ArgumentParser(prog="dpsynth", description="Differentially private synthetic data releases.")
    sub = ap.add_subparsers(dest="command", required=True)
    _add_release(sub)

    bg = sub.add_parser("budget", help="a dataset's lifetime privacy budget (registry in the workspace)")
    bsub = bg.add_subparsers(dest="budget_command", required=True)
    bs = bsub.add_parser("set", help="declare or replace a dataset's cap")
    bs.add_argument("dataset")
    bs.add_argument("--epsilon", type=_finite, required=True, help="lifetime epsilon over all releases")
    bs.add_argument("--delta", type=_finite, required=True, help="lifetime delta")
    bs.add_argument("--period", choices=("day", "week", "month"), default=None, help="also cap each calendar period (UTC)")
    bs.add_argument("--period-epsilon", type=_finite, default=None, help="epsilon allowed per period")
    bs.add_argument("--workspace", default=None, help="default: $DPSYNTH_WORKSPACE, else the user's workspace")
    bs.set_defaults(func=_cmd_budget_set)
    bw = bsub.add_parser("show", help="cap, spend, remaining and every release's noise draws (count, times, cost)")
    bw.add_argument("dataset")
    bw.add_argument("--workspace", default=None, help="default: $DPSYNTH_WORKSPACE, else the user's workspace")
    bw.set_defaults(func=_cmd_budget_show)

    s = sub.add_parser("schema", help="schema helpers")
    ssub = s.add_subparsers(dest="schema_command", required=True)
    si = ssub.add_parser("infer", help="draft a schema from a data file (reads private data: review it)")
    si.add_argument("data")
    si.add_argument("--name", default=None)
    si.add_argument("--out", default=None)
    si.add_argument("--max-categories", type=int, default=50, help="list at most this many values per column")
    si.add_argument("--min-count", type=int, default=20,
                    help="do not list a value seen in fewer rows (it falls into 'other'); default 20")
    si.add_argument("--bins", type=int, default=10, help="about this many bins per numeric column; default 10")
    si.add_argument("--epsilon", type=float, default=None,
                    help="draft with differential privacy at this epsilon (charged to --dataset); without it the "
                         "draft is read from the rows and must be reviewed")
    si.add_argument("--delta", type=float, default=None, help="delta of the DP draft (default 1e-6)")
    si.add_argument("--dataset", default=None, help="dataset the DP draft is charged to (required with --epsilon)")
    si.add_argument("--workspace", default=None, help="private workspace holding the registry")
    si.add_argument("--seed-file", default=None, help="secret seed for a reproducible DP draft")
    si.set_defaults(func=_cmd_schema_infer)
    sc = ssub.add_parser("check", help="validate a schema file")
    sc.add_argument("schema")
    sc.set_defaults(func=_cmd_schema_check)

    v = sub.add_parser("verify", help="re-check a published release (hashes, schema validity, ledger)")
    v.add_argument("release", help="the release folder OUT/NAME")
    v.add_argument("--key", default=None, help="the publisher's signing key: also check manifest.sig")
    v.set_defaults(func=_cmd_verify)

    b = sub.add_parser("bounds", help="privacy and accuracy bounds of private sampling (Theorems 12.2, 12.4)")
    b.add_argument("--n", type=int, required=True, help="records")
    b.add_argument("--p", type=int, required=True, help="Boolean features (one-hot width)")
    b.add_argument("--d", type=int, required=True, help="Walsh degree (marginal dimension)")
    b.add_argument("--m", type=int, required=True, help="size of the reduced space")
    b.add_argument("--delta", type=_finite, required=True, help="lower density bound (accuracy 4*delta)")
    b.add_argument("--Delta", type=_finite, required=True, help="density bound: density <= Delta / 2^p")
    b.add_argument("--gamma", type=_finite, required=True, help="failure probability of Theorem 12.4")
    b.add_argument("--epsilon", type=_finite, required=True)
    b.add_argument("--k", type=int, default=None, help="rows to release: also say whether (epsilon, k) holds")
    b.set_defaults(func=_cmd_bounds)

    t = sub.add_parser("test", help="hypothesis tests on released DP statistics (post-processing, no budget)")
    tsub = t.add_subparsers(dest="test_command", required=True)
    tp = tsub.add_parser("two-proportions", help="Tulap-noised counts of two groups: one-step and bootstrap p-values")
    tp.add_argument("--x", type=_finite, required=True, help="released noisy count of successes, group X")
    tp.add_argument("--n", type=int, required=True, help="size of group X (public)")
    tp.add_argument("--y", type=_finite, required=True, help="released noisy count of successes, group Y")
    tp.add_argument("--m", type=int, required=True, help="size of group Y (public)")
    tp.add_argument("--epsilon", type=_finite, required=True, help="epsilon of the Tulap release (b = exp(-epsilon))")
    tp.add_argument("--replicates", type=int, default=2000)
    tp.add_argument("--seed", type=int, default=None, help="seed of the Monte Carlo (public; default: fresh)")
    tp.set_defaults(func=_cmd_test_two_proportions)

    m = sub.add_parser("methods", help="list methods: guarantee and when to use each (details with --verbose)")
    m.add_argument("--verbose", "-v", action="store_true",
                   help="each method's description, guarantee in full, and parameters with defaults and ranges")
    m.set_defaults(func=_cmd_methods)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one command; returns the exit code (one error line on stderr, never a traceback)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("dpsynth: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line, never a traceback with locals or a row
        print(f"dpsynth: error: {_error_line(args, exc)}", file=sys.stderr)
        return _exit_code(exc)


def _error_line(args: argparse.Namespace, exc: BaseException) -> str:
    """The one error line: for a command with a workspace, without its private paths and
    keys (:mod:`dpsynth.pipeline.messages`); a release's line also says whether budget was
    spent (a failure from the measure stage on is a BudgetSpent and says so itself)."""
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if not hasattr(args, "workspace"):
        return message
    from .pipeline import BudgetSpent, default_workspace
    from .pipeline.messages import public_message

    workspace = Path(args.workspace) if args.workspace else default_workspace()
    message = public_message(exc, workspace).splitlines()[0]
    if args.func is _cmd_release and not isinstance(exc, BudgetSpent) and "nothing was measured" not in message:
        message += "; nothing was measured, no privacy budget was spent"
    return message


if __name__ == "__main__":
    sys.exit(main())
