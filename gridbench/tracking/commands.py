"""The commands gridbench prints for a user to paste: every word quoted for the shell (shlex.quote).

A store or journal path with spaces or quotes, pasted as printed, then runs as printed.
"""

from __future__ import annotations

import shlex
from typing import Sequence


def pasteable(*words: str) -> str:
    """A command line to paste into a shell: each word quoted where it needs it."""
    return shlex.join(str(word) for word in words)


def ui_command(tracking_uri: str) -> str:
    return pasteable("python", "-m", "gridbench", "ui", "--tracking-uri", tracking_uri)


def sync_command(journal: str, tracking_uri: str | None = None) -> str:
    where = ("--tracking-uri", tracking_uri) if tracking_uri else ()
    return pasteable("gridbench", "sync", str(journal), *where)


def resume_command(
    command_line: str | None, spec_name: str, run_id: str, tracking_uri: str | None = None, device: str | None = None
) -> str:
    """How to continue search `run_id`: the command that ran it (its options must be the same) with `--resume RUN_ID`.

    `command_line` is the search's recorded command (the `command` tag); where it was not a `gridbench search`
    command line (the Python API), the spec's name, and the store where one is given. `device`: the search's,
    for one half of `--device both`, which is resumed on its own.
    """
    try:
        words = shlex.split(command_line or "")
    except ValueError:  # an unbalanced quote: not a command line this can rebuild
        words = []
    if words[:2] == ["gridbench", "search"]:
        words = _without_resume(words)
        if device and ("both" in words or "--device=both" in words):
            words = [
                device if word == "both" and before == "--device" else f"--device={device}" if word == "--device=both"
                else word
                for before, word in zip(["", *words], words)
            ]  # fmt: skip
        return pasteable(*words, "--resume", run_id)
    where = ("--tracking-uri", tracking_uri) if tracking_uri else ()
    return pasteable("gridbench", "search", spec_name, "--resume", run_id, *where)


def _without_resume(words: Sequence[str]) -> list[str]:
    """The words less a `--resume [RUN_ID]` (the search that was resumed: the new command names it)."""
    kept, index = [], 0
    while index < len(words):
        word = words[index]
        if word.startswith("--resume="):
            index += 1
            continue
        if word == "--resume":
            has_value = index + 1 < len(words) and not words[index + 1].startswith("-")
            index += 2 if has_value else 1
            continue
        kept.append(word)
        index += 1
    return kept
