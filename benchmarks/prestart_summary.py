"""benchmarks/prestart_gpu.sh's output as figures (docs/results/prestart.md): each scale run's makespan, speedup
and efficiency by GPU count, and each headline run's whole command against tune_floor.py A and peer_tune.py.

Usage: python benchmarks/prestart_summary.py OUTDIR   (peer_tune.py's run: peer-2.txt, else peer.txt)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def scale_rows(out: Path) -> None:
    for name in ("a", "b-off", "b-on", "c-off", "c-on"):
        for row in json.loads((out / f"{name}.json").read_text())["rows"]:
            print(
                f"scale {name}: {row['count']} GPU(s), {row['concurrency']} at once: makespan {row['makespan_s']:.2f} s, "
                f"speedup {row['speedup']:.2f}x, efficiency {100 * row['efficiency']:.1f}%"
            )


def headline_rows(out: Path) -> None:
    calls = (out / "calls.txt").read_text()
    walls = {m[1]: float(m[2]) for m in re.finditer(r"^(\S+): rc 0 whole command ([\d.]+) s", calls, re.M)}
    peer = out / "peer-2.txt" if (out / "peer-2.txt").exists() else out / "peer.txt"
    walls["peer"] = float(peer.read_text().split("whole command ")[-1].split()[0])
    for run in sorted(name for name in walls if name.startswith("headline-") and name != "headline-1"):
        print(
            f"{run}: {walls[run]:.2f} s; tune_floor.py A / it = {walls['floor-A'] / walls[run]:.2f}x; "
            f"peer_tune.py / it = {walls['peer'] / walls[run]:.2f}x"
        )


if __name__ == "__main__":
    scale_rows(Path(sys.argv[1]))
    headline_rows(Path(sys.argv[1]))
