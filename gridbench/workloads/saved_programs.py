"""Compiled programs kept on disk beside JAX's compile cache, ready without tracing or lowering them again.

JAX's persistent cache keys an entry by the lowered program, so a program found there is
still traced and lowered first: on an H100 0.24-0.62 s to be ready, the cache read 0.08-0.16 s
of it (docs/results/h100-fixed-costs.md). Here whoever compiles a program (a trial, a
compilation ahead, a precompile process) also writes its executables, serialised
(jax.experimental.serialize_executable) with their argument and result trees, to
`programs/` in the same cache directory, named by everything the program depends on
(`identity`). A later worker that finds the file loads the executables directly.

The name holds gridbench's program key (workload, architecture, batch size, precision,
optimizer, loop, data shapes and dtypes, classes, device, members of a fused group), the
source of gridbench.workloads (the loop, the models, donation), the versions of JAX, jaxlib,
Keras and Python, JAX's tracing configuration, Keras' configuration, the XLA flags, the
device's platform, kind and runtime, the host's processor, and whether the program carries
each operation's whole Python traceback (short_locations: by default only its innermost frame,
which makes an executable quicker to load on a GPU). A file is used only if its
checksum and the full identity inside it match, and its executables take exactly the
arguments the trial passes (shapes, dtypes, shardings); anything else (damaged, foreign,
unfitting, unreadable) falls back to tracing and JAX's cache, and the file is removed.
Writers write a temporary file and rename it, so that concurrent writers never leave a
partial one.

Only executables XLA compiled in the process are saved: one that JAX's cache served does not
serialise whole again. So the executables are named after the identity in JAX's cache too
(`tagged`): no other program's entry (an evaluation shared by two batch sizes) and no older
gridbench's serves them. One JAX's cache still serves (its file evicted) is compiled again past
JAX's cache by a precompile process, which saves it (gridbench.trial.precompile.save_unsaved).

Nothing here is read or written without a compile cache (--compile-cache off), for a user's
model (its source is not in the name), under data parallelism, or with
$GRIDBENCH_SAVED_PROGRAMS=0 (the way before, for measuring against it). The files are
bounded to a quarter of the cache's size ($GRIDBENCH_CACHE_MAX_MB), least recently used
first. Like JAX's own cache, the directory is trusted: loading an executable runs its code.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import hashlib
import logging
import os
import pickle
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import jax
import keras
from jax.experimental import serialize_executable

from gridbench import collector, compile_cache
from gridbench.workloads import source_digest
from gridbench.workloads.programs import Program

FORMAT = 1  # of the file: MAGIC, the payload's sha256, then the pickled payload
MAGIC = b"gridbench-program\n"
SUFFIX = ".program"
SUBDIRECTORY = "programs"
ENABLED_ENV = "GRIDBENCH_SAVED_PROGRAMS"  # "0": trace, lower and look up in JAX's cache every time, as before
EXECUTABLES = ("train_epoch", "correct")  # the Program's executables kept in a file
# Program keys whose programs JAX's cache served in this process with no saved file to read: an older
# gridbench's, one whose file was evicted, or one compiled before gridbench.workloads' source changed.
SERVED_UNSAVED: set[tuple] = set()
_log = logging.getLogger(__name__)


def directory() -> str | None:
    """Where this process keeps saved programs: beside its JAX compile cache; None: nowhere."""
    cache = compile_cache.in_use()
    if cache is None or os.environ.get(ENABLED_ENV, "1") == "0":
        return None
    return os.path.join(cache, SUBDIRECTORY)


def ready_or_compile(
    program_key: tuple,
    arguments: dict[str, tuple],
    place,
    compile_program: Callable[[str | None], Program],
    *,
    ahead: bool = False,
    keep: bool = True,
) -> Program:
    """The program saved under `program_key`, if one takes `arguments`; else compile_program(tag), then saved.

    `arguments` holds, for each of EXECUTABLES, the arguments (or their ShapeDtypeStructs) it is called with.
    `tag` names the program's executables in JAX's cache after its identity: none of them is then served by an
    entry another program (the same evaluation under another batch size or optimizer) or another identity (an
    older gridbench.workloads) compiled, which could not be saved (below). `keep` False (a user's model), several
    devices or no directory: compile_program(None) alone, as before.
    """
    where = directory()
    if where is None or not keep or isinstance(place, jax.sharding.Sharding):
        with short_locations():
            return compile_program(None)
    name = identity(program_key, place)
    path = path_of(where, name)
    program = load(path, name, arguments, place, ahead)
    if program is not None:
        return program
    served = compile_cache.mark()[1]
    with short_locations():
        program = compile_program(os.path.basename(path)[:12])
    # Only an executable XLA compiled here: one that JAX's cache served does not serialise whole again (JAX
    # 0.10.2 on CPU: the reloaded executable failed as it ran, "Function add_tanh_fusion.2 not found").
    if compile_cache.mark()[1] == served:
        save(path, name, program)
    else:
        SERVED_UNSAVED.add(program_key)  # a precompile process compiles it again past JAX's cache (save_unsaved)
    return program


# JAX writes each operation's Python traceback (up to jax_traceback_in_locations_limit frames: 100 in JAX 0.10.2)
# into the program, and XLA:GPU formats every instruction's frames into profiler annotations each time it loads an
# executable: 57% of py-spy's samples inside a program's loads on an H100 (docs/results/around-training.md,
# twenty-first section). The innermost frame of each operation (its file and line) is kept; JAX's own variable,
# where set, is the user's choice and stands.
FULL_TRACEBACKS_ENV = "JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS"


def full_tracebacks() -> bool:
    """Whether gridbench's programs carry each operation's whole Python traceback: only where the user asked."""
    return FULL_TRACEBACKS_ENV in os.environ and jax.config.jax_include_full_tracebacks_in_locations


@contextlib.contextmanager
def short_locations():
    """Programs lowered inside carry full tracebacks only where the user asked (full_tracebacks)."""
    from jax._src import config  # JAX's own module: the setting has no public context manager

    with config.include_full_tracebacks_in_locations(full_tracebacks()):
        yield


@contextlib.contextmanager
def past_jax_cache():
    """Compilations inside neither read nor write JAX's persistent cache: for compiling again, to save, what it
    served (ready_or_compile). Process-wide: only for a process that compiles nothing else meanwhile."""
    from jax._src import compilation_cache  # JAX's own module: no public way to step past its cache for a while

    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()  # JAX decides once per process whether it uses the cache: ask it again
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", True)
        compilation_cache.reset_cache()


def identity(program_key: tuple, device) -> str:
    """Everything a program depends on besides its arguments' values, as text (a file's name hashes it)."""
    process = (*_process_identity(), ("full_tracebacks", full_tracebacks()))
    return repr((FORMAT, program_key, process, _device_identity(device), _trace_config(), _keras_config()))


def tagged(function: Callable, tag: str | None) -> Callable:
    """`function` under a name that ends in `tag` (jax.jit names its program, and JAX's cache entry, after it)."""
    if tag is None:
        return function

    def renamed(*args):
        return function(*args)

    renamed.__name__ = renamed.__qualname__ = f"{getattr(function, '__name__', 'program')}_{tag}"
    return renamed


def path_of(where: str, name: str) -> str:
    """The file in `where` that holds the program of identity `name`."""
    return os.path.join(where, hashlib.sha256(name.encode()).hexdigest()[:40] + SUFFIX)


@functools.lru_cache(maxsize=1)
def _process_identity() -> tuple:
    """What stays the same in a process: versions, gridbench's program code, XLA flags, the processor."""
    import jaxlib

    return (
        ("jax", jax.__version__),
        ("jaxlib", jaxlib.__version__),
        ("keras", keras.__version__),
        ("python", sys.version_info[:3]),
        ("workloads", source_digest()),
        ("XLA_FLAGS", os.environ.get("XLA_FLAGS", "")),
        ("LIBTPU_INIT_ARGS", os.environ.get("LIBTPU_INIT_ARGS", "")),
        ("host", platform.machine(), _processor()),
    )


def _processor() -> str:
    """The host processor's model and features (XLA:CPU compiles for them); '' where /proc/cpuinfo is absent."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            lines = cpuinfo.read().split("\n\n")[0].splitlines()
    except OSError:
        return platform.processor()
    wanted = [line for line in lines if line.split(":")[0].strip() in ("vendor_id", "model name", "flags", "Features")]
    return hashlib.sha256("\n".join(wanted).encode()).hexdigest()[:16]


def _device_identity(device) -> tuple:
    return (device.platform, device.device_kind, device.client.platform_version, device.id, jax.process_count())


def _trace_config() -> tuple:
    """JAX's configuration that tracing depends on (its own jit cache keys by it), by name where JAX says them."""
    from jax._src import config

    values = config.trace_context()
    try:
        names = config.trace_context_names()
    except (AttributeError, NotImplementedError):
        names = range(len(values))
    return tuple((name, _plain(value)) for name, value in zip(names, values))


def _plain(value: Any) -> Any:
    """`value` where its repr is stable across processes; else its type (an object's repr holds its address)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    text = repr(value)
    return type(value).__qualname__ if " at 0x" in text else text


def _keras_config() -> tuple:
    return (
        keras.backend.backend(),
        keras.config.floatx(),
        keras.config.epsilon(),
        keras.config.image_data_format(),
        keras.config.dtype_policy().name,
    )


def load(path: str, name: str, arguments: dict[str, tuple], device, ahead: bool = False) -> Program | None:
    """The program saved at `path` if it is `name`'s and takes `arguments`; None (and why, in the log) if not."""
    start = time.perf_counter()
    try:
        with open(path, "rb") as file, collector.held():  # a full collection here walked the heap inside the timed load
            payload = _payload(file.read(), name)
            executables = _deserialized(payload, device)
        for part, compiled in executables.items():
            mismatch = _mismatch(compiled, arguments[part])
            if mismatch:
                raise ValueError(f"{part} takes other arguments: {mismatch}")
    except FileNotFoundError:
        return None
    except OSError as err:  # unreadable: left as it is
        _log.warning("saved program %s not read (%s); compiling it", path, err)
        return None
    except Exception as err:  # noqa: BLE001 - damaged, foreign or unfitting: removed, and compiled
        _log.warning("saved program %s not used (%s: %s); compiling it", path, type(err).__name__, err)
        Path(path).unlink(missing_ok=True)
        return None
    _touch(path)
    seconds = time.perf_counter() - start
    compile_cache.add_phase("executable_read_s", seconds)
    return Program(executables["train_epoch"], executables["correct"], seconds, ahead, cached=True)


def _deserialized(payload: dict, device) -> dict[str, Any]:
    """Each of EXECUTABLES loaded onto `device`, the later ones on a thread beside the first: XLA lets go of Python's
    lock while it deserialises, so the program is ready after the longest load rather than after their sum."""

    def one(part: str):
        return serialize_executable.deserialize_and_load(*payload[part], device.client, [device])

    first, *others = EXECUTABLES
    with concurrent.futures.ThreadPoolExecutor(len(others), thread_name_prefix="gridbench-load") as pool:
        beside = {part: pool.submit(one, part) for part in others}
        loaded = {first: one(first)}
        return loaded | {part: future.result() for part, future in beside.items()}


def _payload(blob: bytes, name: str) -> dict:
    """The payload of a file's bytes, checked: its format, checksum and identity."""
    header, digest, body = blob[: len(MAGIC)], blob[len(MAGIC) : len(MAGIC) + 64], blob[len(MAGIC) + 65 :]
    if header != MAGIC or digest != hashlib.sha256(body).hexdigest().encode():
        raise ValueError("not a whole saved program (format or checksum)")
    payload = pickle.loads(body)
    if payload.get("identity") != name:
        raise ValueError("saved for another program or environment")
    return payload


def _mismatch(compiled, arguments: tuple) -> str:
    """How `arguments` differ from what `compiled` takes (tree, shapes, dtypes, weak types, shardings); '' if not."""
    leaves, tree = jax.tree_util.tree_flatten((arguments, {}))
    if tree != compiled.in_tree:
        return "their structure"
    expected_avals = jax.tree_util.tree_leaves(compiled.in_avals)
    # A sharding is None where XLA dropped an unused argument.
    expected_shardings = jax.tree_util.tree_leaves(compiled.input_shardings, is_leaf=lambda value: value is None)
    for index, (leaf, aval, sharding) in enumerate(zip(leaves, expected_avals, expected_shardings)):
        given = (tuple(leaf.shape), str(leaf.dtype), bool(getattr(leaf, "weak_type", False)))
        if given != (tuple(aval.shape), str(aval.dtype), bool(aval.weak_type)):
            return f"argument {index} is {given}, not {aval}"
        if sharding is not None and not sharding.is_equivalent_to(leaf.sharding, len(aval.shape)):
            return f"argument {index} is placed {leaf.sharding}, not {sharding}"
    return ""


def _touch(path: str) -> None:
    try:
        os.utime(path)  # least recently used goes first (bound)
    except OSError:
        pass


def save(path: str, name: str, program: Program) -> None:
    """Writes `program`'s executables to `path` (whole, or not at all); a failure only says so in the log."""
    start = time.perf_counter()
    try:
        payload = {"identity": name}
        for part in EXECUTABLES:
            payload[part] = serialize_executable.serialize(getattr(program, part))
        body = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
        blob = MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _write_whole(path, blob)
        bound(os.path.dirname(path), compile_cache.max_size_bytes() // 4)
    except Exception as err:  # noqa: BLE001 - the program still runs; a later worker compiles it again
        _log.warning("could not save program %s (%s: %s)", path, type(err).__name__, err)
    compile_cache.add_phase("executable_write_s", time.perf_counter() - start)


def _write_whole(path: str, blob: bytes) -> None:
    """Writes a temporary file beside `path`, then renames it: readers see the old file or the new, never a part."""
    descriptor, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".writing-")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(blob)
        os.chmod(temporary, 0o644)  # as JAX's own entries (mkstemp makes it the owner's alone)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


STALE_WRITE_S = 3600  # a temporary file older than this was left by a writer that died


def bound(where: str, max_bytes: int) -> None:
    """Removes the least recently used saved programs in `where` beyond `max_bytes`, and dead writers' leftovers."""
    for leftover in Path(where).glob(".writing-*"):
        try:
            if time.time() - leftover.stat().st_mtime > STALE_WRITE_S:
                leftover.unlink()
        except OSError:  # another worker's, removed meanwhile
            pass
    files = []
    for path in Path(where).glob(f"*{SUFFIX}"):
        try:
            stat = path.stat()
        except OSError:  # removed by another worker meanwhile
            continue
        files.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files, key=lambda entry: entry[0]):
        if total <= max_bytes:
            break
        path.unlink(missing_ok=True)
        total -= size
