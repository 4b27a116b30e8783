"""Disk space: a full file system found before a search writes anything, and recognised when it fills mid-way.

A write check must write real bytes: on a full file system creating an empty file
still succeeds (it takes an inode, no block), so an empty probe passed on a full disk
and the search failed later with 128 lines of tracebacks. `probe` writes and syncs
PROBE_BYTES and removes them. Mid-search, ENOSPC (and EDQUOT) from the journal, and
SQLite's "database or disk is full" from the store, are one fault: `OutOfSpace`.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

from gridbench.errors import UserError

# A journal line is a few KB and a new MLflow store about 1 MB before its first run; Ray's session
# writes logs of a few MB. One MiB written and synced is what every one of them needs at the least.
PROBE_BYTES = 1024 * 1024
_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_TEXTS = ("database or disk is full", "no space left on device", "disk quota exceeded")


class OutOfSpace(Exception):
    """A write that the file system refused for lack of space: where, and how much it needed and had."""

    def __init__(self, path: str | os.PathLike, needed: int | None = None, what: str = ""):
        self.path = str(path)
        self.needed = needed
        self.free = free_bytes(path) if os.path.isabs(self.path) else None  # not a store's URI
        self.what = what  # "the journal", "the store", ...
        super().__init__(self.describe())

    def describe(self) -> str:
        needed = f"needed {_size(self.needed)}, " if self.needed else ""
        free = f"{_size(self.free)} free" if self.free is not None else "free space unknown"
        what = f"{self.what} " if self.what else ""
        return f"no space left for {what}at {self.path} ({needed}{free})"


def free_bytes(path: str | os.PathLike) -> int | None:
    """Bytes free to this user on the file system holding `path` (or its nearest existing parent)."""
    existing = Path(path)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        return shutil.disk_usage(existing).free
    except OSError:
        return None


def is_out_of_space(err: BaseException | None) -> bool:
    """True if `err`, or an error it was raised from, says the disk (or the user's quota) is full."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OutOfSpace):
            return True
        if isinstance(err, OSError) and err.errno in _ERRNOS:
            return True
        if any(text in str(err).lower() for text in _TEXTS):
            return True
        err = err.__cause__ or err.__context__
    return False


def fault_of(err: BaseException) -> OutOfSpace:
    """The OutOfSpace that `err` (for which is_out_of_space holds) stands for: where, if it says."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OutOfSpace):
            return err
        if isinstance(err, OSError) and err.errno in _ERRNOS and err.filename:
            return OutOfSpace(os.path.dirname(os.fspath(err.filename)) or err.filename)
        err = err.__cause__ or err.__context__
    return OutOfSpace("a file system of the search's")


def probe(directory: str | os.PathLike, nbytes: int = PROBE_BYTES) -> None:
    """Writes and syncs `nbytes` in `directory`, then removes them; raises OSError where that cannot be done."""
    with tempfile.TemporaryFile(dir=directory, prefix=".gridbench-probe-") as file:
        block = b"\0" * min(nbytes, 64 * 1024)
        for _ in range(0, nbytes, len(block)):
            file.write(block)
        file.flush()
        os.fsync(file.fileno())


def probe_directory(directory: str | os.PathLike) -> None:
    """`probe` in `directory`, created if missing; on failure the directories it created are removed again."""
    directory = Path(directory)
    created = []
    for parent in (directory, *directory.parents):
        if parent.exists():
            break
        created.append(parent)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe(directory)
    except OSError:
        for path in created:  # nothing left behind: innermost first
            try:
                path.rmdir()
            except OSError:
                pass
        raise


def no_room(directory: str | os.PathLike, what: str, fix: str) -> UserError:
    """The one line for a directory that cannot take PROBE_BYTES: `what` it was for, and `fix` besides freeing space."""
    free = free_bytes(directory)
    had = f"{_size(free)} free" if free is not None else "full"
    return UserError(
        f"no space for {what} in {directory} ({had}; a search needs at least {_size(PROBE_BYTES)} there); "
        f"free some space, or {fix}"
    )


def check_room(directory: str | os.PathLike, what: str, fix: str) -> None:
    """A UserError in one line if `directory` cannot be created or take PROBE_BYTES."""
    try:
        probe_directory(directory)
    except OSError as err:
        if err.errno in _ERRNOS:
            raise no_room(directory, what, fix) from None
        raise UserError(f"cannot write {what} in {directory} ({err.strerror}); {fix}") from None


def _size(nbytes: int | None) -> str:
    if nbytes is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"
