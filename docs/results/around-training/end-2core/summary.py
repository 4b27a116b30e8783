"""The end's pairs of ab/, from its raw files: python3 summary.py > summary.txt (from this folder).

ab/calls.txt lists the runs in the order they ran (base: 051e918's gridbench; new: 763b992's), ab/ends.txt the same
searches read back from their store, oldest first ("after": Tune's return to the command's end). Each run's output
holds its "end probe:" lines: Ray's shutdown, and the processes left after it with what ending them took."""

import re
import statistics
from pathlib import Path

calls = re.findall(r"^(\S+): rc 0 whole command ([\d.]+) s", Path("ab/calls.txt").read_text(), re.M)
afters = [float(line.split()[-1]) for line in Path("ab/ends.txt").read_text().splitlines()[1:]]
assert len(calls) == len(afters), "one store row per run"
rows = {}
for (name, whole), after in zip(calls, afters):
    text = Path(f"ab/{name}.txt").read_text()
    shutdown = float(re.search(r"end probe: shutdown ([\d.]+) s", text)[1])
    ending, left = re.search(r"end probe: end ([\d.]+) s, (\d+) left", text).groups()
    rows[name] = (float(whole), after, shutdown, float(ending), int(left))
print("run      whole s  after s  shutdown s  end s  left")
for name, (whole, after, shutdown, ending, left) in rows.items():
    print(f"{name:8} {whole:7.2f}  {after:7.3f}  {shutdown:10.3f}  {ending:5.3f}  {left}")
for side in ("base", "new"):
    mine = [row for name, row in rows.items() if name.startswith(side + "-")]
    left = [row for row in mine if row[4]]
    none = [row for row in mine if not row[4]]
    print(
        f"{side}: a worker left in {len(left)} of {len(mine)}, ending it {min(r[3] for r in left):.3f}-"
        f"{max(r[3] for r in left):.3f} s, after {min(r[1] for r in left):.3f}-{max(r[1] for r in left):.3f} s"
        f" (none left: after {min(r[1] for r in none):.3f}-{max(r[1] for r in none):.3f} s, shutdown"
        f" {min(r[2] for r in none):.3f}-{max(r[2] for r in none):.3f} s; left: shutdown"
        f" {min(r[2] for r in left):.3f}-{max(r[2] for r in left):.3f} s); whole {min(r[0] for r in mine):.2f}-"
        f"{max(r[0] for r in mine):.2f} s, median {statistics.median(r[0] for r in mine):.2f} s"
    )
