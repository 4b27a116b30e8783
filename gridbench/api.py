"""gridbench from Python: search, compare, and specs built in code.

    import gridbench
    result = gridbench.search("examples/digits-cnn.toml", device="cpu", grid={"filters": [8, 16]})
    result.to_pandas()             # one row per trial
    gridbench.compare(cpu_result, gpu_result).to_pandas()

The same planner and runner as the command line; errors are gridbench.UserError (a search
that a signal or a full disk stopped raises its subclass SearchStoppedError), and nothing is
printed unless progress=True. What a search changes in the caller's process (environment
variables, signal handlers) is put back when it returns.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from gridbench.errors import SearchOutOfSpaceError, SearchStoppedError, UserError

if TYPE_CHECKING:
    import pandas

    from gridbench.comparison.pairing import Comparison
    from gridbench.gridsearch.plan import SearchOptions
    from gridbench.gridsearch.search_runner import SearchResult
    from gridbench.spec import ExperimentSpec


@dataclass(frozen=True)
class Spec:
    """An experiment built in Python: the model function and the data may be given directly.

    `model`: a function `build(hp) -> keras.Model` (uncompiled, ending in a softmax), or
    "package.module:build". `dataset`: four arrays (x_train, y_train, x_test, y_test) as a
    tuple or mapping, a function returning them, an .npz path, "package.module:load", or a
    built-in dataset's name. `hyperparameters`: the model's own, as in a TOML's
    [hyperparameters] table: {"filters": {"type": "int", "default": 32, "min": 1}}.
    """

    model: Any
    dataset: Any
    hyperparameters: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    grid: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    name: str = "python"
    description: str = ""
    metric: str = "test_accuracy"
    mode: str | None = None
    target: float | None = None
    seed: int = 0
    repeats: int = 1

    def to_experiment(self) -> ExperimentSpec:
        """The checked, immutable spec (raises UserError)."""
        from gridbench.spec import parse_spec

        data = {
            "model": self.model,
            "dataset": self.dataset,
            "description": self.description,
            "metric": self.metric,
            "seed": self.seed,
            "repeats": self.repeats,
            "params": {k: _plain(v) for k, v in self.params.items()},
            "grid": {k: [_plain(x) for x in v] if isinstance(v, (list, tuple)) else v for k, v in self.grid.items()},
        }
        if self.hyperparameters:
            data["hyperparameters"] = {name: dict(declared) for name, declared in self.hyperparameters.items()}
        if self.mode is not None:
            data["mode"] = self.mode
        if self.target is not None:
            data["target"] = self.target
        return parse_spec(data, name=self.name, source=f"Spec {self.name!r}", base_dir=os.getcwd())


def _plain(value: Any) -> Any:
    """numpy scalars (np.int64(32)) as Python's, which the checks take."""
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, bytes)) else value


def load_spec(name_or_path: str) -> ExperimentSpec:
    """A spec from experiments/ by name, or from a TOML file (raises UserError)."""
    from gridbench.spec import load_spec as load

    return load(name_or_path)


# The command line's search flags, as keyword arguments of search().
_OPTION_NAMES = (
    "backend",
    "cpus_per_trial",
    "gpus_per_trial",
    "gpus",
    "cpus",
    "address",
    "max_concurrent",
    "max_trials",
    "compile_cache",
    "compile_ahead",
    "prestart_workers",
    "tracking_uri",
    "data_dir",
    "synthetic",
)


# The command line's flags as search()'s and compare()'s arguments: an error a Python caller reads names these.
_ARGUMENTS = {
    **{f"--{name.replace('_', '-')}": name for name in _OPTION_NAMES},
    "--device": "device",
    "--set": "params",
    "--grid": "grid",
    "--repeats": "repeats",
    "--target": "target",
    "--prices": "prices",
    "--price": "price",
    "--allow-mismatch": "allow_mismatch",
}
_WORDS = ("cpu", "gpu", "both", "tensorflow", "jax", "torch", "persistent", "search", "off", "auto", "on")
_VALUE = r"[-+]?\d[\w.+-]*|'[^']*'|[\w.]+=\S+?(?=[;:,)]?(?:\s|$))|" + "|".join(_WORDS)  # a number, 'text', k=v, a word
_FLAG = re.compile(rf"--[a-z][a-z-]*(?: (?:{_VALUE})\b)?")


def python_terms(message: str) -> str:
    """A UserError's message with the command line's flags as the Python arguments they stand for:
    "--device gpu: ...; use --device cpu" reads "device='gpu': ...; use device='cpu'"."""

    def argument(match: re.Match) -> str:
        flag, _, value = match.group(0).partition(" ")
        name = _ARGUMENTS.get(flag)
        if name is None:
            return match.group(0)
        if not value:
            return name
        if name in ("params", "grid") and "=" in value:
            key, _, given = value.partition("=")
            return f"{name}={{{key!r}: {given!r}}}"
        if re.fullmatch(r"[-+]?\d[\d.e+-]*", value) or value.startswith("'"):
            return f"{name}={value}"
        return f"{name}={value!r}"

    return _FLAG.sub(argument, message)


def _python_errors(function):
    """search() and compare() raise UserError in Python's terms (python_terms), not the command line's."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except UserError as err:
            raise UserError(python_terms(str(err))) from None

    return wrapper


@dataclass(frozen=True)
class Search:
    """What gridbench.search() returns: a finished search: its MLflow parent run, its trials and its summary figures."""

    result: SearchResult

    @property
    def run_id(self) -> str:
        """The MLflow parent run's id (what `compare` takes)."""
        return self.result.parent_run_id

    @property
    def tracking_uri(self) -> str:
        return self.result.plan.tracking_uri

    @property
    def experiment_name(self) -> str:
        return self.result.experiment_name

    @property
    def trials(self):
        return self.result.trials

    @property
    def summary(self) -> dict[str, float]:
        """The search's figures as recorded on its parent run: makespan, trials, overhead, best metric."""
        return self.result.summary.metrics()

    def to_pandas(self) -> pandas.DataFrame:
        """One row per trial: configuration, repeat, status, device, metrics (timings, accuracy), error."""
        import pandas

        from gridbench.tracking import schema

        axes = sorted(self.result.plan.spec.grid)
        rows = []
        for trial in self.result.trials:
            rows.append(
                {
                    **{axis: trial.config.get(axis) for axis in axes},
                    schema.PARAM_REPEAT: trial.repeat,
                    "status": trial.status.value,
                    "diverged": trial.diverged,  # FINISHED, but its loss became NaN or inf (diverged_epoch: when)
                    "device": trial.tags.get(schema.DEVICE_ACTUAL, trial.tags.get(schema.DEVICE_REQUESTED, "")),
                    **dict(trial.metrics),
                    "error": trial.error,
                    "trial_id": trial.trial_id,
                }
            )
        return pandas.DataFrame(rows)


def _stopped_error(stop: BaseException) -> SearchStoppedError:
    """The API's error for what stopped a search (gridbench.gridsearch.lifecycle.SearchStopped, a KeyboardInterrupt
    so that Ray Tune lets it through): the same one line the command line prints, as a UserError."""
    from gridbench.gridsearch.lifecycle import SearchOutOfSpace

    kind = SearchOutOfSpaceError if isinstance(stop, SearchOutOfSpace) else SearchStoppedError
    return kind(f"search {stop.report()}", stop.ended_by, stop.exit_code)


@contextlib.contextmanager
def _caller_process_restored():
    """The caller's environment variables and signal handlers, put back as they were once the search ends.

    A search sets variables for Ray, Tune and MLflow (docs/guide/python-api.md lists them and why) and
    installs its own SIGINT and SIGTERM handlers; Ray may install others. Handlers can be read and set
    from the main thread only: a search in another thread installs none.
    """
    environ = dict(os.environ)
    handlers = _signal_handlers()
    try:
        yield
    finally:
        for name in set(os.environ) - set(environ):
            del os.environ[name]
        for name, value in environ.items():
            if os.environ.get(name) != value:
                os.environ[name] = value
        for signum, handler in handlers.items():
            if signal.getsignal(signum) is not handler:
                with contextlib.suppress(OSError, ValueError):
                    signal.signal(signum, handler)


def _signal_handlers() -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    handlers = {}
    for signum in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):
            handler = signal.getsignal(signum)
            if handler is not None:  # None: set outside Python, and Python cannot set it back
                handlers[signum] = handler
    return handlers


def _restores_the_caller(api_function):
    """The API's contract with its caller (search and compare): what stopped a search raised as a UserError,
    and the caller's process as it was (see _caller_process_restored) however the call ends."""

    @functools.wraps(api_function)
    def restoring(*args, **kwargs):
        from gridbench.gridsearch.lifecycle import SearchStopped

        with _caller_process_restored():
            try:
                return api_function(*args, **kwargs)
            except SearchStopped as stop:
                raise _stopped_error(stop) from None

    return restoring


@_restores_the_caller
@_python_errors
def search(
    experiment_or_spec: str | ExperimentSpec | Spec,
    device: str = "cpu",
    params: Mapping[str, Any] | None = None,
    grid: Mapping[str, Sequence[Any]] | None = None,
    repeats: int | None = None,
    progress: bool = False,
    **options: Any,
) -> Search | tuple[Search, Search]:
    """Runs a search, recorded in MLflow as the command line's is; raises UserError before writing anything.

    `params` fixes hyperparameters (--set), `grid` makes or replaces axes (--grid);
    `options` are the command line's flags: tracking_uri, backend, cpus_per_trial, ...
    device="both" runs the CPU search, then the GPU search, and returns both.

    A search that a SIGINT (Ctrl-C) or SIGTERM stops raises SearchStoppedError, and one that a full disk
    stops SearchOutOfSpaceError, once its finished trials are recorded; both are UserErrors, never a
    KeyboardInterrupt. The environment variables and signal handlers a search sets (for Ray, Tune and
    MLflow, and to stop the search on a signal) are restored when it returns or raises.
    """
    from gridbench.gridsearch import plan_pair, plan_search, run_search

    spec = _experiment(experiment_or_spec)
    spec = spec.with_overrides(
        {k: _plain(v) for k, v in (params or {}).items()},
        {k: [_plain(x) for x in v] if isinstance(v, (list, tuple)) else v for k, v in (grid or {}).items()},
    )
    if repeats is not None:
        spec = spec.with_repeats(repeats)
    if device == "both":
        backend = options.pop("backend", None)
        backend = backend if isinstance(backend, Mapping) else {"cpu": backend, "gpu": backend}
        gpu_only = {k: options.pop(k) for k in ("gpus_per_trial", "gpus") if k in options}
        plans = plan_pair(
            spec,
            _options("cpu", {**options, "backend": backend.get("cpu")}),
            _options("gpu", {**options, **gpu_only, "backend": backend.get("gpu")}),
        )
        sessions = [None, None]
    else:
        from gridbench.gridsearch.ray_session import RaySession

        # As the command line does: Ray starts while the plan is checked (a user's model in its subprocess).
        session = RaySession(open_store_early=True)
        try:
            plans = (plan_search(spec, _options(device, options), session.start, session.planned, session.assumed),)
        except BaseException:
            session.stop()
            raise
        sessions = [session]
    runs = []
    for plan, session in zip(plans, sessions):
        observer = _progress(plan) if progress else None
        runs.append(Search(run_search(plan, observer=observer, session=session)))
    return tuple(runs) if device == "both" else runs[0]


def _experiment(experiment_or_spec: Any) -> ExperimentSpec:
    from gridbench.spec import ExperimentSpec

    if isinstance(experiment_or_spec, Spec):
        return experiment_or_spec.to_experiment()
    if isinstance(experiment_or_spec, ExperimentSpec):
        return experiment_or_spec
    if isinstance(experiment_or_spec, (str, os.PathLike)):
        return load_spec(os.fspath(experiment_or_spec))
    raise UserError(
        f"search() takes an experiment's name, a .toml path, gridbench.Spec(...) or load_spec(...); "
        f"got {type(experiment_or_spec).__name__}"
    )


def _options(device: str, options: Mapping[str, Any]) -> SearchOptions:
    from gridbench.gridsearch import SearchOptions

    unknown = sorted(set(options) - set(_OPTION_NAMES))
    if unknown:
        raise UserError(f"search(): unknown option(s) {', '.join(unknown)}; known: {', '.join(_OPTION_NAMES)}")
    given = {k: v for k, v in options.items() if v is not None}
    return SearchOptions(device=device, command_line=f"gridbench.search(device={device!r})", **given)


def _progress(plan):
    from rich.console import Console

    from gridbench.gridsearch.progress import SearchProgress

    return SearchProgress(Console(), plan.spec.metric, plan.spec.workload.train_metric)


@dataclass(frozen=True)
class ComparisonResult:
    """Speedups (per epoch, per trial, per search), time to accuracy and cost, as `gridbench compare` shows them."""

    comparison: Comparison
    run_id: str | None  # the comparison's own MLflow run; None when not recorded

    def to_dict(self) -> dict[str, Any]:
        import json

        from gridbench.comparison import report

        return json.loads(report.render(self.comparison, "json"))

    def to_pandas(self) -> pandas.DataFrame:
        """One row per searched configuration and timing: the per-configuration speedups with their intervals."""
        import io

        import pandas

        from gridbench.comparison import report

        return pandas.read_csv(io.StringIO(report.to_csv(self.comparison)))

    def to_markdown(self) -> str:
        from gridbench.comparison import report

        return report.markdown(self.comparison)


@_restores_the_caller
@_python_errors
def compare(
    *runs: str | Search,
    tracking_uri: str | None = None,
    target: float | None = None,
    prices: str | None = None,
    price: Mapping[str, float] | None = None,
    allow_mismatch: bool = False,
    record: bool = True,
    out: str | None = None,
) -> ComparisonResult:
    """Compares two or more searches (run ids or search() results; the first is the baseline).

    Recorded in MLflow as its own run, as `gridbench compare` does, unless record=False.
    """
    from gridbench.comparison.prices import PriceTable
    from gridbench.comparison.recorded import compare_runs, record_comparison
    from gridbench.tracking import resolve_tracking_uri
    from gridbench.tracking.store import check_store_exists

    if len(runs) < 2:
        raise UserError("compare() needs at least two searches: run ids or search() results")
    if tracking_uri is None:
        tracking_uri = next((r.tracking_uri for r in runs if isinstance(r, Search)), None)
    uri = resolve_tracking_uri(tracking_uri)
    check_store_exists(uri)
    run_ids = [r.run_id if isinstance(r, Search) else str(r) for r in runs]
    table = PriceTable.load(prices, [f"{k}={v}" for k, v in (price or {}).items()])
    comparison = compare_runs(uri, run_ids, table, target, allow_mismatch)
    run_id = None
    if record:  # the command line's path: a store that cannot take it says why, as a UserError here
        run_id, unlogged = record_comparison(comparison, run_ids, uri, out)
        if unlogged:
            why = unlogged.split("; the results above")[0]
            raise UserError(f"cannot log the comparison to {uri} ({why}); compare(..., record=False) does not log it")
    return ComparisonResult(comparison, run_id)


__all__ = ["ComparisonResult", "Search", "Spec", "compare", "load_spec", "search"]
