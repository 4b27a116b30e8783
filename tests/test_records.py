"""What crosses from worker to driver and what is recorded, tested without Ray or a store."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from gridbench.comparison import PriceTable, compare
from gridbench.gridsearch import SearchOptions, plan_search
from gridbench.gridsearch.summary import summarise
from gridbench.spec import load_spec
from gridbench.tracking import schema
from gridbench.tracking.memory_recorder import MemoryRecorder
from gridbench.tracking.records import TrialRecord
from gridbench.tracking.schema import Kind, On, SearchStatus, TrialStatus
from gridbench.tracking.stored_searches import SearchRun
from gridbench.trial.outcome import MalformedOutcome, TrialOutcome


def outcome(**changes) -> dict:
    data = {"status": "FINISHED", "started_at": 10.0, "ended_at": 12.5, "repeat": 1, "metrics": {"trial_wall_s": 2.5}}
    return {**data, **changes}


# --- The schema --------------------------------------------------------------------------------------------------


def test_a_name_declared_twice_is_refused():
    with pytest.raises(ValueError, match="schema metric 'trial_wall_s' declared twice"):
        schema._metric(schema.TRIAL_WALL_S, On.TRIAL, "again")


def test_names_in_a_declared_family_belong_to_it():
    assert schema.declared(Kind.METRIC, "gpu_util_pct_mean").name == "gpu_"
    assert schema.declared(Kind.TAG, "version.keras").name == "version."
    assert schema.declared(Kind.TAG, "gpu.0.driver").name == "gpu."
    assert schema.declared(Kind.METRIC, "no_such_metric") is None
    assert schema.declared(Kind.TAG, schema.SHARED_BY).kind is Kind.TAG
    assert schema.declared(Kind.METRIC, schema.SHARED_BY).kind is Kind.METRIC


def test_a_run_written_before_the_schema_tag_reads_through_version_1_defaults():
    old = SearchRun("r1", {"device": "cpu"}, {}, {"makespan_s": 3.0}, ())
    assert old.tags[schema.DATA_SYNTHETIC] == "false" and old.tags[schema.TIMING_TRAIN] == "steady_epoch_s"
    assert old.tags[schema.BACKEND_REASON] == "" and old.metrics[schema.BACKEND_PROBE_S] == 0.0
    assert old.metrics[schema.MAKESPAN_S] == 3.0
    # A current run says what it means: nothing is filled in for it, and its own values stand.
    current = SearchRun("r2", {schema.SCHEMA: "2", schema.TIMING_TRAIN: "fit_s"}, {}, {}, ())
    assert current.timing_train == "fit_s" and schema.DATA_SYNTHETIC not in current.tags


# --- The trial outcome, where it crosses from worker to driver ---------------------------------------------------


def test_an_outcome_survives_the_trip_through_a_plain_dict():
    group = [TrialOutcome(TrialStatus.FINISHED, 1.0, 2.0, 0, metrics={"fit_s": 0.5}, value=0.1)]
    sent = TrialOutcome(
        TrialStatus.FINISHED, 1.0, 3.0, 0, {"trial_wall_s": 2.0}, {"host": "h"}, [0.2, 0.1], group=group
    )
    data = sent.to_dict()
    assert data["status"] == "FINISHED" and data["group"][0]["value"] == 0.1  # plain data, as Ray carries it
    assert TrialOutcome.from_dict(data) == sent


@pytest.mark.parametrize(
    "data, message",
    [
        ({"started_at": 1.0, "ended_at": 2.0}, "missing 'status'"),
        (outcome(status="DONE"), "'DONE' is not a valid TrialStatus"),
        (outcome(status="FAILED"), "a FAILED outcome without an error"),
        (outcome(metrics={"fit_s": "fast"}), "could not convert string to float: 'fast'"),
        (outcome(walltime=3), "unknown fields \\['walltime'\\]"),
        ("FINISHED", "expected a mapping, got str"),
    ],
)
def test_a_malformed_outcome_is_refused_naming_what_is_wrong(data, message):
    with pytest.raises(MalformedOutcome, match=message):
        TrialOutcome.from_dict(data)


def test_a_trial_record_takes_only_a_known_status():
    record = TrialRecord("t", {}, 0, "FINISHED", {}, {}, 1.0, 2.0)
    assert record.status is TrialStatus.FINISHED and record.finished
    with pytest.raises(ValueError, match="'OK' is not a valid TrialStatus"):
        TrialRecord("t", {}, 0, "OK", {}, {}, 1.0, 2.0)


# --- The Tune callback, with an in-memory store --------------------------------------------------------------------


def _tune_trial(trial_id, **config):
    return SimpleNamespace(trial_id=trial_id, config={"repeat": 0, **config}, start_time=5.0)


def _callback(recorder, inner=(None, ())):
    pytest.importorskip("ray")
    from gridbench.gridsearch.tune_callback import RecordingCallback

    recorder.start("search", {}, {}, {})
    return RecordingCallback(recorder, {"seed": 0}, {schema.KIND: "trial"}, None, inner=inner)


def test_each_reported_outcome_becomes_one_recorded_trial():
    recorder = MemoryRecorder()
    callback = _callback(recorder)
    trial = _tune_trial("a", lr=0.1)
    callback.on_trial_result(0, [], trial, {"gridbench": outcome()})
    callback.on_trial_complete(0, [], trial)
    (run,) = recorder.trials
    assert run.status == "FINISHED" and run.params == {"seed": 0, "lr": 0.1, "repeat": 1}
    assert run.tags[schema.CONFIG_KEY] == "lr=0.1" and run.tags[schema.SCHEMA] == str(schema.SCHEMA_VERSION)
    assert run.tags[schema.PARENT_RUN] == recorder.parent_run_id and run.metrics == {"trial_wall_s": 2.5}


def test_a_malformed_or_missing_outcome_is_recorded_as_a_failed_trial_saying_so():
    recorder = MemoryRecorder()
    callback = _callback(recorder)
    broken, silent = _tune_trial("a", lr=0.1), _tune_trial("b", lr=0.2)
    callback.on_trial_result(0, [], broken, {"gridbench": outcome(status="DONE")})
    callback.on_trial_complete(0, [], broken)
    callback.on_trial_complete(0, [], silent)
    assert [(r.status, r.tags[schema.ERROR]) for r in recorder.trials] == [
        ("FAILED", "the trial reported a malformed outcome ('DONE' is not a valid TrialStatus)"),
        ("FAILED", "the trial ended without reporting a result"),
    ]


def test_a_group_trial_is_recorded_once_per_inner_value_and_its_failure_for_each():
    recorder = MemoryRecorder()
    callback = _callback(recorder, inner=("alpha", (0.1, 1.0)))
    members = [outcome(value=alpha, metrics={"fit_s": alpha}) for alpha in (0.1, 1.0)]
    ok, failed = _tune_trial("a", gamma=0.5), _tune_trial("b", gamma=2.0)
    callback.on_trial_result(0, [], ok, {"gridbench": outcome(group=members)})
    callback.on_trial_complete(0, [], ok)
    callback.on_trial_result(0, [], failed, {"gridbench": outcome(status="FAILED", error="MemoryError: Gram")})
    callback.on_trial_complete(0, [], failed)
    rows = [(r.tags[schema.CONFIG_KEY], r.status, r.metrics.get("fit_s")) for r in recorder.trials]
    assert rows == [
        ("alpha=0.1 gamma=0.5", "FINISHED", 0.1),
        ("alpha=1.0 gamma=0.5", "FINISHED", 1.0),
        ("alpha=0.1 gamma=2.0", "FAILED", None),
        ("alpha=1.0 gamma=2.0", "FAILED", None),
    ]


# --- A search's summary and a comparison, from records alone -----------------------------------------------------


def _record(key_value, wall, started, accuracy=None, status="FINISHED", steady=None):
    metrics = {"trial_wall_s": wall, **({"test_accuracy": accuracy} if accuracy is not None else {})}
    if steady is not None:
        metrics["steady_epoch_s"] = steady
    return TrialRecord(f"t{key_value}", {"hidden_units": key_value}, 0, status, metrics, {}, started, started + wall)


def test_the_summary_is_arithmetic_on_the_trials():
    plan = plan_search(load_spec("digits"), SearchOptions(backend="tensorflow", cpus_per_trial=1))
    trials = [_record(32, 2.0, 103.0, 0.9), _record(64, 3.0, 101.5, 0.95), _record(128, 1.0, 102.0, status="FAILED")]
    summary = summarise(plan, trials, concurrency=2, makespan_s=4.0, ray_start_s=1.5, process_start=100.0)
    assert (summary.trials_total, summary.trials_finished, summary.trials_failed) == (4, 2, 1)
    assert summary.best_metric == 0.95  # digits ranks by test_accuracy, highest first; a failed trial never counts
    assert summary.time_to_first_trial_s == 1.5 and summary.trial_wall_sum_s == 6.0
    assert summary.overhead_ratio == pytest.approx(4.0 / 3.0)
    assert summary.metrics()[schema.BACKEND_PROBE_S] == 0.0


def _memory_search(device, steady, makespan):
    recorder = MemoryRecorder("digits")
    tags = {
        schema.SPEC_NAME: "digits", schema.DATASET: "digits", schema.MODEL: "mlp", schema.BACKEND: "jax",
        schema.METRIC: "test_accuracy", schema.METRIC_MODE: "max", schema.METRIC_TARGET: "", schema.DEVICE: device,
        schema.DATA_SYNTHETIC: "false", schema.TIMING_TRAIN: "steady_epoch_s", schema.CPUS_PER_TRIAL: "2",
        schema.GPUS_PER_TRIAL: "1" if device == "gpu" else "0", schema.GPUS_USED: "1" if device == "gpu" else "0",
    }  # fmt: skip
    recorder.start("search", {"grid.hidden_units": [32, 64], "repeats": 1, "seed": 0}, tags, {})
    for units in (32, 64):
        recorder.record_trial(_record(units, 1.0, 0.0, 0.9, steady=steady), {}, {})
    recorder.finish(None, SearchStatus.FINISHED)
    recorder.parent.metrics[schema.MAKESPAN_S] = makespan
    return recorder.search_run()


def test_a_comparison_reads_searches_recorded_in_memory_as_it_reads_them_from_mlflow():
    cpu, gpu = _memory_search("cpu", steady=0.8, makespan=10.0), _memory_search("gpu", steady=0.02, makespan=5.0)
    assert cpu.tags[schema.SCHEMA] == str(schema.SCHEMA_VERSION)
    comparison = compare([cpu, gpu], PriceTable(cpu_core_hour=0.05, gpu_hour={}, source="test"))
    (pairing,) = comparison.pairings
    assert [row.key for row in pairing.rows] == ["hidden_units=32", "hidden_units=64"]
    assert pairing.geomean_speedup["steady_epoch_s"] == pytest.approx(40.0)
    assert pairing.makespan_speedup == pytest.approx(2.0)


# --- What the terminal shows -----------------------------------------------------------------------------------


def test_one_timed_epoch_shows_no_spread_and_one_core_reads_singular():
    from rich.console import Console

    from gridbench.gridsearch import SearchResult
    from gridbench.gridsearch.progress import trials_tables

    plan = plan_search(load_spec("digits"), SearchOptions(backend="tensorflow", cpus_per_trial=1))
    one, three = ({schema.STEADY_EPOCHS: n, schema.STEADY_EPOCH_STD_S: sd} for n, sd in ((1.0, 0.0), (3.0, 0.0123)))
    trials = tuple(
        TrialRecord(f"t{units}", {"hidden_units": units, "learning_rate": 0.01}, 0, "FINISHED", metrics, {}, 0.0, 1.0)
        for units, metrics in ((32, one), (64, three))
    )
    console = Console(record=True, width=200)
    (table,) = trials_tables(SearchResult(plan, "run", "gridbench/digits", trials, None))
    console.print(table)
    lines = console.export_text().splitlines()
    header = [c.strip() for c in next(line for line in lines if line.startswith("┃")).split("┃")]
    rows = [[c.strip() for c in line.split("│")] for line in lines if line.startswith("│")]
    sd = {row[header.index("hidden_units")]: row[header.index("± sd")] for row in rows}
    assert sd == {"32": "", "64": "0.012"}
    tags = {schema.DEVICE: "cpu", schema.CPUS_PER_TRIAL: "1", schema.BACKEND: "jax"}
    assert SearchRun("abcdef123", tags, {}, {}, ()).label == "cpu (1 core/trial) jax abcdef12"


def _mnist_like_result():
    """Eight trials over three axes, with every timing column filled, as an mnist search records them."""
    from gridbench.gridsearch import SearchResult

    spec = load_spec("digits").with_overrides(grids={"batch_size": ["128", "256"]})
    plan = plan_search(spec, SearchOptions(backend="tensorflow", cpus_per_trial=1))
    trials = []
    for i, config in enumerate(spec.configurations()):
        metrics = {
            "test_accuracy": 0.97 + i / 1000, "setup_s": 1.25 + i, "warmup_epoch_s": 3.72 + i,
            "steady_epoch_s": 0.02392 + i / 100, "steady_epoch_std_s": 3.5e-05, "steady_epochs": 3.0,
            "samples_per_s": 2504666.0 + i, "eval_s": 1.81, "trial_wall_s": 14.37 + i,
        }  # fmt: skip
        trials.append(TrialRecord(f"t{i}", config, 0, "FINISHED", metrics, {"device.actual": "gpu:0"}, 0.0, 1.0))
    return SearchResult(plan, "run", "gridbench/digits", tuple(trials), None)


@pytest.mark.parametrize("width", [80, 120, 200])
def test_the_results_fit_the_terminal_and_no_value_is_cut(width):
    from rich.console import Console

    from gridbench.gridsearch.progress import trials_tables

    result = _mnist_like_result()
    console = Console(record=True, width=width)
    tables = trials_tables(result, width)
    for table in tables:
        console.print(table)
    text = console.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= width
    # Every column, header whole, in some table; every row's values under it, found by its rank.
    seen: dict[str, dict[str, str]] = {}
    headers: list[str] = []
    for line, previous in zip(text.splitlines(), ["", *text.splitlines()]):
        if line.startswith("┃"):  # a table's header: one or two lines (a two-word header stacks its words)
            cells = [c.strip() for c in line.split("┃")]
            if previous.startswith("┃"):
                cells = [f"{above} {below}".strip() for above, below in zip(headers, cells)]
            headers = cells
        elif line.startswith("│"):
            cells = [c.strip() for c in line.split("│")]
            seen.setdefault(cells[headers.index("#")], {}).update(zip(headers, cells))
    expected = ["batch_size", "hidden_units", "learning_rate", "test_accuracy", "setup s", "warm-up s",
                "steady s/epoch", "± sd", "samples/s", "eval s", "wall s", "device"]  # fmt: skip
    assert sorted(seen) == [str(number) for number in range(1, 9)]
    for number, row in seen.items():
        assert all(row.get(header) for header in expected), (number, row)
    # The best is the grid's last configuration (batch 256, 128 units, rate 0.01): #8 in every table, ranked first.
    best = seen["8"]
    assert (best["test_accuracy"], best["steady s/epoch"], best["device"]) == ("0.977", "0.09392", "gpu:0")
    assert text.index("│ 8 ") < text.index("│ 1 ")
    # The headline columns come first: at 80 columns the first table has accuracy; at 200 one table has all.
    first_table = text.split("continued")[0]
    assert all(header in first_table for header in ("batch_size", "test_accuracy", "steady", "s/epoch"))
    assert (len(tables) == 1) == (width >= 200)


def test_the_ui_opens_the_experiment_whose_search_started_last_unsorted_on_its_saved_view(store):
    from mlflow import MlflowClient

    from gridbench.tracking.ui import pages

    client = MlflowClient(store)
    first, last = client.create_experiment("gridbench/first"), client.create_experiment("gridbench/last")
    search = {schema.KIND: "search", schema.METRIC: "trial_wall_s", schema.METRIC_MODE: "min"}
    client.create_run(first, start_time=2_000_000, tags=search)  # the newer search, in the older experiment
    client.create_run(
        last, start_time=1_000_000, tags={**search, schema.METRIC: "test_accuracy", schema.METRIC_MODE: "max"}
    )
    comparison = client.create_run(first, start_time=2_500_000, tags={schema.KIND: "comparison"}).info.run_id
    found = pages("http://ui", store, None)
    view = "workflowType=machine_learning&compareRunsMode=TABLE&viewStateShareKey=gridbench-comparison"
    assert found.runs == f"http://ui/#/experiments/{first}/runs?{view}"  # unsorted: MLflow nests trials only then
    state = json.loads(client.get_experiment(first).tags["mlflow.sharedViewState.gridbench-comparison"])
    search_figures = ["metrics.`best_metric`", "metrics.`makespan_s`", "metrics.`whole_command_s`"]  # its row's
    assert state["selectedColumns"] == [
        "metrics.`trial_wall_s`",
        "metrics.`steady_epoch_s`",
        *search_figures,
        "tags.`device`",
    ]
    assert found.reports == (f"http://ui/#/experiments/{first}/runs/{comparison}/artifactPath/report.html",)
    named = pages("http://ui", store, "last")
    assert named.runs == f"http://ui/#/experiments/{last}/runs?{view}"
    assert named.reports == ()


def test_bookkeeping_tags_renamed_in_schema_6_still_read_under_their_old_names():
    old = {"driver.pid": "12", "journal.id": "j1", schema.SCHEMA: "5"}
    assert schema.tag_value(old, schema.DRIVER_PID) == "12" and schema.DRIVER_PID == "gridbench.driver.pid"
    assert schema.upgrade(old, {}, schema.On.SEARCH)[0][schema.JOURNAL_ID] == "j1"
    assert schema.tag_value({schema.DRIVER_PID: "7", "driver.pid": "12"}, schema.DRIVER_PID) == "7"
