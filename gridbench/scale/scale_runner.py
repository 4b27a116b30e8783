"""Scale: one grid searched at several resource counts, and what each count bought.

    spec -> one search per count (GPUs or cores; every plan checked first) -> ScaleRows -> summary run

Each search is an ordinary search (its own MLflow parent run, tagged with the scale
it belongs to); the summary run links them and holds the table and the curve. The
arithmetic here is pure, so that it can be tested without Ray.
"""

from __future__ import annotations

import math
import statistics
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from gridbench import account, environment
from gridbench.errors import UserError
from gridbench.gridsearch import SearchOptions, SearchPlan, placement, plan_search
from gridbench.spec import ExperimentSpec
from gridbench.tracking import schema
from gridbench.tracking.records import SearchSummary, TrialRecord


@dataclass(frozen=True)
class ScaleRow:
    """One resource count's search, and how it compares with the smallest count's."""

    count: int  # GPUs or cores the search could use
    run_id: str
    concurrency: int
    trials: int  # finished
    makespan_s: float
    throughput_per_h: float  # finished trials per hour of makespan
    speedup: float  # smallest count's makespan / this makespan
    efficiency: float  # speedup / (count / smallest count)
    trial_wall_median_s: float
    train_median_s: float  # the workload's training-time metric (steady epoch, fit_s)
    setup_median_s: float  # import + data + model build, per trial
    first_trial_s: float  # from the search's start to its first trial's: Ray starting, the first worker
    idle_s: float  # makespan x concurrency - sum of trial wall times, over concurrency: what ran no trial
    # Steady training / (makespan x concurrency): the value the count's search run records (schema.TRAINING_SHARE).
    training_share: float
    # The count's search's whole command in parts (gridbench.account.PARTS -> s); empty where not recorded.
    account: Mapping[str, float] = field(default_factory=dict)
    # As efficiency, from the searches' steady cost (their trials, without the one-off parts): NaN without accounts.
    efficiency_steady: float = float("nan")
    # Amdahl's law from the smallest count's account: the efficiency expected if only its steady part divided.
    efficiency_amdahl: float = float("nan")

    def to_dict(self) -> dict[str, Any]:
        """Its fields; NaN (nothing to divide by) as None, which JSON can hold."""
        return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in self.__dict__.items()}


def scale_rows(
    points: Sequence[tuple[int, str, SearchSummary, Sequence[TrialRecord]]], train_metric: str
) -> list[ScaleRow]:
    """`points`: (count, search run id, summary, trials), the smallest count first."""
    if not points:
        return []
    base_count, _, base_summary, _ = points[0]
    rows = []
    for count, run_id, summary, trials in points:
        finished = [t for t in trials if t.finished]
        speedup = base_summary.makespan_s / summary.makespan_s
        rows.append(
            ScaleRow(
                count=count,
                run_id=run_id,
                concurrency=summary.concurrency,
                trials=len(finished),
                makespan_s=summary.makespan_s,
                throughput_per_h=len(finished) / summary.makespan_s * 3600,
                speedup=speedup,
                efficiency=speedup / (count / base_count),
                trial_wall_median_s=_median(t.metrics.get(schema.TRIAL_WALL_S) for t in finished),
                train_median_s=_median(t.metrics.get(train_metric) for t in finished),
                setup_median_s=_median(
                    t.metrics.get(schema.IMPORT_S, 0.0) + t.metrics.get(schema.SETUP_S, 0.0) for t in finished
                ),
                first_trial_s=summary.time_to_first_trial_s,
                idle_s=summary.makespan_s - summary.ideal_makespan_s,
                training_share=summary.training_share,
                account=dict(summary.account),
                efficiency_steady=_steady_speedup(base_summary, summary) / (count / base_count),
                efficiency_amdahl=amdahl_efficiency(base_summary.account, base_summary.makespan_s, count / base_count),
            )
        )
    return rows


def parallel_fraction(parts: Mapping[str, float], makespan_s: float) -> float:
    """The share of a search's makespan that more trials at once divide: its steady part (gridbench.account).

    The one-off parts (start-up, compiling, the workers' start, the end) are paid once whatever the count;
    NaN where the search has no account.
    """
    if not parts or not makespan_s:
        return float("nan")
    return min(1.0, account.Account(**parts).steady_s / makespan_s)


def amdahl_efficiency(parts: Mapping[str, float], makespan_s: float, ratio: float) -> float:
    """Amdahl's law: the efficiency at `ratio` times the smallest count's resources, from its parallel fraction."""
    parallel = parallel_fraction(parts, makespan_s)
    speedup = 1.0 / ((1.0 - parallel) + parallel / ratio)
    return speedup / ratio


def projected_counts(rows: Sequence[ScaleRow], counts=(1, 2, 4, 8)) -> list[dict]:
    """Makespan and efficiency at `counts` by Amdahl's law from the smallest count; measured ones beside them."""
    base_row = rows[0]
    measured = {row.count: row for row in rows}
    out = []
    for count in sorted(set(counts) | set(measured)):
        if count < base_row.count:
            continue
        ratio = count / base_row.count
        efficiency = amdahl_efficiency(base_row.account, base_row.makespan_s, ratio)
        row = measured.get(count)
        out.append(
            {
                "count": count,
                "projected_makespan_s": base_row.makespan_s / (efficiency * ratio),
                "projected_efficiency": efficiency,
                "measured_makespan_s": row.makespan_s if row else None,
                "measured_efficiency": row.efficiency if row else None,
            }
        )
    return out


def _steady_speedup(base: SearchSummary, other: SearchSummary) -> float:
    if not base.account or not other.account:
        return float("nan")
    steady = account.Account(**other.account).steady_s
    return account.Account(**base.account).steady_s / steady if steady else float("nan")


def _median(values) -> float:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else float("nan")


@dataclass(frozen=True)
class ScaleRequest:
    resource: str  # "gpu" or "cpu": what the counts count
    counts: tuple[int, ...]
    data_parallel: bool = False  # each trial spreads over all `count` GPUs, trials one after another


def parse_counts(text: str, flag: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UserError(f"{flag} {text!r}: expected counts such as 1,2,4") from None
    if not counts or any(c <= 0 for c in counts) or list(counts) != sorted(set(counts)):
        raise UserError(f"{flag} {text!r}: give increasing positive counts such as 1,2,4")
    return counts


def plan_scale(spec: ExperimentSpec, template: SearchOptions, request: ScaleRequest) -> list[SearchPlan]:
    """One plan per count, all checked before any search runs.

    Each trial gets the same cores at every count (what the largest count allows),
    so that only the number of trials side by side changes between counts.
    """
    if request.resource == "gpu" and template.device != "gpu":
        raise UserError("--gpus counts need --device gpu; for cores use --device cpu --cpus 2,4,...")
    if request.resource == "cpu" and template.device != "cpu":
        raise UserError("--cpus counts need --device cpu; for GPUs use --device gpu --gpus 1,2,...")
    if template.address:
        raise UserError("scale runs on this machine's resources; --address is for search")
    largest = request.counts[-1]
    cpus_per_trial = template.cpus_per_trial
    if request.resource == "gpu":
        if request.data_parallel and template.gpus_per_trial is not None:
            raise UserError("--data-parallel gives each trial all the count's GPUs; drop --gpus-per-trial")
        share = 1.0 if template.gpus_per_trial is None else template.gpus_per_trial
        if cpus_per_trial is None:
            slots = 1 if request.data_parallel else placement.gpu_slots(largest, share)
            cpus_per_trial = max(1, environment.usable_cores() // max(1, slots))
        options = [
            replace(
                template,
                gpus=count,
                gpus_per_trial=float(count) if request.data_parallel else template.gpus_per_trial,
                cpus_per_trial=cpus_per_trial,
            )
            for count in request.counts
        ]
    else:
        if request.data_parallel:
            raise UserError("--data-parallel spreads a trial over GPUs; use it with --device gpu --gpus")
        options = [replace(template, cpus=count, cpus_per_trial=cpus_per_trial or 1) for count in request.counts]
    first = plan_search(spec, options[0])
    # The backend is chosen once (asking backends about GPUs takes seconds) and holds for every count.
    settled = replace(first.backend_choice, probe_s=0.0)
    return [first, *(plan_search(spec, replace(o, backend_choice=settled)) for o in options[1:])]


def new_scale_id() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class ScaleResult:
    spec: ExperimentSpec
    request: ScaleRequest
    scale_id: str
    rows: tuple[ScaleRow, ...]
    labels: dict[str, str]  # device, backend, packing: what every count shared
    order_plans: tuple[str, ...] = ()  # each later count's order, as planned (trial_order.Order); (): the grid's

    @property
    def train_metric(self) -> str:
        return self.spec.workload.train_metric


def run_scale(plans: Sequence[SearchPlan], request: ScaleRequest, observer_for=None) -> ScaleResult:
    """Runs the planned searches one after another (each on the resources of its count).

    With a persistent compile cache, every program is compiled first (gridbench.gridsearch.warmup), so that no
    count pays for compiling what the others load: the phase is in the first count's account.
    """
    from gridbench.gridsearch import run_search, trial_order
    from gridbench.gridsearch.warmup import warm_up

    scale_id = new_scale_id()
    points = []
    requested_at = time.time()
    warm = warm_up(plans)
    first_trials: Sequence[TrialRecord] = ()
    order_plans: tuple[str, ...] = ()
    for index, (count, plan) in enumerate(zip(request.counts, plans)):
        started_at = requested_at if index == 0 else time.time()  # a later count's start holds its order's planning
        observer = observer_for(plan) if observer_for else None
        tags = {schema.SCALE_ID: scale_id, f"{schema.SCALE_PREFIX}resource": request.resource}
        tags[schema.SCALE_COUNT] = str(count)
        order = trial_order.balanced(plan, first_trials, plan.concurrency) if first_trials else None
        if order:  # the first count measured every trial: the later ones share them out by those times
            plan = replace(plan, trial_order=order.points)
            tags[schema.TRIAL_ORDER] = trial_order.BALANCED
            tags[schema.TRIAL_ORDER_PLAN] = order.describe()
        if warm.programs:
            tags[schema.COMPILE_WARMUP] = warm.describe()
        result = run_search(
            plan,
            observer=observer,
            requested_at=started_at,
            extra_tags=tags,
            compile_warmup_s=warm.seconds if index == 0 else 0.0,
        )
        points.append((count, result.parent_run_id, result.summary, result.trials))
        order_plans += (f"{count}: {order.describe()}",) if order else ()
        if index == 0:
            first_trials = result.trials
    spec = plans[0].spec
    first = plans[0]
    labels = {
        "device": first.options.device,
        "backend": first.backend,
        "cpus_per_trial": str(first.cpus_per_trial),
        "gpus_per_trial": "count (data-parallel)" if request.data_parallel else f"{first.gpus_per_trial:g}",
        "execution": first.execution,
    }
    rows = tuple(scale_rows(points, spec.workload.train_metric))
    return ScaleResult(spec, request, scale_id, rows, labels, order_plans)
