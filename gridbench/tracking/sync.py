"""Writes that may be repeated: what the store writer retries and `gridbench sync` replays.

A write that failed may still have reached the store (a timeout after the server
acted), so a repeated write first looks for what is there. A trial's child run is
known by its Ray trial id and start time (an attempt retried after a worker's death
starts later); the parent by its journal id.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from gridbench.errors import UserError
from gridbench.tracking import commands, schema
from gridbench.tracking.journal import JournalContents, read_journal, summary_from_dict
from gridbench.tracking.records import SearchSummary, TrialRecord
from gridbench.tracking.schema import SearchStatus
from gridbench.tracking.store import MlflowRecorder, check_tracking_uri, resolve_tracking_uri

_RUNNING = SearchStatus.RUNNING.value
_FINISHED = SearchStatus.FINISHED.value


def trial_identity(trial_id: str, started_at_ms: int) -> tuple[str, int]:
    return trial_id, started_at_ms


def _identity_of_run(run) -> tuple[str, int]:
    return trial_identity(run.data.tags.get(schema.TRIAL_ID, ""), int(run.info.start_time or 0))


def _identity_of_record(record: TrialRecord) -> tuple[str, int]:
    return trial_identity(record.trial_id, int(record.started_at * 1000))


def _key_of_run(run) -> tuple[str, int]:
    """A child run's configuration and repeat, as a TrialRecord's key and repeat."""
    return run.data.tags.get(schema.CONFIG_KEY, ""), int(run.data.params.get(schema.PARAM_REPEAT, 0))


def unsynced(client, parent_run, contents: JournalContents) -> bool:
    """Whether the store lacks part of this journal's search: a trial it does not hold, or the totals it ended with.

    A journal with an end whose parent is still RUNNING is a driver that exited with records
    waiting (the store was down), never a dead one.
    """
    if contents.finish is not None and parent_run.info.status == _RUNNING:
        return True
    present = children_of(client, parent_run.info.experiment_id, parent_run.info.run_id)
    held = {_identity_of_run(r) for r in present if r.info.status != _RUNNING}
    finished = {_key_of_run(r) for r in present if r.info.status == _FINISHED}
    return any(
        _identity_of_record(t.record) not in held and (t.record.key, t.record.repeat) not in finished
        for t in contents.trials
    )


def children(store: MlflowRecorder, where: str = "") -> list:
    """The parent's child runs (every page), optionally narrowed by an MLflow filter."""
    return children_of(store.client, store.experiment_id, store.parent_run_id, where)


def children_of(client, experiment_id: str, parent_run_id: str, where: str = "") -> list:
    query = f"tags.`{schema.PARENT_RUN}` = '{parent_run_id}'" + (f" and {where}" if where else "")
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], filter_string=query, max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def ensure_parent(
    store: MlflowRecorder,
    start: Mapping[str, Any],
    journal_id: str,
    known_run_id: str | None,
    resumed: str | None = None,
) -> bool:
    """Finds the search's parent run (by id, else by journal id) or creates it; True if created.

    A resumed session's journal (`resumed`: the parent it continued) finds its parent by id: the
    parent's journal tags name the latest session's journal only.
    """
    store.experiment_id = store.ensure_experiment()
    found = None
    if known_run_id:
        from mlflow.exceptions import MlflowException

        try:
            run = store.client.get_run(known_run_id)
            if schema.tag_value(run.data.tags, schema.JOURNAL_ID) == journal_id or resumed == known_run_id:
                found = known_run_id
        except MlflowException:  # another store, or the run was never created there
            pass
    for name in (schema.JOURNAL_ID, schema.RENAMED[schema.JOURNAL_ID]):  # a journal of schema 5 or before: journal.id
        if found is None:
            runs = store.client.search_runs(
                [store.experiment_id], filter_string=f"tags.`{name}` = '{journal_id}'", max_results=1
            )
            found = runs[0].info.run_id if runs else None
    if found is None:
        store.start(**start)
        return True
    # A start cut short may have left the run without its params or documents; writing them again is harmless.
    store.parent_run_id = found
    store.log_values(found, params=start["params"])
    for name, document in start["documents"].items():
        store.client.log_dict(found, document, name)
    return False


def ensure_trial(
    store: MlflowRecorder, record: TrialRecord, params: Mapping[str, Any], tags: Mapping[str, str], check_first: bool
) -> bool:
    """Writes the trial's child run unless a complete one is there; True if written.

    A child still RUNNING is a write cut short (a trial's record is never RUNNING): it is deleted and written again.
    """
    if check_first:
        identity = _identity_of_record(record)
        same = [r for r in children(store, f"tags.{schema.TRIAL_ID} = '{record.trial_id}'")
                if _identity_of_run(r) == identity]  # fmt: skip
        complete = [r for r in same if r.info.status != _RUNNING]
        for run in same:
            if not complete or run is not complete[0]:
                store.client.delete_run(run.info.run_id)
        if complete:
            return False
    store.record_trial(record, params, tags)
    return True


def ensure_finish(
    store: MlflowRecorder,
    summary: SearchSummary | None,
    store_metrics: Mapping[str, float],
    status: SearchStatus,
    error: str | None,
    check_first: bool,
) -> bool:
    """Ends the parent run with the search's totals, unless it already has them; True if written."""
    if check_first:
        run = store.client.get_run(store.parent_run_id)
        if run.info.status == status.value and (summary is None or schema.MAKESPAN_S in run.data.metrics):
            return False
    if store_metrics:  # before the status: a terminated parent has all its figures
        store.log_values(store.parent_run_id, metrics=store_metrics)
    store.finish(summary, status, error)
    return True


def remove_duplicates(store: MlflowRecorder) -> int:
    """Deletes extra copies of a trial's child (a write that reached the store and was retried); returns how many."""
    by_identity: dict[tuple[str, int], list] = {}
    for run in children(store):
        by_identity.setdefault(_identity_of_run(run), []).append(run)
    removed = 0
    for runs in by_identity.values():
        # Keep a complete copy with the most metrics.
        runs.sort(key=lambda r: (r.info.status != _RUNNING, len(r.data.metrics)), reverse=True)
        for extra in runs[1:]:
            store.client.delete_run(extra.info.run_id)
            removed += 1
    return removed


@dataclass(frozen=True)
class SyncReport:
    journal: Path
    tracking_uri: str
    parent_run_id: str
    parent_created: bool
    trials_written: int
    trials_present: int
    duplicates_removed: int
    finish_written: bool | None  # None: the journal has no end (the driver was killed)
    torn_lines: int
    superseded: int = 0  # trials whose configuration and repeat a later session had FINISHED: not written
    bad_lines_note: str = ""  # the lines skipped, by number and why (JournalContents.bad_lines_note)
    # The journal ended FINISHED, but with lines skipped the store holds fewer trials than the search ran:
    # the parent is KILLED instead, and this continues it (the lost trials run again).
    resume: str | None = None

    def line(self) -> str:
        finish = {
            True: "the search's totals written",
            False: "the search's totals already there",
            None: "the journal has no end (the search was killed); its parent run is left as it is",
        }[self.finish_written]
        if self.resume:
            finish = f"the search is marked KILLED: a trial it ran could not be read; run it again with `{self.resume}`"
        created = " (created)" if self.parent_created else ""
        torn = f"; {self.bad_lines_note or f'{self.torn_lines} torn line(s) skipped'}" if self.torn_lines else ""
        removed = f", {self.duplicates_removed} duplicate(s) removed" if self.duplicates_removed else ""
        if self.superseded:
            removed += f", {self.superseded} left out (their configuration and repeat already FINISHED there)"
        return (
            f"synced {self.journal} to {self.tracking_uri}: parent run {self.parent_run_id}{created}, "
            f"{self.trials_written} trial(s) written, {self.trials_present} already there{removed}; {finish}{torn}"
        )


def sync_journal(path: str | Path, tracking_uri: str | None = None) -> SyncReport:
    """Writes to the store whatever of the journal it lacks: the parent, each trial, the totals. Idempotent."""
    contents = read_journal(path)
    uri = resolve_tracking_uri(tracking_uri or contents.tracking_uri)
    check_tracking_uri(uri)
    try:
        return _sync(contents, uri)
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - the store failed part-way; what was written stays, a rerun skips it
        first = (str(err).strip().splitlines() or [""])[0][:160]
        raise UserError(
            f"the store {uri} failed during the sync ({type(err).__name__}: {first}); run the same command again "
            f"once it answers (it writes only what is missing)"
        ) from None


def _sync(contents: JournalContents, uri: str) -> SyncReport:
    store = MlflowRecorder(uri, "")
    store.experiment_name = contents.experiment_name
    created = ensure_parent(store, contents.start, contents.id, contents.parent_run_id, contents.resumed)
    present = children(store)
    for run in present:
        if run.info.status == _RUNNING:  # a write cut short
            store.client.delete_run(run.info.run_id)
    complete = {_identity_of_run(r) for r in present if r.info.status != _RUNNING}
    finished = {_key_of_run(r) for r in present if r.info.status == _FINISHED}
    written = superseded = 0
    for trial in contents.trials:
        record = trial.record
        if _identity_of_record(record) in complete:
            continue
        if (record.key, record.repeat) in finished:  # trained again (--resume) before this sync: never twice
            superseded += 1
            continue
        store.record_trial(record, trial.params, trial.tags)
        complete.add(_identity_of_record(record))
        if record.status.value == _FINISHED:
            finished.add((record.key, record.repeat))
        written += 1
    removed = remove_duplicates(store)
    finish_written, resume = None, None
    if contents.finish is not None:
        finish = contents.finish
        summary, status, error = (
            summary_from_dict(finish["summary"]),
            SearchStatus(finish["status"]),
            finish.get("error"),
        )
        resume = _resume_if_trials_lost(store, contents, summary, status)
        if resume is not None:
            status, error = (
                SearchStatus.KILLED,
                f"a trial's journal line could not be read; continue it with `{resume}`",
            )
        finish_written = ensure_finish(
            store, summary, finish.get("store_metrics") or {}, status, error, check_first=True
        )
    return SyncReport(
        contents.path,
        uri,
        store.parent_run_id,
        created,
        written,
        len(contents.trials) - written - superseded,
        removed,
        finish_written,
        contents.torn_lines,
        superseded,
        contents.bad_lines_note(),
        resume,
    )


def _resume_if_trials_lost(
    store: MlflowRecorder, contents: JournalContents, summary: SearchSummary | None, status: SearchStatus
) -> str | None:
    """The `--resume` command where a search that ended FINISHED lacks trials in the store after the journal's
    damaged lines were skipped (a lost trial's configuration must run again); else None."""
    if status is not SearchStatus.FINISHED or not contents.bad_lines or summary is None:
        return None
    recorded = {_key_of_run(r) for r in children(store) if r.info.status != _RUNNING}
    if len(recorded) >= summary.trials_total:
        return None
    return commands.resume_command(store.parent_run_id, store.tracking_uri)
