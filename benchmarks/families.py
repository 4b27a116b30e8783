"""Every model family on the CPU and on the GPU, compared, and one table of the results.

    python benchmarks/families.py run --out DIR [--data-dir DIR] [--experiments a,b] [--timeout S]
    python benchmarks/families.py table DIR [DIR ...] > families.md

`run` runs, per family, `gridbench search EXPERIMENT --device both --backend jax` on a
two-configuration slice of the experiment's grid (the first axis's first two values),
sized by FAMILY_RUNS so that the CPU half ends in minutes; every search goes to
DIR/mlflow.db and each comparison's files to DIR/EXPERIMENT/. Datasets that are not
in --data-dir run on --synthetic data (timings only). `table` reads those
directories back and writes the per-family table: relative training time and
relative cost, GPU over CPU, as in the published charts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gridbench.spec import load_spec  # noqa: E402

# Per experiment: what is fixed so that the CPU search stays within minutes (the GPU
# search runs the same). train_size caps the training set; the test set stays whole.
# "axis" replaces the default slice (the first axis's first two values).
FAMILY_RUNS = {
    "mnist-cnn": {"train_size": 20000},
    "cifar10-smallcnn": {"train_size": 20000, "axis": ("batch_size", (32, 128))},
    "imdb-fasttext": {},
    "cifar10-cnn": {"train_size": 3000, "batch_size": 128},
    "cifar10-resnet": {"train_size": 1500, "axis": ("depth", (20, 62))},
    "imdb-bilstm": {"train_size": 10000},
    "text-lstm": {"train_size": 20000},
}
EPOCHS = 3  # one warm-up epoch, two timed


def search_args(experiment: str, data_dir: str | None) -> tuple[list[str], bool]:
    spec = load_spec(experiment)
    synthetic = not (data_dir and _has_data(spec.dataset, Path(data_dir)))
    args = ["--set", f"epochs={EPOCHS}"]
    fixed = {k: v for k, v in FAMILY_RUNS[experiment].items() if k != "axis"}
    args += [arg for key, value in fixed.items() for arg in ("--set", f"{key}={value}")]
    axes = [axis for axis in spec.grid if axis not in fixed]
    first, values = FAMILY_RUNS[experiment].get("axis", (axes[0], spec.grid[axes[0]][:2]))
    rest = [axis for axis in axes if axis != first]
    args += ["--grid", f"{first}={','.join(map(str, values))}"]
    args += [arg for axis in rest for arg in ("--set", f"{axis}={spec.grid[axis][0]}")]
    if synthetic:
        args.append("--synthetic")
    elif data_dir:
        args += ["--data-dir", data_dir]
    return args, synthetic


def _has_data(dataset: str, directory: Path) -> bool:
    from gridbench.datasets import find

    return dataset == "digits" or (directory / find.LAYOUTS[dataset].entry).exists()


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = f"sqlite:///{out.resolve() / 'mlflow.db'}"
    experiments = args.experiments.split(",") if args.experiments else list(FAMILY_RUNS)
    for experiment in experiments:
        extra, synthetic = search_args(experiment, args.data_dir)
        command = [sys.executable, "-m", "gridbench", "search", experiment, "--device", "both", "--backend", "jax",
                   "--tracking-uri", store, "--out", str(out / experiment), *extra]  # fmt: skip
        print("$", " ".join(command[1:]), flush=True)
        started = time.perf_counter()
        process = subprocess.Popen(command, start_new_session=True)
        try:
            code = process.wait(timeout=args.timeout)
            status = f"exit {code}"
        except subprocess.TimeoutExpired:
            # The search and the Ray processes it started (its descendants, found before it dies, by PID),
            # so that the next family has the machine to itself; nobody else's processes.
            import psutil

            started_by_it = psutil.Process(process.pid).children(recursive=True)
            os.killpg(process.pid, signal.SIGKILL)
            for child in started_by_it:
                try:
                    child.kill()
                except psutil.NoSuchProcess:
                    pass
            process.wait()
            status = f"stopped after {args.timeout} s"
        (out / experiment).mkdir(exist_ok=True)
        record = {"experiment": experiment, "command": ["gridbench", *command[3:]], "synthetic": synthetic,
                  "status": status, "wall_s": time.perf_counter() - started}  # fmt: skip
        (out / experiment / "run.json").write_text(json.dumps(record, indent=2))
        print(f"{experiment}: {status} in {record['wall_s']:.0f} s", flush=True)
    return 0


def _tags(store: Path, run_id: str) -> dict[str, str]:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{store}")
    trials = client.search_runs(
        [client.get_run(run_id).info.experiment_id], f"tags.mlflow.parentRunId = '{run_id}'", max_results=50
    )
    return trials[0].data.tags if trials else {}


def table(args: argparse.Namespace) -> int:
    rows = [
        "| experiment | model | data | train samples | CPU s/epoch (16 cores) | GPU s/epoch | "
        "training speedup (geomean) | trial wall speedup | makespan CPU / GPU s | relative time | relative cost | "
        "GPU loop | cuDNN LSTM |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for directory in map(Path, args.dirs):
        for folder in sorted(p for p in directory.iterdir() if (p / "run.json").exists()):
            record = json.loads((folder / "run.json").read_text())
            spec = load_spec(record["experiment"])
            data = "synthetic" if record["synthetic"] else "real"
            if not (folder / "comparison.json").exists():
                rows.append(f"| {spec.name} | {spec.model} | {data} | | {record['status']} | | | | | | | | |")
                continue
            comparison = json.loads((folder / "comparison.json").read_text())
            cpu, gpu = comparison["searches"][0], comparison["searches"][1]
            pairing = comparison["pairings"][0]
            configs = pairing["configurations"].values()
            cpu_epoch = statistics.median([c["baseline"]["steady_epoch_s"] for c in configs])
            gpu_epoch = statistics.median([c["other"]["steady_epoch_s"] for c in configs])
            gpu_tags = _tags(directory / "mlflow.db", gpu["run_id"])
            samples = FAMILY_RUNS[spec.name].get("train_size") or "all"
            rows.append(
                f"| {spec.name} | {spec.model} | {data} | {samples} | {cpu_epoch:.3g} | {gpu_epoch:.3g} | "
                f"{pairing['geomean_speedup']['steady_epoch_s']:.1f}x | {pairing['geomean_speedup']['trial_wall_s']:.1f}x | "
                f"{cpu['makespan_s']:.0f} / {gpu['makespan_s']:.0f} | {gpu['relative_time']:.3f} | "
                f"{gpu['relative_cost']:.2f} | {gpu_tags.get('train_loop', '?')} | {gpu_tags.get('lstm.cudnn', '-')} |"
            )
    print("\n".join(rows))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser("run")
    runner.add_argument("--out", required=True)
    runner.add_argument("--data-dir")
    runner.add_argument("--experiments", help="comma-separated (default: every family)")
    runner.add_argument("--timeout", type=int, default=600, help="seconds per experiment")
    runner.set_defaults(handler=run)
    tabler = commands.add_parser("table")
    tabler.add_argument("dirs", nargs="+")
    tabler.set_defaults(handler=table)
    args = parser.parse_args()
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
