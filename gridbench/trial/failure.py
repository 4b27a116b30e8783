"""Why a trial failed, in one line with what a user can do about it: the kinds of failure and how each is told.

    out of GPU memory   the framework's allocator refused (XLA, TensorFlow, PyTorch, CuPy), or a worker died saying so
    out of host memory  a MemoryError, Ray's memory monitor, or the kernel's OOM killer
    worker crashed      the worker process died: its signal, and the last error lines of its log
    exception           the model or the data raised: the exception's own line
    timeout             the trial ran past --trial-timeout and was stopped

The worker tells an exception's kind (`of_exception`); the driver tells a dead worker's (`of_dead_worker`, from
Ray's error, the worker's log and the kernel's) and a timeout's (`of_timeout`). Pure text rules, no framework.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

GPU_MEMORY = "gpu_memory"
HOST_MEMORY = "host_memory"
CRASHED = "worker_crashed"
EXCEPTION = "exception"
TIMEOUT = "timeout"
KINDS = (GPU_MEMORY, HOST_MEMORY, CRASHED, EXCEPTION, TIMEOUT)

LABELS = {
    GPU_MEMORY: "out of GPU memory",
    HOST_MEMORY: "out of host memory",
    CRASHED: "worker crashed",
    EXCEPTION: "exception",
    TIMEOUT: "timeout",
}
FIXES = {
    GPU_MEMORY: "use a smaller model or batch, or fewer trials per GPU (--gpus-per-trial 1)",
    HOST_MEMORY: "run fewer trials at once (--max-concurrent N) or use a smaller model, batch or dataset",
    CRASHED: "--retries N runs a crashed trial again; --keep-ray-logs keeps the worker's whole log",
    EXCEPTION: "fix the model or the data (the traceback is in the trial's run); an exception is never retried",
    TIMEOUT: "raise --trial-timeout (or the spec's trial_timeout) if the trial needs longer, or find where it hangs",
}
# Kinds that a retry (--retries) may get past: the process died of something outside the trial's own code.
RETRIABLE = (CRASHED, HOST_MEMORY, GPU_MEMORY)

GIB = 1024**3


@dataclass(frozen=True)
class Failure:
    kind: str
    what: str  # what happened, without the kind's label or the fix
    killed: bool = False  # the worker process died of it (a retry may get past it), rather than raised it

    @property
    def message(self) -> str:
        """One line: the kind, what happened, the fix."""
        retry = "; --retries N runs a trial killed so again" if self.killed and self.kind != CRASHED else ""
        return f"{LABELS[self.kind]}: {self.what}; {FIXES[self.kind]}{retry}"


# --- the worker: an exception ---------------------------------------------------------------------------------

_GPU_OOM = re.compile(
    r"RESOURCE_EXHAUSTED|CUDA out of memory|OutOfMemoryError|out of memory while trying to allocate|"
    r"OOM when allocating|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation|Out of memory allocating",
    re.IGNORECASE,
)
_ASKED = (
    re.compile(r"trying to allocate ([\d.,]+\s*[KMGT]?i?B|[\d,]+ bytes)", re.IGNORECASE),  # XLA
    re.compile(r"Tried to allocate ([\d.]+ [KMGT]iB)"),  # PyTorch
    re.compile(r"Out of memory allocating ([\d,]+ bytes)"),  # CuPy
    re.compile(r"Unable to allocate ([\d.]+ [KMGT]iB)"),  # NumPy
    re.compile(r"OOM when allocating tensor with (shape\[[^\]]*\])"),  # TensorFlow
)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Keras re-raises a layer's exception with this line first, the exception's own message after it.
_WRAPPER = re.compile(r"^Exception encountered when calling ")


def first_line(err: BaseException) -> str:
    """The exception's own line: its type and the first line of its message (a framework's wrapping line left out)."""
    lines = [line.strip() for line in _ANSI.sub("", str(err)).splitlines() if line.strip()]
    own = next((line for line in lines if not _WRAPPER.match(line)), lines[0] if lines else "")
    return f"{type(err).__name__}: {own}"[:300] if own else type(err).__name__


def asked_for(text: str) -> str | None:
    """What an allocator said it was asked for ('37.25 GiB', '40,000,000,000 bytes'), if it said."""
    for pattern in _ASKED:
        found = pattern.search(text)
        if found:
            return found.group(1)
    return None


def of_exception(err: BaseException, gpu_held: str | None = None) -> Failure:
    """The kind of an exception a trial raised; `gpu_held`: what its GPU held ('GPU 0: 71.2 of 79.1 GiB in use')."""
    chain = _chain(err)  # a framework may re-raise another type (Keras: RuntimeError), the original in its context
    host = next((e for e in chain if isinstance(e, MemoryError)), None)
    gpu = next((e for e in chain if host is None and _GPU_OOM.search(f"{type(e).__name__}: {e}")), None)
    if gpu is not None:
        line, asked = first_line(gpu), asked_for(f"{type(gpu).__name__}: {gpu}")
        said = ", ".join(p for p in (f"asked for {asked}" if asked else "", gpu_held or "") if p)
        return Failure(GPU_MEMORY, f"{said} ({line})" if said else line)
    if host is not None:
        line, asked = first_line(host), asked_for(str(host))
        return Failure(HOST_MEMORY, f"asked for {asked} ({line})" if asked else line)
    return Failure(EXCEPTION, first_line(err))


def _chain(err: BaseException, most: int = 10) -> list[BaseException]:
    """The exception and those it was raised from or during, outermost first."""
    chain: list[BaseException] = []
    while err is not None and err not in chain and len(chain) < most:
        chain.append(err)
        err = err.__cause__ or err.__context__
    return chain


# --- the driver: a dead worker, a timeout ---------------------------------------------------------------------

_FAULT_NAMES = {
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Floating-point exception": "SIGFPE",
    "Illegal instruction": "SIGILL",
}
_NOISE = re.compile(
    r"^(:job_id:|:actor_name:|:task_name:|Stack \(most recent|Current thread|Thread 0x|\s+File \"|Extension modules|"
    r"PC: @|\s*@ +0x|\(total: \d+\))"
)
# What Ray's C++ logging puts before a line: "[2026-11-26 08:27:04,786 E 28276 28276] logging.cc:474: ".
_LOG_PREFIX = re.compile(r"^\[[^\]]*\] [\w.]+\.cc:\d+: ")
_RAY_MEMORY_MONITOR = re.compile(r"memory monitor|running low on memory|OutOfMemoryError", re.IGNORECASE)


def signal_in_log(lines: Sequence[str]) -> str | None:
    """The signal a worker's log says killed it (absl's '*** SIGSEGV received', Python's 'Fatal Python error')."""
    for line in reversed(lines):
        found = re.search(r"\*\*\* (SIG[A-Z]+) received", line)
        if found:
            return found.group(1)
        found = re.search(r"Fatal Python error: (.+)", line)
        if found:
            return _FAULT_NAMES.get(found.group(1).strip(), found.group(1).strip())
    return None


def error_lines(lines: Sequence[str], most: int = 3) -> list[str]:
    """The last lines of a worker's log that say something: stack frames, addresses and Ray's markers left out."""
    bare = [_LOG_PREFIX.sub("", line) for line in lines]
    said = [line.strip() for line in bare if line.strip() and not _NOISE.match(line)]
    return [line[:200] for line in said[-most:]]


def of_dead_worker(ray_error: str, log_lines: Sequence[str] = (), killed_by_kernel: bool = False) -> Failure:
    """A worker that died mid-trial: Ray's error text, the worker's log (if read), and whether the kernel's OOM
    killer killed it (if known)."""
    said = error_lines(log_lines)
    tail = f"; its log ends: {' | '.join(said)}" if said else ""
    if _RAY_MEMORY_MONITOR.search(ray_error):
        usage = re.search(r"was running was ([\d.]+\s*[KMGT]?B / [\d.]+\s*[KMGT]?B)", ray_error)
        where = f"the node's memory was {usage.group(1)} used" if usage else "the node ran low on memory"
        return Failure(HOST_MEMORY, f"Ray's memory monitor killed the worker ({where})", killed=True)
    if killed_by_kernel:
        return Failure(HOST_MEMORY, "the kernel's OOM killer killed the worker (see dmesg)" + tail, killed=True)
    if any(_GPU_OOM.search(line) for line in log_lines):
        asked = next((a for a in map(asked_for, log_lines) if a), None)
        what = (f"asked for {asked}; " if asked else "") + "the worker died of it" + tail
        return Failure(GPU_MEMORY, what, killed=True)
    signal_name = signal_in_log(log_lines)
    exited = re.search(r"exit code (\d+)", ray_error)  # not Ray's "connection error code 2", its socket's
    if signal_name:
        how = f"killed by {signal_name}"
    elif exited:
        how = f"exited with code {exited.group(1)}"
    elif re.search(r"node has crashed|node .* died|node died", ray_error, re.IGNORECASE):
        how = "its Ray node died under it"
    else:
        how = "its process ended without a word (SIGKILL, or an exit from native code)"
    return Failure(CRASHED, how + tail, killed=True)


def of_timeout(limit_s: float, ran_s: float) -> Failure:
    return Failure(TIMEOUT, f"stopped after {ran_s:.1f} s, past the trial timeout of {limit_s:g} s")
