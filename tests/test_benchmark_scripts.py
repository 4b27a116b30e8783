"""benchmarks/fixed_costs.sh's plumbing, run for real on this machine with a stand-in for the hand-written floor.

The GPU jobs that publish docs/results' figures run this script on a lent machine, where a step that fails costs
device time and leaves a figure unmeasured. Its `jaxfloor` step needs no GPU of gridbench's: only
../shared/bench/fused_floor.py, replaced here by a script that records how it was called. A line continuation lost
in a reread (d1d2339) made every floor run of that step a shell error ("--json: command not found"); this test
fails on it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Writes one line per call: its arguments and the JAX cache variables it was given, to $FLOOR_CALLS.
STAND_IN_FLOOR = """
import json, os, sys
names = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
         "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES")
cache = {name: os.environ.get(name) for name in names}
with open(os.environ["FLOOR_CALLS"], "a") as calls:
    calls.write(json.dumps({"argv": sys.argv[1:], "env": cache}) + "\\n")
"""


@pytest.mark.skipif(shutil.which("bash") is None or not Path("/usr/bin/time").exists(), reason="needs bash and time")
def test_jaxfloor_step_runs_the_floor_on_jax_persistent_cache(tmp_path):
    bench, data, out = tmp_path / "bench", tmp_path / "data", tmp_path / "out"
    bench.mkdir()
    data.mkdir()
    (bench / "fused_floor.py").write_text(STAND_IN_FLOOR)
    (data / "mnist.npz").write_bytes(b"")  # copied into Keras' cache by the script, never read by the stand-in
    calls_file = tmp_path / "floor-calls.jsonl"
    bin_dir = tmp_path / "bin"  # `python3` is this interpreter, as on the lent machines
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "FLOOR_CALLS": str(calls_file),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    finished = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "fixed_costs.sh"), str(out), str(data), str(bench), "jaxfloor"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert finished.returncode == 0, finished.stderr
    calls = [json.loads(line) for line in calls_file.read_text().splitlines()]
    cache = str(out / "work" / "jax-floor-cache")
    fused = [
        call for call in calls if "--mode" in call["argv"] and call["argv"][call["argv"].index("--mode") + 1] == "fused"
    ]
    assert [call["argv"][-1] for call in fused] == [str(out / f"jaxfloor-fused-{i}.json") for i in (1, 2)]
    for call in fused:
        assert call["argv"][0] == str(out / "work" / "inputs" / "data" / "mnist.npz")
        assert call["env"] == {
            "JAX_COMPILATION_CACHE_DIR": cache,
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
        }
    assert len(calls) == 3 and calls[2]["argv"][1:3] == ["--mode", "trials"]
    assert calls[2]["env"]["JAX_COMPILATION_CACHE_DIR"] is None  # the trials floor compiles every configuration
    recorded = (out / "calls.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in recorded] == ["jaxfloor-fused-1", "jaxfloor-fused-2", "jaxfloor-trials"]
    assert all(": rc 0 whole command " in line for line in recorded)


def _targets_table():
    spec = importlib.util.spec_from_file_location("targets_table", ROOT / "benchmarks" / "targets_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RAW = ROOT / "docs" / "results" / "around-training"


def test_targets_table_pairs_runs_as_the_nineteenth_published_them():
    """docs/results/around-training.md's nineteenth table (one H100), rebuilt from its raw files alone."""
    table = _targets_table()
    job = RAW / "h100-12fa26c"
    first, seconds, floors, peers = table.headline_runs(job)
    assert first == 16.06
    assert seconds == [9.14, 8.09, 8.60, 9.45]
    assert [round(floor / ours, 2) for ours, floor in floors] == [1.98, 2.23, 2.04, 1.74]
    assert [round(peer / ours, 2) for ours, peer in peers] == [7.03, 7.95]
    fused, trials = table.fused_pairs(job)
    assert [round(ours / floor, 2) for ours, floor in fused] == [1.14, 1.20, 1.28, 1.33]
    assert round(trials[0] / trials[1], 2) == 0.38
    ready = table.ready_times(job)
    assert [sum(t <= 0.1 for t in ready[program]) for program in ("mlp", "fused")] == [4, 3]
    lines = table.rows(job)
    assert any(line.startswith("| at least 2x `tune_floor.py A`") and line.endswith("| 2 of 4 |") for line in lines)


def test_targets_table_reads_a_job_without_some_steps_and_says_what_did_not_run(tmp_path):
    (tmp_path / "headline").mkdir()
    (tmp_path / "headline" / "calls.txt").write_text(
        "headline-1: rc 0 whole command 16.50 s\nheadline-2: rc 0 whole command 9.00 s\n"
        "headline-3: rc 1 whole command 3.00 s\nfloor-A: rc 0 whole command 19.00 s\n"
    )
    (tmp_path / "pair-1").mkdir()  # a second run beside its floor, and one of the same time in another step
    (tmp_path / "pair-1" / "calls.txt").write_text("headline-1: rc 0 whole command 9.00 s\n")
    (tmp_path / "fused").mkdir()
    (tmp_path / "fused" / "calls.txt").write_text(
        "jaxfloor-fused-pair-1: rc 0 whole command 10.00 s\nfused-pair-1: rc 0 whole command 19.50 s\n"
        "jaxfloor-fused-pair-2: rc 0 whole command 10.00 s\nfused-pair-2: rc 0 whole command 13.00 s\n"
    )
    for pair, (exit_code, seconds) in {1: (0, 16.0), 2: (1, 11.0)}.items():  # fused.py also reads the store back
        raw = tmp_path / "fused" / f"fusedpair-{pair}" / "raw"
        raw.mkdir(parents=True)
        (raw / "mlp-gpu-fused.json").write_text(json.dumps({"exit": exit_code, "command_s": seconds}))
    table = _targets_table()
    # a failed run is left out; a second run without a floor beside it still counts against the 12 s
    assert table.headline_runs(tmp_path) == (16.5, [9.0, 9.0], [(9.0, 19.0)], [])
    assert table.fused_pairs(tmp_path) == ([(16.0, 10.0)], None)  # gridbench's own time; a failed search left out
    lines = table.rows(tmp_path)
    assert any("1.5x `fused_floor.py --mode fused`" in line and line.endswith("| no |") for line in lines)
    assert any(
        "one trial per configuration" in line and "| not measured (not run, or failed) | - |" in line for line in lines
    )
    assert any("`peer_tune.py`" in line and "| not measured (not run, or failed) | - |" in line for line in lines)
    assert any("second run at most 12 s | 9.00, 9.00 s | yes |" in line for line in lines)
