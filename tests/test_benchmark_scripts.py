"""benchmarks/fixed_costs.sh's plumbing, run for real on this machine with a stand-in for the hand-written floor.

The GPU jobs that publish docs/results' figures run this script on a lent machine, where a step that fails costs
device time and leaves a figure unmeasured. Its `jaxfloor` step needs no GPU of gridbench's: only
../shared/bench/fused_floor.py, replaced here by a script that records how it was called. A line continuation lost
in a reread (d1d2339) made every floor run of that step a shell error ("--json: command not found"); this test
fails on it.
"""

from __future__ import annotations

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
