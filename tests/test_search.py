"""Searches under real Ray Tune against a real MLflow store, read back through MlflowClient.

The harness tests use fake trial runners (tests/fakes.py) so that they check Ray and
MLflow plumbing without training; the end-to-end tests train real Keras models. The search of the real MNIST
file is test_backends' JAX search (one search read by two tests).
"""

from __future__ import annotations

import os
import subprocess
import sys

import fakes
import pytest
from stores import new_store

from gridbench.environment import usable_cores
from gridbench.gridsearch import SearchOptions, plan_search, run_search
from gridbench.spec import load_spec
from gridbench.tracking import experiment_name

pytestmark = pytest.mark.slow


def runs_of(store: str, name: str):
    from mlflow import MlflowClient

    client = MlflowClient(store)
    experiment = client.get_experiment_by_name(experiment_name(name))
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return client, parents, children


def small_digits(repeats: int = 1):
    return (
        load_spec("digits")
        .with_overrides({"learning_rate": "0.01"}, {"hidden_units": ["32", "64"]})
        .with_repeats(repeats)
    )


class EventLog:
    """An observer that writes down what it hears."""

    def __init__(self):
        self.events = []

    def start(self, total):
        self.events.append(("start", total))

    def trial_started(self, config):
        self.events.append(("started", config["hidden_units"]))

    def trial_ended(self, record):
        self.events.append(("ended", record.status))

    def stop(self):
        self.events.append(("stop",))


def test_failed_trials_are_recorded_as_failed_and_the_search_goes_on(store):
    plan = plan_search(small_digits(repeats=2), SearchOptions(cpus_per_trial=1, tracking_uri=store))
    log = EventLog()
    result = run_search(plan, observer=log, runner=fakes.fails_one)

    assert log.events[0] == ("start", 4) and log.events[-1] == ("stop",)
    assert sorted(e for e in log.events if e[0] == "ended") == [("ended", "FAILED")] * 2 + [("ended", "FINISHED")] * 2
    assert sum(e[0] == "started" for e in log.events) == 4

    assert result.summary.trials_total == 4
    assert result.summary.trials_finished == 2 and result.summary.trials_failed == 2
    assert result.summary.concurrency == min(4, usable_cores())  # one CPU per trial
    client, parents, children = runs_of(store, "digits")
    assert [p.info.run_id for p in parents] == [result.parent_run_id]
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["trials_failed"] == 2 and parent.data.metrics["trials_finished"] == 2
    assert parent.data.metrics["best_metric"] == pytest.approx(0.0321)  # hidden_units 32, repeat 1
    assert parent.data.tags["device"] == "cpu" and parent.data.tags["spec.hash"] == plan.spec.spec_hash
    assert len(children) == 4
    assert all(c.data.tags["mlflow.parentRunId"] == result.parent_run_id for c in children)
    failed = [c for c in children if c.info.status == "FAILED"]
    assert sorted(c.data.params["repeat"] for c in failed) == ["0", "1"]
    assert all(c.data.params["hidden_units"] == "64" for c in failed)
    assert all(c.data.tags["error"] == "ValueError: planted failure" for c in failed)
    error_text = client.download_artifacts(failed[0].info.run_id, "error.txt")
    assert "planted failure" in open(error_text).read()
    finished = [c for c in children if c.info.status == "FINISHED"]
    assert {(c.data.params["hidden_units"], c.data.params["repeat"]) for c in finished} == {("32", "0"), ("32", "1")}
    assert all(c.data.params["learning_rate"] == "0.01" and c.data.params["epochs"] == "6" for c in finished)
    assert [m.value for m in client.get_metric_history(finished[0].info.run_id, "epoch_s")] == [0.02, 0.01, 0.01]


def test_a_crashed_worker_fails_its_trial_and_loses_no_finished_one(store):
    plan = plan_search(small_digits(), SearchOptions(cpus_per_trial=1, max_concurrent=1, tracking_uri=store))
    result = run_search(plan, runner=fakes.crashes_one)

    client, parents, children = runs_of(store, "digits")
    by_units = {c.data.params["hidden_units"]: c for c in children}
    assert by_units["32"].info.status == "FINISHED"
    assert by_units["64"].info.status == "FAILED"
    assert by_units["64"].data.tags["error"]
    assert result.summary.trials_failed == 1 and result.summary.trials_finished == 1
    assert parents[0].info.status == "FINISHED"


def test_digits_search_end_to_end_through_the_cli(tmp_path):
    """The README's main job: real Keras trials under Ray, every one in MLflow."""
    store = new_store(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "gridbench", "search", "digits", "--tracking-uri", store],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "GRIDBENCH_PLAIN_WORKERS")},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("backend tensorflow: Keras' default for a CPU search (KERAS_BACKEND is unset)\n")
    assert "overhead ratio" in result.stdout and "python -m gridbench ui --tracking-uri" in result.stdout

    spec = load_spec("digits")
    client, parents, children = runs_of(store, "digits")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    parent = parents[0].data
    assert parent.tags["backend.reason"] == "Keras' default for a CPU search (KERAS_BACKEND is unset)"
    assert parent.metrics["backend_probe_s"] == 0.0  # nothing asked on a CPU
    # No worker imports ahead unless --prestart-workers asks (off by default: on 2 cores it did not pay); Tune's
    # actors take plain workers, one per trial at once, asked for as soon as Ray was up (gridsearch.plain_workers).
    assert parent.tags["prestart_workers"] == "off" and parent.tags["trial_workers"] == "plain"
    assert parent.metrics["workers_prestarted"] == parent.metrics["concurrency"] >= 1
    assert parent.metrics["workers_started_ahead"] <= parent.metrics["workers_prestarted"]
    assert parent.metrics["workers_imported_ahead"] == 0 and parent.metrics["import_ahead_s"] == 0
    assert parent.tags["ray.start"] == "lean"  # workers started through gridbench's script, no API server
    for tag in (
        "cpu.model",
        "cpu.cores_usable",
        "version.keras",
        "version.ray",
        "version.mlflow-skinny",
        "spec.hash",
        "command",
    ):
        assert parent.tags[tag], tag
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")  # the CLI's default
    assert parent.tags["backend"] == backend
    assert parent.metrics["trials_finished"] == spec.grid_size and parent.metrics["trials_failed"] == 0
    assert parent.metrics["makespan_s"] > 0 and parent.metrics["overhead_ratio"] >= 1.0

    assert len(children) == spec.grid_size
    ran = sorted((c.data.params["hidden_units"], c.data.params["learning_rate"]) for c in children)
    assert ran == sorted((str(c["hidden_units"]), str(c["learning_rate"])) for c in spec.configurations())
    cores = parent.tags["cpus_per_trial"]
    for child in children:
        m, tags = child.data.metrics, child.data.tags
        assert child.info.status == "FINISHED"
        for key in ("setup_s", "warmup_epoch_s", "steady_epoch_s", "eval_s", "samples_per_s", "trial_wall_s"):
            assert m[key] > 0, key
        assert 0.5 < m["test_accuracy"] <= 1.0
        assert m["steady_epochs"] == spec.params["epochs"] - 1
        assert len(client.get_metric_history(child.info.run_id, "epoch_s")) == spec.params["epochs"]
        assert tags["device.requested"] == "cpu" and tags["device.actual"] == "cpu:0"
        assert tags["backend"] == backend and tags["threads.omp"] == cores
        if backend == "tensorflow":
            assert tags["threads.tf_intra_op"] == cores
    # Workers are reused: the trials ran in at most one process per concurrent trial, not one each.
    workers = {c.data.tags["pid"] for c in children}
    assert len(workers) <= int(parent.metrics["concurrency"]) < len(children), workers
