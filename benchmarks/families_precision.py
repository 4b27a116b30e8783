"""Each model family's run in test_families' compiled-loop test, alone, under a precision: where that test's time goes.

    python benchmarks/families_precision.py mixed_bfloat16|float32     (from the repository's root, 2-core CI machine)

Runs tests/programs/train_families.py once per family, in a process of its own (so each pays Keras' and JAX's
import, which the test pays once), on the test's self-made data and small models, JAX on the CPU, with the precision
the test's program asks for replaced by the one given. Prints, per family, the wall and CPU seconds of that process
and what its trial said.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from datafiles import make_cifar10, make_imdb, make_text  # noqa: E402
from test_families import FAMILY_EXPERIMENTS, JAX_FIT_TOO, LEARNS, SMALL  # noqa: E402

from gridbench.spec import load_spec  # noqa: E402


def main(precision: str) -> None:
    data = Path(tempfile.mkdtemp(prefix="gridbench-families-"))
    for make in (make_cifar10, make_imdb, make_text):
        make(data)
    program = Path(tempfile.mkdtemp()) / "train_families.py"
    source = (ROOT / "tests/programs/train_families.py").read_text()
    program.write_text(source.replace('precision="mixed_bfloat16"', f'precision="{precision}"'))
    path = os.pathsep.join(str(p) for p in (ROOT, ROOT / "tests", ROOT / "tests/programs"))
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "PYTHONPATH": path}
    for experiment, model in FAMILY_EXPERIMENTS.items():
        loops = {model: ("compiled", "fit") if model in JAX_FIT_TOO else ("compiled",)}
        asked = {"backend": "jax", "data_dir": str(data), "datasets": {model: load_spec(experiment).dataset},
                 "loops": loops, "small": {model: {**SMALL.get(model, {}), **LEARNS.get(model, {})}}}  # fmt: skip
        start, before = time.perf_counter(), os.times()
        out = subprocess.run([sys.executable, str(program), json.dumps(asked)], capture_output=True, text=True, env=env)
        after = os.times()
        cpu = after.children_user - before.children_user + after.children_system - before.children_system
        said = out.stdout.strip().splitlines()[-1] if out.returncode == 0 else out.stderr[-300:]
        print(
            f"{model:10s} {precision} wall {time.perf_counter() - start:6.1f} cpu {cpu:6.1f} {said[:200]}", flush=True
        )


if __name__ == "__main__":
    main(sys.argv[1])
