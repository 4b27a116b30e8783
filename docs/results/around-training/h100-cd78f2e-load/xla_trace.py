"""XLA's own trace events (jax.profiler) inside a saved program's executables' loads, every thread.

python xla_trace.py ROUNDS OUTDIR CACHE_DIR [CACHE_DIR ...]
"""

import collections
import glob
import os
import pickle
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import serialize_executable  # noqa: E402
from jax.profiler import ProfileData  # noqa: E402

from gridbench.workloads import saved_programs  # noqa: E402

rounds, outdir, caches = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
dev = jax.devices()[0]
jax.device_put(np.zeros(4, np.float32), dev).block_until_ready()
files = [f for c in caches for f in sorted(glob.glob(c + "/**/*.program", recursive=True))]
kept, windows = [], []
payloads = [(f, pickle.loads(open(f, "rb").read()[len(saved_programs.MAGIC) + 65 :])) for f in files]
for f, p in payloads:  # each once before tracing: the process's one-off costs apart
    for part in saved_programs.EXECUTABLES:
        kept.append(serialize_executable.deserialize_and_load(*p[part], dev.client, [dev]))
jax.profiler.start_trace(outdir)
for r in range(rounds):
    for f, p in payloads:
        for part in saved_programs.EXECUTABLES:
            t = time.perf_counter()
            kept.append(serialize_executable.deserialize_and_load(*p[part], dev.client, [dev]))
            s = time.perf_counter() - t
            windows.append((os.path.basename(f)[:8], part, s))
            print(f"round {r} {os.path.basename(f)[:8]} {part} {s:.4f} s", flush=True)
    kept.clear()
jax.profiler.stop_trace()
path = sorted(glob.glob(outdir + "/**/*.xplane.pb", recursive=True))[-1]
data = ProfileData.from_file(path)
agg = collections.defaultdict(lambda: [0, 0.0, set()])
for plane in data.planes:
    for line in plane.lines:
        for ev in line.events:
            a = agg[(plane.name, ev.name)]
            a[0] += 1
            a[1] += ev.duration_ns / 1e6
            a[2].add(line.name)
print(f"\nevents over {rounds} rounds of {len(payloads)} files x 2 executables (total ms, count, plane, name, threads)")
for (p, n), (c, ms, lines) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:80]:
    print(f"{ms:10.2f} ms {c:5d}x {p[:24]:24s} {n[:100]}  [{len(lines)} lines: {', '.join(sorted(lines))[:60]}]")
