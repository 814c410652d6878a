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
import sys
from pathlib import Path
from typing import Sequence

from .args import UsageError, _finite
from .commands import (_cmd_bounds, _cmd_budget_set, _cmd_budget_show, _cmd_methods, _cmd_schema_check,
                       _cmd_schema_infer, _cmd_test_two_proportions, _cmd_verify)
from .release import _add_release, _cmd_release

__all__ = ["UsageError", "build_parser", "main"]


# Errors of the request (public problems): nothing was spent.
_REQUEST_ERRORS = ("SchemaError", "DataError", "ParamError", "BudgetExceeded", "ReleaseError", "PublishError")


def _exit_code(exc: BaseException) -> int:
    """2: a public problem, nothing was measured; 1: the run failed (the budget may be spent)."""
    from ..pipeline import BudgetSpent

    if isinstance(exc, BudgetSpent):
        return 1
    kind = type(exc).__name__
    return 2 if kind in _REQUEST_ERRORS or isinstance(exc, (ValueError, FileNotFoundError)) else 1


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
    from ..pipeline import BudgetSpent, default_workspace
    from ..pipeline.messages import public_message

    workspace = Path(args.workspace) if args.workspace else default_workspace()
    message = public_message(exc, workspace).splitlines()[0]
    if args.func is _cmd_release and not isinstance(exc, BudgetSpent) and "nothing was measured" not in message:
        message += "; nothing was measured, no privacy budget was spent"
    return message
