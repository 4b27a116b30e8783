"""The one error type a user can fix: the CLI prints it as one line and exits 2. The Python API raises it, or a
subclass of it, for a search that something outside it stopped.

And what keeps that line alone: libraries' C++ sides write to descriptor 2 whatever their
Python loggers are told, so code that may raise one holds that output back meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import sys


class UserError(Exception):
    """Bad input or an unmet precondition, with a message that says how to fix it."""


class SearchStoppedError(UserError):
    """gridbench.search(): something outside the search stopped it, a SIGINT (Ctrl-C) or a SIGTERM.

    The finished trials are recorded and the search is KILLED in the store; the message says how many and the
    command that continues it (`--resume`). `ended_by` names what stopped it ("SIGINT", "out of space"), and
    `exit_code` is the command line's for the same stop (130, 143; 3 for a full disk).
    """

    def __init__(self, message: str, ended_by: str, exit_code: int):
        super().__init__(message)
        self.ended_by = ended_by
        self.exit_code = exit_code


class SearchOutOfSpaceError(SearchStoppedError):
    """gridbench.search(): a disk filled during the search (the journal's, the store's, Ray's).

    What finished is in the store or its journal; the message names the `gridbench sync` command where the
    store lacks part of it, then `--resume` continues the search once there is space.
    """


@contextlib.contextmanager
def stderr_into(file):
    """Writes this process's descriptor 2 (C++ libraries' output included) into `file` meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
