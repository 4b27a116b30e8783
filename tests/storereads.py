"""Reading a search's trials back from a real MLflow store, for the tests that check what searches recorded."""

from __future__ import annotations

from gridbench.tracking import read_search, schema


def trial_runs(uri: str, run_id: str) -> list:
    """The trial runs of the search `run_id`."""
    from mlflow import MlflowClient

    search_run = read_search(uri, run_id)
    client = MlflowClient(uri)
    return client.search_runs(
        [search_run.experiment_id], filter_string=f"tags.`{schema.PARENT_RUN}` = '{run_id}'", max_results=100
    )


def program_sources(uri: str, run_id: str) -> set[str]:
    """Where the search's trials got their programs: compiled ("no"), from the compile cache ("yes"), ..."""
    return {run.data.tags.get(schema.PROGRAM_CACHED, "?") for run in trial_runs(uri, run_id)}
