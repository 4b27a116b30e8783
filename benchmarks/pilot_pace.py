"""A pilot's pace against its whole search's, program by program (benchmarks/pilot_check.sh's output).

    python benchmarks/pilot_pace.py OUTDIR GRID [...]      e.g. mlp15 cnn11

For each grid and device: each program's steady epoch in the pilot against the median over the
whole search's trials of that program; then, over the whole search's trials of at least 5 epochs,
each epoch's time against the median of its trial's epochs from the 4th on (the mean over trials):
whether a pilot's few epochs run slower than a long trial's later ones.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

from pilot_table import store_uri, whole_ids

from gridbench.tracking import read_search, schema
from gridbench.tracking.records import config_key
from gridbench.workloads import RUNTIME_HYPERPARAMETERS, UNTRACED_HYPERPARAMETERS


def program_of(trial) -> str:
    """The trial's program, shown: its configuration without the runtime hyperparameters."""
    left_out = RUNTIME_HYPERPARAMETERS | UNTRACED_HYPERPARAMETERS
    return config_key({axis: value for axis, value in trial.config.items() if axis not in left_out})


def _epochs(uri: str, run_id: str) -> list[float]:
    import mlflow

    return [
        m.value for m in sorted(mlflow.MlflowClient(uri).get_metric_history(run_id, "epoch_s"), key=lambda m: m.step)
    ]


def main(out: Path, grids: list[str]) -> None:
    uri = store_uri(out)
    for name in grids:
        pilots = [read_search(uri, i) for i in (out / f"{name}-pilot.ids").read_text().split()]
        wholes = [read_search(uri, i) for i in whole_ids(out, name)]
        for pilot, whole in zip(pilots, wholes):
            device = pilot.tags[schema.DEVICE]
            found = defaultdict(list)
            for trial in whole.trials:
                found[program_of(trial)].append(trial.metrics[schema.STEADY_EPOCH_S])
            for trial in pilot.trials:
                key = program_of(trial)
                mine, theirs = trial.metrics[schema.STEADY_EPOCH_S], statistics.median(found[key])
                print(
                    f"{name} {device} {key}: pilot {mine:.4g} s/epoch, whole median {theirs:.4g} ({mine / theirs - 1:+.1%})"
                )
            rows = []
            for trial in whole.trials:
                epochs = _epochs(uri, trial.run_id)
                if len(epochs) >= 5:
                    rows.append([e / statistics.median(epochs[3:]) for e in epochs])
            if rows:
                shown = [f"{statistics.fmean(r[i] for r in rows):.3f}" for i in range(min(map(len, rows)))]
                print(
                    f"{name} {device} whole, epoch i / its trial's median from the 4th, mean over trials: {' '.join(shown)}"
                )


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
