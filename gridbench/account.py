"""Where a search's time went: the whole command split into named parts that add up to it.

    command start -> [compile warm-up] -> start-up -> [first trial ... last trial] -> end -> command end

The trials' window is shared out by what each trial's own clock measured (gridbench.trial):
its imports, its compiling, its epochs (the first one's excess over a steady epoch is
warm-up), the rest of the trial (setup, evaluation) and the gaps between trials (Tune's
scheduling, recording) as per-trial overhead. Whatever the first trial in each worker
process spent beyond what later trials spent is the worker's start (imports, device
initialisation, first allocations). With several trials at once, the trials' parts are
divided by the concurrency: the account is of wall time, as a user waits for it.

The parts partition the timeline, so they add up to the whole command by construction;
what the account claims is checked from outside (tests/test_compare_e2e.py). Pure
arithmetic: no Ray, no store.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping, Sequence

from gridbench.tracking import schema

# The parts, in the order they happen; the first four and the end are paid once per search.
PARTS = (
    "compile_warmup_s",
    "startup_s",
    "compile_s",
    "worker_start_s",
    "trial_overhead_s",
    "warmup_s",
    "training_s",
    "failed_s",
    "end_s",
)
ONE_OFF = ("compile_warmup_s", "startup_s", "compile_s", "worker_start_s", "end_s")
PART_LABELS = {
    "compile_warmup_s": "compile warm-up (before timed searches)",
    "startup_s": "start-up (command to first trial)",
    "compile_s": "compiling not hidden",
    "worker_start_s": "workers' start (imports, device)",
    "trial_overhead_s": "per-trial overhead",
    "warmup_s": "warm-up beyond a steady epoch",
    "training_s": "training (steady epochs)",
    "failed_s": "failed trials (their whole time)",
    "end_s": "end (last trial to exit)",
}


@dataclass(frozen=True)
class TrialTiming:
    """One Ray trial as its worker timed it (the members of a fused or grouped trial added up)."""

    worker: str  # host:pid of the worker process: its first trial pays the worker's start
    started_at: float  # Unix time
    ended_at: float
    wall_s: float
    import_s: float = 0.0
    compile_s: float = 0.0
    warmup_s: float = 0.0  # the first epoch's excess over a steady epoch
    training_s: float = 0.0  # the epochs at their steady time (or the workload's training metric)
    epochs: int = 0  # epochs per configuration; 0 where the workload has none
    failed: bool = False  # a FAILED trial: its whole time is the account's failed_s, none of its other parts

    @property
    def overhead_s(self) -> float:
        """Setup, evaluation, recording inside the trial: what is not imports, compiling or epochs."""
        return max(0.0, self.wall_s - self.import_s - self.compile_s - self.warmup_s - self.training_s)


def trial_parts(metrics: Mapping[str, float], train_metric: str = schema.STEADY_EPOCH_S) -> dict[str, float]:
    """A trial's own warm-up and training from its metrics; an unfinished trial trained nothing that counts."""
    epochs_sum = metrics.get(schema.TRAIN_EPOCHS_S)
    if epochs_sum is not None and schema.WARMUP_EPOCH_S in metrics and schema.STEADY_EPOCH_S in metrics:
        warmup = max(0.0, min(epochs_sum, metrics[schema.WARMUP_EPOCH_S] - metrics[schema.STEADY_EPOCH_S]))
        epochs = int(metrics.get(schema.STEADY_EPOCHS, 0)) + 1
        return {"warmup_s": warmup, "training_s": epochs_sum - warmup, "epochs": epochs}
    if train_metric != schema.STEADY_EPOCH_S and train_metric in metrics:  # e.g. kernel methods: fit_s
        return {"warmup_s": 0.0, "training_s": metrics[train_metric], "epochs": 0}
    return {"warmup_s": 0.0, "training_s": 0.0, "epochs": 0}


def _units(members: Sequence[tuple[str, float, float, Mapping[str, float]]]) -> list[tuple[str, list[int]]]:
    """The Ray trials among the records, as (worker, indices of its records), in the order they started.

    Records that share a worker and a start are the members of one fused or grouped trial.
    """
    units: dict[tuple[str, float], list[int]] = {}
    for index, (worker, started_at, *_) in enumerate(members):
        units.setdefault((worker, round(started_at, 3)), []).append(index)
    return sorted(((worker, indices) for (worker, _), indices in units.items()),
                  key=lambda unit: min(members[i][1] for i in unit[1]))  # fmt: skip


def _unit_timing(worker: str, records: Sequence[tuple], train_metric: str) -> TrialTiming:
    """One Ray trial from its members' records: their wall, compile and training are shares and add up; imports
    are the worker's, once. A record's optional fifth item is True for a FAILED trial: a unit with one failed."""
    parts = [trial_parts(record[3], train_metric) for record in records]
    return TrialTiming(
        worker=worker,
        started_at=min(r[1] for r in records),
        ended_at=max(r[2] for r in records),
        wall_s=sum(record[3].get(schema.TRIAL_WALL_S, 0.0) for record in records),
        import_s=max(record[3].get(schema.IMPORT_S, 0.0) for record in records),
        compile_s=sum(record[3].get(schema.COMPILE_S, 0.0) for record in records),
        warmup_s=sum(p["warmup_s"] for p in parts),
        training_s=sum(p["training_s"] for p in parts),
        epochs=max(p["epochs"] for p in parts),
        failed=any(len(record) > 4 and record[4] for record in records),
    )


def timings_of(
    members: Iterable[tuple[str, float, float, Mapping[str, float]]], train_metric: str
) -> list[TrialTiming]:
    """TrialTimings from (worker, started_at, ended_at, metrics[, failed]) records, one per Ray trial, in the order
    they started."""
    members = list(members)
    return [_unit_timing(worker, [members[i] for i in indices], train_metric) for worker, indices in _units(members)]


# One colour per part on every chart (the account's, and a trial's phases drawn in the same terms), from
# matplotlib's default cycle: the same part never changes colour from one chart to the next.
PART_COLOURS = {
    "compile_warmup_s": "#8c564b",
    "startup_s": "#7f7f7f",
    "compile_s": "#d62728",
    "worker_start_s": "#9467bd",
    "trial_overhead_s": "#bcbd22",
    "warmup_s": "#ff7f0e",
    "training_s": "#2ca02c",
    "end_s": "#17becf",
    "failed_s": "#e377c2",
    "eval_s": "#1f77b4",  # a trial's evaluation: its own colour in the trial's phases (the account counts it overhead)
}


@dataclass(frozen=True)
class Account:
    """The whole command in parts (seconds of wall time); they add up to `whole_command_s`."""

    compile_warmup_s: float
    startup_s: float
    compile_s: float
    worker_start_s: float
    trial_overhead_s: float
    warmup_s: float
    training_s: float
    end_s: float
    failed_s: float = 0.0  # FAILED trials' whole time (their share of the window, as the other trials' parts)

    @property
    def whole_command_s(self) -> float:
        return sum(self.parts().values())

    @property
    def one_off_s(self) -> float:
        """Paid once per search whatever its size: start-up, compiling, the workers' start, the end."""
        return sum(getattr(self, part) for part in ONE_OFF)

    @property
    def steady_s(self) -> float:
        """What the search costs where the one-off parts are already paid: its trials, at their steady cost."""
        return self.whole_command_s - self.one_off_s

    def parts(self) -> dict[str, float]:
        return {part: getattr(self, part) for part in PARTS}

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, float]) -> Account | None:
        """The account a search's parent run holds; None for a search recorded before it existed."""
        names = {part: schema.ACCOUNT_PREFIX + part for part in PARTS}
        later = ("compile_warmup_s", "failed_s")  # parts an older search's account lacks: 0 there
        if not all(name in metrics for part, name in names.items() if part not in later):
            return None
        return cls(**{part: float(metrics.get(name, 0.0)) for part, name in names.items()})


@dataclass(frozen=True)
class PerTrial:
    """One trial's slot-time with its worker's start taken out: what another trial like it would cost."""

    overhead_s: float  # its setup, evaluation, recording and its share of the gaps between trials
    warmup_s: float
    epoch_s: float  # its training per epoch (or per trial, where the workload has no epochs)


@dataclass(frozen=True)
class Breakdown:
    account: Account
    trials: tuple[PerTrial, ...]
    concurrency: int  # trials at once, as the account divides them


def _worker_excess(timings: Sequence[TrialTiming]) -> tuple[dict[int, float], dict[int, float]]:
    """For each worker's first trial: what it spent beyond the search's later trials (overhead, warm-up)."""
    firsts: dict[str, int] = {}
    for index, timing in enumerate(timings):
        firsts.setdefault(timing.worker, index)
    later = [t for i, t in enumerate(timings) if i not in firsts.values()]
    typical_overhead = statistics.median(t.overhead_s for t in later) if later else None
    typical_warmup = statistics.median(t.warmup_s for t in later) if later else None
    overhead, warmup = {}, {}
    for index in firsts.values():
        first = timings[index]
        overhead[index] = max(0.0, first.overhead_s - typical_overhead) if typical_overhead is not None else 0.0
        warmup[index] = max(0.0, first.warmup_s - typical_warmup) if typical_warmup is not None else 0.0
    return overhead, warmup


def per_trial(timings: Sequence[TrialTiming]) -> tuple[list[PerTrial], float, float]:
    """Each trial's slot-time with its worker's start taken out; and the workers' start (overhead, warm-up)."""
    overhead_excess, warmup_excess = _worker_excess(timings)
    trials = [
        PerTrial(
            overhead_s=t.overhead_s - overhead_excess.get(index, 0.0),
            warmup_s=t.warmup_s - warmup_excess.get(index, 0.0),
            epoch_s=t.training_s / t.epochs if t.epochs else t.training_s,
        )
        for index, t in enumerate(timings)
    ]
    return trials, sum(overhead_excess.values()), sum(warmup_excess.values())


@dataclass(frozen=True)
class TrialShare:
    """One recorded trial's wall time split into what it paid once and what another trial like it would cost."""

    worker_start_s: float  # its worker's imports and first-trial excess (0 for a worker's later trials)
    program_s: float  # compiling or loading its program from the cache (0 once the program is reused)
    steady_s: float  # the rest: setup, warm-up, epochs, evaluation
    worker_first: bool  # it was its worker's first trial

    @property
    def one_off_s(self) -> float:
        return self.worker_start_s + self.program_s


def trial_shares(
    members: Sequence[tuple[str, float, float, Mapping[str, float]]], train_metric: str
) -> list[TrialShare]:
    """Each record's wall time as one-off parts (the worker's start, the program's first use) and its steady cost,
    in the records' order: the account's own split (per_trial), shared equally among a fused trial's members."""
    # A record without its worker (host:pid unrecorded) cannot be told a worker's first: it stands alone.
    members = [(w if w.strip(":") else f"?{i}", *rest) for i, (w, *rest) in enumerate(members)]
    units = _units(members)
    timings = [_unit_timing(worker, [members[i] for i in indices], train_metric) for worker, indices in units]
    overhead_excess, warmup_excess = _worker_excess(timings)
    overhead_excess = {u: v for u, v in overhead_excess.items() if not units[u][0].startswith("?")}
    shares: list[TrialShare | None] = [None] * len(members)
    for unit, (_, indices) in enumerate(units):
        start = (
            timings[unit].import_s
            + overhead_excess.get(unit, 0.0)
            + warmup_excess.get(unit, 0.0) * (unit in overhead_excess)
        )
        for index in indices:
            metrics = members[index][3]
            worker_start, program = start / len(indices), metrics.get(schema.COMPILE_S, 0.0)
            steady = max(0.0, metrics.get(schema.TRIAL_WALL_S, 0.0) - worker_start - program)
            shares[index] = TrialShare(worker_start, program, steady, unit in overhead_excess)
    return shares


def with_gaps(trials: Sequence[PerTrial], gaps_s: float, slots: int) -> tuple[PerTrial, ...]:
    """The gaps between trials (wall seconds, with `slots` trials at once) shared out equally over the trials."""
    share = gaps_s * slots / len(trials) if trials else 0.0
    return tuple(PerTrial(t.overhead_s + share, t.warmup_s, t.epoch_s) for t in trials)


def account(
    timings: Sequence[TrialTiming],
    command_start: float,
    command_end: float,
    concurrency: int,
    precompile_wait_s: float = 0.0,
    compile_warmup_s: float = 0.0,
) -> Breakdown:
    """The account of a search from its trials' timings and the command's start and end (Unix times).

    `precompile_wait_s`: the trials' start waited that long for programs compiled ahead (a CPU search);
    `compile_warmup_s`: the command compiled every search's programs that long before this one started.
    """
    whole = max(0.0, command_end - command_start)
    warmup = min(max(0.0, compile_warmup_s), whole)
    if not timings:  # nothing ran: it was all start-up and end
        return Breakdown(Account(warmup, whole - warmup, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0), (), max(1, concurrency))
    slots = max(1, min(concurrency, len(timings)))
    first_start = min(t.started_at for t in timings)
    window = max(0.0, max(t.ended_at for t in timings) - first_start)
    wait = min(max(0.0, precompile_wait_s), max(0.0, first_start - command_start - warmup))
    failed = [t for t in timings if t.failed]  # their whole time is one part of its own, not overhead
    timings = [t for t in timings if not t.failed]
    trials, overhead_excess, warmup_excess = per_trial(timings)
    busy = {
        "compile_s": sum(t.compile_s for t in timings),
        "worker_start_s": sum(t.import_s for t in timings) + overhead_excess + warmup_excess,
        "trial_overhead_s": sum(t.overhead_s for t in trials),
        "warmup_s": sum(t.warmup_s for t in trials),
        "training_s": sum(t.training_s for t in timings),
        "failed_s": sum(t.wall_s for t in failed),
    }
    in_window = {part: seconds / slots for part, seconds in busy.items()}
    filled = sum(in_window.values())
    if filled > window > 0:  # clocks of several nodes disagree: share the window out in proportion
        in_window = {part: seconds * window / filled for part, seconds in in_window.items()}
    gaps = max(0.0, window - sum(in_window.values()))
    startup = max(0.0, first_start - command_start - warmup) - wait
    parts = Account(
        compile_warmup_s=warmup,
        startup_s=startup,
        compile_s=in_window["compile_s"] + wait,
        worker_start_s=in_window["worker_start_s"],
        trial_overhead_s=in_window["trial_overhead_s"] + gaps,
        warmup_s=in_window["warmup_s"],
        training_s=in_window["training_s"],
        end_s=max(0.0, whole - warmup - startup - wait - window),
        failed_s=in_window["failed_s"],
    )
    return Breakdown(parts, with_gaps(trials, gaps, slots), slots)


def one_line(parts: Account) -> str:
    """'start-up 8.2 s, compiling 0.4 s, ...' for a search's summary."""
    short = {
        "compile_warmup_s": "compile warm-up",
        "startup_s": "start-up",
        "compile_s": "compiling",
        "worker_start_s": "workers' start",
        "trial_overhead_s": "per-trial overhead",
        "warmup_s": "warm-up",
        "training_s": "training",
        "failed_s": "failed trials",
        "end_s": "end",
    }
    shown = {p: s for p, s in parts.parts().items() if p not in ("compile_warmup_s", "failed_s") or s}
    return ", ".join(f"{short[p]} {s:.1f} s" for p, s in shown.items())
