"""The command line: a thin layer over spec -> search -> report.

Start-up stays light: nothing here imports TensorFlow, Keras or Ray until a
command that needs them runs. A UserError becomes one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

from gridbench import compile_cache
from gridbench.errors import UserError

EXIT_USER_ERROR = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors: same one-line form
        raise UserError(f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gridbench",
        description="Compare CPU and GPU speed for whole hyperparameter grid searches (Ray Tune + MLflow).",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    _add_search_command(commands)
    _add_scale_command(commands)
    _add_compare_command(commands)
    _add_baseline_command(commands)
    _add_store_commands(commands)
    return parser


def _add_search_command(commands) -> None:
    """`gridbench search`: its flags, shared with scale and compare where they mean the same."""
    search = commands.add_parser("search", help="run an experiment's grid as Ray Tune trials, recorded in MLflow")
    search.add_argument("experiment", help="a name from experiments/ (see `gridbench list`) or a path to a .toml file")
    search.add_argument(
        "--device",
        choices=("cpu", "gpu", "both"),
        default="cpu",
        help="where trials train (default: cpu); both: the CPU search, the GPU search, then `compare`",
    )
    search.add_argument(
        "--backend",
        metavar="NAME",
        help="Keras backend: tensorflow, jax or torch; with --device both, one per half as cpu=NAME,gpu=NAME "
        "(default: $KERAS_BACKEND; else on a GPU the first of jax, torch, tensorflow that sees it, and on a CPU "
        "tensorflow; --device both uses the GPU half's for both)",
    )
    search.add_argument(
        "--cpus-per-trial",
        type=int,
        metavar="N",
        help="CPU cores reserved per trial (default: the usable cores shared by the trials that run at once)",
    )
    search.add_argument(
        "--gpus-per-trial",
        type=float,
        metavar="F",
        help="GPUs per trial with --device gpu (default 1; a fraction packs trials: 0.25 runs 4 per GPU)",
    )
    search.add_argument("--gpus", type=int, metavar="N", help="use at most N of this machine's GPUs (default: all)")
    search.add_argument("--cpus", type=int, metavar="N", help="use at most N of this machine's cores (default: all)")
    _add_cluster_option(search)
    search.add_argument("--max-concurrent", type=int, metavar="N", help="at most N trials at once")
    _add_max_trials(search)
    _add_compile_cache(search)
    search.add_argument(
        "--repeats", type=int, metavar="N", help="train each configuration N times (overrides the spec)"
    )
    search.add_argument(
        "--tracking-uri", metavar="URI", help="MLflow store (default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db)"
    )
    search.add_argument(
        "--data-dir", metavar="DIR", help="directory holding dataset files such as mnist.npz ($GRIDBENCH_DATA_DIR)"
    )
    search.add_argument(
        "--synthetic",
        action="store_true",
        help="random data of the dataset's real shapes and label count, for speed-only runs (accuracy not reported)",
    )
    search.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="fix a hyperparameter"
    )
    search.add_argument(
        "--grid", dest="grids", action="append", default=[], metavar="KEY=V1,V2", help="make or replace a grid axis"
    )
    _add_lifecycle_options(search)
    _add_execution_option(search)
    _add_compare_options(search)
    search.set_defaults(handler=_search)


def _add_scale_command(commands) -> None:
    """`gridbench scale`: one grid at several GPU or core counts."""
    scale = commands.add_parser(
        "scale", help="the same grid at several GPU or core counts: throughput, speedup, parallel efficiency"
    )
    scale.add_argument("experiment", help="a name from experiments/ (see `gridbench list`) or a path to a .toml file")
    counts = scale.add_mutually_exclusive_group(required=True)
    counts.add_argument("--gpus", metavar="N,N,...", help="GPU counts, e.g. 1,2,4 (trials on GPUs)")
    counts.add_argument("--cpus", metavar="N,N,...", help="core counts, e.g. 2,4,8,16 (trials on CPU cores)")
    scale.add_argument(
        "--data-parallel",
        action="store_true",
        help="spread each trial over all N GPUs (Keras DataParallel, JAX) instead of N trials side by side",
    )
    scale.add_argument("--backend", metavar="NAME", help="Keras backend (default: as for search)")
    scale.add_argument(
        "--gpus-per-trial", type=float, metavar="F", help="GPU share per trial (default 1; 0.25 packs 4 per GPU)"
    )
    scale.add_argument(
        "--cpus-per-trial",
        type=int,
        metavar="N",
        help="cores per trial, the same at every count (default: with --gpus, the cores per GPU slot at the "
        "largest count; with --cpus, 1)",
    )
    scale.add_argument("--repeats", type=int, metavar="N", help="train each configuration N times")
    _add_max_trials(scale)
    _add_compile_cache(scale)
    scale.add_argument("--tracking-uri", metavar="URI", help="MLflow store (default: sqlite:///mlflow.db)")
    scale.add_argument("--data-dir", metavar="DIR", help="directory holding dataset files")
    scale.add_argument("--synthetic", action="store_true", help="random data of the real shapes (speed only)")
    scale.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    scale.add_argument("--grid", dest="grids", action="append", default=[], metavar="KEY=V1,V2")
    scale.add_argument("--format", choices=("table", "markdown", "csv", "json"), default="table", dest="output_format")
    scale.add_argument(
        "--out", metavar="DIR", help="also write the table (md, csv, json), the curve (PNG) and report.html here"
    )
    scale.add_argument("--html", metavar="FILE", help="also write the result as one self-contained HTML page")
    _add_execution_option(scale)
    scale.set_defaults(handler=_scale)


def _add_compare_command(commands) -> None:
    """`gridbench compare`: two or more searches read back from the store."""
    compare = commands.add_parser(
        "compare", help="CPU-versus-GPU speedups and cost for two or more searches of one experiment, from MLflow"
    )
    compare.add_argument(
        "run_ids", nargs="*", metavar="RUN_ID", help="searches' parent run ids; the first is the baseline"
    )
    compare.add_argument(
        "--experiment", metavar="NAME", help="compare the latest finished search on each device (CPU first)"
    )
    compare.add_argument(
        "--tracking-uri", metavar="URI", help="MLflow store (default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db)"
    )
    _add_compare_options(compare)
    compare.set_defaults(handler=_compare)


def _add_baseline_command(commands) -> None:
    """`gridbench baseline`: a kernel grid through scikit-learn's GridSearchCV."""
    baseline = commands.add_parser(
        "baseline", help="the same kernel grid through scikit-learn's GridSearchCV on the CPU, recorded as a search"
    )
    baseline.add_argument(
        "experiment", help="a kernel_ridge experiment (kernels-digits, kernels-mnist) or a .toml path"
    )
    baseline.add_argument(
        "--estimator", choices=("svc", "kernel_ridge"), default="svc", help="SVC(kernel='rbf') or KernelRidge"
    )
    baseline.add_argument("--n-jobs", type=int, default=-1, help="GridSearchCV's n_jobs (default -1: every core)")
    baseline.add_argument(
        "--tracking-uri", metavar="URI", help="MLflow store (default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db)"
    )
    baseline.add_argument("--data-dir", metavar="DIR", help="directory holding dataset files such as mnist.npz")
    baseline.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="fix a hyperparameter"
    )
    baseline.add_argument(
        "--grid", dest="grids", action="append", default=[], metavar="KEY=V1,V2", help="make or replace an axis"
    )
    baseline.set_defaults(handler=_baseline, repeats=None)


def _add_store_commands(commands) -> None:
    """The commands over the store: ui, sync, report; and list, over experiments/."""
    ui = commands.add_parser("ui", help="start the MLflow UI on 127.0.0.1 for the store, lean (3 processes)")
    ui.add_argument(
        "--tracking-uri", metavar="URI", help="MLflow store (default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db)"
    )
    ui.add_argument("--port", type=int, default=5000, help="port on 127.0.0.1 (default 5000; 0 picks a free one)")
    ui.add_argument("--experiment", metavar="NAME", help="print this experiment's runs page (default: the newest)")
    ui.set_defaults(handler=_ui)

    sync = commands.add_parser(
        "sync", help="write a search's journal into the store: what a store outage left out (idempotent)"
    )
    sync.add_argument("journal", metavar="JOURNAL", help="a search's journal (.jsonl, in gridbench-journal/)")
    sync.add_argument("--tracking-uri", metavar="URI", help="MLflow store (default: the one the search wrote to)")
    sync.set_defaults(handler=_sync)

    report = commands.add_parser(
        "report", help="a search, comparison or scale run as one self-contained HTML page, readable offline"
    )
    report.add_argument("run_id", metavar="RUN_ID", help="a search's, comparison's or scale's run id")
    report.add_argument("--html", metavar="FILE", help="where to write it (default: gridbench-KIND-ID.html here)")
    report.add_argument(
        "--tracking-uri", metavar="URI", help="MLflow store (default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db)"
    )
    report.set_defaults(handler=_report)

    listing = commands.add_parser("list", help="list the experiments in experiments/")
    listing.set_defaults(handler=_list)


def _add_max_trials(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-trials",
        type=int,
        default=10_000,
        metavar="N",
        help="refuse a search of more than N trials, configurations x repeats (default 10000)",
    )


def _add_lifecycle_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        metavar="RUN_ID",
        help="continue the latest unfinished search of this spec in the store (or the search RUN_ID): only its "
        "trials not FINISHED run, under its parent run; the spec and options must be the ones it ran with",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=0,
        metavar="N",
        help="run a trial whose worker died (a crash, an out-of-memory kill) again, up to N times (default 0); "
        "every attempt is recorded",
    )
    parser.add_argument(
        "--keep-ray-logs",
        action="store_true",
        help="keep the search's directory (Ray's session and logs) instead of removing it, and say where",
    )


def _add_execution_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--execution",
        choices=("trials", "fused"),
        help="trials: one Ray trial per configuration; fused: configurations that share a program train as one "
        "vectorised program (jax.vmap) on one device, each still recorded as its own trial "
        "(default: the spec's execution, else trials)",
    )


def _add_cluster_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--address",
        metavar="ADDR",
        help="join an existing Ray cluster (HOST:PORT, or auto) instead of starting Ray here; "
        "pair with an MLflow server: --tracking-uri http://HOST:5000",
    )


def _add_compare_options(parser: argparse.ArgumentParser) -> None:
    from_compare = parser.prog.endswith("compare")
    group = parser.add_argument_group("comparison" + ("" if from_compare else " (with --device both)"))
    group.add_argument("--format", choices=("table", "markdown", "csv", "json"), default="table", dest="output_format")
    group.add_argument("--target", type=float, help="metric value for time to accuracy (default: the spec's target)")
    group.add_argument("--prices", metavar="FILE", help="$/hour table (layout of gridbench/data/prices.toml)")
    group.add_argument("--price", action="append", default=[], metavar="KEY=USD", help='e.g. "NVIDIA H100=2.50"')
    group.add_argument(
        "--allow-mismatch", action="store_true", help="compare searches of different backends, data or epochs"
    )
    group.add_argument(
        "--out", metavar="DIR", help="also write the comparison's files here (plots, tables, report.html)"
    )
    group.add_argument("--html", metavar="FILE", help="also write the comparison as one self-contained HTML page")
    group.add_argument(
        "--project",
        metavar="SIZE",
        help="also project the pair to this size, e.g. epochs=50,configs=200,repeats=3 (keys: epochs, configs, "
        "repeats, concurrency)",
    )
    group.add_argument(
        "--no-log", action="store_true", help="log no comparison run to MLflow (print, and write --out/--html only)"
    )


def _load(args: argparse.Namespace):
    from gridbench.spec import load_spec, parse_assignments, parse_grid_overrides

    spec = load_spec(args.experiment)
    spec = spec.with_overrides(parse_assignments(args.sets, "--set"), parse_grid_overrides(args.grids))
    if args.repeats is not None:
        spec = spec.with_repeats(args.repeats)
    if getattr(args, "execution", None) is not None:  # search and scale have it; baseline not
        spec = spec.with_execution(args.execution)
    return spec


def _search(args: argparse.Namespace) -> int:
    from rich.console import Console

    from gridbench.gridsearch import backends, plan_pair, plan_search, run_search
    from gridbench.gridsearch.progress import SearchProgress, print_search
    from gridbench.gridsearch.ray_session import RaySession
    from gridbench.tracking import schema

    spec = _load(args)
    # The store opens while Ray starts, except where --resume reads it first.
    session = RaySession(open_store_early=not args.resume)
    named = backends.parse_flag(args.backend)
    if args.device == "both":
        from gridbench.comparison.prices import PriceTable
        from gridbench.comparison.projection import parse_sizes

        PriceTable.load(args.prices, args.price)  # bad prices should fail now, not after two searches
        parse_sizes(args.project, args.max_trials)
        plans = plan_pair(
            spec, _search_options(args, "cpu", named.get("cpu")), _search_options(args, "gpu", named.get("gpu"))
        )
    else:
        try:  # Ray starts while the backends are asked about GPUs
            options = _search_options(args, args.device, named.get(args.device))
            plans = [plan_search(spec, options, session.start, session.planned)]
        except BaseException:
            session.stop()
            raise
    resume = None
    if args.resume:
        from gridbench.gridsearch import resume as resuming

        try:
            if args.device == "both":
                raise UserError("--resume continues one search; give --device cpu or --device gpu")
            resume = resuming.locate(plans[0], args.resume)
        except BaseException:
            session.stop()
            raise
        if resume.remaining == 0:
            session.stop()
            print(f"search {resume.parent_run_id} of {spec.name} is finished: nothing to run")
            return 0
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 160)  # logs: keep the results table on one line per trial
    results, warm = [], _warm_up(console, plans)
    for plan in plans:
        _print_plan(console, plan)
        # A later search of --device both was asked for when the one before it ended.
        requested_at = time.time() if results else None
        progress = SearchProgress(console, spec.metric, plan.spec.workload.train_metric)
        if resume is not None:
            print(f"resuming search {resume.parent_run_id}: {resume.remaining} of {plan.trials_total} trials to run")
        result = run_search(
            plan,
            observer=progress,
            requested_at=requested_at,
            resume=resume,
            session=session,
            extra_tags={schema.COMPILE_WARMUP: warm.describe()} if warm.programs else None,
            compile_warmup_s=0.0 if results else warm.seconds,
        )
        print_search(console, result)
        results.append(result)
    if args.device == "both":
        _compare_and_report(console, [r.parent_run_id for r in results], plans[0].tracking_uri, args)
    # 1: the search ran, but not every trial finished (the failed ones are in MLflow).
    finished = all(r.summary.trials_finished == r.summary.trials_total for r in results)
    return 0 if finished else 1


def _warm_up(console, plans):
    """Several timed searches (--device both): every program compiled first, so that neither half compiles."""
    from gridbench.gridsearch.warmup import WarmUp, warm_up

    if len(plans) < 2:
        return WarmUp()
    warm = warm_up(plans)
    if warm.programs:
        console.print(warm.describe(), highlight=False)
    return warm


def _search_options(args: argparse.Namespace, device: str, backend: str | None):
    from gridbench.gridsearch import SearchOptions

    return SearchOptions(
        device=device,
        backend=backend,
        # With --device both, the GPU flags shape the GPU search only (elsewhere plan_search checks them).
        gpus_per_trial=None if args.device == "both" and device == "cpu" else args.gpus_per_trial,
        gpus=None if args.device == "both" and device == "cpu" else args.gpus,
        cpus=args.cpus,
        address=args.address,
        max_concurrent=args.max_concurrent,
        retries=args.retries,
        keep_ray_logs=args.keep_ray_logs,
        **_shared_options(args),
    )


def _add_compile_cache(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--compile-cache",
        choices=compile_cache.SETTINGS,
        default=compile_cache.DEFAULT,
        help="JAX's compiled programs: kept across searches in ~/.cache/gridbench/jax ($GRIDBENCH_CACHE_DIR, bounded "
        "by $GRIDBENCH_CACHE_MAX_MB; default); compiled once per search, as on a fresh machine (search); or "
        "compiled by every worker anew (off)",
    )
    command.add_argument(
        "--no-compile-cache", dest="compile_cache", action="store_const", const="off", help="--compile-cache off"
    )
    command.add_argument(
        "--compile-ahead",
        choices=compile_cache.AHEAD_SETTINGS,
        default=compile_cache.AHEAD_AUTO,
        help="compile JAX's programs in processes of their own while Ray starts: on a GPU, and on a CPU of 8 cores "
        "or more (auto, the default); always (on); or in each program's first trial (off)",
    )


def _shared_options(args: argparse.Namespace) -> dict:
    """The options `search` and `scale` both take, as SearchOptions fields."""
    return {
        "cpus_per_trial": args.cpus_per_trial,
        "max_trials": args.max_trials,
        "compile_cache": args.compile_cache,
        "compile_ahead": args.compile_ahead,
        "tracking_uri": args.tracking_uri,
        "data_dir": args.data_dir,
        "synthetic": args.synthetic,
        "command_line": shlex.join(["gridbench", *sys.argv[1:]]),
    }


def _print_plan(console, plan) -> None:
    spec, options = plan.spec, plan.options
    console.print(f"backend {plan.backend}: {plan.backend_choice.reason}", highlight=False)
    if options.address:
        gpus = f", {plan.gpus_per_trial:g} GPU(s) per trial" if options.device == "gpu" else ""
        where = f"on the Ray cluster at {options.address}"
    else:
        gpus = f", {plan.gpus_per_trial:g} GPU(s) per trial on {plan.gpus} GPU(s)" if plan.gpus else ""
        where = f"up to {plan.concurrency} at once"
    parallel = " (data-parallel)" if plan.data_parallel else ""
    console.print(
        f"{spec.name}: {spec.grid_size} configurations x {spec.repeats} repeat(s) = {plan.trials_total} trials "
        f"on {options.device} ({plan.backend}), {plan.cpus_per_trial} CPU(s) per trial{gpus}{parallel}, "
        f"{where}; store {plan.tracking_uri}"
    )
    if plan.user_check_s:
        checked = f"model {spec.model} and data {spec.dataset} checked in {plan.user_check_s:.1f} s"
        console.print(f"{checked} (CPU subprocess, before Ray starts)", highlight=False)
    if plan.fused_groups:
        sizes = sorted({len(group) for group in plan.fused_groups})
        console.print(
            f"fused: {plan.trials_total} trials in {len(plan.fused_groups)} group(s) of "
            f"{'/'.join(map(str, sizes))}, each one vectorised program on one device"
        )
    if plan.data.synthetic:
        console.print(f"[yellow]synthetic {spec.dataset}: random data of the real shapes; timings only, no accuracy[/]")


def _scale(args: argparse.Namespace) -> int:
    from rich.console import Console

    from gridbench.gridsearch import SearchOptions, backends
    from gridbench.gridsearch.progress import SearchProgress
    from gridbench.scale import ScaleRequest, parse_counts, plan_scale, run_scale
    from gridbench.scale import report as scale_report

    spec = _load(args)
    resource = "gpu" if args.gpus else "cpu"
    request = ScaleRequest(resource, parse_counts(args.gpus or args.cpus, f"--{resource}s"), args.data_parallel)
    template = SearchOptions(
        device=resource,
        backend=backends.parse_flag(args.backend).get(resource),
        gpus_per_trial=args.gpus_per_trial,
        **_shared_options(args),
    )
    plans = plan_scale(spec, template, request)  # every count checked before any runs
    console = Console(stderr=args.output_format != "table")
    if not console.is_terminal:
        console.width = max(console.width, 160)
    for plan in plans:
        _print_plan(console, plan)
    result = run_scale(
        plans,
        request,
        observer_for=lambda plan: SearchProgress(console, plan.spec.metric, plan.spec.workload.train_metric),
    )
    if args.output_format == "table":
        scale_report.print_table(console, result)
    else:
        print(scale_report.render(result, args.output_format))
    run_id = scale_report.record(result, plans[0].tracking_uri, args.out)
    if args.html:
        _write_page(args.html, scale_report.page(result, plans[0].tracking_uri))
    console.print(
        f"scale summary logged to MLflow as run {run_id} (table, curve, report.html)"
        + (f"; files in {args.out}" if args.out else "")
        + (f"; page {args.html}" if args.html else "")
    )
    finished = all(row.trials == plan.trials_total for row, plan in zip(result.rows, plans))
    return 0 if finished else 1


def _compare(args: argparse.Namespace) -> int:

    from rich.console import Console

    from gridbench.tracking import latest_searches, resolve_tracking_uri
    from gridbench.tracking.store import check_store_exists

    uri = resolve_tracking_uri(args.tracking_uri)
    check_store_exists(uri)
    if bool(args.run_ids) == bool(args.experiment):
        raise UserError("give two or more search run ids, or --experiment NAME (not both)")
    run_ids = args.run_ids or latest_searches(uri, args.experiment)
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 160)
    _compare_and_report(console, run_ids, uri, args)
    return 0


def _compare_and_report(console, run_ids: list[str], tracking_uri: str, args: argparse.Namespace) -> None:
    """Reads the searches, compares them, prints the result and logs it to MLflow as its own run (unless --no-log)."""
    from pathlib import Path

    from gridbench.comparison import artifacts as compare_artifacts
    from gridbench.comparison import report as compare_report
    from gridbench.comparison.prices import PriceTable
    from gridbench.comparison.projection import parse_sizes
    from gridbench.comparison.recorded import compare_runs, record_comparison

    if len(run_ids) < 2:
        raise UserError("compare needs at least two searches; give two run ids or --experiment NAME")
    prices = PriceTable.load(args.prices, args.price)
    sizes = parse_sizes(args.project, getattr(args, "max_trials", None) or 10_000)
    comparison = compare_runs(tracking_uri, run_ids, prices, args.target, args.allow_mismatch, project=sizes)
    if args.output_format == "table":
        compare_report.print_table(console, comparison)
    else:
        print(compare_report.render(comparison, args.output_format))
    out = sys.stderr if args.output_format != "table" else sys.stdout
    run_id, unlogged = None, None
    if args.no_log:
        if args.out:
            compare_artifacts.write_files(comparison, Path(args.out), tracking_uri)
    else:
        run_id, unlogged = record_comparison(comparison, run_ids, tracking_uri, args.out)
    where = f"; files in {args.out}" if args.out else ""
    if args.html:
        from gridbench.comparison import html

        _write_page(args.html, html.comparison_page(comparison, tracking_uri, run_id))
        where += f"; page {args.html}"
    print(_compare_view_line(comparison, tracking_uri), file=out)
    if unlogged:  # the results are printed above; only their record in the store is missing
        print(f"gridbench: cannot log the comparison to {tracking_uri} ({unlogged}){where}", file=sys.stderr)
    elif run_id is None:
        print(f"comparison not logged (--no-log){where}", file=out)
    else:
        print(f"comparison logged to MLflow as run {run_id} (plots, tables, JSON, report.html){where}", file=out)


def _compare_view_line(comparison, tracking_uri: str) -> str:
    """The link to MLflow's compare view of the searches, and where it expects the UI."""
    from gridbench.tracking import ui

    base = ui.ui_base(tracking_uri)
    searches = comparison.searches
    url = ui.compare_runs_url(base, [s.run_id for s in searches], [s.experiment_id for s in searches])
    served = base == tracking_uri.rstrip("/")
    where = "" if served else f" (with `python -m gridbench ui --tracking-uri {tracking_uri}` running)"
    return f"side by side in MLflow{where}: {url}"


def _write_page(path: str, text: str) -> None:
    from pathlib import Path

    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as err:
        raise UserError(f"--html {path}: cannot write it ({err.strerror}); choose another path") from None


def _report(args: argparse.Namespace) -> int:
    from gridbench.comparison.html import report_page
    from gridbench.tracking.store import check_store_exists, resolve_tracking_uri

    uri = resolve_tracking_uri(args.tracking_uri)
    check_store_exists(uri)
    kind, text = report_page(uri, args.run_id)
    path = args.html or f"gridbench-{kind}-{args.run_id[:8]}.html"
    _write_page(path, text)
    print(f"{kind} {args.run_id}: {path}")
    return 0


def _baseline(args: argparse.Namespace) -> int:
    from gridbench.gridsearch.baseline import run_baseline
    from gridbench.tracking import schema

    spec = _load(args)
    run_id, summary, trials = run_baseline(spec, args.estimator, args.tracking_uri, args.data_dir, args.n_jobs)
    best = max(trials, key=lambda t: t.metrics[schema.TEST_ACCURACY])
    print(
        f"{spec.name}: GridSearchCV({args.estimator}) over {len(trials)} configurations in {summary.makespan_s:.1f} s; "
        f"best test_accuracy {best.metrics['test_accuracy']:.4f} at {best.key}; MLflow parent run {run_id}"
    )
    return 0


def _sync(args: argparse.Namespace) -> int:
    from gridbench.tracking.sync import sync_journal

    print(sync_journal(args.journal, args.tracking_uri).line())
    return 0


def _ui(args: argparse.Namespace) -> int:
    from gridbench.tracking.ui import serve

    return serve(args.tracking_uri, args.port, args.experiment)


def _list(args: argparse.Namespace) -> int:
    from gridbench.spec import available_experiments, load_spec

    rows, own_models = [], []
    for name in available_experiments():
        spec = load_spec(name)
        if spec.user_model is not None:
            own_models.append(spec.workload)
        axes = " x ".join(f"{axis}({len(values)})" for axis, values in spec.grid.items()) or "-"
        rows.append((name, spec.dataset, spec.model, str(spec.grid_size), axes, spec.description))
    headers = ("experiment", "dataset", "model", "configs", "grid", "description")
    widths = [max(len(r[i]) for r in (headers, *rows)) for i in range(len(headers) - 1)]
    for row in (headers, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
    from gridbench.workloads import WORKLOADS

    print("models (the `model` of a spec; `--set`/`--grid` take their hyperparameters):")
    width = max(map(len, WORKLOADS))
    for workload in WORKLOADS.values():
        names = ", ".join(hp.name for hp in workload.hyperparameters)
        print(f"  {workload.name.ljust(width)}  {workload.description} [{', '.join(workload.datasets)}]: {names}")
    for workload in own_models:  # a user's own, declared in an experiment's [hyperparameters]
        names = ", ".join(hp.name for hp in workload.hyperparameters)
        print(f"  {workload.name}  {workload.description}: {names}")
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.handler(args)
    except UserError as err:
        print(f"gridbench: error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt as err:
        from gridbench.gridsearch.lifecycle import SearchStopped

        if isinstance(err, SearchStopped):  # a signal (130, 143), a disk that filled (3)
            print(f"gridbench: {err.report()}", file=sys.stderr)
            return err.exit_code
        print("gridbench: interrupted", file=sys.stderr)
        return 130


def run() -> None:
    """The command line's entry point: main(), its exit handlers, then an exit without the interpreter's teardown.

    Once Ray and MLflow were imported, tearing the interpreter down took 1.8-3.2 s on 2 cores after every exit
    handler had run (native threads and modules unloading): time a user waits for after the search has ended,
    and that no search's account could hold. Output is flushed and the exit handlers run (logging, Ray) first.
    """
    import atexit

    code = main()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
