"""A trial whose training loss becomes NaN or inf: recorded as diverged, never the best, never "done"."""

from __future__ import annotations

import math

import pytest
from stores import new_store

from gridbench.comparison.pairing import time_to_target
from gridbench.gridsearch import SearchOptions, SearchResult, plan_search
from gridbench.gridsearch.summary import summarise
from gridbench.spec import load_spec
from gridbench.tracking import schema
from gridbench.tracking.memory_recorder import MemoryRecorder
from gridbench.tracking.records import TrialRecord
from gridbench.tracking.schema import SearchStatus, TrialStatus
from gridbench.trial.outcome import TrialOutcome

NAN = float("nan")


def _record(units: int, accuracy: float, loss: float, ended: float, diverged_epoch: float | None = None) -> TrialRecord:
    metrics = {schema.TEST_ACCURACY: accuracy, schema.TRAIN_LOSS: loss, schema.TRIAL_WALL_S: 1.0}
    if diverged_epoch is not None:
        metrics[schema.DIVERGED_EPOCH] = diverged_epoch
    outcome = TrialOutcome(TrialStatus.FINISHED, ended - 1.0, ended, 0, metrics, {schema.DEVICE_ACTUAL: "cpu:0"})
    return TrialRecord.from_outcome(f"t{units}", {"hidden_units": units, "learning_rate": 0.01}, outcome)


def _plan():
    return plan_search(load_spec("digits"), SearchOptions(backend="tensorflow", cpus_per_trial=1))


def test_a_nan_or_inf_loss_tags_a_finished_trial_diverged_and_nothing_else():
    assert _record(32, 0.1, NAN, 2.0, diverged_epoch=2.0).tags[schema.DIVERGED] == "true"
    # A final loss that is not finite is divergence even where the workload named no epoch.
    assert _record(32, 0.1, math.inf, 2.0).diverged
    healthy = _record(64, 0.9, 0.3, 2.0)
    assert not healthy.diverged and schema.DIVERGED not in healthy.tags and healthy.ranked
    failed = TrialOutcome(TrialStatus.FAILED, 0.0, 1.0, 0, {schema.TRAIN_LOSS: NAN}, error="boom")
    assert not TrialRecord.from_outcome("t", {"hidden_units": 1}, failed).diverged
    # It ran every epoch: FINISHED, as MLflow records it.
    assert _record(32, 0.1, NAN, 2.0, 1.0).status is TrialStatus.FINISHED


def test_a_diverged_trial_is_never_the_search_best_and_is_counted():
    # Its accuracy is set above the others' on purpose: a constant prediction can score anything.
    trials = [_record(32, 0.99, NAN, 2.0, 1.0), _record(64, 0.9, 0.3, 3.0), _record(128, 0.8, 0.4, 4.0)]
    summary = summarise(_plan(), trials, concurrency=1, makespan_s=4.0, ray_start_s=0.5, process_start=0.0)
    assert summary.best_metric == 0.9
    assert summary.trials_finished == 3 and summary.trials_diverged == 1
    assert summary.metrics()[schema.TRIALS_DIVERGED] == 1.0


def test_the_results_table_ranks_healthy_trials_and_lists_diverged_ones_last():
    from rich.console import Console

    from gridbench.gridsearch.progress import trials_tables

    trials = (_record(32, 0.99, NAN, 2.0, 1.0), _record(64, 0.8, 0.4, 3.0), _record(128, 0.9, 0.3, 4.0))
    (table,) = trials_tables(SearchResult(_plan(), "run", "gridbench/digits", trials, None))
    console = Console(record=True, width=200)
    console.print(table)
    text = console.export_text()
    # In rank order, each with its configuration's number (hidden units 32, 64, 128: #1, #2, #3).
    rows = [[c.strip() for c in line.split("│")[1:3]] for line in text.splitlines() if line.startswith("│")]
    assert rows == [["3", "128"], ["2", "64"], ["1", "32"]]
    assert "1 diverged (unranked, last)" in text


def test_the_progress_line_says_diverged_with_the_epoch_not_done():
    from rich.console import Console

    from gridbench.gridsearch.progress import SearchProgress

    console = Console(record=True, width=200)
    progress = SearchProgress(console, schema.TEST_ACCURACY)
    progress.start(2)
    progress.trial_ended(_record(32, 0.1, NAN, 2.0, 2.0))
    progress.trial_ended(_record(64, 0.9, 0.3, 3.0))
    progress.stop()
    lines = [line for line in console.export_text().splitlines() if "hidden_units" in line]
    assert lines[0].startswith("diverged hidden_units=32 learning_rate=0.01 #0: training loss became - at epoch 2")
    assert "(test_accuracy 0.1)" in lines[0]
    assert lines[1].startswith("done hidden_units=64")


def test_time_to_accuracy_skips_a_diverged_trial_read_back_from_the_store():
    recorder = MemoryRecorder("digits")
    recorder.start("search", {"grid.hidden_units": [32, 64], "repeats": 1, "seed": 0}, {}, {})
    recorder.parent.started_at = 0.0
    recorder.record_trial(_record(32, 0.99, NAN, 2.0, 1.0), {}, {})  # reaches the target first, but diverged
    recorder.record_trial(_record(64, 0.96, 0.3, 5.0), {}, {})
    recorder.finish(None, SearchStatus.FINISHED)
    search = recorder.search_run()
    assert [t.diverged for t in search.trials] == [True, False]
    assert time_to_target(search, schema.TEST_ACCURACY, 0.95, "max") == pytest.approx(5.0)


def test_loss_metrics_name_the_first_epoch_that_was_not_finite():
    from gridbench.workloads.keras_common import loss_metrics

    assert loss_metrics([2.0, 1.0]) == {schema.TRAIN_LOSS: 1.0}
    assert loss_metrics([2.0, math.inf, NAN]) == {
        schema.TRAIN_LOSS: pytest.approx(NAN, nan_ok=True),
        schema.DIVERGED_EPOCH: 2.0,
    }


@pytest.mark.slow
def test_a_learning_rate_that_diverges_is_recorded_diverged_in_a_real_search(tmp_path):
    """SGD at learning rate 10 through four 256-unit layers gives a NaN loss in the first epoch on digits."""
    from mlflow import MlflowClient

    from gridbench.gridsearch import run_search

    store = new_store(tmp_path)
    spec = load_spec("digits").with_overrides(
        {"optimizer": "sgd", "hidden_layers": "4", "hidden_units": "256", "epochs": "2"},
        {"learning_rate": ["0.01", "10"]},
    )
    # One trial at a time on both cores (the default): one worker imports TensorFlow, not two (21 CPU s for the
    # search instead of 29-33 s, alone on the 2-core machine).
    plan = plan_search(spec, SearchOptions(backend="tensorflow", tracking_uri=store))
    result = run_search(plan)
    by_rate = {t.config["learning_rate"]: t for t in result.trials}
    assert by_rate[10.0].diverged and by_rate[10.0].metrics[schema.DIVERGED_EPOCH] == 1.0
    assert not math.isfinite(by_rate[10.0].metrics[schema.TRAIN_LOSS])
    assert not by_rate[0.01].diverged and schema.DIVERGED_EPOCH not in by_rate[0.01].metrics
    assert result.summary.best_metric == by_rate[0.01].metrics[schema.TEST_ACCURACY]

    client = MlflowClient(store)
    children = client.search_runs([client.get_experiment_by_name("gridbench/digits").experiment_id],
                                  filter_string=f"tags.`{schema.DIVERGED}` = 'true'")  # fmt: skip
    (diverged,) = children
    assert diverged.info.status == "FINISHED" and diverged.data.params["learning_rate"] == "10.0"
    assert diverged.data.metrics[schema.DIVERGED_EPOCH] == 1.0
    parent = client.get_run(result.parent_run_id)
    assert parent.data.metrics[schema.TRIALS_DIVERGED] == 1.0
    assert parent.data.metrics[schema.BEST_METRIC] == by_rate[0.01].metrics[schema.TEST_ACCURACY]
