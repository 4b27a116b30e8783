"""Clocks, epoch statistics and search totals on fixed numbers."""

from __future__ import annotations

import math

import pytest

from gridbench.tracking.records import SearchSummary, TrialRecord, config_key
from gridbench.trial.outcome import TrialOutcome
from gridbench.trial.timing import PhaseClock, epoch_summary


def test_epoch_summary_keeps_warmup_apart():
    summary = epoch_summary([5.0, 1.0, 3.0, 2.0])
    assert summary["warmup_epoch_s"] == 5.0
    assert summary["steady_epoch_s"] == 2.0  # median of 1, 3, 2
    assert summary["steady_epoch_mean_s"] == 2.0
    assert summary["steady_epoch_std_s"] == pytest.approx(1.0)
    assert (summary["steady_epoch_min_s"], summary["steady_epoch_max_s"]) == (1.0, 3.0)
    assert summary["steady_epochs"] == 3


def test_epoch_summary_needs_a_steady_epoch():
    with pytest.raises(ValueError, match="at least 2 epochs"):
        epoch_summary([1.0])
    assert epoch_summary([4.0, 1.5])["steady_epoch_std_s"] == 0.0


def test_clock_synchronises_before_every_reading():
    calls = []
    clock = PhaseClock(sync=lambda: calls.append("sync"))
    with clock.phase("setup"):
        calls.append("work")
    clock.epoch_begin()
    clock.epoch_end()
    assert calls == ["sync", "work", "sync", "sync", "sync"]
    assert clock.phases["setup"] >= 0 and len(clock.epochs) == 1


def test_epoch_end_without_begin_is_a_bug():
    with pytest.raises(RuntimeError):
        PhaseClock().epoch_end()


def test_summary_overhead_ratio_against_ideal_makespan():
    summary = SearchSummary(
        trials_total=4,
        trials_finished=3,
        trials_failed=1,
        concurrency=2,
        makespan_s=30.0,
        ray_start_s=5.0,
        time_to_first_trial_s=8.0,
        trial_wall_sum_s=40.0,
        best_metric=0.9,
    )
    assert summary.ideal_makespan_s == 20.0
    assert summary.overhead_ratio == 1.5
    metrics = summary.metrics()
    assert metrics["overhead_s"] == 10.0
    assert metrics["best_metric"] == 0.9
    assert metrics["trials_failed"] == 1.0


def test_summary_without_trial_time_has_no_ratio():
    summary = SearchSummary(0, 0, 0, 1, 1.0, 0.0, 0.0, 0.0, None)
    assert math.isnan(summary.overhead_ratio)
    assert "best_metric" not in summary.metrics()


def test_config_key_is_sorted_and_readable():
    assert config_key({"lr": 0.1, "batch_size": 32}) == "batch_size=32 lr=0.1"


def test_trial_record_from_outcome_separates_repeat_from_config():
    record = TrialRecord.from_outcome(
        "t1",
        {"lr": 0.1, "repeat": 2},
        TrialOutcome.from_dict(
            {"status": "FINISHED", "started_at": 1.0, "ended_at": 2.0, "repeat": 2, "metrics": {"a": 1.0}, "tags": {}}
        ),
    )
    assert record.config == {"lr": 0.1}
    assert record.repeat == 2 and record.finished and record.key == "lr=0.1"
