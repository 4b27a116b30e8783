"""Each epoch load in vlog.txt (load_parts.py --marks under XLA's log): its length, and how much of it came after
XLA's "Thunk passes changed the thunk tree." line of that load (XLA's log names threads by id, the marks by name: a
log line is given to the latest load open at its time).

    python vlog_split.py vlog.txt
"""

import re
import sys


def seconds(stamp: str) -> float:
    hours, minutes, rest = stamp.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(rest)


def main() -> None:
    loads, ended = {}, []
    for line in open(sys.argv[1]).read().splitlines():
        if line.startswith("mark"):
            words = line.split()
            key = (line.split(" on ")[-1], words[3])
            if words[2] == "start":
                loads[key] = {"start": seconds(words[1]), "thunks": []}
            else:
                loads[key]["end"] = seconds(words[1])
                ended.append((*key, loads[key]))
            continue
        logged = re.match(r"I\d+ (\S+)\s+\d+ \S+\] Thunk passes", line)
        if logged:
            at = seconds(logged.group(1))
            open_loads = [load for load in loads.values() if "end" not in load and load["start"] <= at]
            if open_loads:
                max(open_loads, key=lambda load: load["start"])["thunks"].append(at)
    for thread, part, load in ended:
        if part == "train_epoch":
            after = ", ".join(f"{(load['end'] - at) * 1000:.1f}" for at in load["thunks"])
            whole = (load["end"] - load["start"]) * 1000
            print(f"{thread:18s} {part}: {whole:.1f} ms, after the thunk passes {after} ms")


main()
