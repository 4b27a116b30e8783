"""When a search's compiling processes started, were prepared to compile, and had each program ready.

    python benchmarks/precompile_timeline.py SEARCH_DIR [--since EPOCH_SECONDS]

SEARCH_DIR is a search's directory kept with --keep-ray-logs (it holds precompile/programs-N.jsonl, written by
gridbench.gridsearch.precompile and gridbench.trial.precompile). Times are seconds after --since (the command's
start, e.g. `date +%s.%N` just before it), else after the first process's launch. For each process: its launch,
its imports (the framework and the workload) and the data's read, then each program's end with its seconds:
`build` is the model's and the session's making, `compile` what the program records (tracing, lowering and XLA's
compilation, or the cache's read).
"""

from __future__ import annotations

import argparse
import glob
import json
import os


def read_lines(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as results:
        return [json.loads(line) for line in results if line.strip()]


def process_rows(lines: list[dict], zero: float) -> list[str]:
    rows = []
    for line in lines:
        if "launched_at" in line:
            rows.append(f"  {line['launched_at'] - zero:7.2f}  launched")
        elif line.get("prepared"):
            rows.append(
                f"  {line['at'] - zero:7.2f}  prepared: main began at {line['started_at'] - zero:.2f}, "
                f"imports {line['imports_s']:.2f} s, data {line['data_s']:.2f} s"
            )
        elif "index" in line:
            what = "error: " + line["error"] if "error" in line else "loaded" if line.get("cached") else "compiled"
            compile_s = line.get("compile_s", 0.0)
            rows.append(
                f"  {line['at'] - zero:7.2f}  program {line['index']} {what}: wall {line['wall_s']:.2f} s "
                f"(build {line['wall_s'] - compile_s:.2f} s, compile {compile_s:.2f} s)"
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("search_dir", help="a search's directory kept with --keep-ray-logs")
    parser.add_argument("--since", type=float, help="the command's start, seconds since the epoch")
    args = parser.parse_args(argv)
    paths = sorted(glob.glob(os.path.join(args.search_dir, "precompile", "programs-*.jsonl")))
    if not paths:
        print(f"no precompile/programs-*.jsonl under {args.search_dir}: no program was compiled ahead")
        return 1
    processes = {path: read_lines(path) for path in paths}
    launches = [line["launched_at"] for lines in processes.values() for line in lines if "launched_at" in line]
    zero = args.since if args.since is not None else min(launches, default=0.0)
    print(f"seconds after {'the command' if args.since is not None else 'the first launch'}")
    for path, lines in processes.items():
        print(os.path.basename(path))
        print("\n".join(process_rows(lines, zero)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
