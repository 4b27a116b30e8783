"""The store: what is recorded (records.py), writing it to MLflow (store.py), reading it back (stored_searches.py),
the UI."""

from gridbench.tracking.store import (
    MlflowRecorder,
    Recorder,
    check_tracking_uri,
    experiment_name,
    record_comparison,
    record_summary,
    resolve_tracking_uri,
    ui_command,
)
from gridbench.tracking.stored_searches import SearchRun, TrialRun, earlier_runs, latest_searches, read_search

__all__ = [
    "MlflowRecorder",
    "Recorder",
    "SearchRun",
    "TrialRun",
    "check_tracking_uri",
    "earlier_runs",
    "experiment_name",
    "latest_searches",
    "read_search",
    "record_comparison",
    "record_summary",
    "resolve_tracking_uri",
    "ui_command",
]
