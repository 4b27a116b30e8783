"""JAX's persistent compilation cache: which one a search uses, and whether a program came from it.

Three settings (`--compile-cache`):
  - persistent (the default): one directory per user and machine, kept across searches
    ($GRIDBENCH_CACHE_DIR, else $XDG_CACHE_HOME/gridbench/jax or ~/.cache/gridbench/jax),
    bounded (least recently used entries go beyond $GRIDBENCH_CACHE_MAX_MB, 2048 MiB).
    A program compiled by an earlier search loads in about 0.1-0.5 s instead of compiling
    in 3-5 s (an mnist MLP on an H100, docs/results/h100-issue15.md). JAX recommends it,
    and MLPerf Training leaves compiling out of the timed region; each search records
    what the cache held when it started (`compile_cache.state`).
  - search: a directory inside the search's own, removed with it. Each search compiles
    each of its programs once, as on a machine that never ran one: what a first search
    on a fresh machine costs.
  - off: no persistent cache; each worker compiles what it needs.

A persistent directory that cannot be written (or has no room) does not stop a search:
it says so in one line and compiles in the search's own directory instead, and the
parent records why (`compile_cache.state`).

JAX keys each entry by the program, the JAX and XLA versions, the device kind and the
compiler flags, so an entry never serves another machine's or version's program. Beside
its entries, gridbench keeps each program's executables (`programs/`,
gridbench.workloads.saved_programs), which a worker loads without tracing the program. Each
trial records whether the cache served every compilation its program needed
(`program.cached`), so a search on a warm cache is never read as one that compiled.

The driver imports this module for the directory's name only; JAX is imported inside
a worker, by `use`.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

SEARCH, PERSISTENT, OFF = "search", "persistent", "off"
SETTINGS = (SEARCH, PERSISTENT, OFF)

# --compile-ahead: whether the search's own processes compile its programs while Ray starts
# (gridbench.gridsearch.precompile says when auto does).
AHEAD_AUTO, AHEAD_ON, AHEAD_OFF = "auto", "on", "off"
AHEAD_SETTINGS = (AHEAD_AUTO, AHEAD_ON, AHEAD_OFF)
DEFAULT = PERSISTENT
CACHE_DIR_ENV = "GRIDBENCH_CACHE_DIR"
MAX_SIZE_ENV = "GRIDBENCH_CACHE_MAX_MB"  # JAX evicts the least recently used entries beyond this
DEFAULT_MAX_MB = 2048

# The evaluation runs once per trial, over the test set: on a GPU its GEMMs are cuBLAS', not Triton fusions autotuned
# on the device. With XLA's defaults, compiling a headline program's evaluation took 1.72-1.94 s on an H100 (an older
# JAX), against 0.28 s without Triton's GEMMs (docs/results/h100-issue15.md); on an H200 with JAX 0.11.2 a program's
# whole compile fell by 0.12-0.53 s (around-training.md, "tenth"). The epochs, the speedups' substance, keep XLA's
# defaults. Here, beside the cache, for the workloads' evaluations and a worker's start of cuBLAS
# (gridbench.trial.steps.start_gemm_library) alike.
EVALUATION_GPU_OPTIONS = {"xla_gpu_enable_triton_gemm": False}

_REQUEST_EVENT = "/jax/compilation_cache/compile_requests_use_cache"  # each compilation the cache is asked for
_HIT_EVENT = "/jax/compilation_cache/cache_hits"  # each one it served
# JAX's own clocks on a program's way to the device, summed per thread: tracing to a jaxpr, lowering to
# StableHLO, then the backend's step, which is computing the cache key and reading the entry on a hit
# (its read alone is cache_read_s), or compiling on a miss.
PROGRAM_PHASES = {
    "/jax/core/compile/jaxpr_trace_duration": "trace_s",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
    "/jax/core/compile/backend_compile_duration": "backend_s",
    "/jax/compilation_cache/cache_retrieval_time_sec": "cache_read_s",
}
# gridbench's own clocks beside them (gridbench.workloads.saved_programs): reading a saved executable, which
# skips the three phases above, and writing one after a compilation.
SAVED_PHASES = ("executable_read_s", "executable_write_s")
_counts = threading.local()  # per thread: compilations ahead run in threads of their own
_listening = False
_listening_lock = threading.Lock()
_in_use: str | None = None  # the directory `use` gave this process's JAX; None: no cache (--compile-cache off)


def persistent_dir() -> str:
    """The per-user directory kept across searches."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return os.path.join(base, "gridbench", "jax")


def max_size_bytes() -> int:
    """The cache's bound: $GRIDBENCH_CACHE_MAX_MB MiB (a local Ray's workers inherit it), else 2048 MiB."""
    try:
        megabytes = int(os.environ.get(MAX_SIZE_ENV, DEFAULT_MAX_MB))
    except ValueError:
        megabytes = DEFAULT_MAX_MB
    return max(1, megabytes) * 1024**2


def unusable(path: str) -> str | None:
    """Why the persistent directory cannot take programs (created if missing), or None if it can."""
    from gridbench import disk_space

    try:
        disk_space.probe_directory(path)
    except OSError as err:
        return err.strerror or type(err).__name__
    return None


def state(path: str | None) -> str:
    """What a cache directory holds as a search starts: 'empty', or 'N entries, X MB'."""
    if path is None:
        return "off"
    files = (
        [p for p in Path(path).glob("*") if p.is_file() and not p.name.startswith(".")] if os.path.isdir(path) else []
    )
    entries = [p for p in files if p.name.endswith("-cache")] or files  # JAX keeps an -atime file beside each entry
    if not entries:
        return "empty"
    size = sum(p.stat().st_size for p in files if p.exists())
    return f"{len(entries)} entries, {size / 1e6:.1f} MB"


def directory(setting: str, search_dir: str) -> str | None:
    """Where a search's workers keep compiled programs under `setting`; None: nowhere."""
    if setting == PERSISTENT:
        return persistent_dir()
    if setting == SEARCH:
        return os.path.join(search_dir, "jax-cache")
    return None


def tag(setting: str, backend: str) -> str:
    """The `compile_cache` tag: what the setting did, where the backend compiles with JAX; else off."""
    if backend != "jax":
        return OFF
    return "per search" if setting == SEARCH else setting


def use(cache_dir: str) -> None:
    """Points this worker's JAX at `cache_dir`, caching every program, and starts counting what it serves."""
    import jax

    jax.config.update("jax_compilation_cache_dir", cache_dir)
    # Every program, the small ones too (weight initialisation, evaluation: below JAX's default 1 s threshold).
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.config.update("jax_compilation_cache_max_size", max_size_bytes())
    global _in_use
    _in_use = cache_dir
    listen()


def unused() -> None:
    """This worker keeps no programs on disk (--compile-cache off): nothing is read or written beside JAX's."""
    global _in_use
    _in_use = None


def in_use() -> str | None:
    """The compile cache this process's JAX was pointed at (`use`), or None."""
    return _in_use


def listen() -> None:
    """Counts, per thread, the compilations JAX served from its persistent cache (once per process)."""
    global _listening
    with _listening_lock:
        if _listening:
            return
        import jax

        jax.monitoring.register_event_listener(_heard)
        jax.monitoring.register_event_duration_secs_listener(_heard_duration)
        _listening = True


def _heard(event: str, **_details) -> None:
    if event == _REQUEST_EVENT:
        _counts.requests = getattr(_counts, "requests", 0) + 1
    elif event == _HIT_EVENT:
        _counts.hits = getattr(_counts, "hits", 0) + 1


def _heard_duration(event: str, duration: float, **_details) -> None:
    phase = PROGRAM_PHASES.get(event)
    if phase is not None:
        setattr(_counts, phase, getattr(_counts, phase, 0.0) + duration)


def add_phase(phase: str, seconds: float) -> None:
    """Counts `seconds` to one of SAVED_PHASES, on this thread's clocks beside JAX's."""
    setattr(_counts, phase, getattr(_counts, phase, 0.0) + seconds)


def phase_totals() -> dict[str, float]:
    """This thread's time so far in each of PROGRAM_PHASES' and SAVED_PHASES' phases (seconds)."""
    return {phase: getattr(_counts, phase, 0.0) for phase in (*PROGRAM_PHASES.values(), *SAVED_PHASES)}


def phases_since(before: dict[str, float]) -> dict[str, float]:
    """This thread's time in each phase since `before` (a `phase_totals`)."""
    return {phase: total - before.get(phase, 0.0) for phase, total in phase_totals().items()}


def mark() -> tuple[int, int]:
    """This thread's compilations so far: (asked of the cache, served by it)."""
    return getattr(_counts, "requests", 0), getattr(_counts, "hits", 0)


def all_loaded(since: tuple[int, int]) -> bool:
    """Whether this thread compiled something since `since` (a `mark`) and the cache served every one of them."""
    requests, hits = mark()
    return requests > since[0] and hits - since[1] == requests - since[0]
