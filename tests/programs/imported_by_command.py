"""`python imported_by_command.py OUT ARGS...` runs `python -m gridbench ARGS...` as the command line does, then
writes to OUT which of the heavy frameworks the command imported, one name a line: the proof that a command it
refused started none of them (Ray above all)."""

import atexit
import runpy
import sys

HEAVY = ("ray", "tensorflow", "keras", "jax", "torch")


def _write_imported(path: str) -> None:
    with open(path, "w", encoding="utf-8") as out:
        out.writelines(f"{name}\n" for name in HEAVY if name in sys.modules)


if __name__ == "__main__":
    atexit.register(_write_imported, sys.argv[1])
    sys.argv = ["gridbench", *sys.argv[2:]]
    runpy.run_module("gridbench", run_name="__main__", alter_sys=True)
