"""Keras' import in fresh processes, as a trial's worker did before gridbench.trial.keras_import ("plain"), with
scikit-learn hidden as it did at ce5cd2f ("without scikit-learn"), with matplotlib hidden too as it did at 0c5b00a
("without matplotlib"), and as it does now, with pandas hidden as well ("gridbench"), in turn (issue "Everything
around the training").

    python benchmarks/keras_import_ab.py [--pairs 5] [--backend jax]

Each process times only the import (time.perf_counter around it) and says whether scikit-learn, matplotlib and
pandas were imported.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

PROGRAMS = {
    "plain": "import time; t = time.perf_counter(); import keras; s = time.perf_counter() - t",
    "without scikit-learn": "import sys, time; t = time.perf_counter(); sys.modules['sklearn'] = None; "
    "import keras; del sys.modules['sklearn']; s = time.perf_counter() - t",
    "without matplotlib": "import sys, time; t = time.perf_counter(); sys.modules['sklearn'] = None; "
    "sys.modules['matplotlib'] = None; import keras; del sys.modules['sklearn'], sys.modules['matplotlib']; "
    "s = time.perf_counter() - t",
    "gridbench": "import time; t = time.perf_counter(); from gridbench.trial import keras_import; "
    "keras_import.import_keras(); s = time.perf_counter() - t",
}
REPORT = (
    "; import sys; print(f\"{s:.3f} {'sklearn' in sys.modules} {'matplotlib' in sys.modules} "
    "{'pandas' in sys.modules}\")"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--backend", default="jax")
    args = parser.parse_args()
    env = {**os.environ, "KERAS_BACKEND": args.backend}
    times: dict[str, list[float]] = {name: [] for name in PROGRAMS}
    for pair in range(1, args.pairs + 1):
        for name, program in PROGRAMS.items():
            out = subprocess.run([sys.executable, "-c", program + REPORT], env=env, capture_output=True, text=True)
            seconds, sklearn, matplotlib, pandas = out.stdout.split()
            times[name].append(float(seconds))
            print(
                f"round {pair}, {name}: {seconds} s, scikit-learn imported: {sklearn}, matplotlib: {matplotlib}, "
                f"pandas: {pandas}",
                flush=True,
            )
    for name, values in times.items():
        print(f"{name}: median {statistics.median(values):.3f} s [{min(values):.3f}-{max(values):.3f}]")


if __name__ == "__main__":
    main()
