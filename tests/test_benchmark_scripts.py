"""benchmarks/fixed_costs.sh's plumbing, run for real on this machine with a stand-in for the hand-written floor.

The GPU jobs that publish docs/results' figures run this script on a lent machine, where a step that fails costs
device time and leaves a figure unmeasured. Its `jaxfloor` step needs no GPU of gridbench's: only
../shared/bench/fused_floor.py, replaced here by a script that records how it was called. A line continuation lost
in a reread (d1d2339) made every `--mode fused` floor run (the jaxfloor and fusedpairs steps') a shell error
("--json: command not found"); this test fails on it.
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
    assert {program: (sum(t <= 0.1 for t in times), len(times)) for program, times in ready.items()} == {
        "mlp": (4, 5),
        "fused": (3, 5),
    }
    lines = table.rows(job)
    assert any(line.startswith("| at least 2x `tune_floor.py A`") and line.endswith("| 2 of 4 |") for line in lines)


def test_targets_table_rebuilds_the_eighteenths_peer_ratio_and_reads_past_other_steps_runs():
    """The eighteenth (one H200) published 7.89x for 82.95 / 10.52 = 7.88498; h100-85ac4a3's headline/ also holds the
    `against` step's runs (headline-after-N, floor-A-N), which are not the headline step's."""
    table = _targets_table()
    _, _, _, peers = table.headline_runs(RAW / "h200-6cb7382")
    assert [table.ratio(peer / ours, 5.0) for ours, peer in peers] == ["7.29x", "7.88x"]
    assert table.headline_runs(RAW / "h100-85ac4a3") == (31.23, [12.01], [], [])


def test_targets_table_shows_a_third_decimal_where_two_would_round_a_miss_onto_the_target():
    table = _targets_table()
    assert (table.ratio(1.996, 2.0), table.ratio(2.0, 2.0), table.ratio(1.504, 1.5)) == ("1.996x", "2.00x", "1.504x")


def _job(tmp_path, headline: str, fused_calls: str, fused_raw: dict[int, tuple[int, float]]):
    (tmp_path / "headline").mkdir()
    (tmp_path / "headline" / "calls.txt").write_text(headline)
    (tmp_path / "fused").mkdir()
    (tmp_path / "fused" / "calls.txt").write_text(fused_calls)
    for pair, (exit_code, seconds) in fused_raw.items():  # fused.py's own JSON: gridbench's exit and command_s
        raw = tmp_path / "fused" / f"fusedpair-{pair}" / "raw"
        raw.mkdir(parents=True)
        (raw / "mlp-gpu-fused.json").write_text(json.dumps({"exit": exit_code, "command_s": seconds}))


def test_targets_table_reads_a_job_without_some_steps_and_says_what_did_not_run(tmp_path):
    _job(
        tmp_path,
        "headline-1: rc 0 whole command 16.50 s\nheadline-2: rc 0 whole command 9.00 s\n"
        "headline-3: rc 1 whole command 3.00 s\nfloor-A: rc 0 whole command 19.00 s\n",
        # fused.py's whole time (the lines below) also reads the store back: gridbench's own is in its JSON
        "jaxfloor-fused-pair-1: rc 0 whole command 10.00 s\nfused-pair-1: rc 0 whole command 19.50 s\n"
        "jaxfloor-fused-pair-2: rc 1 whole command 1.00 s\nfused-pair-2: rc 0 whole command 13.00 s\n"
        "jaxfloor-fused-pair-3: rc 0 whole command 10.00 s\nfused-pair-3: rc 0 whole command 13.00 s\n"
        "fused-pair-4: rc 0 whole command 13.00 s\njaxfloor-fused-pair-4: rc 0 whole command 10.00 s\n",
        {1: (0, 16.0), 2: (0, 11.0), 3: (0, 12.0), 4: (1, 11.0)},
    )
    (tmp_path / "pair-1").mkdir()  # a second run with no floor in its step, of the same time as headline-2
    (tmp_path / "pair-1" / "calls.txt").write_text("headline-1: rc 0 whole command 9.00 s\n")
    table = _targets_table()
    # a failed run is left out; a second run without a floor beside it still counts against the 12 s
    assert table.headline_runs(tmp_path) == (16.5, [9.0, 9.0], [(9.0, 19.0)], [])
    # pair 2's floor and pair 4's search failed: both pairs are left out, and pair 3 is still read
    assert table.fused_pairs(tmp_path) == ([(16.0, 10.0), (12.0, 10.0)], None)
    lines = table.rows(tmp_path)
    assert any("1.5x `fused_floor.py --mode fused`" in line and line.endswith("| 1 of 2 |") for line in lines)
    for target in ("one trial per configuration", "`peer_tune.py`", "ready in at most 0.1 s (mlp)"):
        assert any(target in line and f"| {table.NOT_MEASURED} | - |" in line for line in lines), target
    assert any("second run at most 12 s | 9.00, 9.00 s | yes |" in line for line in lines)


def test_targets_table_counts_no_second_run_where_the_first_failed(tmp_path):
    """The run after a failed first run may have run on the empty cache itself: it is not counted as a second run."""
    _job(tmp_path, "headline-1: rc 1 whole command 4.00 s\nheadline-2: rc 0 whole command 25.00 s\n", "", {})
    table = _targets_table()
    assert table.headline_runs(tmp_path) == (None, [], [], [])
    lines = table.rows(tmp_path)
    assert any(line.startswith("| headline's second run") and f"| {table.NOT_MEASURED} | - |" in line for line in lines)
