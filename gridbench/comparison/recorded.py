"""Searches compared and the comparison recorded: the one path `gridbench compare` (and `search --device both`)
and gridbench.compare() both take.

    compare_runs(uri, run_ids, prices, ...)  -> Comparison   (reads each search back from the store)
    record_comparison(comparison, ...)       -> (run id, None) or (None, why it could not be logged)
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from gridbench.comparison import artifacts
from gridbench.comparison.pairing import Comparison, compare
from gridbench.comparison.prices import PriceTable
from gridbench.errors import UserError


def compare_runs(
    tracking_uri: str,
    run_ids: Sequence[str],
    prices: PriceTable,
    target: float | None = None,
    allow_mismatch: bool = False,
    project=None,
    refuse_unprojectable: bool = False,
) -> Comparison:
    """The searches `run_ids` read back from the store and compared (the first is the baseline), each with the other
    runs of the same search in the store for its intervals' run-to-run spread. `refuse_unprojectable`: a `project`
    size that a pair cannot be projected to is a UserError (compare's bad input), else a note."""
    from gridbench.comparison.projection import asked_problem
    from gridbench.tracking import earlier_runs, read_search

    if len(run_ids) < 2:
        raise UserError("compare needs at least two searches; give two run ids or --experiment NAME")
    searches = [read_search(tracking_uri, run_id) for run_id in run_ids]
    history = {s.run_id: earlier_runs(tracking_uri, s) for s in searches}
    comparison = compare(
        searches, prices, target=target, allow_mismatch=allow_mismatch, project=project, history=history
    )
    problems = [p for pairing in comparison.pairings if (p := asked_problem(pairing.projection))] if project else []
    if problems and refuse_unprojectable:
        raise UserError(f"--project: cannot project {problems[0]}")
    return comparison


def record_comparison(
    comparison: Comparison, run_ids: Sequence[str], tracking_uri: str, out: str | None
) -> tuple[str | None, str | None]:
    """The comparison's MLflow run id, or None and why it could not be logged (a read-only store, a full disk).

    Its files are written to `out` either way, where given.
    """
    from gridbench.tracking.store import store_writable

    if not store_writable(tracking_uri):
        if out:  # its files are still written
            artifacts.write_files(comparison, Path(out), tracking_uri)
        return None, "the store is read-only here; the results above are complete"
    try:
        return artifacts.record(comparison, list(run_ids), tracking_uri, out), None
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - the store refused the write; the comparison itself stands
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        return None, f"{type(err).__name__}: {first[:120]}; the results above are complete"
