"""Programs saved beside the compile cache (gridbench.workloads.saved_programs): a saved program is ready without
tracing or lowering, computes bit for bit what the traced one does, and anything wrong with a file falls back to
JAX's cache; the trial's line names the parts of its program's time."""

from __future__ import annotations

import json
import os

import pytest
from trainings import PROGRAMS, run_python

from gridbench.tracking import schema


@pytest.fixture(scope="module", params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def saved_report(request, tmp_path_factory) -> dict:
    """tests/programs/saved_programs.py's report: one process on JAX's CPU (or the first GPU), a fresh cache."""
    pytest.importorskip("jax")
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    if request.param == "gpu":  # one executable run twice gives the same bits (test_workloads' reused programs)
        env.update(JAX_PLATFORMS="", CUDA_VISIBLE_DEVICES="0", XLA_FLAGS="--xla_gpu_deterministic_ops=true")
    env.pop("GRIDBENCH_SAVED_PROGRAMS", None)
    cache = tmp_path_factory.mktemp("saved") / "cache"
    out = run_python(
        str(PROGRAMS / "saved_programs.py"), str(cache), capture_output=True, text=True, env=env, timeout=900
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "device": request.param}


def same_training(a: dict, b: dict) -> bool:
    """The same numbers, bit for bit: the same executable (saved and loaded, or served by JAX's cache)."""
    return (a["fit"], a["evaluation"], a["state"]) == (b["fit"], b["evaluation"], b["state"])


def same_program(a: dict, b: dict, device: str) -> bool:
    """Two compilations of one program: on a CPU the same bits; on a GPU XLA's autotuning may pick other kernels
    for each, so the same loss to 1e-4 and accuracy to one sample in 450."""
    if device == "cpu":
        return same_training(a, b)
    return (
        a["fit"]["train_loss"] == pytest.approx(b["fit"]["train_loss"], rel=1e-4)
        and abs(a["evaluation"]["test_accuracy"] - b["evaluation"]["test_accuracy"]) <= 1 / 450
    )


def parts(phases: dict) -> float:
    return sum(seconds for phase, seconds in phases.items() if phase != "cache_read_s")  # cache read: of backend_s


@pytest.mark.slow
@pytest.mark.parametrize("program", ["mlp", "fused"])
def test_a_saved_program_is_ready_without_tracing_and_trains_bit_for_bit_as_the_traced_one(saved_report, program):
    traced, loaded = saved_report[program]
    assert traced["cached"] == "no" and traced["phases"]["trace_s"] > 0 and traced["phases"]["executable_write_s"] > 0
    assert loaded["cached"] == "yes"
    assert loaded["phases"]["trace_s"] == loaded["phases"]["lower_s"] == loaded["phases"]["backend_s"] == 0
    assert loaded["phases"]["executable_read_s"] > 0
    # The parts are the program's time: a loaded program's is its read, and Python's few milliseconds around it.
    assert loaded["phases"]["executable_read_s"] <= loaded["compile_s"]
    assert parts(traced["phases"]) <= traced["compile_s"]
    assert same_training(traced, loaded)
    assert saved_report["saved"] == 2
    # No cyclic collection inside the load (gridbench.collector.held): off for both executables, on again after.
    assert loaded["collector_in_loads"] == [False, False] and loaded["collector_after"]


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["unfitting", "damaged", "foreign"])
def test_a_damaged_foreign_or_unfitting_file_is_removed_and_the_program_comes_from_jaxs_cache(saved_report, damage):
    assert saved_report[f"{damage}_removed"]
    if damage == "unfitting":  # asked to take arguments of another shape, it is not used
        assert saved_report["unfitting_refused"]
        return
    fallen_back, traced = saved_report[damage], saved_report["mlp"][0]
    assert fallen_back["cached"] == "yes" and fallen_back["phases"]["trace_s"] > 0  # traced, JAX's cache served it
    assert fallen_back["phases"]["executable_read_s"] == 0
    assert same_training(fallen_back, traced)
    # Saved again by a precompile process, past JAX's cache (an executable JAX's cache served does not serialise
    # whole), and loaded by the next trial.
    assert saved_report["served_unsaved"]
    restored = saved_report["restored"]
    assert restored["phases"]["executable_read_s"] > 0 and same_program(restored, traced, saved_report["device"])


@pytest.mark.slow
def test_a_program_compiled_ahead_from_shapes_alone_trains_as_the_same_program_traced(saved_report):
    """The precompile processes compile from ShapeDtypeStructs; the trial loads what they saved."""
    loaded, traced = saved_report["detached"], saved_report["traced"]
    assert loaded["phases"]["executable_read_s"] > 0 and loaded["phases"]["trace_s"] == 0
    assert traced["phases"]["trace_s"] > 0  # GRIDBENCH_SAVED_PROGRAMS=0: the way before
    assert same_program(loaded, traced, saved_report["device"])


@pytest.mark.slow
def test_without_a_compile_cache_nothing_is_saved(saved_report):
    assert saved_report["off"]["phases"]["executable_write_s"] == 0 and saved_report["off_saved_nothing"]


def _line(phases: dict) -> str:
    """The line a finished trial prints, with `phases` (seconds by schema metric) as its compile_s and its parts."""
    from rich.console import Console

    from gridbench.gridsearch.progress import SearchProgress
    from gridbench.tracking.records import TrialRecord
    from gridbench.tracking.schema import TrialStatus
    from gridbench.trial.outcome import TrialOutcome

    metrics = {schema.TEST_ACCURACY: 0.9, schema.STEADY_EPOCH_S: 0.01, schema.WARMUP_EPOCH_S: 0.02, **phases}
    metrics[schema.COMPILE_S] = round(sum(s for m, s in phases.items() if m != schema.PROGRAM_CACHE_READ_S), 6)
    tags = {schema.DEVICE_ACTUAL: "cpu:0", schema.PROGRAM_REUSED: "no", schema.PROGRAM_CACHED: "yes"}
    outcome = TrialOutcome(TrialStatus.FINISHED, 0.0, 1.0, 0, metrics, tags)
    console = Console(record=True, width=250)
    progress = SearchProgress(console, schema.TEST_ACCURACY)
    progress.start(1)
    progress.trial_ended(TrialRecord.from_outcome("t", {"hidden_units": 32}, outcome))
    progress.stop()
    (line,) = [line for line in console.export_text().splitlines() if line.startswith("done")]
    return line.split("program loaded from the compile cache in ")[1].split(", wall")[0]


def test_the_trials_line_names_a_saved_programs_read_and_a_compiled_ones_write():
    none = dict.fromkeys(schema.PROGRAM_PHASE_METRICS.values(), 0.0)
    assert _line({**none, schema.PROGRAM_EXECUTABLE_READ_S: 0.052}) == "0.052 s (executable read 0.052 s)"
    jax_clocks = {schema.PROGRAM_TRACE_S: 0.12, schema.PROGRAM_LOWER_S: 0.14, schema.PROGRAM_BACKEND_S: 3.1}
    compiled = {**none, **jax_clocks, schema.PROGRAM_EXECUTABLE_WRITE_S: 0.03}
    assert _line(compiled) == "3.39 s (trace 0.12, lower 0.14, backend 3.1 s, executable write 0.03 s)"
    through_jax = {**none, **jax_clocks, schema.PROGRAM_BACKEND_S: 0.13, schema.PROGRAM_CACHE_READ_S: 0.12}
    assert _line(through_jax) == "0.39 s (trace 0.12, lower 0.14, backend 0.13 s: cache read 0.12)"


@pytest.mark.slow
def test_a_saved_programs_name_changes_with_what_the_program_depends_on(saved_report):
    names = saved_report["identity"]
    assert names["same"] and names["facts_named"]
    assert names["other_shape"] and names["other_xla_flags"] and names["other_matmul_precision"]


@pytest.mark.slow
def test_saved_programs_beyond_their_bound_go_least_recently_used_first_and_dead_writers_files_go(saved_report):
    assert saved_report["bound"]["kept"] == [".writing-now", "a.program", "d.program"]


@pytest.mark.parametrize("asked", [False, True], ids=["by-default", "asked-for"])
def test_programs_carry_each_operations_own_line_and_whole_tracebacks_only_where_asked(monkeypatch, asked):
    """XLA:GPU formats every frame of every instruction each time it loads an executable (short_locations)."""
    jax = pytest.importorskip("jax")
    from gridbench.workloads import saved_programs

    monkeypatch.delenv(saved_programs.FULL_TRACEBACKS_ENV, raising=False)
    if asked:
        monkeypatch.setenv(saved_programs.FULL_TRACEBACKS_ENV, "1")

    def inner(x):
        return jax.numpy.tanh(x) * 2.0

    def outer(x):
        return inner(x) + 1.0

    with saved_programs.short_locations():
        text = jax.jit(outer).lower(1.0).as_text(debug_info=True)
    assert ("callsite(" in text) == asked
    assert "test_saved_programs.py" in text  # each operation's own file and line, either way
    name = saved_programs.identity(("a program",), jax.devices("cpu")[0])
    assert ("('full_tracebacks', True)" in name) == asked
