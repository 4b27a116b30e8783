"""How a local Ray's raylet starts each Python worker: Ray's setup step, without importing Ray for it.

The raylet starts every Python worker as `python setup_worker.py default_worker.py ARGS`. Ray's
setup_worker.py imports Ray (0.88-0.90 s on the 2-core machine) only to read the runtime_env's context, a
JSON of environment variables and the interpreter, and to exec the worker, which then imports Ray
again. gridbench gives its local Ray this script instead (gridbench.gridsearch.local_ray). It does
the same with the standard library alone for the plain context that Tune's trial actors get (their
environment variables, this interpreter), and hands any other context (a command prefix such as
conda's or a container's, another interpreter, another entry point, Java) to Ray's own script as it was
given. On 2 cores an actor with Tune's runtime_env was ready in a median of 1.119 s instead of 1.550 s
(benchmarks/worker_setup_ab.py at 4da123a, docs/results/around-training/worker-setup-2core.txt).

It runs as a script in the worker's process before the worker exists: standard library only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys

# RuntimeEnvContext's fields (ray/_private/runtime_env/context.py, Ray 2.60); any other is handed to Ray.
PLAIN_FIELDS = {"command_prefix", "env_vars", "py_executable", "override_worker_entrypoint", "java_jars"}


def parse(argv: list[str]) -> tuple[str, str | None, list[str]]:
    """The context's JSON, the language and the worker's own command, as Ray's setup_worker.py reads them."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--serialized-runtime-env-context", type=str)
    parser.add_argument("--language", type=str)
    known, worker_command = parser.parse_known_args(argv)
    return known.serialized_runtime_env_context or "{}", known.language, worker_command


def plain(context: dict, language: str | None, executable: str = sys.executable) -> bool:
    """Whether starting the worker takes nothing but its environment variables and this interpreter."""
    return (
        sys.platform != "win32"
        and language == "PYTHON"
        and set(context) <= PLAIN_FIELDS
        and not context.get("command_prefix")
        and not context.get("override_worker_entrypoint")
        and not context.get("java_jars")
        and context.get("py_executable") in (None, executable)
    )


def expand(value: str) -> str:
    """A variable's value as Ray's update_envs sets it: ${X} from this environment, unknown ones empty."""
    return re.sub(r"\$\{[A-Z0-9_]+\}", "", os.path.expandvars(value))


def rays_setup_worker() -> str:
    """Ray's own setup_worker.py, found without importing Ray."""
    ray = importlib.util.find_spec("ray")
    return os.path.join(list(ray.submodule_search_locations)[0], "_private", "workers", "setup_worker.py")


def main(argv: list[str]) -> None:
    serialized, language, worker_command = parse(argv)
    context = json.loads(serialized)
    if not plain(context, language):
        os.execv(sys.executable, [sys.executable, rays_setup_worker(), *argv])
    for name, value in (context.get("env_vars") or {}).items():
        os.environ[name] = expand(value)
    os.execv(sys.executable, [sys.executable, *worker_command])


if __name__ == "__main__":
    main(sys.argv[1:])
