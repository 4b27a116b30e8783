"""Experiment specs: experiments/*.toml loaded into a validated, immutable record.

A spec names a dataset and a model, fixes some hyperparameters and lists grid axes
for others. Everything is checked here, before Ray, TensorFlow or MLflow start, so
bad input costs nothing and writes nothing.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping

from gridbench.errors import UserError
from gridbench.workloads import Value, Workload, get_workload
from gridbench.workloads.user_model import UserModel, is_model_reference, user_model

if TYPE_CHECKING:  # numpy: imported only for a user's own data
    from gridbench.datasets.user_data import UserData

EXPERIMENTS_DIR = Path(__file__).resolve().parent.parent / "experiments"

# Metrics a trial reports that a search can rank by, with their natural direction.
METRICS = {
    "test_accuracy": "max",
    "train_loss": "min",
    "steady_epoch_s": "min",
    "fit_s": "min",
    "trial_wall_s": "min",
}
_TOP_LEVEL_KEYS = (
    "description",
    "dataset",
    "model",
    "metric",
    "mode",
    "target",
    "seed",
    "repeats",
    "execution",
    "trial_timeout",
    "params",
    "grid",
)
_TOP_LEVEL_KEYS += ("hyperparameters",)  # a user's own model's (gridbench.workloads.user_model)


@dataclass(frozen=True)
class ExperimentSpec:
    name: str
    description: str
    dataset: str
    model: str
    params: Mapping[str, Value]  # fixed hyperparameters, defaults filled in
    grid: Mapping[str, tuple[Value, ...]]  # axis name -> values, in file order
    metric: str
    mode: str
    target: float | None  # the metric value "time to accuracy" waits for; None: not set
    seed: int
    repeats: int
    source: str  # the file it came from
    user_model: UserModel | None = None  # a user's own model (model = "package.module:build")
    user_data: UserData | None = None  # a user's own data (an .npz, a loader, arrays)
    # How the grid runs: "trials" (one Ray trial per configuration) or "fused" (gridbench.gridsearch.fusion).
    # How, not what: left out of to_dict and the hash, so that fused and unfused searches share a spec hash.
    execution: str = "trials"
    # Seconds a trial may run before it is stopped and recorded FAILED (kind timeout); None: no limit. How, not
    # what, as execution is: left out of to_dict and the hash. --trial-timeout overrides it.
    trial_timeout: float | None = None

    @property
    def workload(self) -> Workload:
        if self.user_model is not None:
            return self.user_model.workload
        return get_workload(self.model, self.source)

    @property
    def grid_size(self) -> int:
        size = 1
        for values in self.grid.values():
            size *= len(values)
        return size

    def configurations(self) -> list[dict[str, Value]]:
        """The grid's points, each with only its axis values, in a fixed order (sorted axes)."""
        axes = sorted(self.grid)
        return [dict(zip(axes, values)) for values in itertools.product(*(self.grid[a] for a in axes))]

    def to_dict(self) -> dict[str, Any]:
        declared = {"hyperparameters": self.user_model.declarations()} if self.user_model else {}
        return {
            **declared,
            "name": self.name,
            "description": self.description,
            "dataset": self.dataset,
            "model": self.model,
            "params": dict(self.params),
            "grid": {k: list(v) for k, v in self.grid.items()},
            "metric": self.metric,
            "mode": self.mode,
            "target": self.target,
            "seed": self.seed,
            "repeats": self.repeats,
        }

    @property
    def spec_hash(self) -> str:
        """A short hash of everything that defines the search (not where it came from)."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def with_overrides(
        self, sets: Mapping[str, str] = MappingProxyType({}), grids: Mapping[str, list[str]] = MappingProxyType({})
    ) -> ExperimentSpec:
        """`--set key=value` fixes a hyperparameter (removing its axis); `--grid key=a,b` makes or replaces an axis."""
        params = dict(self.params)
        grid = dict(self.grid)
        workload = self.workload
        for key, raw in sets.items():
            hp = workload.hyperparameter(key, "--set")
            params[key] = hp.coerce(raw, "--set")
            grid.pop(key, None)
        for key, raws in grids.items():
            hp = workload.hyperparameter(key, "--grid")
            grid[key] = _axis(hp, raws, "--grid")
            params.pop(key, None)
        return replace(self, params=MappingProxyType(params), grid=MappingProxyType(grid))

    def for_backend(self, backend: str, device: str) -> ExperimentSpec:
        """The spec as it runs on `backend` and `device` ("auto" choices resolved), so records name what ran."""
        params, grid = self.workload.for_backend(
            dict(self.params), dict(self.grid), backend, device, f"--backend {backend}"
        )
        return replace(self, params=MappingProxyType(params), grid=MappingProxyType(grid))

    def with_repeats(self, repeats: int) -> ExperimentSpec:
        return replace(self, repeats=_repeats(repeats, "--repeats"))

    def with_execution(self, execution: str) -> ExperimentSpec:
        return replace(self, execution=_execution(execution, "--execution"))


def _axis(hp, values: Any, where: str) -> tuple[Value, ...]:
    if not isinstance(values, list):
        raise UserError(f"{where}: grid axis {hp.name!r} must be a list of values, e.g. {hp.name} = [{hp.default!r}]")
    if not values:
        raise UserError(f"{where}: grid axis {hp.name!r} is empty; give it at least one value")
    coerced = tuple(hp.coerce(v, where) for v in values)
    if len(set(coerced)) != len(coerced):
        raise UserError(f"{where}: grid axis {hp.name!r} repeats a value: {list(coerced)}")
    return coerced


def _repeats(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UserError(f"{where}: repeats must be an integer > 0, got {value!r}")
    return value


def available_experiments() -> list[str]:
    return sorted(p.stem for p in EXPERIMENTS_DIR.glob("*.toml"))


def resolve_experiment_path(name_or_path: str) -> Path:
    """A name from experiments/ or a path to a TOML file."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.parent != Path("."):
        if not path.is_file():
            raise UserError(f"experiment file {name_or_path} does not exist")
        return path
    candidate = EXPERIMENTS_DIR / f"{name_or_path}.toml"
    if candidate.is_file():
        return candidate
    known = ", ".join(available_experiments()) or "(none)"
    raise UserError(f"unknown experiment {name_or_path!r}; known: {known} (or give a path to a .toml file)")


def load_spec(name_or_path: str) -> ExperimentSpec:
    path = resolve_experiment_path(name_or_path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        # The message already says "(at line L, column C)".
        raise UserError(f"{path}: invalid TOML: {err}") from None
    return parse_spec(data, name=path.stem, source=str(path), base_dir=str(path.resolve().parent))


def parse_spec(data: Mapping[str, Any], name: str, source: str, base_dir: str | None = None) -> ExperimentSpec:
    """`base_dir`: where a user's module and relative .npz path are looked for (the TOML's folder)."""
    unknown = sorted(set(data) - set(_TOP_LEVEL_KEYS))
    if unknown:
        raise UserError(f"{source}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(_TOP_LEVEL_KEYS)}")
    own_model = is_model_reference(data.get("model"))
    for key in ("dataset", "model"):
        if not isinstance(data.get(key), str) and not (own_model and data.get(key) is not None):
            raise UserError(f'{source}: {key} = "..." is required')
    own, own_data = None, None
    if own_model:
        own = user_model(data["model"], data.get("hyperparameters"), source, base_dir)
        workload = own.workload
        own_data = _user_data(data["dataset"], source, base_dir)
    elif "hyperparameters" in data:
        get_workload(data["model"], source)  # an unknown model is named as such first
        raise UserError(
            f'{source}: [hyperparameters] declares your own model\'s; set model = "package.module:build" '
            f"(model {data['model']!r} is built in: see `gridbench list`)"
        )
    else:
        workload = get_workload(data["model"], source)
    dataset = own_data.description if own_data else data["dataset"]
    if workload.datasets and dataset not in workload.datasets:
        raise UserError(
            f"{source}: dataset {dataset!r} is not available for model {workload.name!r}; "
            f"choose one of {', '.join(workload.datasets)}"
        )
    metric = data.get("metric", "test_accuracy")
    if metric not in METRICS:
        raise UserError(f"{source}: unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    mode = data.get("mode", METRICS[metric])
    if mode not in ("max", "min"):
        raise UserError(f'{source}: mode must be "max" or "min", got {mode!r}')
    target = data.get("target")
    if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float))):
        raise UserError(f"{source}: target must be a number (a value of {metric}), got {target!r}")
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UserError(f"{source}: seed must be an integer >= 0, got {seed!r}")

    raw_params = data.get("params", {})
    raw_grid = data.get("grid", {})
    for table, value in (("params", raw_params), ("grid", raw_grid)):
        if not isinstance(value, dict):
            raise UserError(f"{source}: [{table}] must be a table")
    both = sorted(set(raw_params) & set(raw_grid))
    if both:
        raise UserError(f"{source}: {', '.join(both)} appear(s) in both [params] and [grid]; keep one")
    grid = {key: _axis(workload.hyperparameter(key, source), values, source) for key, values in raw_grid.items()}
    params = {}
    for hp in workload.hyperparameters:
        if hp.name in raw_params:
            params[hp.name] = hp.coerce(raw_params[hp.name], source)
        elif hp.name not in grid:
            params[hp.name] = hp.default
    for key in raw_params:
        workload.hyperparameter(key, source)  # unknown keys are an error, not ignored

    return ExperimentSpec(
        name=name,
        description=str(data.get("description", "")),
        dataset=dataset,
        model=workload.name,
        user_model=own,
        user_data=own_data,
        params=MappingProxyType(params),
        grid=MappingProxyType(grid),
        metric=metric,
        mode=mode,
        target=None if target is None else float(target),
        seed=seed,
        repeats=_repeats(data.get("repeats", 1), source),
        source=source,
        execution=_execution(data.get("execution", "trials"), source),
        trial_timeout=trial_timeout(data.get("trial_timeout"), f"{source}: trial_timeout"),
    )


def _user_data(dataset: Any, source: str, base_dir: str | None):
    """A user's own data (an .npz, "module:function", a function, arrays), or None for a built-in dataset."""
    from gridbench.datasets.user_data import is_user_dataset, user_data

    return user_data(dataset, source, base_dir) if is_user_dataset(dataset) else None


def trial_timeout(value: Any, where: str) -> float | None:
    """Seconds > 0, or None (no timeout)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise UserError(f"{where} must be a number of seconds > 0, got {value!r}")
    return float(value)


# "trials": one Ray trial per configuration x repeat; "fused": gridbench.gridsearch.fusion.
EXECUTIONS = ("trials", "fused")


def _execution(value: Any, where: str) -> str:
    if value not in EXECUTIONS:
        raise UserError(f"{where}: execution must be one of {', '.join(EXECUTIONS)}, got {value!r}")
    return value


def parse_assignments(items: list[str], flag: str, allow_empty: bool = False) -> dict[str, str]:
    """["a=1", "b=x"] -> {"a": "1", "b": "x"}; the last of a repeated key wins."""
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not (value.strip() or allow_empty):
            raise UserError(f"{flag} {item!r}: expected KEY=VALUE, e.g. {flag} learning_rate=0.01")
        result[key.strip()] = value.strip()
    return result


def parse_grid_overrides(items: list[str]) -> dict[str, list[str]]:
    return {
        key: [v.strip() for v in value.split(",") if v.strip()]
        for key, value in parse_assignments(items, "--grid", allow_empty=True).items()
    }
