"""The warm-up phase of several timed searches (`--device both`, `scale`): every program compiled first.

    plans -> compiling processes (gridsearch.precompile), each plan's programs -> the compile cache -> searches

Without it, the first search of a pair or a scale would compile what the later ones load
from the cache, and which one ran first would decide the comparison. With a persistent
compile cache, the phase compiles (or finds) every program each plan needs before any
timed search starts; each search then loads its programs. The phase is its own part of
the account (gridbench.account, `compile_warmup_s`), in the first search's command and
never inside a makespan. Without a cache kept across searches (`--compile-cache search`
or `off`) there is nothing to warm up: each search pays its own compiling, as a first
search on a fresh machine does.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from typing import Sequence

from gridbench import compile_cache
from gridbench.gridsearch import precompile
from gridbench.gridsearch.plan import SearchPlan
from gridbench.gridsearch.tuning import program_representatives, trial_context
from gridbench.trial import precompile as precompile_process


@dataclass(frozen=True)
class WarmUp:
    """What the phase did: its wall time and the programs compiled, found in the cache, or left to the trials."""

    seconds: float = 0.0
    compiled: int = 0
    loaded: int = 0
    failed: int = 0

    @property
    def programs(self) -> int:
        return self.compiled + self.loaded + self.failed

    def describe(self) -> str:
        return (
            f"compile warm-up: {self.compiled} program(s) compiled, {self.loaded} found in the cache"
            + (f", {self.failed} left to their trials" if self.failed else "")
            + f", {self.seconds:.1f} s before the timed searches"
        )


def _warmable(plan: SearchPlan) -> tuple[SearchPlan, int]:
    """The plan as its programs compile ahead (whatever --compile-ahead says), and how many it has; 0: none."""
    if plan.options.compile_cache != compile_cache.PERSISTENT:
        return plan, 0
    ahead = replace(plan, options=replace(plan.options, compile_ahead=compile_cache.AHEAD_ON))
    return ahead, precompile.program_count(ahead, len(program_representatives(plan.spec)))


def warm_up(plans: Sequence[SearchPlan]) -> WarmUp:
    """Compiles every program of `plans` into the persistent compile cache, all plans at once; waits for them."""
    started = time.perf_counter()
    scratch = tempfile.mkdtemp(prefix="gridbench-warmup-")
    compilers = []
    try:
        seen, ready = set(), 0
        for plan in plans:
            ahead, programs = _warmable(plan)
            key = (plan.options.device, plan.backend, plan.spec.spec_hash)
            if programs == 0 or key in seen:  # a scale's counts share their programs
                continue
            seen.add(key)
            context = trial_context(ahead, scratch, precompiled=True)
            if precompile_process.all_ready(context, programs):
                ready += programs  # found or compiled by an earlier search: loading them here would warm nothing
                continue
            directory = os.path.join(scratch, f"plan-{len(compilers)}")
            compilers.append(precompile.Precompiler.start(ahead, context, programs, directory))
        for compiler in compilers:
            compiler.wait()
        reports = [compiler.report() for compiler in compilers]
    finally:
        for compiler in compilers:
            compiler.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    if not compilers:
        return WarmUp(seconds=time.perf_counter() - started, loaded=ready) if ready else WarmUp()
    return WarmUp(
        seconds=time.perf_counter() - started,
        compiled=sum(r.programs for r in reports),
        loaded=ready + sum(r.loaded for r in reports),
        failed=sum(r.failed for r in reports),
    )
