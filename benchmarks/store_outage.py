"""A tracking-server outage mid-search, measured: issue 17's "Measure".

    python benchmarks/store_outage.py --out DIR [--configs 1000] [--epochs 2] [--outage-s 30]

Runs the same digits grid (`--configs` configurations: hidden_units x learning_rate,
`--cpus-per-trial 1`) twice, each against a local `mlflow server` this script starts
on 127.0.0.1 over a fresh SQLite backend in DIR:

1. undisturbed;
2. with the server killed (SIGKILL of its process group) once `--outage-at` of the
   trials are stored, and restarted on the same port and backend `--outage-s` later;
   then `gridbench sync` replays the search's journal.

Writes DIR/store_outage.md (the table and the commands), DIR/results.json and each
run's raw output (search.out, search.err, server.log, sync.out, result.json) under
DIR/<run>/. `--runs undisturbed` and `--runs server-killed` run one each (two shorter
commands), `--report-only` then builds the table from DIR.
Every figure is read back from the store: FINISHED children, duplicates (children
beyond one per trial id), the parent's makespan, overhead ratio and store metrics.
Stops only the servers and searches it started, by their process ids.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gridbench.tracking.ui import free_port, server_command  # noqa: E402

RUNS = {"undisturbed": False, "server-killed": True}  # name: whether the server is killed mid-search
STORED_CHILDREN = (
    "SELECT count(*) FROM runs WHERE status = 'FINISHED' AND lifecycle_stage = 'active' AND run_uuid IN "
    "(SELECT run_uuid FROM tags WHERE key = 'mlflow.parentRunId')"
)


def grid_axes(configs: int) -> tuple[list[int], list[float]]:
    """hidden_units x learning_rate with exactly `configs` points (1,000 = 25 x 40)."""
    units = max(d for d in range(1, 26) if configs % d == 0)
    return [8 * (i + 1) for i in range(units)], [round(0.001 * (j + 1), 4) for j in range(configs // units)]


class Server:
    def __init__(self, backend: Path, port: int, log: Path):
        self.backend, self.port, self.log, self.process = backend, port, log, None
        self.uri = f"http://127.0.0.1:{port}"

    def start(self) -> float:
        import requests

        started = time.monotonic()
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        with open(self.log, "a") as log:
            self.process = subprocess.Popen(server_command(f"sqlite:///{self.backend}", self.port), env=env,
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        while time.monotonic() - started < 180:
            if self.process.poll() is not None:
                sys.exit(f"mlflow server exited with {self.process.returncode}; see {self.log}")
            try:
                if requests.get(f"{self.uri}/health", timeout=1).ok:
                    return time.monotonic() - started
            except requests.RequestException:
                pass
            time.sleep(0.5)
        self.kill()
        sys.exit(f"mlflow server did not answer in 180 s; see {self.log}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)  # its own group: the server and its worker
            self.process.wait()


def stored_children(backend: Path) -> int:
    try:
        with sqlite3.connect(backend, timeout=5) as connection:
            return connection.execute(STORED_CHILDREN).fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0


def run(name: str, args, out: Path, outage: bool) -> dict:
    directory = out / name
    directory.mkdir(parents=True, exist_ok=True)
    backend = directory / "backend.db"
    for stale in (backend, directory / "server.log"):
        stale.unlink(missing_ok=True)
    server = Server(backend, free_port(), directory / "server.log")
    server.start()
    units, rates = grid_axes(args.configs)
    command = [sys.executable, "-m", "gridbench", "search", "digits", "--tracking-uri", server.uri,
               "--cpus-per-trial", "1", "--set", f"epochs={args.epochs}",
               "--grid", "hidden_units=" + ",".join(map(str, units)),
               "--grid", "learning_rate=" + ",".join(map(str, rates))]  # fmt: skip
    if args.backend:
        command += ["--backend", args.backend]
    env = {**os.environ, "GRIDBENCH_JOURNAL_DIR": str(directory / "journal")}
    result: dict = {"run": name, "command": " ".join(["python", *command[1:]]), "outage_s": 0.0}
    try:
        with open(directory / "search.out", "w") as stdout, open(directory / "search.err", "w") as stderr:
            started = time.monotonic()
            search = subprocess.Popen(command, cwd=directory, env=env, stdout=stdout, stderr=stderr)
            try:
                if outage:
                    threshold = max(1, int(args.configs * args.outage_at))
                    while stored_children(backend) < threshold and search.poll() is None:
                        time.sleep(0.5)
                    server.kill()
                    killed_at = time.monotonic()
                    result["killed_after_s"] = killed_at - started
                    result["stored_before_kill"] = stored_children(backend)
                    time.sleep(args.outage_s)
                    result["restart_s"] = server.start()
                    result["outage_s"] = time.monotonic() - killed_at
                search.wait()
            finally:
                if search.poll() is None:
                    search.kill()
            result["search_exit"] = search.returncode
            result["search_wall_s"] = time.monotonic() - started
        if outage:
            journals = sorted((directory / "journal").glob("*.jsonl"))
            synced_at = time.monotonic()
            sync = subprocess.run([sys.executable, "-m", "gridbench", "sync", str(journals[-1])], env=env,
                                  capture_output=True, text=True)  # fmt: skip
            (directory / "sync.out").write_text(sync.stdout + sync.stderr)
            result["sync_exit"] = sync.returncode
            result["sync_s"] = time.monotonic() - synced_at
            result["sync_line"] = ((sync.stdout + sync.stderr).strip().splitlines() or [""])[-1]  # its report
        result.update(read_back(backend))
    finally:
        server.kill()
    result["hint"] = next((line for line in (directory / "search.err").read_text().splitlines()
                           if "gridbench sync" in line), "")  # fmt: skip
    (directory / "result.json").write_text(json.dumps(result, indent=2))
    return result


def read_back(backend: Path) -> dict:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{backend}")
    experiment = client.get_experiment_by_name("gridbench/digits")
    runs, token = [], None
    while True:
        page = client.search_runs([experiment.experiment_id], max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            break
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    trials = {(r.data.tags.get("config_key"), r.data.params.get("repeat")) for r in children}
    metrics = parents[0].data.metrics if len(parents) == 1 else {}
    return {
        "parents": len(parents),
        "parent_status": parents[0].info.status if len(parents) == 1 else "?",
        "children": len(children),
        "children_finished": sum(r.info.status == "FINISHED" for r in children),
        "duplicates": len(children) - len(trials),
        **{key: metrics.get(key) for key in ("makespan_s", "overhead_ratio", "trial_wall_sum_s", "concurrency",
                                              "journal_write_s", "store_write_s", "store_lag_max_s", "store_retries")},
    }  # fmt: skip


def table(results: list[dict], args) -> str:
    rows = [
        ("children FINISHED", lambda r: f"{r['children_finished']} of {args.configs}"),
        ("duplicates", lambda r: str(r["duplicates"])),
        ("parent status", lambda r: r["parent_status"]),
        ("makespan (s)", lambda r: f"{r['makespan_s']:.1f}"),
        ("overhead ratio", lambda r: f"{r['overhead_ratio']:.3f}"),
        ("trial wall sum / concurrency (s)", lambda r: f"{r['trial_wall_sum_s'] / r['concurrency']:.1f}"),
        ("server down (s)", lambda r: f"{r['outage_s']:.1f}"),
        ("journal fsyncs, in the makespan (s)", lambda r: f"{r['journal_write_s']:.2f}"),
        ("store writes, off Tune's thread (s)", lambda r: f"{r['store_write_s']:.1f}"),
        ("longest wait, journal to store (s)", lambda r: f"{r['store_lag_max_s']:.1f}"),
        ("store retries", lambda r: f"{r['store_retries']:.0f}"),
        ("search exit / sync exit", lambda r: f"{r['search_exit']} / {r.get('sync_exit', '-')}"),
        ("whole command (s)", lambda r: f"{r['search_wall_s']:.1f}"),
    ]
    lines = ["| | " + " | ".join(r["run"] for r in results) + " |", "|---|" + "---:|" * len(results)]
    for label, cell in rows:
        lines.append(f"| {label} | " + " | ".join(_safe(cell, r) for r in results) + " |")
    return "\n".join(lines)


def _safe(cell, result) -> str:
    try:
        return cell(result)
    except (KeyError, TypeError, ZeroDivisionError):
        return "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="directory for the table and raw output")
    parser.add_argument("--configs", type=int, default=1000, help="grid size (default 1000)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--outage-s", type=float, default=30.0, help="seconds the server stays down (default 30)")
    parser.add_argument("--outage-at", type=float, default=0.3, help="kill once this share of trials is stored")
    parser.add_argument("--backend", help="Keras backend (default: gridbench's choice, $KERAS_BACKEND)")
    parser.add_argument("--runs", default=",".join(RUNS), help="which runs, e.g. one per invocation (default: both)")
    parser.add_argument("--report-only", action="store_true", help="rebuild the table from DIR's results")
    args = parser.parse_args()
    # mlflow-skinny (the GPU machine's kit) has the client, not the server.
    missing = [name for name in ("flask", "uvicorn", "mlflow.server") if importlib.util.find_spec(name) is None]
    if missing:
        sys.exit(
            f"`mlflow server` cannot run here (missing: {', '.join(missing)}): install the full mlflow package; "
            f"for the GPU machine's kit: ../shared/device-kit/build.sh .devkit 'mlflow==3.17.2'"
        )
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)

    for name in [] if args.report_only else args.runs.split(","):
        if name not in RUNS:
            sys.exit(f"--runs: unknown run {name!r}; choose from {', '.join(RUNS)}")
        run(name, args, out, outage=RUNS[name])
    # Every run's result found under DIR: runs made by separate invocations (--runs) report together.
    results = [json.loads((out / name / "result.json").read_text()) for name in RUNS
               if (out / name / "result.json").is_file()]  # fmt: skip
    (out / "results.json").write_text(json.dumps(results, indent=2))
    if len(results) < 2:
        print(f"{', '.join(r['run'] for r in results)} done; run the other with --runs to get the table")
        return
    undisturbed, disturbed = results
    try:
        ratio = f"{disturbed['makespan_s'] / undisturbed['makespan_s']:.3f}"
    except (KeyError, TypeError, ZeroDivisionError):
        ratio = "n/a"
    report = "\n".join([
        f"# Store outage: {args.configs} digits configurations, {args.epochs} epochs, 1 CPU per trial",
        "",
        f"    python benchmarks/store_outage.py --out {args.out} --configs {args.configs} --epochs {args.epochs} "
        f"--outage-s {args.outage_s:g} --outage-at {args.outage_at:g}" + (f" --backend {args.backend}" if args.backend else ""),
        "",
        f"Search: `{undisturbed['command']}`. The second run's server was killed (SIGKILL) once "
        f"{disturbed.get('stored_before_kill', '?')} trials were stored, {disturbed.get('killed_after_s', 0):.0f} s "
        f"into the command, and restarted on the same port and backend after {disturbed.get('outage_s', 0):.1f} s; "
        "then `gridbench sync` replayed the journal. Figures read back from each run's store.",
        "",
        table(results, args),
        "",
        f"Makespan with the outage / undisturbed: **{ratio}**.",
        "",
        f"sync: `{disturbed.get('sync_line', '')}` ({disturbed.get('sync_s', 0):.1f} s)",
        "",
        f"Hint printed by the search with the outage: `{disturbed['hint'] or '(none: the writer caught up)'}`",
        "",
    ])  # fmt: skip
    (out / "store_outage.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
