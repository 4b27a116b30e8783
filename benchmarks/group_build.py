"""A fused group's build (FusedSession.build: its members' initial states and the data on the device), timed in this
process, for issue "Everything around the training". Run it from two checkouts to compare them:

    python benchmarks/group_build.py [--repeats 12] [--device cpu]
    PYTHONPATH=BASE python benchmarks/group_build.py ...      # BASE: e.g. `git archive REV gridbench | tar -x -C BASE`

The group is one of benchmarks/fused.py's MLP grid (hidden_units 512, batch_size 128, 8 members: learning_rate
x dropout, seed 0) on MNIST-shaped random data. The first two builds are warm-up (reported apart); the device is
synchronised before each clock reading.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=12)
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    args = parser.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "jax")
    if args.device == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import numpy as np

    import gridbench
    from gridbench.datasets import Dataset
    from gridbench.workloads.keras_mlp import open_fused_session

    rng = np.random.default_rng(0)
    data = Dataset("mnist", rng.random((60000, 784), dtype=np.float32), rng.integers(0, 10, 60000),
                   rng.random((10000, 784), dtype=np.float32), rng.integers(0, 10, 10000), 10)  # fmt: skip
    members = [
        dict(
            epochs=10,
            hidden_layers=2,
            optimizer="rmsprop",
            hidden_units=512,
            batch_size=128,
            learning_rate=lr,
            dropout=d,
        )
        for lr in (3e-4, 1e-3, 3e-3, 1e-2)
        for d in (0.0, 0.2)
    ]
    seconds = []
    for _ in range(args.repeats):
        session = open_fused_session(members, data, [0] * len(members))
        start = time.perf_counter()
        session.build()
        jax.block_until_ready(session.state)
        seconds.append(time.perf_counter() - start)
    timed = seconds[2:]
    print(f"gridbench from {os.path.dirname(gridbench.__file__)}, device {jax.devices()[0]}")
    print(f"warm-up builds: {', '.join(f'{s:.3f}' for s in seconds[:2])} s")
    print(f"group build: median {statistics.median(timed):.3f} s [{min(timed):.3f}-{max(timed):.3f}] over {len(timed)}")


if __name__ == "__main__":
    main()
