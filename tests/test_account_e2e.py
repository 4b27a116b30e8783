"""The account and the projection against real searches: measured from outside, then run at the projected size."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest

from gridbench import account
from gridbench.tracking import read_search, schema

pytestmark = pytest.mark.slow

# A CPU pair on this machine's cores: a trial on every core against one trial per core.
PAIR = (("--cpus-per-trial", "2", "--backend", "jax"), ("--cpus-per-trial", "1", "--backend", "jax"))


def timed_search(uri: str, cwd, epochs: int, extra) -> tuple[str, float]:
    """Runs `gridbench search digits` as a user would; returns its parent run id and its wall time from outside."""
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "gridbench", "search", "digits", "--set", f"epochs={epochs}", "--tracking-uri", uri,
         "--compile-cache", "off", *extra],
        capture_output=True, text=True, cwd=cwd, timeout=600,
    )  # fmt: skip
    wall = time.perf_counter() - start
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "where the whole command's" in result.stdout
    run_id = result.stdout.split("parent run ")[1].split()[0]
    return run_id, wall


def compare_json(uri: str, cwd, run_ids, *extra) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "gridbench", "compare", *run_ids, "--tracking-uri", uri, "--format", "json", *extra],
        capture_output=True, text=True, cwd=cwd, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def test_the_account_adds_up_to_the_command_and_a_projection_holds_when_the_larger_pair_runs(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    small = [timed_search(uri, tmp_path, 2, extra) for extra in PAIR]
    for run_id, wall in small:
        recorded = read_search(uri, run_id).metrics
        parts = account.Account.from_metrics(recorded)
        assert parts is not None and parts.whole_command_s == pytest.approx(recorded[schema.WHOLE_COMMAND_S])
        # What the parts add up to is the command as measured from outside it, within 2%.
        assert parts.whole_command_s == pytest.approx(wall, rel=0.02)
        assert min(parts.parts().values()) >= 0 and parts.training_s > 0 and parts.startup_s > 0

    projected = compare_json(uri, tmp_path, [r for r, _ in small], "--project", "epochs=6")
    (asked,) = [row for row in projected["projection"] if row["label"] == "asked (--project)"]
    large = [timed_search(uri, tmp_path, 6, extra)[0] for extra in PAIR]
    measured = compare_json(uri, tmp_path, large)
    errors = {}
    for index, search in enumerate(measured["searches"]):
        predicted = asked["searches"][index]["makespan_s"]["value"]
        errors[search["label"]] = predicted / search["makespan_s"] - 1
    speedup = measured["pairings"][0]["speedup_as_run"]
    errors["speedup"] = asked["speedup"]["value"] / speedup - 1
    print("projection errors:", errors)
    # A check of magnitude, not of the 15% the GPU validation meets (docs/results/h100-projection.md): on two cores
    # shared with the other test worker, one search's start-up and epochs swing by seconds between runs (seen in
    # CI: +7%, -29% and +50% on the speedup; alone: -14%, -2%, -13%; on a clean clone at 176e732, +117% on the
    # 1-core search's makespan and -51% on the speedup). Within a factor of 3 either way.
    assert all(abs(math.log1p(error)) <= math.log(3) for error in errors.values()), errors
