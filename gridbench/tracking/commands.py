"""The commands gridbench prints for a user to paste: every word quoted for the shell (shlex.quote).

A store or journal path with spaces or quotes, pasted as printed, then runs as printed. The
`--resume` command is the run id alone (the search's parent run holds its spec and options).
"""

from __future__ import annotations

import shlex


def pasteable(*words: str) -> str:
    """A command line to paste into a shell: each word quoted where it needs it."""
    return shlex.join(str(word) for word in words)


def ui_command(tracking_uri: str) -> str:
    return pasteable("python", "-m", "gridbench", "ui", "--tracking-uri", tracking_uri)


def sync_command(journal: str, tracking_uri: str | None = None) -> str:
    where = ("--tracking-uri", tracking_uri) if tracking_uri else ()
    return pasteable("gridbench", "sync", str(journal), *where)


def resume_command(run_id: str, tracking_uri: str | None = None) -> str:
    """`gridbench search --resume RUN_ID [--tracking-uri URI]`: the spec and options come from the search's parent
    run; gridbench.tracking.stale.resume_command leaves the store out where it is the default."""
    where = ("--tracking-uri", tracking_uri) if tracking_uri else ()
    return pasteable("gridbench", "search", "--resume", run_id, *where)
