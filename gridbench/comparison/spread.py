"""Run-to-run spread: how much the same search varies from one run to the next on the same machine.

One run cannot see it. Its trials show their spread (trial to trial, epoch to epoch), but a
whole search run again on the same machine also moves as a block: on an H100 host the
one-off parts of the headline pair differed by 1.2-3.6 s between two runs, and the CPU's
pace by 11% (docs/results/run-spread.md). An interval that leaves this out misses the
next run. Two sources, the larger used:

- earlier runs of the same search in the store (same experiment, parameters, device, host,
  backend, placement and compile-cache state), when there are at least two besides this one;
- a measured floor per kind of device, gridbench/data/run_spread.toml, from searches run
  twice on a GPU machine (benchmarks/run_spread.py computes it from their raw output).

Pure arithmetic on records read back from the store.
"""

from __future__ import annotations

import math
import statistics
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from gridbench import account
from gridbench.tracking import schema
from gridbench.tracking.stored_searches import SearchRun

FLOORS = Path(__file__).resolve().parent.parent / "data" / "run_spread.toml"
PILOT_SPREAD = Path(__file__).resolve().parent.parent / "data" / "pilot_spread.toml"
MIN_HISTORY = 2  # earlier runs needed besides this one for a standard deviation worth using


@dataclass(frozen=True)
class Spread:
    """Standard deviations between runs of the same search: of its trials' steady cost (relative) and of its
    one-off parts (seconds)."""

    pace: float
    one_off_s: float
    source: str

    def describe(self) -> str:
        return f"run to run: pace {self.pace:.0%}, one-off parts {self.one_off_s:.1f} s ({self.source})"

    def to_dict(self) -> dict:
        return {"pace": self.pace, "one_off_s": self.one_off_s, "source": self.source}


def floor(device: str) -> Spread:
    """The measured floor for a kind of device (cpu, gpu)."""
    table = tomllib.loads(FLOORS.read_text())
    entry = table.get(device, table["cpu"])
    return Spread(float(entry["pace"]), float(entry["one_off_s"]), f"measured floor, {table['page']}")


def pilot_one_off(device: str) -> tuple[float, str]:
    """How far a pilot's one-off parts inside the makespan stand from its whole search's, relative (a standard
    deviation), and where that was measured: the whole search pays them in another order
    (gridbench/data/pilot_spread.toml)."""
    table = tomllib.loads(PILOT_SPREAD.read_text())
    return float(table.get(device, table["cpu"])["one_off"]), table["page"]


def same_search(search: SearchRun, other: SearchRun) -> bool:
    """Whether `other` is another run of the same search on the same machine, set up the same way."""
    keys = (schema.SPEC_NAME, schema.DEVICE, schema.HOST, schema.BACKEND, schema.EXECUTION, schema.CPUS_PER_TRIAL,
            schema.GPUS_PER_TRIAL, f"{schema.GPU_PREFIX}0.name", schema.TRIAL_ORDER)  # fmt: skip
    warm = [s.tags.get(schema.COMPILE_CACHE_STATE, "") == "empty" for s in (search, other)]
    return (
        other.run_id != search.run_id
        and all(search.tags.get(k) == other.tags.get(k) for k in keys)
        and dict(search.params) == dict(other.params)
        and warm[0] == warm[1]
        and search.metrics.get(schema.CONCURRENCY) == other.metrics.get(schema.CONCURRENCY)
    )


def from_history(search: SearchRun, earlier: Sequence[SearchRun]) -> Spread | None:
    """The spread among this run and earlier runs of the same search; None with fewer than MIN_HISTORY of them."""
    runs = [search, *(s for s in earlier if same_search(search, s))]
    accounts = [a for a in (account.Account.from_metrics(s.metrics) for s in runs) if a and a.steady_s > 0]
    if len(accounts) < MIN_HISTORY + 1:
        return None
    pace = statistics.stdev(math.log(a.steady_s) for a in accounts)
    one_off = statistics.stdev(a.one_off_s for a in accounts)
    return Spread(pace, one_off, f"{len(accounts) - 1} earlier runs of this search on this host")


def run_to_run(search: SearchRun, earlier: Sequence[SearchRun] = ()) -> Spread:
    """The larger of the history's spread and the measured floor, part by part, naming where each came from."""
    low = floor(search.tags.get(schema.DEVICE, "cpu"))
    seen = from_history(search, earlier)
    if seen is None:
        return low
    pace, one_off = max(seen.pace, low.pace), max(seen.one_off_s, low.one_off_s)
    return Spread(pace, one_off, f"the larger of {seen.source} and the {low.source}, part by part")
