"""Where a search's driver spends its start-up: `gridbench` run with its start-up steps stamped.

    python benchmarks/driver_timeline.py search mnist --device gpu [more gridbench arguments]

Prints "[trace] SECONDS > step" and "< step" on stderr, in seconds since the process was
created (the command's start, as time_to_first_trial_s counts it), for planning, Ray's start,
the backends' probe and the imports beside it (MLflow and Ray Tune, on threads), the store's
opening, compiling ahead, the recording callback and Tune's fit, then the command's own output.
Run it from an empty directory, as a user types the command.
"""

from __future__ import annotations

import functools
import sys
import time

import psutil

STARTED = psutil.Process().create_time()


def stamp(label: str) -> None:
    print(f"[trace] {time.time() - STARTED:6.2f} {label}", file=sys.stderr, flush=True)


def stamped(owner, name: str) -> None:
    """Replaces owner.name with a version that stamps its start and end."""
    function = getattr(owner, name)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        stamp(f"> {name}")
        try:
            return function(*args, **kwargs)
        finally:
            stamp(f"< {name}")

    setattr(owner, name, wrapper)


def main() -> int:
    stamp("python started, importing gridbench")
    import gridbench.cli as cli
    import gridbench.gridsearch as search
    import gridbench.gridsearch.plan as plan
    import gridbench.gridsearch.ray_session as ray_session
    import gridbench.gridsearch.search_runner as run

    # Each where its caller looks it up (run_search's steps are in run.py's namespace).
    steps = [(ray_session, "_start_ray"), (ray_session, "open_store"), (run, "recording_callback"), (run, "fit")]
    steps.append((ray_session, "_import_for_later"))  # MLflow and Ray Tune, on a thread beside Ray's start
    steps.append((plan, "_choose_backend"))  # asking the backends about GPUs, on a thread beside Ray's start
    for module, name in [*steps, (run, "start_search")]:
        if hasattr(module, name):
            stamped(module, name)
    for name in ("planned", "precompile"):
        if hasattr(ray_session.RaySession, name):  # older commits have precompile only
            stamped(ray_session.RaySession, name)
    stamped(search, "plan_search")  # the CLI imports it from gridbench.gridsearch when it runs
    stamp("gridbench imported")
    sys.argv = ["gridbench", *sys.argv[1:]]
    from gridbench import collector

    collector.pause_for_startup()  # as gridbench.cli.run does
    try:
        return cli.main()
    finally:
        stamp("end")


if __name__ == "__main__":
    sys.exit(main())
