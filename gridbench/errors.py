"""The one error type a user can fix: the CLI prints it as one line and exits 2.

And what keeps that line alone: libraries' C++ sides write to descriptor 2 whatever their
Python loggers are told, so code that may raise one holds that output back meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import sys


class UserError(Exception):
    """Bad input or an unmet precondition, with a message that says how to fix it."""


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
