"""The command line: a thin layer over spec -> search -> report.

Start-up stays light: nothing here imports TensorFlow, Keras or Ray until a
command that needs them runs. A UserError becomes one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time

from gridbench import collector, compile_cache
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
    from gridbench import __version__

    parser.add_argument("--version", action="version", version=f"gridbench {__version__}")
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
    search.add_argument(
        "experiment",
        nargs="?",
        help="a name from experiments/ (see `gridbench list`) or a path to a .toml file; with --resume RUN_ID, "
        "the one that search ran (it may be left out)",
    )
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
    search.add_argument(
        "--pilot",
        nargs="?",
        const="",
        metavar="epochs=N",
        help="run a pilot instead: one configuration per program for N epochs (default 3) on each device, then "
        "project the whole search's time and cost, with --device both the verdict",
    )
    _add_lifecycle_options(search)
    _add_prestart_option(search)
    _add_execution_option(search)
    _add_compare_options(search)
    search.set_defaults(handler=_search)


def _add_prestart_option(parser) -> None:
    parser.add_argument(
        "--prestart-workers",
        action=argparse.BooleanOptionalAction,
        help="start a local Ray's workers, one per trial at once, as soon as Ray is up, each importing its framework "
        "and the trial's modules (and, seeing one GPU only, starting it) before its first trial; or let each worker "
        "import with its first trial (--no-prestart-workers, the default: the workers still start as soon as Ray is "
        "up, unless GRIDBENCH_PLAIN_WORKERS=0). A Ray cluster (--address) always starts them with the trials",
    )


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
    scale.add_argument(
        "--tracking-uri", metavar="URI", help="MLflow store (default: $MLFLOW_TRACKING_URI or sqlite:///mlflow.db)"
    )
    scale.add_argument("--data-dir", metavar="DIR", help="directory holding dataset files")
    scale.add_argument("--synthetic", action="store_true", help="random data of the real shapes (speed only)")
    scale.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="fix a hyperparameter"
    )
    scale.add_argument(
        "--grid", dest="grids", action="append", default=[], metavar="KEY=V1,V2", help="make or replace a grid axis"
    )
    _add_format(scale, "the scale table")
    scale.add_argument(
        "--out", metavar="DIR", help="also write the table (md, csv, json), the curve (PNG) and report.html here"
    )
    scale.add_argument("--html", metavar="FILE", help="also write the result as one self-contained HTML page")
    _add_execution_option(scale)
    _add_prestart_option(scale)
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
    baseline.add_argument(
        "--n-jobs", type=int, default=-1, metavar="N", help="GridSearchCV's n_jobs (default -1: every core)"
    )
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
    ui_help = (
        "start MLflow's UI for the store on 127.0.0.1 (its server, without the job runner) and print the pages to "
        "open; MLflow's and the web server's own lines go to a log file it names"
    )
    ui = commands.add_parser("ui", help=ui_help, description=ui_help)
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


def _add_format(parser, what: str) -> None:
    parser.add_argument(
        "--format",
        choices=("table", "markdown", "csv", "json"),
        default="table",
        dest="output_format",
        help=f"print {what} as a terminal table (default), Markdown, CSV or JSON (the other lines then go to stderr)",
    )


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
        help="continue the search RUN_ID with the spec and options it ran with, as its parent run recorded them "
        "(`gridbench search --resume RUN_ID`); without RUN_ID, the latest unfinished search of EXPERIMENT: only "
        "its trials not FINISHED run, under its parent run; an option given that differs from the one it ran "
        "with is refused",
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
        "--trial-timeout",
        type=float,
        metavar="SECONDS",
        help="stop a trial that runs longer (its worker is killed and replaced) and record it FAILED with kind "
        "timeout; the search goes on (default: the spec's trial_timeout, else no limit)",
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
    _add_format(group, "the comparison")
    group.add_argument(
        "--target", type=float, metavar="VALUE", help="metric value for time to accuracy (default: the spec's target)"
    )
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

    spec, whole = _pilot_setup(args, _load(args))
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
        try:  # Ray starts while the backends are asked about GPUs; a resume is checked against its run first
            options = _search_options(args, args.device, named.get(args.device))
            starting = (session.start, session.planned, session.assumed) if not args.resume else ()
            plans = [plan_search(spec, options, *starting)]
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
        tags = {schema.RESUME_ARGUMENTS: json.dumps(_resume_arguments(args, plan.options.device))}
        tags.update({schema.COMPILE_WARMUP: warm.describe()} if warm.programs else {})
        tags.update(_pilot_tags(whole, plan) if whole is not None else {})
        result = run_search(
            plan,
            observer=progress,
            requested_at=requested_at,
            resume=resume,
            session=session,
            extra_tags=tags,
            compile_warmup_s=0.0 if results else warm.seconds,
        )
        print_search(console, result, project_hint=whole is None)  # a pilot's projection follows
        results.append(result)
    if whole is not None:
        _pilot_report([r.parent_run_id for r in results], plans[0].tracking_uri, args)
    elif args.device == "both":
        _compare_and_report(console, [r.parent_run_id for r in results], plans[0].tracking_uri, args)
    # 1: the search ran, but not every trial finished (the failed ones are in MLflow).
    finished = all(r.summary.trials_finished == r.summary.trials_total for r in results)
    return 0 if finished else 1


def _pilot_setup(args: argparse.Namespace, spec):
    """(the spec to run, the whole search it stands for): with --pilot, the pilot's spec and the whole search as
    written (the pilot runs in its place and records what it stands for); without, the spec and None."""
    if args.pilot is None:
        return spec, None
    from gridbench.gridsearch import pilot

    epochs = pilot.parse(args.pilot)
    pilot.check(spec, bool(args.resume))
    print(pilot.describe(spec, epochs))
    return pilot.pilot_spec(spec, epochs), spec


def _pilot_tags(whole, plan) -> dict[str, str]:
    """A pilot's tags: the whole search it stands for, with the trials at once its plan allows there."""
    from dataclasses import replace

    from gridbench.gridsearch import pilot
    from gridbench.gridsearch.recording import search_params

    trials = whole.grid_size * whole.repeats
    concurrency = replace(plan, trials_total=trials).concurrency_on(plan.cpus, plan.gpus)
    return pilot.tags(whole, pilot.whole_params(whole, plan.spec, search_params(whole)), concurrency)


def _pilot_report(run_ids: list[str], tracking_uri: str, args: argparse.Namespace, strict: bool = False) -> None:
    """Each pilot's whole search, projected; with two, the verdict last. What cannot be projected says why:
    refused (`strict`: compare, reading), or one line after the pilot ran."""
    import json

    from gridbench.comparison import pilot, spread
    from gridbench.comparison.pairing import search_price
    from gridbench.comparison.prices import PriceTable
    from gridbench.comparison.projection import parse_sizes
    from gridbench.tracking import earlier_runs, read_search

    prices = PriceTable.load(args.prices, args.price)
    asked = parse_sizes(args.project, getattr(args, "max_trials", None) or 10_000)
    found = []
    for run_id in run_ids:
        search = read_search(tracking_uri, run_id)
        projected = pilot.project(
            search, search_price(search, prices), spread.run_to_run(search, earlier_runs(tracking_uri, search)), asked
        )
        if isinstance(projected, str):
            if strict:
                raise UserError(f"pilot: cannot project {projected}")
            print(f"pilot: not projected: {projected}")
            continue
        found.append(projected)
        if args.output_format != "json":
            print("\n".join(pilot.lines(projected)))
    sentence = pilot.verdict(*found) if len(found) == 2 else None
    if args.output_format == "json":
        print(json.dumps({"pilots": [p.to_dict() for p in found], "verdict": sentence}, indent=1))
    elif sentence:
        print(sentence)


def _warm_up(console, plans):
    """Several timed searches (--device both): every program compiled first, so that neither half compiles."""
    from gridbench.gridsearch.warmup import WarmUp, warm_up

    if len(plans) < 2:
        return WarmUp()
    warm = warm_up(plans)
    if warm.programs:
        console.print(warm.describe(), highlight=False)
    return warm


# `search` flags that say what a search trains and how (its spec and options), by their argparse dest.
_RECORDED_FLAGS = {
    "cpus_per_trial": "--cpus-per-trial",
    "cpus": "--cpus",
    "address": "--address",
    "max_concurrent": "--max-concurrent",
    "max_trials": "--max-trials",
    "compile_cache": "--compile-cache",
    "compile_ahead": "--compile-ahead",
    "repeats": "--repeats",
    "synthetic": "--synthetic",
    "retries": "--retries",
    "keep_ray_logs": "--keep-ray-logs",
    "execution": "--execution",
}
_GPU_FLAGS = {"gpus_per_trial": "--gpus-per-trial", "gpus": "--gpus"}


def _resume_arguments(args: argparse.Namespace, device: str) -> list[str]:
    """This search's spec and options as `search` arguments, for its parent run: `search --resume RUN_ID` alone
    parses them again (paths made absolute, the backend as chosen by flag or $KERAS_BACKEND; no store)."""
    from pathlib import Path

    from gridbench.gridsearch import backends
    from gridbench.spec import EXPERIMENTS_DIR, resolve_experiment_path

    path = resolve_experiment_path(args.experiment)
    in_experiments = path.resolve().parent == EXPERIMENTS_DIR.resolve()
    arguments = [path.stem if in_experiments else str(path.resolve()), "--device", device]
    backend = backends.parse_flag(args.backend).get(device) or os.environ.get("KERAS_BACKEND")
    if backend:
        arguments += ["--backend", backend]
    defaults = build_parser().parse_args(["search", "x"])
    flags = {**_RECORDED_FLAGS, **(_GPU_FLAGS if device == "gpu" else {})}
    if args.prestart_workers is not None:  # how this search's workers started: its resumed sessions start them so
        arguments.append("--prestart-workers" if args.prestart_workers else "--no-prestart-workers")
    for dest, flag in flags.items():
        value = getattr(args, dest)
        if value is True:
            arguments.append(flag)
        elif value not in (None, False) and value != getattr(defaults, dest):
            arguments += [flag, str(value)]
    if args.data_dir:
        arguments += ["--data-dir", str(Path(args.data_dir).resolve())]
    for item in args.sets:
        arguments += ["--set", item]
    for item in args.grids:
        arguments += ["--grid", item]
    return arguments


def _recorded_search(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str]):
    """`search --resume RUN_ID` without an experiment: the spec and options its parent run recorded, then the
    flags given here (which the plan must then agree with, as for any --resume)."""
    from gridbench.gridsearch.resume import LATEST, recorded_arguments
    from gridbench.spec import available_experiments

    if args.resume in available_experiments() or str(args.resume).endswith(".toml"):
        args.experiment, args.resume = args.resume, LATEST  # `search --resume digits`: the experiment's latest
        return args
    if args.resume is None:
        raise UserError("search: give an experiment (see `gridbench list`), or --resume RUN_ID to continue a search")
    if args.resume == LATEST:
        raise UserError(
            "--resume alone continues the latest unfinished search of an experiment: give it "
            "(gridbench search EXPERIMENT --resume), or give the search's run id (gridbench search --resume RUN_ID)"
        )
    recorded = recorded_arguments(args.tracking_uri, args.resume)
    given = argv[argv.index("search") + 1 :]
    return parser.parse_args(["search", *recorded, *given])


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
        trial_timeout_s=args.trial_timeout,
        **_shared_options(args),
    )


def _add_compile_cache(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--compile-cache",
        choices=compile_cache.SETTINGS,
        default=compile_cache.DEFAULT,
        help="JAX backend only (TensorFlow and torch searches compile no cached programs; it does not apply): "
        "the compiled programs are kept across searches in ~/.cache/gridbench/jax ($GRIDBENCH_CACHE_DIR, bounded "
        "by $GRIDBENCH_CACHE_MAX_MB; persistent, the default); compiled once per search, as on a fresh machine "
        "(search); or compiled by every worker anew (off)",
    )
    command.add_argument(
        "--no-compile-cache", dest="compile_cache", action="store_const", const="off", help="--compile-cache off"
    )
    command.add_argument(
        "--compile-ahead",
        choices=compile_cache.AHEAD_SETTINGS,
        default=compile_cache.AHEAD_AUTO,
        help="JAX backend only (not TensorFlow or torch): compile the programs in processes of their own while Ray "
        "starts: on a GPU, and on a CPU of 8 cores or more (auto, the default); always (on); or in each "
        "program's first trial (off)",
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
        # Unset: SearchOptions' default.
        **({} if args.prestart_workers is None else {"prestart_workers": args.prestart_workers}),
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
        where = "while Ray started" if not options.address else "while joining the cluster"
        console.print(f"{checked} (a CPU subprocess, {where})", highlight=False)
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
    from gridbench.tracking.stored_searches import is_pilot

    uri = resolve_tracking_uri(args.tracking_uri)
    check_store_exists(uri)
    if bool(args.run_ids) == bool(args.experiment):
        raise UserError("give two or more search run ids, or --experiment NAME (not both)")
    run_ids = args.run_ids or latest_searches(uri, args.experiment)
    if any(is_pilot(uri, run_id) for run_id in run_ids):
        _pilot_report(run_ids, uri, args, strict=True)
        return 0
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 160)
    _compare_and_report(console, run_ids, uri, args)
    return 0


def _compare_and_report(console, run_ids: list[str], tracking_uri: str, args: argparse.Namespace) -> None:
    """Reads the searches, compares them, prints the result and logs it to MLflow as its own run (unless --no-log);
    the verdict comes last."""
    from pathlib import Path

    from gridbench.comparison import artifacts as compare_artifacts
    from gridbench.comparison import report as compare_report
    from gridbench.comparison.prices import PriceTable
    from gridbench.comparison.projection import parse_sizes
    from gridbench.comparison.recorded import compare_runs, record_comparison

    prices = PriceTable.load(args.prices, args.price)
    sizes = parse_sizes(args.project, getattr(args, "max_trials", None) or 10_000)
    if len(run_ids) == 1 and sizes:
        _project_one(run_ids[0], tracking_uri, prices, sizes, args)
        return
    if len(run_ids) < 2:
        raise UserError(
            "compare needs at least two searches, or one with --project (e.g. --project epochs=20); give run ids "
            "or --experiment NAME"
        )
    comparison = compare_runs(tracking_uri, run_ids, prices, args.target, args.allow_mismatch, project=sizes,
                              refuse_unprojectable=args.command == "compare")  # fmt: skip
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
    for line in _pilot_checks(comparison, tracking_uri, args):
        print(line, file=out)
    for verdict in comparison.verdicts:  # the answer, last
        print(verdict.text, file=out)


def _pilot_checks(comparison, tracking_uri: str, args: argparse.Namespace) -> list[str]:
    """For each search a pilot projected (the same search, device and host), that projection against it."""
    from gridbench.comparison import pilot, spread
    from gridbench.comparison.pairing import search_price
    from gridbench.comparison.prices import PriceTable
    from gridbench.tracking.stored_searches import pilots_for

    prices, found = PriceTable.load(args.prices, args.price), []
    for search in comparison.searches:
        for earlier in pilots_for(tracking_uri, search)[:1]:  # the newest
            projected = pilot.project(earlier, search_price(earlier, prices), spread.run_to_run(earlier))
            if not isinstance(projected, str):
                found.append(pilot.check(projected, search))
    return found


def _project_one(run_id: str, tracking_uri: str, prices, sizes, args: argparse.Namespace) -> None:
    """compare RUN --project SIZE: one search's own time and cost at another size, projected."""
    import json

    from gridbench.comparison import spread, verdict
    from gridbench.comparison.pairing import search_price
    from gridbench.comparison.projection import project_search
    from gridbench.tracking import earlier_runs, read_search

    search = read_search(tracking_uri, run_id)
    projected = project_search(
        search, search_price(search, prices), spread.run_to_run(search, earlier_runs(tracking_uri, search)), sizes
    )
    if args.output_format == "json":
        print(json.dumps({**projected.to_dict(), "verdict": verdict.of_search(projected)}, indent=1))
        return
    print(
        f"{search.label}: makespan {search.metrics.get('makespan_s', 0.0):.1f} s as run; projected to "
        f"{', '.join(f'{k} {v}' for k, v in projected.size.items())}: a model, not a measurement "
        f"(interval: the trials' spread and {projected.spread.describe()})"
    )
    print(verdict.of_search(projected))


def _compare_view_line(comparison, tracking_uri: str) -> str:
    """The link to MLflow's compare view of the searches, and where it expects the UI."""
    from gridbench.tracking import ui
    from gridbench.tracking.commands import ui_command

    base = ui.ui_base(tracking_uri)
    searches = comparison.searches
    url = ui.compare_runs_url(base, [s.run_id for s in searches], [s.experiment_id for s in searches])
    served = base == tracking_uri.rstrip("/")
    where = "" if served else f" (with `{ui_command(tracking_uri)}` running)"
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
    """The experiments (and examples), whether each runs offline, and the models, in the terminal's width
    (80 columns where it is not a terminal): long text wrapped, never cut."""
    import shutil
    from pathlib import Path

    from rich.console import Console

    from gridbench.datasets.find import on_disk
    from gridbench.spec import EXPERIMENTS_DIR, available_experiments, load_spec
    from gridbench.tables import Column, fitted
    from gridbench.workloads import WORKLOADS

    width = max(60, shutil.get_terminal_size((80, 24)).columns) if sys.stdout.isatty() else 80
    examples = sorted((EXPERIMENTS_DIR.parent / "examples").glob("*.toml"))
    specs = [load_spec(name) for name in [*available_experiments(), *(_shortest_path(p) for p in examples)]]
    names = [
        spec.name if Path(spec.source).parent == EXPERIMENTS_DIR else _shortest_path(spec.source) for spec in specs
    ]
    offline = ["yes" if s.user_data is not None or on_disk(s.dataset) else f"no ({s.dataset})" for s in specs]
    columns = [
        Column("experiment", names, key=True, justify="left"),
        Column("offline", offline, justify="left"),
        Column("configs", [str(spec.grid_size) for spec in specs]),
        Column("model", [spec.model for spec in specs], justify="left"),
    ]
    console = Console(width=width, highlight=False)
    for table in fitted("experiments/ and examples/", columns, width):
        console.print(table)
    print(_wrapped("offline no: its first search downloads the dataset through Keras (or give --data-dir)", width))
    print("\nWhat each trains, and its grid (axis(values)):")
    for name, spec in zip(names, specs):
        axes = " x ".join(f"{axis}({len(values)})" for axis, values in spec.grid.items()) or "no grid"
        print(_wrapped(f"{name}: {spec.description}; {axes}", width, "  ", "      "))
    print("\nModels, their datasets, and the hyperparameters --set and --grid take:")
    own = [spec.workload for spec in specs if spec.user_model is not None]
    for workload in [*WORKLOADS.values(), *own]:
        datasets = f" [{', '.join(workload.datasets)}]" if workload.name in WORKLOADS else ""
        names_ = ", ".join(hp.name for hp in workload.hyperparameters)
        print(_wrapped(f"{workload.name}{datasets}: {workload.description}; {names_}", width, "  ", "      "))
    return 0


def _shortest_path(path) -> str:
    """A file's path as a command here takes it: relative to this directory, or absolute where that is shorter."""
    return min(os.path.relpath(path), os.path.abspath(path), key=len)


def _wrapped(text: str, width: int, first: str = "", rest: str = "") -> str:
    import textwrap

    return textwrap.fill(text, width, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False)


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command not in ("search", "scale"):
            collector.resume_after_startup()  # only a search's start-up runs without the collector
        if args.command == "search" and args.experiment is None:
            args = _recorded_search(parser, args, list(sys.argv[1:] if argv is None else argv))
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

    collector.pause_for_startup()  # until the search has started: this process is gridbench's own
    code = main()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
