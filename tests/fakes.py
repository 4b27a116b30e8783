"""Fake trial runners for harness tests: real Ray and MLflow, no training.

Imported by Ray workers through PYTHONPATH (see conftest.py).
"""

from __future__ import annotations

import os
import time

from gridbench.tracking.schema import TrialStatus
from gridbench.trial.outcome import TrialOutcome

FAIL_AT = {"hidden_units": 64}  # the grid point that fails_one() fails


def _outcome(config, context, error=None) -> TrialOutcome:
    started = time.time()
    time.sleep(0.05)
    metrics = {
        "setup_s": 0.01,
        "warmup_epoch_s": 0.02,
        "steady_epoch_s": 0.01,
        "test_accuracy": config["hidden_units"] / 1000 + config.get("repeat", 0) / 10000,
    }
    outcome = TrialOutcome(
        TrialStatus.FAILED if error else TrialStatus.FINISHED,
        started_at=started,
        ended_at=time.time(),
        repeat=config.get("repeat", 0),
        metrics={} if error else metrics,
        tags={"device.requested": context.device, "device.actual": "cpu:0", "pid": str(os.getpid())},
        epoch_times=[0.02, 0.01, 0.01],
        error=error,
        traceback=f"Traceback (most recent call last):\n{error}\n" if error else None,
    )
    outcome.metrics["trial_wall_s"] = time.time() - started
    return outcome


def succeeds(config, context):
    return _outcome(config, context)


RAN_MARKER_ENV = "GRIDBENCH_TEST_RAN_MARKER"  # notes_it_ran's file: set in the driver before Ray starts


def notes_it_ran(config, context):
    """Succeeds, having first written the file $GRIDBENCH_TEST_RAN_MARKER names: the driver sees a trial ran."""
    with open(os.environ[RAN_MARKER_ENV], "w") as marker:
        marker.write(str(os.getpid()))
    return _outcome(config, context)


def fails_one(config, context):
    if all(config.get(k) == v for k, v in FAIL_AT.items()):
        return _outcome(config, context, error="ValueError: planted failure")
    return _outcome(config, context)


def crashes_one(config, context):
    """Kills its worker process outright for one grid point, as an out-of-memory kill would."""
    if all(config.get(k) == v for k, v in FAIL_AT.items()):
        os._exit(1)
    return _outcome(config, context)


class FakeSession:
    """A workload that trains nothing: epochs are short sleeps, on a device it names."""

    device = "cpu:0"
    prepared_with: list[int] = []

    @staticmethod
    def prepare(context):
        FakeSession.prepared_with.append(context.cpus)

    @classmethod
    def open_session(cls, hyperparameters, data, seed):
        return cls(hyperparameters, data, seed)

    def __init__(self, hyperparameters, data, seed):
        self.hyperparameters = hyperparameters
        self.train_samples = len(data.x_train)
        self.syncs = 0

    def build(self):
        pass

    def actual_device(self):
        return self.device

    def sync(self):
        self.syncs += 1

    def fit(self, clock):
        for _ in range(self.hyperparameters["epochs"]):
            clock.epoch_begin()
            time.sleep(0.01)
            clock.epoch_end()
        return {"train_loss": 0.5}

    def evaluate(self):
        return {"test_accuracy": 0.75}

    def facts(self):
        return {"backend": "fake"}


class OnTheGpuSession(FakeSession):
    """Places its model on a GPU whatever was asked: a mislabelled timing waiting to happen."""

    device = "gpu:0"


class BrokenFitSession(FakeSession):
    def fit(self, clock):
        raise FloatingPointError("loss is nan at step 3")


def waits_to_be_killed(config, context):
    """The first attempt at each grid point writes its worker's pid to $GRIDBENCH_TEST_PID_DIR and waits (up to
    60 s) for the test to kill it; a later attempt (a retry) finishes at once."""
    from pathlib import Path

    directory = Path(os.environ["GRIDBENCH_TEST_PID_DIR"])
    marker = directory / f"{config['hidden_units']}-{config.get('repeat', 0)}.pid"
    if marker.exists():
        return _outcome(config, context)
    # Written whole, then named *.pid: the test's killer, polling for *.pid, once read a file made but not yet
    # written ('' in a suite run on two loaded cores), and never killed the worker.
    written = directory / f"{marker.name}.writing"
    written.write_text(str(os.getpid()))
    os.replace(written, marker)
    time.sleep(60)
    return _outcome(config, context)
