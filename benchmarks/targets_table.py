"""Issue "Everything around the training": its one-GPU targets, against one job's raw files, as a Markdown table.

    python benchmarks/targets_table.py JOBDIR

JOBDIR is laid out as the around-training jobs lay it out (docs/results/around-training/*/job.sh), each folder
written by benchmarks/fixed_costs.sh, each read where present:
- headline/: the `headline` step as the job's first search, so that its headline-1 ran on an empty compile cache and
  its later runs on a filled one; `floor` (tune_floor.py A) and `peer` (peer_tune.py) where that step ran them;
- pair-N/: the `floor` then `headline` steps, HEADLINE_RUNS=1, on the filled cache;
- fused/: the `fused`, `jaxfloor` and `fusedpairs` steps;
- ready.json: benchmarks/program_ready.py's records.
Other steps name their runs otherwise (`against`, `prestart`, `firstrun`: headline-after-N, floor-A-N, ...) and are
not read: a target that only they measured says NOT_MEASURED.

Each ratio pairs two runs of one call, as the issue asks: a second run of the headline with the floor run of its step
(and the peer), the fused grid's second run with fused_floor.py's second (`jaxfloor`), and each fused pair with its
own floor run. gridbench's fused times are its own `command_s` (benchmarks/fused.py also reads the store back). Reads
the files only: a table published earlier is rebuilt from its raw files, with nothing run again.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

WHOLE = re.compile(r"^(?P<name>[\w-]+): rc (?P<rc>\d+) whole command (?P<s>[\d.]+) s$")
HEADLINE, PAIR_STEP, FUSED_PAIR = re.compile(r"^headline-\d+$"), re.compile(r"^pair-\d+$"), re.compile(r"-pair-(\d+)$")
FUSED_AT_MOST, HEADLINE_AT_MOST, FIRST_AT_MOST, READY_AT_MOST = 1.5, 12.0, 18.0, 0.1  # the targets
FLOOR_AT_LEAST, PEER_AT_LEAST = 2.0, 5.0
NOT_MEASURED = "not found (not run, failed, or named by a step not read)"


def calls(path: Path) -> dict[str, float]:
    """A calls.txt's successful whole commands, by name."""
    found = {}
    for line in path.read_text().splitlines() if path.exists() else ():
        if (whole := WHOLE.match(line)) and whole["rc"] == "0":
            found[whole["name"]] = float(whole["s"])
    return found


def command_s(path: Path) -> float | None:
    """gridbench's own whole command in one of benchmarks/fused.py's raw JSON files, where it ran and succeeded."""
    run = json.loads(path.read_text()) if path.exists() else {}
    return run["command_s"] if run.get("exit") == 0 else None


def headline_runs(job: Path) -> tuple[float | None, list[float], list[tuple[float, float]], list[tuple[float, float]]]:
    """The first run on an empty cache; every second run; (second run, its step's floor) and (second run, peer) pairs.

    Only the `headline`, `floor` and `peer` steps' runs are read (headline-N, floor-A, peer); the `against`, `prestart`
    and `firstrun` steps name theirs otherwise (headline-after-N, floor-A-N, ...). Where headline/'s headline-1 failed,
    its later runs are left out: the first of them may have run on the empty cache.
    """
    first, seconds, floors, peers = None, [], [], []
    pairs = [path for path in job.glob("pair-*") if PAIR_STEP.match(path.name) and path.is_dir()]
    for step in [job / "headline", *sorted(pairs, key=lambda path: int(path.name.split("-")[1]))]:
        runs = calls(step / "calls.txt")
        headlines = sorted((name for name in runs if HEADLINE.match(name)), key=lambda n: int(n.split("-")[1]))
        if step.name == "headline":
            first = runs.get("headline-1")
            headlines = [name for name in headlines if name != "headline-1"] if first is not None else []
        for name in headlines:
            seconds.append(runs[name])
            if "floor-A" in runs:
                floors.append((runs[name], runs["floor-A"]))
            if "peer" in runs:
                peers.append((runs[name], runs["peer"]))
    return first, seconds, floors, peers


def fused_pairs(job: Path) -> tuple[list[tuple[float, float]], tuple[float, float] | None]:
    """(gridbench, floor) for the fused grid: the `fused` step's second runs first, then each fusedpairs pair; and
    (gridbench, floor) for the one-trial-per-configuration grid, where the job ran it."""
    runs = calls(job / "fused" / "calls.txt")
    raw = job / "fused" / "fused-2" / "raw"
    pairs, trials = [], None
    if (grid := command_s(raw / "mlp-gpu-fused.json")) is not None and "jaxfloor-fused-2" in runs:
        pairs.append((grid, runs["jaxfloor-fused-2"]))
    for pair in sorted({int(match[1]) for name in runs if (match := FUSED_PAIR.search(name))}):
        grid = command_s(job / "fused" / f"fusedpair-{pair}" / "raw" / "mlp-gpu-fused.json")
        if grid is not None and f"jaxfloor-fused-pair-{pair}" in runs:  # a pair of which either side failed is left out
            pairs.append((grid, runs[f"jaxfloor-fused-pair-{pair}"]))
    if (grid := command_s(raw / "mlp-gpu-trials.json")) is not None and "jaxfloor-trials" in runs:
        trials = (grid, runs["jaxfloor-trials"])
    return pairs, trials


def ready_times(job: Path) -> dict[str, list[float]]:
    """Each program's times to be ready from the cache (program_ready.py's `ready` stage), in the order run."""
    path = job / "ready.json"
    times: dict[str, list[float]] = {}
    for record in json.loads(path.read_text()) if path.exists() else ():
        if record["stage"] == "ready":
            times.setdefault(record["program"], []).append(record["ready_s"])
    return times


def met(count: int, total: int) -> str:
    return "-" if not total else "yes" if count == total else "no" if not count else f"{count} of {total}"


def row(target: str, shown: list[str], oks: list[bool]) -> str:
    """One table row: what was measured (or NOT_MEASURED), and how many of `oks` meet the target."""
    return f"| {target} | {'; '.join(shown) or NOT_MEASURED} | {met(sum(oks), len(oks))} |"


def ratio(value: float, target: float) -> str:
    """N.NNx, with a third decimal where two would round a miss onto the target (1.996 is not 2.00x)."""
    text = f"{value:.2f}"
    return (f"{value:.3f}" if float(text) == target and value != target else text) + "x"


def listed(values: list[float], digits: int) -> list[str]:
    return [", ".join(f"{value:.{digits}f}" for value in values) + " s"] if values else []


def rows(job: Path) -> list[str]:
    first, seconds, floors, peers = headline_runs(job)
    fused, trials = fused_pairs(job)
    lines = []
    for target, pairs in (
        (f"64-configuration grid, fused: at most {FUSED_AT_MOST}x `fused_floor.py --mode fused`", fused),
        (
            f"the same grid, one trial per configuration: at most {FUSED_AT_MOST}x `--mode trials`",
            [trials] if trials else [],
        ),
    ):
        shown = [f"{ours:.2f} s against {floor:.2f} s: {ratio(ours / floor, FUSED_AT_MOST)}" for ours, floor in pairs]
        lines.append(row(target, shown, [ours / floor <= FUSED_AT_MOST for ours, floor in pairs]))
    ready = ready_times(job) or {"mlp": [], "fused": []}
    for program, times in ready.items():
        target = f"a program from the cache ready in at most {READY_AT_MOST} s ({program})"
        lines.append(row(target, listed(times, 3), [t <= READY_AT_MOST for t in times]))
    target = f"headline's second run at most {HEADLINE_AT_MOST:g} s"
    lines.append(row(target, listed(seconds, 2), [s <= HEADLINE_AT_MOST for s in seconds]))
    for reference, at_least, pairs in (
        ("tune_floor.py A", FLOOR_AT_LEAST, floors),
        ("peer_tune.py", PEER_AT_LEAST, peers),
    ):
        shown = [f"{theirs:.2f} s against {ours:.2f} s: {ratio(theirs / ours, at_least)}" for ours, theirs in pairs]
        oks = [theirs / ours >= at_least for ours, theirs in pairs]
        lines.append(row(f"at least {at_least:g}x `{reference}` in the same call", shown, oks))
    firsts = [first] if first is not None else []
    target = f"first run on an empty cache at most {FIRST_AT_MOST:g} s"
    lines.append(row(target, listed(firsts, 2), [run <= FIRST_AT_MOST for run in firsts]))
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python benchmarks/targets_table.py JOBDIR (a folder of an around-training job's raw files)")
        return 2
    print("| target | measured | met |\n|---|---|---|")
    print("\n".join(rows(Path(argv[0]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
