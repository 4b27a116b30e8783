"""The command line: a thin layer over spec -> search -> report.

Start-up stays light: nothing here imports TensorFlow, Keras or Ray until a
command that needs them runs. A UserError becomes one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from gridbench.errors import UserError
from gridbench.workloads import BACKENDS, default_backend

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

    search = commands.add_parser("search", help="run an experiment's grid as Ray Tune trials, recorded in MLflow")
    search.add_argument("experiment", help="a name from experiments/ (see `gridbench list`) or a path to a .toml file")
    search.add_argument("--device", choices=("cpu", "gpu"), default="cpu", help="where trials train (default: cpu)")
    search.add_argument(
        "--backend",
        choices=tuple(BACKENDS),
        default=default_backend(),
        help="Keras backend (default: $KERAS_BACKEND, else tensorflow)",
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
    search.add_argument("--max-concurrent", type=int, metavar="N", help="at most N trials at once")
    search.add_argument(
        "--no-compile-cache",
        dest="compile_cache",
        action="store_false",
        help="compile every trial's JAX programs anew (default: once per search, shared by trials of one shape)",
    )
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
        "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="fix a hyperparameter"
    )
    search.add_argument(
        "--grid", dest="grids", action="append", default=[], metavar="KEY=V1,V2", help="make or replace a grid axis"
    )
    search.set_defaults(handler=_search)

    listing = commands.add_parser("list", help="list the experiments in experiments/")
    listing.set_defaults(handler=_list)
    return parser


def _load(args: argparse.Namespace):
    from gridbench.spec import load_spec, parse_assignments, parse_grid_overrides

    spec = load_spec(args.experiment)
    spec = spec.with_overrides(parse_assignments(args.sets, "--set"), parse_grid_overrides(args.grids))
    if args.repeats is not None:
        spec = spec.with_repeats(args.repeats)
    return spec


def _search(args: argparse.Namespace) -> int:
    from rich.console import Console

    from gridbench.report import SearchProgress, print_search
    from gridbench.search import SearchOptions, plan_search, run_search

    spec = _load(args)
    options = SearchOptions(
        device=args.device,
        backend=args.backend,
        cpus_per_trial=args.cpus_per_trial,
        gpus_per_trial=args.gpus_per_trial,
        gpus=args.gpus,
        max_concurrent=args.max_concurrent,
        compile_cache=args.compile_cache,
        tracking_uri=args.tracking_uri,
        data_dir=args.data_dir,
        command_line=shlex.join(["gridbench", *sys.argv[1:]]),
    )
    plan = plan_search(spec, options)
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 160)  # logs: keep the results table on one line per trial
    gpus = f", {plan.gpus_per_trial:g} GPU(s) per trial on {plan.gpus} GPU(s)" if plan.gpus else ""
    console.print(
        f"{spec.name}: {spec.grid_size} configurations x {spec.repeats} repeat(s) = {plan.trials_total} trials "
        f"on {options.device} ({options.backend}), {plan.cpus_per_trial} CPU(s) per trial{gpus}, "
        f"up to {plan.concurrency} at once; store {plan.tracking_uri}"
    )
    result = run_search(plan, observer=SearchProgress(console, spec.metric))
    print_search(console, result)
    # 1: the search ran, but not every trial finished (the failed ones are in MLflow).
    return 0 if result.summary.trials_finished == result.summary.trials_total else 1


def _list(args: argparse.Namespace) -> int:
    from gridbench.spec import available_experiments, load_spec

    rows = []
    for name in available_experiments():
        spec = load_spec(name)
        axes = " x ".join(f"{axis}({len(values)})" for axis, values in spec.grid.items()) or "-"
        rows.append((name, spec.dataset, spec.model, str(spec.grid_size), axes, spec.description))
    headers = ("experiment", "dataset", "model", "configs", "grid", "description")
    widths = [max(len(r[i]) for r in (headers, *rows)) for i in range(len(headers) - 1)]
    for row in (headers, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.handler(args)
    except UserError as err:
        print(f"gridbench: error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("gridbench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
