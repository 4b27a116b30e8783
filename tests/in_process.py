"""The command line's main() run in the test process, whose MLflow and gridbench are imported already, for
commands whose output a test reads for what it says: a `python -m gridbench` process of its own imported them again
(3.2 CPU s for a compare or a report, 2 cores, 2026-11-26). A test of what else a command prints (one line on
stderr, nothing before it: what the frameworks' own handlers may write) runs it in a process of its own.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path


def gridbench_main(*args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    """`gridbench ARGS` in this process, in `cwd`: its exit code, stdout and stderr. The environment is given back
    as it was: a command sets variables for its own process (MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT), which the
    processes later tests start would otherwise inherit."""
    from gridbench.cli import main

    out, err, environ = io.StringIO(), io.StringIO(), dict(os.environ)
    try:
        with contextlib.chdir(cwd or os.getcwd()), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        os.environ.clear()
        os.environ.update(environ)
    return code, out.getvalue(), err.getvalue()
