"""The command line's other commands: ``budget``, ``schema``, ``methods``, ``bounds``,
``verify`` and ``test`` (each a small function of its parsed arguments)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .args import UsageError
from .release import _privacy_line


def _budget_workspace(args: argparse.Namespace) -> Path:
    """The workspace of a budget command; says on stderr which registry it reads or writes."""
    from ..privacy.registry import registry_path
    from ..privacy.workspace import default_workspace

    workspace = Path(args.workspace) if args.workspace else default_workspace()
    print(f"dpsynth: privacy registry {registry_path(workspace).absolute()}", file=sys.stderr)
    return workspace


def _cmd_budget_set(args: argparse.Namespace) -> int:
    from ..privacy.registry import Cap, set_cap, state

    cap = Cap(epsilon=args.epsilon, delta=args.delta, period=args.period, period_epsilon=args.period_epsilon)
    workspace = _budget_workspace(args)
    _warn_near_twin(workspace, args.dataset)
    set_cap(workspace, args.dataset, cap)
    _print_budget(state(workspace, args.dataset))
    return 0


def _cmd_budget_show(args: argparse.Namespace) -> int:
    from ..pipeline import DEFAULT_DELTA
    from ..privacy.registry import state

    workspace = _budget_workspace(args)
    _warn_near_twin(workspace, args.dataset)
    _print_budget(state(workspace, args.dataset, delta=DEFAULT_DELTA))
    return 0


def _warn_near_twin(workspace: Path, dataset: str) -> None:
    """A stderr warning when the registry holds a dataset whose name differs only by case,
    spaces or Unicode form (refuses a misspelt name first)."""
    from ..privacy.registry import check_dataset_name, near_twin_warning

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


def _cmd_schema_infer(args: argparse.Namespace) -> int:
    if args.epsilon is not None:
        return _schema_infer_dp(args)
    if args.dataset is not None or args.delta is not None:
        raise UsageError("--dataset and --delta go with --epsilon (a DP draft)")
    from ..rows.encoding import read_table
    from ..schema.draft import WARNING, draft_from_table

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
    from ..pipeline import DEFAULT_DELTA
    from ..privacy.registry import RegistryRefused, registry_path
    from ..privacy.rng import read_seed_file
    from ..privacy.schema_draft import dp_draft_from_table
    from ..rows.encoding import read_table

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
    if not draft.schema["columns"]:
        print("warning: the DP draft could draft no column (each column's reason is a comment in the draft): a "
              "release refuses a schema without columns; declare the schema from public knowledge", file=sys.stderr)
    return 0


def _cmd_schema_check(args: argparse.Namespace) -> int:
    """Validates a schema file; a draft read from the rows is reported with what is left to
    review, and exits 1 (a release would refuse it)."""
    from ..schema import load_schema
    from ..privacy.schema_source import schema_source

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
    from ..methods import METHODS
    from ..methods.catalog import describe_method, method_order, methods_table

    if args.verbose:
        for name in method_order(METHODS):
            print("\n".join(describe_method(name, METHODS[name])) + "\n")
        print("Pass parameters as --param key=value (Python: params={...}). Which method for which data: "
              "docs/choosing.md")
        return 0
    print("\n".join(methods_table(METHODS)))
    return 0


def _cmd_bounds(args: argparse.Namespace) -> int:
    from ..methods.private_sampling import bounds_report

    report = bounds_report(n=args.n, p=args.p, d=args.d, m=args.m, delta=args.delta, Delta=args.Delta,
                           gamma=args.gamma, epsilon=args.epsilon, k=args.k)
    print(json.dumps(report, indent=2, sort_keys=True))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from ..publish.verify import verify_release

    from ..publish.bundle import read_sign_key

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

    from ..onestep.tulap import two_proportions_test

    rng = np.random.default_rng(args.seed)
    r = two_proportions_test(args.x, args.n, args.y, args.m, args.epsilon, rng, replicates=args.replicates)
    print(json.dumps({"hypothesis": "H0: theta_X = theta_Y vs H1: theta_Y > theta_X", "theta_hat": r.theta_hat,
                      "p_value_one_step": r.p_one_step, "p_value_bootstrap": r.p_bootstrap,
                      "replicates": r.replicates}, indent=2, allow_nan=False))  # valid JSON or an error
    return 0
