"""A pytest `--durations` listing summed by test file: where the test workers' time went.

    python benchmarks/durations_by_file.py LISTING [--at-least SECONDS]

Reads the `12.50s call     tests/test_x.py::test_y` lines (setup and teardown too) and prints each test
file's sum, largest first, the listing's whole sum and its number of lines, and the number and sum of
the lines of at least SECONDS (default 5). A listing cut short (`--durations=40`) sums only what it holds.
Reads the file only.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^(\d+\.\d+)s (?:call|setup|teardown)\s+(\S+?)::", re.M)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("listing", type=Path)
    parser.add_argument("--at-least", type=float, default=5.0, help="seconds (default 5)")
    args = parser.parse_args()
    lines = [(float(seconds), path) for seconds, path in LINE.findall(args.listing.read_text(encoding="utf-8"))]
    if not lines:
        parser.exit(1, f"{args.listing}: no `--durations` lines\n")
    by_file: dict[str, float] = defaultdict(float)
    for seconds, path in lines:
        by_file[path] += seconds
    for path, seconds in sorted(by_file.items(), key=lambda item: -item[1]):
        print(f"{seconds:9.2f} s  {path}")
    long = [seconds for seconds, _ in lines if seconds >= args.at_least]
    print(f"{sum(s for s, _ in lines):9.2f} s  in all: {len(lines)} lines, {len(by_file)} files")
    print(f"{sum(long):9.2f} s  in the {len(long)} lines of at least {args.at_least:g} s")


if __name__ == "__main__":
    main()
