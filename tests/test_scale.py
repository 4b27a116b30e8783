"""Scale: the arithmetic of speedup and efficiency, the plans' checks, data parallelism, and a real run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from storereads import program_sources, trial_runs
from stores import new_store
from trainings import PROGRAMS, run_python

from gridbench import compile_cache
from gridbench.errors import UserError
from gridbench.gridsearch import SearchOptions
from gridbench.scale import ScaleRequest, parse_counts, plan_scale
from gridbench.scale.scale_runner import scale_rows
from gridbench.spec import load_spec
from gridbench.tracking import schema
from gridbench.tracking.records import SearchSummary, TrialRecord


def summary(makespan: float, concurrency: int, wall_sum: float, training_sum: float = 0.0) -> SearchSummary:
    return SearchSummary(8, 8, 0, concurrency, makespan, 5.0, 9.0, wall_sum, 0.9, training_sum_s=training_sum)


def trial(wall: float, epoch: float) -> TrialRecord:
    return TrialRecord(
        trial_id="t", config={"x": 1}, repeat=0, status="FINISHED", started_at=0.0, ended_at=wall,
        metrics={"trial_wall_s": wall, "steady_epoch_s": epoch, "import_s": 1.0, "setup_s": 0.5}, tags={},
    )  # fmt: skip


def test_speedup_efficiency_and_idle_time_follow_from_the_makespans():
    points = [
        (1, "a", summary(80.0, 1, 72.0, 16.0), [trial(9.0, 0.5)] * 8),
        (2, "b", summary(44.0, 2, 76.0, 16.0), [trial(9.5, 0.5)] * 8),
        (4, "c", summary(25.0, 4, 80.0, 19.2), [trial(10.0, 0.6)] * 8),
    ]
    rows = scale_rows(points, "steady_epoch_s")
    assert [r.count for r in rows] == [1, 2, 4] and [r.run_id for r in rows] == ["a", "b", "c"]
    assert rows[0].speedup == 1.0 and rows[0].efficiency == 1.0
    assert rows[1].speedup == pytest.approx(80 / 44) and rows[1].efficiency == pytest.approx(80 / 44 / 2)
    assert rows[2].efficiency == pytest.approx(0.8)
    assert rows[2].throughput_per_h == pytest.approx(8 / 25 * 3600)
    assert rows[2].idle_s == pytest.approx(25.0 - 80.0 / 4)  # makespan less the ideal
    assert rows[2].train_median_s == 0.6 and rows[2].setup_median_s == 1.5 and rows[2].first_trial_s == 9.0
    # Timed epochs over makespan x concurrency, as each search run records it.
    assert [r.training_share for r in rows] == pytest.approx([16 / 80, 16 / 88, 19.2 / 100])


@pytest.mark.parametrize("text", ["", "2,1", "1,1", "0,2", "a,b"])
def test_counts_must_be_increasing_positive_integers(text):
    with pytest.raises(UserError, match="--gpus"):
        parse_counts(text, "--gpus")


def test_core_counts_keep_each_trial_s_cores_and_check_the_machine():
    spec = load_spec("digits")
    plans = plan_scale(spec, SearchOptions(device="cpu"), ScaleRequest("cpu", (1, 2)))
    assert [p.cpus for p in plans] == [1, 2] and {p.cpus_per_trial for p in plans} == {1}
    assert [p.concurrency for p in plans] == [1, 2]
    with pytest.raises(UserError, match="--cpus 4096: this machine has"):
        plan_scale(spec, SearchOptions(device="cpu"), ScaleRequest("cpu", (1, 4096)))


def test_gpu_counts_need_gpus_and_data_parallelism_needs_jax_compiled():
    spec = load_spec("mnist")
    with pytest.raises(UserError, match="--data-parallel spreads a trial over GPUs"):
        plan_scale(spec, SearchOptions(device="cpu"), ScaleRequest("cpu", (1, 2), data_parallel=True))
    from gridbench.environment import visible_gpu_count

    if visible_gpu_count() == 0:
        with pytest.raises(UserError, match="no GPU is visible"):
            plan_scale(spec, SearchOptions(device="gpu", backend="jax"), ScaleRequest("gpu", (1, 2)))


def test_data_parallel_search_plans_are_refused_where_they_cannot_run(monkeypatch, fake_probes):
    from gridbench import environment
    from gridbench.gridsearch import plan_search

    monkeypatch.setattr(environment, "visible_gpu_count", lambda: 4)
    fake_probes.seeing.add("torch")
    mnist = load_spec("mnist").with_overrides({"batch_size": "128"})
    plan = plan_search(mnist, SearchOptions(device="gpu", backend="jax", gpus_per_trial=2, synthetic=True))
    assert plan.data_parallel and plan.spec.params["train_loop"] == "compiled" and plan.concurrency == 2
    with pytest.raises(UserError, match="needs a Keras model on --backend jax with train_loop=compiled"):
        plan_search(mnist, SearchOptions(device="gpu", backend="torch", gpus_per_trial=2, synthetic=True))
    with pytest.raises(UserError, match="batch_size 6 does not split evenly over 4 GPUs"):
        plan_search(
            load_spec("mnist").with_overrides({"batch_size": "6"}),
            SearchOptions(device="gpu", backend="jax", gpus_per_trial=4, synthetic=True),
        )


@pytest.mark.slow
def test_data_parallel_training_splits_each_batch_over_the_devices(kept_environ):
    """Two XLA host devices stand in for two GPUs: the same compiled loop, sharded by Keras' DataParallel."""
    results = {}
    for devices in (1, 2):
        flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}"  # conftest's too
        env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags}
        out = run_python(
            str(PROGRAMS / "data_parallel_trials.py"), capture_output=True, text=True, env=env, timeout=600
        )
        assert out.returncode == 0, out.stderr[-3000:]
        results[devices] = json.loads(out.stdout.splitlines()[-1])
    for name in ("mlp", "cnn"):
        single, parallel = results[1][name], results[2][name]
        assert single[:3] == ["FINISHED", None, "1"] and parallel[:3] == ["FINISHED", None, "2"]
        # Same global batch, same steps: the model learns alike (not bit for bit: reductions differ).
        assert parallel[3] > 0.85 and abs(parallel[3] - single[3]) < 0.05


def _measured_digits(walls: dict, repeats: int, extra_import=None) -> tuple[object, list[TrialRecord]]:
    """A digits plan of `repeats` repeats, and its trials as a first count measured them: wall `walls[(units, rate)]`
    plus 0.1 s a repeat (or `walls[(units, rate, repeat)]`), plus `extra_import(units, rate, repeat)` s of a
    worker's start; no epochs timed."""
    from types import SimpleNamespace

    plan = SimpleNamespace(spec=load_spec("digits").with_repeats(repeats), fused_groups=())
    trials = []
    for units, rate in dict.fromkeys(key[:2] for key in walls):
        for repeat in range(repeats):
            start = extra_import(units, rate, repeat) if extra_import else 0.0
            wall = walls.get((units, rate, repeat), walls.get((units, rate), 0.0) + repeat * 0.1) + start
            metrics = {schema.TRIAL_WALL_S: wall, schema.IMPORT_S: start}
            trials.append(TrialRecord(f"{units}-{rate}-{repeat}", {"hidden_units": units, "learning_rate": rate},
                                      repeat, "FINISHED", metrics, {}, 0.0, wall))  # fmt: skip
    return plan, trials


def _as_tune_starts_them(order, seconds_of) -> list[float]:
    """Each slot's busy seconds where, as in Tune, each slot as it frees takes the next point of `order`."""
    import heapq

    free = [(0.0, slot) for slot in range(order.slots)]
    for point in order.points:
        at, slot = heapq.heappop(free)
        heapq.heappush(free, (at + seconds_of(point), slot))
    return sorted(at for at, _ in free)


def test_one_slot_starts_the_longest_trials_first_by_their_own_times_at_the_first_count():
    from types import SimpleNamespace

    from gridbench.gridsearch.trial_order import balanced

    walls = {(32, 0.001): 3.0, (32, 0.01): 9.0, (128, 0.001): 5.0, (128, 0.01): 1.0}
    # The (128, 0.01) trial paid its worker's 20 s start: its own time is still the shortest. These trials time no
    # epochs, so their own time is their wall less the worker's start and the setup.
    plan, trials = _measured_digits(walls, 2, lambda u, r, k: 20.0 if (u, r, k) == (128, 0.01, 0) else 0.0)
    order = balanced(plan, trials, 1)
    assert [(p["hidden_units"], p["learning_rate"], p["repeat"]) for p in order.points] == [
        (32, 0.01, 1), (32, 0.01, 0), (128, 0.001, 1), (128, 0.001, 0), (32, 0.001, 1),
        (32, 0.001, 0), (128, 0.01, 1), (128, 0.01, 0)]  # fmt: skip
    assert order.fullest_s == order.longest_first_s == pytest.approx(2 * (9 + 5 + 3 + 1) + 4 * 0.1)
    # A trial not measured (failed at the first count): the grid's order stays.
    assert balanced(plan, [replace(trials[0], status="FAILED"), *trials[1:]], 1) is None
    assert balanced(SimpleNamespace(spec=plan.spec, fused_groups=((),)), trials, 1) is None
    # Where epochs are timed, they and the evaluation are the trial's own time, whatever its wall held besides.
    timed = [replace(t, metrics={**t.metrics, schema.TRAIN_EPOCHS_S: 10.0 - i, schema.EVAL_S: 0.5})
             for i, t in enumerate(trials)]  # fmt: skip
    assert [(p["hidden_units"], p["learning_rate"], p["repeat"]) for p in balanced(plan, timed, 1).points][:2] == [
        (32, 0.001, 0), (32, 0.001, 1)]  # fmt: skip


def test_several_slots_end_together_where_longest_first_leaves_one_slot_running_alone():
    from gridbench.gridsearch.trial_order import balanced

    # 4 configurations x 4 repeats, timed as the 300-epoch MNIST grid's 16 trials at 1 GPU on 4 H200s
    # (around-training/h200x4-f361cd3/scale/a-on-walls.txt): longest first, the fullest of 4 slots runs 1.25 s past
    # their mean; the best share, 0.03 s (by HiGHS).
    measured_walls = [7.652, 3.817, 7.259, 4.364, 9.488, 6.033, 16.07, 10.56,
                      6.319, 3.706, 7.21, 4.307, 9.436, 6.037, 16.1, 10.49]  # fmt: skip
    keys = [(units, rate, repeat) for units in (32, 128) for rate in (0.001, 0.01) for repeat in range(4)]
    plan, trials = _measured_digits(dict(zip(keys, measured_walls)), 4)
    # Each wall held 0.5 s of setup besides the trial's own time: a trial takes it in any slot, so the plan counts it.
    trials = [replace(t, metrics={**t.metrics, schema.SETUP_S: 0.5}) for t in trials]
    seconds = {(t.config["hidden_units"], t.config["learning_rate"], t.repeat): t.metrics[schema.TRIAL_WALL_S]
               for t in trials}  # fmt: skip

    def seconds_of(point):
        return seconds[(point["hidden_units"], point["learning_rate"], point["repeat"])]

    order = balanced(plan, trials, 4)
    ends = _as_tune_starts_them(order, seconds_of)
    mean = sum(seconds.values()) / 4
    assert ends[-1] == pytest.approx(order.fullest_s) and order.fullest_s < order.longest_first_s - 0.7
    assert ends[-1] - mean < 0.6
    assert order.planned_s > 0 and "planned in" in order.describe()


def test_a_share_is_improved_by_moves_and_swaps_out_of_its_fullest_slot():
    from gridbench.gridsearch.trial_order import fullest, longest_first_shares, share_out

    # Longest first and the largest differencing method both leave 10 s on one slot; swapping the 4 there for a 3
    # leaves 9 s on each.
    seconds = [5.0, 4.0, 3.0, 3.0, 3.0]
    assert fullest(longest_first_shares(seconds, 2), seconds) == 10.0
    shares = share_out(seconds, 2)
    assert fullest(shares, seconds) == 9.0 and sorted(i for share in shares for i in share) == [0, 1, 2, 3, 4]
    assert share_out([], 3) == [[], [], []]
    with pytest.raises(ValueError, match="at least 1"):
        share_out(seconds, 0)


@pytest.fixture(scope="module")
def scaled(tmp_path_factory) -> tuple[str, dict, Path]:
    """One real `scale` over 1 and 2 cores, read by the tests below: its store, its JSON report and its --out.
    Its trials' epochs differ 12x, so that the longest trials are not the grid's first."""
    tmp_path = tmp_path_factory.mktemp("scale")
    store, out = new_store(tmp_path), tmp_path / "out"
    env = {**os.environ, compile_cache.CACHE_DIR_ENV: str(tmp_path / "cache")}  # cold: the warm-up compiles
    result = subprocess.run(
        [sys.executable, "-m", "gridbench", "scale", "digits", "--cpus", "1,2", "--backend", "jax",
         "--set", "train_loop=compiled", "--grid", "epochs=2,24", "--grid", "learning_rate=0.01",
         "--tracking-uri", store,
         "--format", "json", "--out", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return store, json.loads(result.stdout), out


@pytest.mark.slow
def test_scale_over_cores_runs_each_count_and_links_them_in_mlflow(scaled):
    store, report, out = scaled
    rows = report["rows"]
    assert [r["count"] for r in rows] == [1, 2] and [r["concurrency"] for r in rows] == [1, 2]
    assert rows[0]["speedup"] == 1.0 and rows[1]["speedup"] == pytest.approx(
        rows[0]["makespan_s"] / rows[1]["makespan_s"]
    )
    assert all(r["trials"] == 4 for r in rows)
    assert sorted(p.name for p in out.iterdir()) == [
        "report.html",
        "scale.csv",
        "scale.json",
        "scale.md",
        "scaling.png",
    ]
    assert (out / "scaling.png").read_bytes()[:4] == b"\x89PNG"

    from mlflow import MlflowClient

    from gridbench.tracking import experiment_name

    client = MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name(experiment_name("digits")).experiment_id])
    searches = [r for r in runs if r.data.tags.get("gridbench.kind") == "search"]
    (summary_run,) = [r for r in runs if r.data.tags.get("gridbench.kind") == "scale"]
    assert sorted(s.data.tags["scale.count"] for s in searches) == ["1", "2"]
    assert {s.data.tags["scale.id"] for s in searches} == {report["scale_id"]}
    assert {s.data.tags["gridbench.scale_run"] for s in searches} == {summary_run.info.run_id}
    assert summary_run.data.tags["scale.runs"] == ",".join(r["run_id"] for r in rows)
    assert summary_run.data.metrics["efficiency_2"] == pytest.approx(rows[1]["efficiency"])
    artifacts = {a.path for a in client.list_artifacts(summary_run.info.run_id)}
    assert {"scaling.png", "scale.md", "scale.csv", "scale.json", "report.html"} <= artifacts


@pytest.mark.slow
def test_scale_compiles_every_program_before_its_counts_and_every_count_loads_them(scaled):
    uri = scaled[0]
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    (experiment,) = [e for e in client.search_experiments() if e.name.endswith("digits")]
    searches = client.search_runs([experiment.experiment_id], f"tags.`{schema.KIND}` = 'search'",
                                  order_by=["attributes.start_time ASC"])  # fmt: skip
    assert len(searches) == 2
    first, second = (s.data for s in searches)
    assert first.metrics[f"{schema.ACCOUNT_PREFIX}compile_warmup_s"] > 0
    assert second.metrics[f"{schema.ACCOUNT_PREFIX}compile_warmup_s"] == 0
    assert "program(s) compiled" in first.tags[schema.COMPILE_WARMUP]
    for run in searches:  # no count compiled: each loaded every program the warm-up had compiled
        assert program_sources(uri, run.info.run_id) == {"yes"}
        # A trial that got its program itself says where that time went: it read the executables the warm-up
        # saved (gridbench.workloads.saved_programs), with no tracing, lowering or backend step.
        trials = trial_runs(uri, run.info.run_id)
        loaded = [t.data.metrics for t in trials if t.data.tags[schema.PROGRAM_REUSED] == "no"]
        assert loaded
        for m in loaded:
            assert m[schema.PROGRAM_EXECUTABLE_READ_S] > 0
            assert m[schema.PROGRAM_TRACE_S] == m[schema.PROGRAM_LOWER_S] == m[schema.PROGRAM_BACKEND_S] == 0
            split = [m[metric] for metric in schema.PROGRAM_PHASE_METRICS.values()]
            assert sum(split) - m[schema.PROGRAM_CACHE_READ_S] <= m[schema.COMPILE_S]


@pytest.mark.slow
def test_the_second_count_starts_the_first_count_s_longest_trials_first(scaled):
    from mlflow import MlflowClient

    from gridbench.gridsearch.trial_order import BALANCED

    uri, report = scaled[0], scaled[1]
    first, second = (MlflowClient(uri).get_run(row["run_id"]) for row in report["rows"])
    assert schema.TRIAL_ORDER not in first.data.tags and second.data.tags[schema.TRIAL_ORDER] == BALANCED
    assert second.data.tags[schema.TRIAL_ORDER_PLAN].startswith("4 trials on 2 slot(s)")

    def key(run):
        return run.data.params["hidden_units"], run.data.params["epochs"]

    first_trials = trial_runs(uri, first.info.run_id)
    own = {key(t): t.data.metrics["train_epochs_s"] + t.data.metrics["eval_s"] for t in first_trials}
    longest = set(sorted(own, key=own.get, reverse=True)[:2])
    in_grid_order = {key(t) for t in sorted(first_trials, key=lambda t: t.info.start_time)[:2]}
    assert longest != in_grid_order  # else this test could not tell the two orders apart
    started = sorted(trial_runs(uri, second.info.run_id), key=lambda t: t.info.start_time)
    # Two at once: the two that started first are the first count's two longest (24 epochs each), where the grid's
    # order would start (2 epochs, 32 units) and (24 epochs, 32 units).
    assert {key(t) for t in started[:2]} == longest


def test_steady_efficiency_compares_the_counts_steady_cost_and_the_table_shows_each_count_s_account():
    from gridbench import account

    def with_account(makespan, concurrency, one_off, steady):
        parts = dict.fromkeys(account.PARTS, 0.0) | {"startup_s": one_off, "training_s": steady}
        return replace(summary(makespan, concurrency, 72.0), account=parts)

    points = [(1, "a", with_account(80.0, 1, 20.0, 60.0), []), (2, "b", with_account(52.0, 2, 20.0, 32.0), [])]
    rows = scale_rows(points, "steady_epoch_s")
    # As run: 80 / 52 over 2 GPUs = 77%; the trials alone: 60 / 32 over 2 = 94% (the one-off 20 s is paid at each).
    assert rows[1].efficiency == pytest.approx(80 / 52 / 2)
    assert rows[1].efficiency_steady == pytest.approx(60 / 32 / 2)
    assert math.isnan(scale_rows([(1, "a", summary(80.0, 1, 72.0), [])], "steady_epoch_s")[0].efficiency_steady)


def test_amdahl_predicts_each_count_from_the_smallest_count_s_account_and_projects_unmeasured_counts():
    from gridbench import account
    from gridbench.scale.scale_runner import amdahl_efficiency, projected_counts

    parts = dict.fromkeys(account.PARTS, 0.0) | {"startup_s": 10.0, "training_s": 60.0, "end_s": 2.0}
    # Makespan 70 s, of which the trials' steady 60 s divide: parallel fraction 6/7.
    assert amdahl_efficiency(parts, 70.0, 2) == pytest.approx(1 / ((1 / 7) + (6 / 7) / 2) / 2)
    base = replace(summary(70.0, 1, 72.0), account=parts)
    rows = scale_rows([(1, "a", base, []), (2, "b", replace(base, makespan_s=41.0), [])], "steady_epoch_s")
    assert rows[1].efficiency_amdahl == pytest.approx(amdahl_efficiency(parts, 70.0, 2))
    projected = {row["count"]: row for row in projected_counts(rows)}
    assert sorted(projected) == [1, 2, 4, 8]
    assert projected[2]["measured_makespan_s"] == 41.0 and projected[8]["measured_makespan_s"] is None
    assert projected[8]["projected_makespan_s"] == pytest.approx(10.0 + 60.0 / 8)  # the serial 10 s, 60 s / 8
