"""The search's recorder while its store opens beside Tune's start.

Importing MLflow and opening its store ended 1.8 s after Ray was up on an H100, and Tune's start waited for it
(docs/results/around-training.md, "eighth"). A trial's record is the store's first use, and the first trial ends
seconds after Tune's start: so Tune starts once Ray is up, and the store's opening and the parent run's creation
go on, on a thread, meanwhile. OpeningRecorder stands for the recorder until then: each use of it waits for the
opening (a trial that ended before it waits, on Tune's callback thread), and a failed opening stops the search
with its own error, once Tune's loop asks (RecordingCallback.stop_if_store_failed) or when the search ends.
Nothing is written by a search whose store did not open.
"""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable

from gridbench.tracking.stale import resume_command
from gridbench.tracking.store import Recorder

_OWN = ("_recorder", "_error", "_opened", "opened_at")


class OpeningRecorder:
    """A Recorder whose store is still opening: `opening` (open_store's recorder and stale searches), then
    `start_parent(recorder)` (the parent run created or resumed), both on a thread of their own."""

    def __init__(self, opening: Future, start_parent: Callable[[Recorder], None], tracking_uri: str):
        self._recorder: Recorder | None = None
        self._error: BaseException | None = None
        self._opened = threading.Event()
        self.opened_at: float | None = None  # when the parent run was ready (Unix time)
        threading.Thread(
            target=self._open, args=(opening, start_parent, tracking_uri), name="gridbench-open-parent", daemon=True
        ).start()

    def _open(self, opening: Future, start_parent: Callable[[Recorder], None], tracking_uri: str) -> None:
        try:
            recorder, stale = opening.result()
            for run_id in stale:
                print(
                    f"gridbench: search {run_id} was left RUNNING by a driver that died; marked KILLED "
                    f"(continue it with `{resume_command(run_id, tracking_uri)}`)",
                    file=sys.stderr,
                )
            start_parent(recorder)
            self._recorder, self.opened_at = recorder, time.time()
        except BaseException as err:  # noqa: BLE001 - the search's own thread raises it (ready, opening_error)
            self._error = err
        finally:
            self._opened.set()

    def ready(self) -> Recorder:
        """The recorder, once its store is open and the parent run started; raises the opening's error."""
        self._opened.wait()
        if self._error is not None:
            raise self._error
        return self._recorder

    @property
    def opening_error(self) -> BaseException | None:
        """Why the store did not open, once that is known; never waits."""
        return self._error if self._opened.is_set() else None

    @property
    def fault(self):
        """The open recorder's fault (out of space), if any; never waits (Tune's loop asks at every step)."""
        return getattr(self._recorder, "fault", None) if self._opened.is_set() else None

    @property
    def parent_run_id(self) -> str | None:
        """The parent run, once created; None while the store opens, or where it failed to."""
        return self._recorder.parent_run_id if self._recorder is not None else None

    def start(self, *args, **kwargs) -> str:
        raise TypeError("the parent run is started by the opening itself (start_parent)")

    def resume(self, *args, **kwargs) -> None:
        raise TypeError("the parent run is resumed by the opening itself (start_parent)")

    def record_trial(self, *args, **kwargs) -> str:
        return self.ready().record_trial(*args, **kwargs)

    def finish(self, *args, **kwargs) -> None:
        """Ends the search in its store; nothing, where the store never opened (its error is the search's)."""
        self._opened.wait()
        if self._recorder is not None:
            self._recorder.finish(*args, **kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN:
            object.__setattr__(self, name, value)
        else:  # the recorder's own settings (announce_unsynced)
            setattr(self.ready(), name, value)

    def __getattr__(self, name: str) -> Any:
        # Anything else a caller asks of the recorder (experiment_name, journal, store_metrics, ...), once open.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.ready(), name)
