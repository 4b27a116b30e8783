"""The account of a search and its projection, on fixed numbers: parts that add up, sizes that scale."""

from __future__ import annotations

import json
import math

import pytest

from gridbench import account
from gridbench.comparison import compare, spread
from gridbench.comparison import report as compare_report
from gridbench.comparison.prices import PriceTable
from gridbench.comparison.projection import parse_sizes
from gridbench.errors import UserError
from gridbench.tracking import schema
from gridbench.tracking.memory_recorder import MemoryRecorder
from gridbench.tracking.records import SearchSummary, TrialRecord
from gridbench.tracking.schema import SearchStatus, TrialStatus

PRICES = PriceTable(cpu_core_hour=0.05, gpu_hour={"NVIDIA H100": 3.0}, source="test")


def timing(started, ended, wall, import_s=0.0, compile_s=0.0, warmup=0.0, training=0.0, epochs=4, worker="h:1"):
    return account.TrialTiming(worker, started, ended, wall, import_s, compile_s, warmup, training, epochs)


def three_trials():
    # The first trial imports (2 s), compiles (1 s) and warms up 0.8 s beyond a steady epoch; the later two 0.1 s.
    return [
        timing(110.0, 115.0, 5.0, import_s=2.0, compile_s=1.0, warmup=0.8, training=0.8),
        timing(115.5, 117.0, 1.4, warmup=0.1, training=0.8),
        timing(117.2, 118.7, 1.4, warmup=0.1, training=0.8),
    ]


def test_the_parts_add_up_to_the_whole_command_and_each_is_what_it_names():
    result = account.account(three_trials(), command_start=100.0, command_end=121.0, concurrency=1)
    parts = result.account
    assert parts.whole_command_s == pytest.approx(21.0)
    assert parts.startup_s == pytest.approx(10.0)  # command start to the first trial
    assert parts.compile_s == pytest.approx(1.0)
    # Imports, and the first trial's warm-up beyond the later trials' 0.1 s (its overhead, 0.4 s, was not more).
    assert parts.worker_start_s == pytest.approx(2.0 + 0.7)
    assert parts.warmup_s == pytest.approx(0.3)
    assert parts.training_s == pytest.approx(2.4)
    # The trials' own overhead (0.4 + 0.5 + 0.5) and the gaps between them (0.5 + 0.2) plus 0.2 s of rounding.
    assert parts.trial_overhead_s == pytest.approx(21.0 - 10.0 - 1.0 - 2.7 - 0.3 - 2.4 - 2.3)
    assert parts.end_s == pytest.approx(2.3)  # last trial's end to the command's
    assert parts.one_off_s == pytest.approx(10.0 + 1.0 + 2.7 + 2.3)
    assert parts.steady_s == pytest.approx(parts.trial_overhead_s + 0.3 + 2.4)


def test_per_trial_costs_leave_the_workers_start_out_and_share_the_gaps():
    result = account.account(three_trials(), command_start=100.0, command_end=121.0, concurrency=1)
    gaps = result.account.trial_overhead_s - 1.4
    assert [round(t.warmup_s, 6) for t in result.trials] == [0.1, 0.1, 0.1]
    assert [t.overhead_s for t in result.trials] == pytest.approx([0.4 + gaps / 3, 0.5 + gaps / 3, 0.5 + gaps / 3])
    assert [t.epoch_s for t in result.trials] == pytest.approx([0.2, 0.2, 0.2])


def test_trials_at_once_divide_the_trials_parts_and_the_account_still_adds_up():
    trials = [
        timing(10.0, 14.0, 4.0, import_s=1.0, training=2.0, worker="h:1"),
        timing(10.0, 14.0, 4.0, import_s=1.0, training=2.0, worker="h:2"),
        timing(14.0, 16.0, 2.0, training=2.0, worker="h:1"),
        timing(14.0, 16.0, 2.0, training=2.0, worker="h:2"),
    ]
    parts = account.account(trials, 0.0, 20.0, concurrency=2).account
    assert parts.training_s == pytest.approx(4.0)  # 8 s of training over 2 slots
    # Both workers at once: each imported (1 s) and its first trial's other 1 s is more than later trials spent.
    assert parts.worker_start_s == pytest.approx(2.0)
    assert parts.whole_command_s == pytest.approx(20.0)


def test_the_members_of_one_fused_trial_count_their_workers_imports_once():
    metrics = {schema.TRIAL_WALL_S: 2.0, schema.IMPORT_S: 3.0, schema.TRAIN_EPOCHS_S: 1.0,
               schema.WARMUP_EPOCH_S: 0.4, schema.STEADY_EPOCH_S: 0.2, schema.STEADY_EPOCHS: 3.0}  # fmt: skip
    (unit,) = account.timings_of([("h:1", 5.0, 9.0, metrics)] * 2, schema.STEADY_EPOCH_S)
    assert (unit.wall_s, unit.import_s, unit.warmup_s, unit.training_s, unit.epochs) == pytest.approx(
        (4.0, 3.0, 0.4, 1.6, 4)
    )


def test_a_wait_for_programs_compiled_ahead_counts_as_compiling_not_start_up():
    parts = account.account(three_trials(), 100.0, 121.0, 1, precompile_wait_s=4.0).account
    assert (parts.startup_s, parts.compile_s) == pytest.approx((6.0, 5.0))
    assert parts.whole_command_s == pytest.approx(21.0)


def test_a_search_whose_trials_never_ran_is_all_start_up():
    parts = account.account([], 100.0, 103.0, concurrency=4).account
    assert parts.startup_s == 3.0 and parts.whole_command_s == 3.0


# --- Projection, on searches recorded in the in-memory store ---------------------------------------------------------


def recorded(device: str, overhead: float, epoch: float, one_off: tuple[float, float, float], trials=8, epochs=4,
             failed=0, execution="trials"):  # fmt: skip
    """A search of `trials` identical trials (one at a time) recorded as a driver records one, account included."""
    startup, worker_start, end = one_off
    store = MemoryRecorder("mnist")
    tags = {"spec.name": "mnist", "dataset": "mnist", "model": "mlp", "backend": "jax", "metric": "test_accuracy",
            "metric.mode": "max", "device": device, "cpu.cores_usable": "16", "cpus_per_trial": "16",
            "gpus_per_trial": "1" if device == "gpu" else "0", "gpus_used": "1" if device == "gpu" else "0",
            "gpu.0.name": "NVIDIA H100 80GB HBM3", "data.synthetic": "false", "timing.train": "steady_epoch_s",
            "execution": execution}  # fmt: skip
    store.start("s", {"epochs": epochs, "grid.lr": json.dumps([str(i) for i in range(trials)]), "repeats": 1}, tags, {})
    clock, records = 1000.0 + startup, []
    for index in range(trials):
        first = index == 0
        wall = overhead + epochs * epoch + (worker_start if first else 0.0)
        metrics = {schema.TRIAL_WALL_S: wall, schema.IMPORT_S: worker_start if first else 0.0,
                   schema.TRAIN_EPOCHS_S: epochs * epoch, schema.WARMUP_EPOCH_S: epoch, schema.STEADY_EPOCH_S: epoch,
                   schema.STEADY_EPOCHS: epochs - 1.0}  # fmt: skip
        status = TrialStatus.FAILED if index < failed else TrialStatus.FINISHED
        record = TrialRecord(str(index), {"lr": str(index)}, 0, status, metrics, {"host": "h", "pid": "1"}, clock,
                             clock + wall)  # fmt: skip
        store.record_trial(record, {}, {})
        records.append(("h:1", record.started_at, record.ended_at, metrics))
        clock += wall
    store.parent.started_at = 1000.0
    breakdown = account.account(account.timings_of(records, schema.STEADY_EPOCH_S), 1000.0, clock + end, 1)
    makespan = breakdown.account.whole_command_s - startup - end + 1.0  # Tune's start 0.5 s, its end 0.5 s
    summary = SearchSummary(trials, trials, 0, 1, makespan, 0.0, startup, 0.0, None, account=breakdown.account.parts())
    store.finish(summary, SearchStatus.FINISHED)
    return store.search_run()


def cpu_gpu_pair(**options):
    cpu = recorded("cpu", overhead=0.5, epoch=2.0, one_off=(10.0, 3.0, 2.0), **options)
    gpu = recorded("gpu", overhead=0.4, epoch=0.05, one_off=(12.0, 6.0, 2.0), **options)
    return cpu, gpu


def test_the_projection_returns_the_measured_search_at_its_own_size_and_scales_each_part():
    cpu, gpu = cpu_gpu_pair()
    comparison = compare([cpu, gpu], PRICES, project={"epochs": 50, "configs": 200, "repeats": 3})
    rows = {row.label: row for row in comparison.pairings[0].projection.rows}
    as_run = rows["as run"]
    assert as_run.measured and as_run.makespan_s[0].value == pytest.approx(cpu.metrics["makespan_s"])
    assert as_run.makespan_s[1].value == pytest.approx(gpu.metrics["makespan_s"])
    # One-off parts held (15 s CPU, 20 s GPU, less the 11 s and 13 s outside the makespan); trials scale.
    assert rows["10x epochs"].makespan_s[0].value == pytest.approx(4 + 8 * (0.5 + 40 * 2.0))
    assert rows["10x configurations"].makespan_s[1].value == pytest.approx(7 + 80 * (0.4 + 4 * 0.05))
    asked = rows["asked (--project)"]
    assert (asked.epochs, asked.configs, asked.repeats) == (50, 200, 3)
    assert asked.makespan_s[1].value == pytest.approx(7 + 600 * (0.4 + 50 * 0.05))
    cpu_asked = 4 + 600 * (0.5 + 50 * 2.0)
    assert asked.speedup.value == pytest.approx(cpu_asked / (7 + 600 * 2.9))
    # Identical trials: no spread of their own, so the interval is the run-to-run floor's alone (no history).
    floors = [spread.floor(device) for device in ("cpu", "gpu")]
    sds = [math.hypot(f.pace * 600 * cost, f.one_off_s) for f, cost in zip(floors, (100.5, 2.9))]
    relative = math.hypot(sds[0] / cpu_asked, sds[1] / asked.makespan_s[1].value)
    assert asked.speedup.low == pytest.approx(asked.speedup.value * math.exp(-1.959964 * relative))
    assert asked.speedup.high == pytest.approx(asked.speedup.value * math.exp(1.959964 * relative))
    # Cost: 16 cores at $0.05 against 1 H100 at $3 (the GPU search's 16 cores are not held by its trials' price).
    cost_ratio = cpu_asked * 0.8 / (asked.makespan_s[1].value * 3.8)
    assert asked.cost_ratio == pytest.approx(cost_ratio)


def test_break_even_points_follow_from_the_linear_model():
    cpu, gpu = cpu_gpu_pair()
    lines = compare([cpu, gpu], PRICES).pairings[0].projection.break_even
    # makespan(E): CPU 4 + 8 (0.5 + 2 E), GPU 7 + 8 (0.4 + 0.05 E); 10x faster once 8 + 16 E >= 10 (10.2 + 0.4 E),
    # from E = 7.83.
    assert "10x faster: from 8 epochs (projected)" in lines
    # Cheaper: 0.8 (8 + 16 E) >= 3.8 (10.2 + 0.4 E) from E = 2.87: 3 epochs.
    assert "cheaper: from 3 epochs (projected)" in lines
    # Along configurations at 4 epochs: CPU 4 + 8.5 k x 8 against GPU 7 + 0.6 k x 8: 10x from k = 3.35.
    assert "10x faster: from 27 configurations (projected)" in lines


def test_a_spread_of_trials_gives_an_interval_around_the_projection():
    cpu, gpu = cpu_gpu_pair()
    trials = list(gpu.trials)
    trials[3] = type(trials[3])(**{**vars(trials[3]), "metrics": {**trials[3].metrics, schema.TRIAL_WALL_S: 2.0}})
    gpu = type(gpu)(gpu.run_id, gpu.tags, gpu.params, gpu.metrics, tuple(trials))
    row = compare([cpu, gpu], PRICES).pairings[0].projection.rows[1]
    assert row.makespan_s[1].low < row.makespan_s[1].value < row.makespan_s[1].high


def test_json_holds_the_account_both_speedups_and_the_projection():
    document = json.loads(compare_report.render(compare(list(cpu_gpu_pair()), PRICES), "json"))
    base, other = document["searches"]
    assert set(base["account"]) == set(account.PARTS)
    assert base["whole_command_s"] == pytest.approx(sum(base["account"].values()))
    pairing = document["pairings"][0]
    assert pairing["speedup_as_run"] == pytest.approx(base["makespan_s"] / other["makespan_s"])
    steady = (base["account"]["trial_overhead_s"] + base["account"]["warmup_s"] + base["account"]["training_s"]) / (
        other["account"]["trial_overhead_s"] + other["account"]["warmup_s"] + other["account"]["training_s"]
    )
    assert pairing["speedup_steady"] == pytest.approx(steady)
    first = document["projection"][0]
    assert {"epochs", "configs", "repeats", "speedup", "cost_ratio"} <= set(first)
    assert [s["makespan_s"]["value"] for s in first["searches"]] == pytest.approx(
        [s["makespan_s"] for s in (base, other)]
    )


def test_the_table_shows_the_account_and_the_projection_and_says_it_is_one():
    text = compare_report.markdown(compare(list(cpu_gpu_pair()), PRICES))
    assert "## Where the time went" in text and "per-trial overhead" in text
    assert "Projected to other sizes" in text and "10x configurations" in text
    assert "a model, not a measurement" in text
    assert "whole search as run" in text and "the trials without the one-off parts" in text


def test_searches_with_failed_or_single_trials_are_not_projected_and_say_why():
    cpu, gpu = cpu_gpu_pair()
    failed = recorded("gpu", overhead=0.4, epoch=0.05, one_off=(12.0, 6.0, 2.0), failed=1)
    projection = compare([cpu, failed], PRICES).pairings[0].projection
    assert projection.rows == () and "1 trial(s) did not finish" in projection.why_not
    single = recorded("gpu", overhead=0.4, epoch=0.05, one_off=(12.0, 6.0, 2.0), trials=1)
    why = compare([recorded("cpu", 0.5, 2.0, (10.0, 3.0, 2.0), trials=1), single], PRICES).pairings[0].projection
    assert "one trial" in why.why_not


def test_a_fused_search_is_projected_in_epochs_but_not_in_configurations():
    cpu, _ = cpu_gpu_pair()
    fused = recorded("gpu", overhead=0.4, epoch=0.05, one_off=(12.0, 6.0, 2.0), execution="fused")
    rows = {r.label: r for r in compare([cpu, fused], PRICES).pairings[0].projection.rows}
    assert rows["10x epochs"].why_not is None
    assert "fused groups" in rows["10x configurations"].why_not


@pytest.mark.parametrize(
    "text, message",
    [
        ("epoch=5", "unknown size"),
        ("epochs=five", "positive whole number"),
        ("configs=0", "positive whole number"),
        ("repeats=-2", "positive whole number"),
        ("epochs=1", "at least 2 epochs"),
        ("configs=20000", "more than --max-trials 10000"),
    ],
)
def test_bad_project_sizes_are_refused_in_one_line(text, message):
    with pytest.raises(UserError, match=message):
        parse_sizes(text)


def test_the_comparison_page_draws_each_whole_command_and_the_projected_speedup():
    from gridbench.comparison import html

    text = html.comparison_page(compare(list(cpu_gpu_pair()), PRICES), "sqlite:///unused.db")
    assert "where each whole command went" in text and "At other sizes, projected" in text
    assert text.count("<svg") >= 3  # the account's bars and the projection's two panels among the charts
    assert "projected, not measured" in text


def test_a_fused_search_projects_its_groups_not_its_members_along_epochs():
    cpu, _ = cpu_gpu_pair()
    fused = recorded("gpu", overhead=0.4, epoch=0.05, one_off=(12.0, 6.0, 2.0), execution="fused")
    # Two groups of four members: members share their group's start and worker, as a fused trial records them.
    trials = [
        type(t)(**{**vars(t), "started_s": fused.trials[0].started_s if i < 4 else fused.trials[4].started_s})
        for i, t in enumerate(sorted(fused.trials, key=lambda t: t.started_s))
    ]
    fused = type(fused)(fused.run_id, fused.tags, fused.params, fused.metrics, tuple(trials))
    rows = {r.label: r for r in compare([cpu, fused], PRICES).pairings[0].projection.rows}
    assert rows["as run"].makespan_s[1].value == pytest.approx(fused.metrics["makespan_s"])
