"""mnist.npz read as np.load reads it and as gridbench reads it (gridbench.datasets.npz), alone and beside a thread
that runs Python (as a worker's imports do while its first trial reads the data), each in a fresh process.

    python benchmarks/data_read.py --data .data/mnist.npz [--repeats 3]

Prints, for each reader and setting, the seconds of each process's read: the four arrays, as uint8 (no scaling).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import sys, threading, time
    import numpy as np
    from gridbench.datasets import MNIST_ARRAYS
    from gridbench.datasets.npz import read_arrays
    path, reader, beside = sys.argv[1], sys.argv[2], sys.argv[3] == "beside"
    done = threading.Event()

    def python_work():
        while not done.is_set():
            sum(i * i for i in range(100))

    if beside:
        threading.Thread(target=python_work, daemon=True).start()
    start = time.perf_counter()
    if reader == "np.load":
        with np.load(path, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in MNIST_ARRAYS}
    else:
        arrays = read_arrays(path, MNIST_ARRAYS)
    print(time.perf_counter() - start)
    done.set()
    """
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="mnist.npz")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for reader in ("np.load", "gridbench"):
        for setting in ("alone", "beside"):
            seconds = [
                float(
                    subprocess.run(
                        [sys.executable, "-c", CHILD, args.data, reader, setting],
                        check=True,
                        capture_output=True,
                        text=True,
                    ).stdout
                )
                for _ in range(args.repeats)
            ]
            listed = ", ".join(f"{s:.3f}" for s in seconds)
            print(f"{reader:9s} {setting:6s} median {statistics.median(seconds):.3f} s  ({listed})", flush=True)


if __name__ == "__main__":
    main()
