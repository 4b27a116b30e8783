"""`python saved_programs.py CACHE_DIR`: programs saved beside the compile cache (gridbench.workloads.saved_programs),
in this process on JAX's CPU; prints one JSON line of a report (test_saved_programs).

For an MLP trial and a fused group of two: trained on a program traced and compiled here (and so saved), then on the
saved one loaded back; the report holds both results, each final state's digest and what JAX's and gridbench's
clocks saw. Then what a damaged, a foreign and an unfitting file do (JAX's cache serves the program instead), a
program compiled ahead from shapes alone (as the precompile processes do) and loaded by a trial against the same
program traced, and --compile-cache off.
"""

import gc
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import jax
import numpy as np
from jax.experimental import serialize_executable

from gridbench import compile_cache, datasets
from gridbench.datasets import trial_data
from gridbench.trial.precompile import save_unsaved
from gridbench.trial.timing import PhaseClock
from gridbench.workloads import get_workload, keras_mlp, saved_programs
from gridbench.workloads.keras_compiled import program_arguments
from gridbench.workloads.programs import PROGRAMS

LOADS_WITH_COLLECTOR: list[bool] = []  # for each executable loaded: whether the cyclic collector was on meanwhile
_load = serialize_executable.deserialize_and_load


def _recorded_load(*args, **kwargs):
    LOADS_WITH_COLLECTOR.append(gc.isenabled())
    return _load(*args, **kwargs)


serialize_executable.deserialize_and_load = _recorded_load  # saved_programs calls it through the module

DATA = trial_data.load(datasets.DataSource("digits"), seed=0, flat=True)
BASE = {hp.name: hp.default for hp in get_workload("mlp", "test").hyperparameters}
BASE.update(epochs=2, batch_size=32, train_loop="compiled", optimizer="adam", hidden_units=16, hidden_layers=1)


def trial(fused: bool = False, detached: bool = False, units: int = 16) -> dict:
    """One session from a fresh worker's view (no program kept in the process): how it got its program, and what
    it trained."""
    PROGRAMS.clear()
    LOADS_WITH_COLLECTOR.clear()
    base = dict(BASE, hidden_units=units)
    if fused:
        members = [dict(base, learning_rate=0.01, dropout=0.0), dict(base, learning_rate=0.001, dropout=0.3)]
        session = keras_mlp.open_fused_session(members, DATA, [0, 1])
    else:
        session = keras_mlp.open_session(dict(base, learning_rate=0.003, dropout=0.1), DATA, seed=0)
    session.workload = "mlp"
    session.build()
    before = compile_cache.phase_totals()
    if detached:  # as a precompile process does: from shapes alone, then the trial takes it from PROGRAMS
        PROGRAMS.get(session.program_key, session.compile_detached)
        PROGRAMS.clear()
        before = compile_cache.phase_totals()
    start = time.perf_counter()
    tags = session.compile()  # the trial's compile phase
    compile_s = time.perf_counter() - start
    phases = compile_cache.phases_since(before)
    fit = session.fit(PhaseClock(sync=session.sync))
    evaluation = session.evaluate()
    state = hashlib.sha256(b"".join(np.asarray(leaf).tobytes() for leaf in jax.tree_util.tree_leaves(session.state)))
    return {
        "cached": tags["program.cached"],
        "compile_s": compile_s,
        "phases": phases,
        "fit": fit,
        "evaluation": evaluation,
        "state": state.hexdigest(),
        "collector_in_loads": list(LOADS_WITH_COLLECTOR),
        "collector_after": gc.isenabled(),
    }


def mlp_session():
    session = keras_mlp.open_session(dict(BASE, learning_rate=0.003, dropout=0.1), DATA, seed=0)
    session.workload = "mlp"
    session.build()
    return session


def mlp_file() -> Path:
    session = mlp_session()
    return Path(
        saved_programs.path_of(saved_programs.directory(), saved_programs.identity(session.program_key, session.place))
    )


def unfitting() -> bool:
    """The MLP's saved program is used for its own arguments, and not for arguments of another shape."""
    session = mlp_session()
    place, name = session.place, saved_programs.identity(session.program_key, session.place)
    arguments = (session.state, session.key, session.x_train, session.y_train)
    x = session.x_train
    other = (*arguments[:2], jax.ShapeDtypeStruct((7, *x.shape[1:]), x.dtype, sharding=x.sharding), arguments[3])
    path = str(mlp_file())
    fits = saved_programs.load(path, name, program_arguments(arguments, place), place)
    return fits is not None and saved_programs.load(path, name, program_arguments(other, place), place) is None


def saved_files(cache: Path) -> list[Path]:
    return sorted((cache / saved_programs.SUBDIRECTORY).glob(f"*{saved_programs.SUFFIX}"))


def identity_report() -> dict:
    """Whether a saved program's name changes with the shapes, the XLA flags and the tracing configuration."""
    device = jax.local_devices()[0]
    key = ("mlp", (("batch_size", 32),), (100, 64), "float32", (100,), 10, (str(device),))
    name = saved_programs.identity(key, device)
    facts = ("jax", "jaxlib", "keras", "workloads", "XLA_FLAGS", device.device_kind, device.platform)
    report = {"same": name == saved_programs.identity(key, device), "facts_named": all(f in name for f in facts)}
    report["other_shape"] = name != saved_programs.identity((*key[:2], (101, 64), *key[3:]), device)
    with jax.default_matmul_precision("highest"):
        report["other_matmul_precision"] = saved_programs.identity(key, device) != name
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_fast_math=true"
    saved_programs._process_identity.cache_clear()  # read once per process: a worker's flags do not change
    report["other_xla_flags"] = saved_programs.identity(key, device) != name
    return report


def bound_report(where: Path) -> dict:
    """What bound() keeps of four 100-byte programs in 250 bytes (the oldest read last), and of dead writers' files."""
    where.mkdir()
    for age, name in enumerate("abcd"):
        (where / f"{name}{saved_programs.SUFFIX}").write_bytes(b"x" * 100)
        os.utime(where / f"{name}{saved_programs.SUFFIX}", (1000 + age, 1000 + age))
    os.utime(where / f"a{saved_programs.SUFFIX}", (2000, 2000))  # read last: kept
    (where / ".writing-old").write_bytes(b"x")
    os.utime(where / ".writing-old", (1000, 1000))
    (where / ".writing-now").write_bytes(b"x")
    saved_programs.bound(str(where), 250)
    return {"kept": sorted(p.name for p in where.iterdir())}


def main(cache: Path) -> dict:
    compile_cache.use(str(cache))
    report = {"mlp": [trial(), trial()], "fused": [trial(True), trial(True)]}  # traced and saved; then loaded
    report["saved"] = len(saved_files(cache))
    path = mlp_file()
    good = path.read_bytes()
    fused_bytes = next(p.read_bytes() for p in saved_files(cache) if p != path)
    report["unfitting_refused"] = unfitting()
    report["unfitting_removed"] = not path.exists()
    path.write_bytes(good[: len(good) // 2])  # damaged: cut short
    report["damaged"] = trial()
    report["damaged_removed"] = not path.exists()
    path.write_bytes(fused_bytes)  # whole, but another program's
    report["foreign"] = trial()
    report["foreign_removed"] = not path.exists()
    # JAX's cache served it, with no file to read: a precompile process compiles it again past JAX's cache, saves it.
    report["served_unsaved"] = mlp_session().program_key in saved_programs.SERVED_UNSAVED and not path.exists()
    save_unsaved([mlp_session()])
    report["restored"] = trial()
    # A program JAX's cache has not seen, compiled from shapes alone and loaded; then the same traced again.
    report["detached"] = trial(detached=True, units=24)
    os.environ[saved_programs.ENABLED_ENV] = "0"
    report["traced"] = trial(units=24)
    del os.environ[saved_programs.ENABLED_ENV]
    files = saved_files(cache)
    compile_cache.unused()
    report["off"] = trial(units=8)  # compiled, and not saved
    report["off_saved_nothing"] = saved_files(cache) == files
    report["bound"] = bound_report(cache / "bound")
    report["identity"] = identity_report()  # last: it changes XLA_FLAGS
    return report


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
