"""Fused execution against one trial per configuration, in one command: issue 15's grids.

    python benchmarks/fused.py --out DIR [--data-dir DIR] [--only NAME ...]   # the GPU machine
    python benchmarks/fused.py --quick --out DIR                              # anywhere, CPU, in minutes

Each run is one whole `python -m gridbench search` in a fresh process (start-up
included, as a user meets it), recorded in DIR/mlflow.db; its output goes to
DIR/raw/NAME.log and what was read back from MLflow to DIR/raw/NAME.json. The
table (DIR/fused.md) is rebuilt from every DIR/raw/*.json present, so runs can be
made in several commands (--only) and still land in one table.

Full runs (JAX, MNIST):
- mlp-*: the 64-configuration MLP grid, hidden_units x learning_rate x dropout x
  batch_size = 4x4x2x2, 10 epochs: fused on one GPU, one trial per GPU, 4 trials
  packed per GPU (--gpus-per-trial 0.25), and on the CPU cores fused and not
  (train_loop auto: Keras fit unfused, the compiled loop fused).
- cnn-*: mnist-cnn (2 filters x 2 learning rates x 2 batch sizes) with dropout
  0.25, 0.5 as a fourth axis (16 configurations), fused and one trial per GPU.
--quick: the same runs' CPU halves on digits (8 MLP and 4 CNN configurations, 3 epochs).

Speedup = the reference run's makespan / this run's. training_share comes from the
parent run where the search records it (absent: "-"; nothing is estimated here).
max |d acc| is the largest accuracy difference to the reference run over the
configurations (and repeats) both finished: the same seed on the same loop gives the
same training, so it says something only where both ran the same loop (on the CPU,
unfused trials run Keras fit by default, fused ones the compiled loop).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MLP_GRID = [
    "--grid", "hidden_units=64,128,256,512",
    "--grid", "learning_rate=0.0003,0.001,0.003,0.01",
    "--grid", "dropout=0,0.2",
    "--grid", "batch_size=128,256",
    "--set", "epochs=10",
]  # fmt: skip
CNN_GRID = ["--grid", "dropout=0.25,0.5"]
GPU = ["--device", "gpu", "--backend", "jax", "--gpus", "1"]
CPU = ["--device", "cpu", "--backend", "jax"]
FUSED = ["--execution", "fused"]

# name: (experiment, arguments, the run its speedup is against)
FULL = {
    "mlp-gpu-trials": ("mnist", [*MLP_GRID, *GPU, "--gpus-per-trial", "1"], None),
    "mlp-gpu-packed4": ("mnist", [*MLP_GRID, *GPU, "--gpus-per-trial", "0.25"], "mlp-gpu-trials"),
    "mlp-gpu-fused": ("mnist", [*MLP_GRID, *GPU, *FUSED], "mlp-gpu-trials"),
    "mlp-cpu-trials": ("mnist", [*MLP_GRID, *CPU], None),
    "mlp-cpu-fused": ("mnist", [*MLP_GRID, *CPU, *FUSED], "mlp-cpu-trials"),
    "cnn-gpu-trials": ("mnist-cnn", [*CNN_GRID, *GPU, "--gpus-per-trial", "1"], None),
    "cnn-gpu-fused": ("mnist-cnn", [*CNN_GRID, *GPU, *FUSED], "cnn-gpu-trials"),
}
QUICK_MLP = [
    "--grid", "hidden_units=16,32", "--grid", "learning_rate=0.01,0.1", "--grid", "dropout=0,0.2",
    "--set", "epochs=3",
]  # fmt: skip
QUICK_CNN = [
    "--set", "filters=4", "--set", "dense_units=16", "--set", "epochs=3", "--set", "batch_size=32",
    "--grid", "learning_rate=0.001,0.01", "--grid", "dropout=0.25,0.5",
]  # fmt: skip
CNN_DIGITS = {"dataset": "digits", "model": "cnn", "description": "mnist-cnn's model on digits (benchmarks/fused.py)"}
QUICK = {
    "mlp-cpu-trials": ("digits", [*QUICK_MLP, *CPU], None),
    "mlp-cpu-fused": ("digits", [*QUICK_MLP, *CPU, *FUSED], "mlp-cpu-trials"),
    "cnn-cpu-trials": ("{cnn_digits}", [*QUICK_CNN, *CPU], None),
    "cnn-cpu-fused": ("{cnn_digits}", [*QUICK_CNN, *CPU, *FUSED], "cnn-cpu-trials"),
}


def run_one(
    name: str, experiment: str, arguments: list[str], out: Path, data_dir: str | None, compile_cache: str
) -> dict:
    """One search in a fresh process; its parent run and trials read back from the store."""
    from gridbench.tracking.stored_searches import read_search

    store = f"sqlite:///{(out / 'mlflow.db').resolve()}"
    command = [sys.executable, "-m", "gridbench", "search", experiment, *arguments, "--tracking-uri", store]
    command += ["--compile-cache", compile_cache]
    if data_dir:
        command += ["--data-dir", data_dir]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "200"})
    command_s = time.perf_counter() - started
    (out / "raw" / f"{name}.log").write_text(
        f"$ {' '.join(command)}\n# exit {result.returncode}, {command_s:.1f} s\n{result.stdout}\n{result.stderr}"
    )
    found = re.search(r"parent run ([0-9a-f]{32})", result.stdout)
    if not found:
        raise SystemExit(f"{name}: the search wrote no parent run (exit {result.returncode}); see raw/{name}.log")
    search = read_search(store, found.group(1))
    record = {
        "name": name,
        "command": " ".join(command[1:]),
        "exit": result.returncode,
        "command_s": command_s,
        "run_id": search.run_id,
        "tags": {k: v for k, v in search.tags.items() if not k.startswith("mlflow.")},
        "metrics": dict(search.metrics),
        "params": dict(search.params),
        "trials": [
            {"key": t.key, "repeat": t.repeat, "status": t.status, "metrics": dict(t.metrics)} for t in search.trials
        ],
    }
    (out / "raw" / f"{name}.json").write_text(json.dumps(record, indent=1))
    return record


def _num(value, digits=2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(records: dict[str, dict], runs: dict[str, tuple]) -> str:
    lines = [
        "| run | device | execution | loop | GPUs/trial | trials | Ray trials at once | makespan s | speedup | "
        "training_share | overhead ratio | test accuracy | max abs d acc | vs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, record in records.items():
        tags, metrics = record["tags"], record["metrics"]
        reference = records.get((runs.get(name) or (None, None, None))[2] or "")
        makespan = metrics.get("makespan_s")
        speedup = reference["metrics"]["makespan_s"] / makespan if reference and makespan else None
        accuracy = {(t["key"], t["repeat"]): t["metrics"].get("test_accuracy") for t in record["trials"]}
        finished = [a for a in accuracy.values() if a is not None]
        delta = None
        if reference:
            theirs = {(t["key"], t["repeat"]): t["metrics"].get("test_accuracy") for t in reference["trials"]}
            both = [abs(a - theirs[k]) for k, a in accuracy.items() if a is not None and theirs.get(k) is not None]
            delta = max(both) if both else None
        lines.append(
            f"| {name} | {tags.get('device')} | {tags.get('execution', 'trials')} "
            f"| {record.get('params', {}).get('train_loop', '?')} | {tags.get('gpus_per_trial')} "
            f"| {int(metrics.get('trials_finished', 0))}/{int(metrics.get('trials_total', 0))} "
            f"| {int(metrics.get('concurrency', 0))} | {_num(makespan, 1)} "
            f"| {_num(speedup) + 'x' if speedup else '-'} | {_num(metrics.get('training_share'))} "
            f"| {_num(metrics.get('overhead_ratio'))} "
            f"| {_num(min(finished, default=None), 4)}-{_num(max(finished, default=None), 4)} "
            f"| {_num(delta, 4)} | {(runs.get(name) or (None, None, '-'))[2] or '-'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="where mlflow.db, raw/ and fused.md go (kept between commands)")
    parser.add_argument("--data-dir", help="directory holding mnist.npz (default: gridbench's search)")
    parser.add_argument("--quick", action="store_true", help="the CPU runs on digits, small: to try it anywhere")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="run only these (repeatable)")
    parser.add_argument(
        "--compile-cache",
        choices=("search", "persistent"),
        default="search",
        help="search (default): every run compiles its programs, as on a fresh machine; persistent: programs kept "
        "across runs (run twice: the second measures a warm cache; runs sharing programs favour the later)",
    )
    args = parser.parse_args()

    out = Path(args.out)
    (out / "raw").mkdir(parents=True, exist_ok=True)
    runs = QUICK if args.quick else FULL
    unknown = sorted(set(args.only) - set(runs))
    if unknown:
        raise SystemExit(f"--only {unknown[0]}: unknown run; known: {', '.join(runs)}")
    cnn_digits = out / "cnn-digits.toml"
    cnn_digits.write_text("\n".join(f'{k} = "{v}"' for k, v in CNN_DIGITS.items()) + "\n")
    for name, (experiment, arguments, _) in runs.items():
        if args.only and name not in args.only:
            continue
        record = run_one(
            name, experiment.format(cnn_digits=cnn_digits), arguments, out, args.data_dir, args.compile_cache
        )
        m = record["metrics"]
        print(
            f"{name}: exit {record['exit']}, {int(m.get('trials_finished', 0))}/{int(m.get('trials_total', 0))} "
            f"trials, makespan {m.get('makespan_s', float('nan')):.1f} s, command {record['command_s']:.1f} s",
            flush=True,
        )
    records = {}
    for name in runs:  # every run recorded so far in this directory, in the table's order
        path = out / "raw" / f"{name}.json"
        if path.exists():
            records[name] = json.loads(path.read_text())
    from gridbench import environment

    env = environment.collect()
    machine = f"{env.get('cpu.model', '?')}, {env.get('cpu.cores_usable', '?')} usable cores"
    if env.get("gpu.0.name"):
        machine += f", {env.get('gpu.count')} x {env['gpu.0.name']}"
    text = (
        f"# Fused execution ({'quick, digits' if args.quick else 'issue 15 grids, MNIST'})\n\n"
        f"Machine: {machine}. Command: `python benchmarks/fused.py {' '.join(sys.argv[1:])}`; "
        f"each run's command and output in raw/NAME.log.\n\n" + table(records, runs)
    )
    (out / "fused.md").write_text(text)
    print("\n" + text)


if __name__ == "__main__":
    main()
