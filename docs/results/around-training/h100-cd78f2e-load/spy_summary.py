"""py-spy's native samples (spy_native.txt.gz, `py-spy record --native -f raw`) of load_parts.py: the share of the
samples inside load_one (one executable's deserialize_and_load) that each frame below it holds, inclusive.

    python spy_summary.py spy_native.txt.gz [TOP] [PART ...]

Each PART (a piece of a frame's name, or several joined by |) is then counted once per sample that has any frame
naming it: a union, where the frames above overlap.
"""

import collections
import gzip
import sys


def main() -> None:
    path, top, parts = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40, sys.argv[3:]
    inclusive, unions, total = collections.Counter(), collections.Counter(), 0
    with gzip.open(path, "rt") as samples:
        for line in samples:
            stack, _, count = line.rstrip().rpartition(" ")
            frames = [frame.split(" (")[0] for frame in stack.split(";")]
            if "load_one" not in frames:
                continue
            total += int(count)
            below = frames[frames.index("load_one") :]
            for name in set(below):
                inclusive[name] += int(count)
            for part in parts:
                named = any(piece in name for piece in part.split("|") for name in below)
                unions[part] += int(count) if named else 0
    print(f"samples inside load_one: {total}")
    for name, count in inclusive.most_common(top):
        print(f"{count:6d} {count / total:6.1%}  {name[:150]}")
    for part in parts:
        print(f"any frame naming {part!r}: {unions[part]} samples, {unions[part] / total:.1%}")


main()
