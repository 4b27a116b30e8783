"""Planning a search: every check against the machine, the data and the store, before anything is written.

spec + options -> backend, GPUs and cores, data, store -> SearchPlan
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Callable

from gridbench import compile_cache, disk_space, environment
from gridbench.datasets import SHAPES
from gridbench.errors import UserError
from gridbench.gridsearch import backends, fusion, gpu_nodes, lifecycle, local_ray, placement, plain_workers, user_check
from gridbench.gridsearch.options import SearchOptions, SearchPlan
from gridbench.spec import ExperimentSpec, trial_timeout
from gridbench.tracking.journal import check_journal_dir
from gridbench.tracking.store import check_tracking_uri, resolve_tracking_uri

DEVICES = ("cpu", "gpu")
MAX_RETRIES = 100


def plan_search(
    spec: ExperimentSpec,
    options: SearchOptions,
    while_probing: Callable[[SearchOptions, int, int, dict | None, tuple[int, float]], None] | None = None,
    when_planned: Callable[[SearchPlan], None] | None = None,
    before_asking: Callable[[SearchPlan], None] | None = None,
) -> SearchPlan:
    """Checks the request against this machine, the data and the store; raises UserError.

    The checks that need no backend come first (the data and the store among them), then the backend: asking
    backends whether they see a GPU takes seconds, and `while_probing(options, cpus, gpus, runtime_env,
    trial_share)` runs meanwhile (the search starts Ray then, gridbench.gridsearch.ray_session.RaySession.start).
    Before asking a Keras GPU search's backends (none chosen yet), `before_asking(plan)` gets the plan on the backend
    the answer most likely names, in the probe's thread beside `while_probing` (_assume; compiling ahead starts on
    it, RaySession.assumed). The checks that depend on the backend come after; then
    `when_planned(plan)` gets the finished plan, still beside Ray's start (RaySession.planned)."""
    _check_options(options)
    workload = spec.workload
    trials_total = spec.grid_size * spec.repeats
    if trials_total > options.max_trials:
        raise UserError(
            f"{spec.grid_size} configurations x {spec.repeats} repeat(s) = {trials_total} trials is more than "
            f"--max-trials {options.max_trials}; shrink the grid, or raise --max-trials"
        )
    _check_batch_sizes(spec)
    inner = workload.inner_axis
    ray_trials = trials_total // len(spec.grid.get(inner, (1,))) if inner else trials_total
    groups = ()
    if spec.execution == "fused":
        fusion.check_fusable(workload.name, workload.framework, options.gpus_per_trial or 1.0)
        groups = fusion.fused_groups(spec.configurations(), spec.params, spec.repeats)
        ray_trials = len(groups)
    gpus, gpus_per_trial, visible_gpus, cores, cpus = _resources(options, ray_trials)
    data = user_check.locate(spec, options)  # a user's own data, or a built-in dataset found as usual
    tracking_uri = resolve_tracking_uri(options.tracking_uri)
    check_tracking_uri(tracking_uri)
    check_journal_dir(tracking_uri)
    _check_room(options)
    options, cache_state = _usable_cache(options)
    if workload.framework == "keras":
        _refuse_before_ray(spec, bool(groups), options)
    runtime_env, trial_share = user_check.runtime_env(spec), (cpus, gpus_per_trial)  # a trial's: gpu_nodes.layout
    meanwhile = (lambda: while_probing(options, cores, gpus, runtime_env, trial_share)) if while_probing else None

    build = functools.partial(_plan_on, spec=spec, options=options, tracking_uri=tracking_uri, data=data,
                              cpus_per_trial=cpus, gpus_per_trial=gpus_per_trial, gpus=gpus, cpus=cores,
                              trials_total=trials_total, fused_groups=groups,
                              compile_cache_state=cache_state)  # fmt: skip

    def complete(choice: backends.BackendChoice) -> SearchPlan:
        """The checks that depend on the backend, then the plan (in the probe's thread, while Ray starts)."""
        plan = build(choice)
        if plan.spec.user_model is not None:
            plan = replace(plan, user_check_s=user_check.check(plan))
        if when_planned is not None:
            when_planned(plan)
        return plan

    if workload.framework == "keras":

        def asked() -> SearchPlan:
            _assume(build, options, before_asking)
            return complete(_choose_backend(options, visible_gpus))

        return _while(asked, meanwhile)
    if meanwhile is not None:
        meanwhile()
    if options.device == "gpu" and importlib.util.find_spec("cupy") is None:
        raise UserError(
            f"model {workload.name} on --device gpu needs CuPy: pip install 'gridbench[cuda13]' (or [cuda12])"
        )
    return complete(
        backends.BackendChoice(workload.framework, f"model {workload.name} computes with {workload.framework}")
    )


def _plan_on(choice: backends.BackendChoice, spec: ExperimentSpec, options: SearchOptions, **fixed) -> SearchPlan:
    """The plan on `choice`'s backend; `fixed`, the plan's fields that no backend changes (raises UserError)."""
    fused_spec = fusion.fused_spec(spec, choice.backend) if fixed["fused_groups"] else spec  # refuses what cannot fuse
    ran_spec = fused_spec.for_backend(choice.backend, options.device)
    if fixed["gpus_per_trial"] > 1:
        _check_data_parallel(ran_spec, choice.backend, fixed["gpus_per_trial"])
    return SearchPlan(spec=ran_spec, options=options, backend_choice=choice, **fixed)


def _assume(
    build: Callable[[backends.BackendChoice], SearchPlan],
    options: SearchOptions,
    before_asking: Callable[[SearchPlan], None] | None,
) -> None:
    """Hands `before_asking` a GPU search's plan on the backend its probe most likely confirms: the one named, or
    the first installed of backends.GPU_ORDER. Asking takes 1.8-4.6 s on an H100 (docs/results/around-training.md,
    "sixteenth"), which compiling ahead need not wait for; a different answer replaces what started on it.
    A user's own model is checked first (user_check), so nothing starts on it before the answer."""
    if before_asking is None or options.device != "gpu" or options.backend_choice is not None:
        return
    named = backends.named_backend(options.backend)
    likely = (named[0],) if named is not None else backends.GPU_ORDER
    backend = next((b for b in likely if b in backends.BACKENDS and backends.installed(b)), None)
    if backend is None:
        return
    try:
        plan = build(backends.BackendChoice(backend, f"assumed before asking: {backend}"))
    except UserError:
        return  # nothing to start on: the confirmed plan refuses it too, in one line, where the answer names it
    if plan.spec.user_model is None:
        before_asking(plan)


def _check_options(options: SearchOptions) -> None:
    """The checks on the options alone (raises UserError)."""
    if options.device not in DEVICES:
        raise UserError(f"--device must be one of {', '.join(DEVICES)}, got {options.device!r}")
    if options.compile_cache not in compile_cache.SETTINGS:
        raise UserError(
            f"--compile-cache must be one of {', '.join(compile_cache.SETTINGS)}, got {options.compile_cache!r}"
        )
    if options.compile_ahead not in compile_cache.AHEAD_SETTINGS:
        raise UserError(
            f"--compile-ahead must be one of {', '.join(compile_cache.AHEAD_SETTINGS)}, got {options.compile_ahead!r}"
        )
    if options.max_concurrent is not None and options.max_concurrent <= 0:
        raise UserError(f"--max-concurrent must be > 0, got {options.max_concurrent}")
    if options.address and (options.gpus is not None or options.cpus is not None):
        raise UserError("--gpus and --cpus limit this machine's Ray; on a cluster (--address) every node's count")
    trial_timeout(options.trial_timeout_s, "--trial-timeout")
    if not 0 <= options.retries <= MAX_RETRIES:
        raise UserError(f"--retries must be 0 to {MAX_RETRIES}, got {options.retries}")
    if not options.address:  # how a local Ray starts: refused before the journal's directory is made
        local_ray.choice()
        gpu_nodes.node_per_gpu()
        plain_workers.wanted()


def _resources(options: SearchOptions, ray_trials: int) -> tuple[int, float, int, int, int]:
    """GPUs Ray may hand out, GPUs per trial, visible GPUs, cores, cores per trial (raises UserError)."""
    gpus, gpus_per_trial, visible_gpus = 0, 0.0, 0
    if options.device == "gpu":
        gpus_per_trial = placement.check_gpus_per_trial(
            1.0 if options.gpus_per_trial is None else options.gpus_per_trial
        )
        visible_gpus = environment.visible_gpu_count()
        # Ray would queue a GPU trial forever on a machine without one (a cluster's nodes
        # are checked once Ray has joined it).
        if not options.address:
            gpus = placement.choose_gpus(options.gpus, visible_gpus, gpus_per_trial)
    elif options.gpus_per_trial is not None or options.gpus is not None:
        raise UserError("--gpus and --gpus-per-trial apply to --device gpu only")
    cores = environment.usable_cores()
    if options.cpus is not None:
        if not 0 < options.cpus <= cores:
            raise UserError(f"--cpus {options.cpus}: this machine has {cores} usable cores; use 1 to {cores}")
        cores = options.cpus
    cpus = options.cpus_per_trial
    if cpus is None:
        # One trial at a time gets every core; trials packed on GPUs share them evenly.
        slots = placement.gpu_slots(gpus, gpus_per_trial) if gpus else 1
        cpus = 1 if options.address else max(1, cores // min(slots, ray_trials, options.max_concurrent or slots))
    if cpus <= 0:
        raise UserError(f"--cpus-per-trial must be > 0, got {cpus}")
    if cpus > cores and not options.address:
        raise UserError(
            f"--cpus-per-trial {cpus} is more than the {cores} cores this search may use; use at most {cores}"
        )
    return gpus, gpus_per_trial, visible_gpus, cores, cpus


def plan_pair(spec: ExperimentSpec, cpu: SearchOptions, gpu: SearchOptions) -> tuple[SearchPlan, SearchPlan]:
    """--device both: the CPU and the GPU search, both checked before either runs.

    Both train on the GPU search's backend, so that the pair compares like for like,
    unless the CPU search names its own.
    """
    gpu_plan = plan_search(spec, gpu)
    if cpu.backend is None and spec.workload.framework == "keras":
        reason = f"the GPU search's, so that the pair compares like for like ({gpu_plan.backend_choice.reason})"
        cpu = replace(cpu, backend_choice=backends.BackendChoice(gpu_plan.backend, reason))
    return plan_search(spec, cpu), gpu_plan


def _while(task: Callable[[], SearchPlan], meanwhile: Callable[[], None] | None) -> SearchPlan:
    """task(), with meanwhile() run in this thread while task runs in another (Ray starts in the main thread)."""
    if meanwhile is None:
        return task()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gridbench-probe") as pool:
        answer = pool.submit(task)
        meanwhile()
        return answer.result()


def _refuse_before_ray(spec: ExperimentSpec, fused: bool, options: SearchOptions) -> None:
    """What the backend cannot run, refused before Ray starts, where the backend is known without asking one:
    a bad train_loop then costs a fraction of a second, not Ray's start and stop (8 s on 2 cores)."""
    backend = _known_backend(options)
    if backend is not None:
        (fusion.fused_spec(spec, backend) if fused else spec).for_backend(backend, options.device)


def _known_backend(options: SearchOptions) -> str | None:
    """The backend a keras search takes when no backend need be asked: as chosen, as named, or a CPU's default."""
    if options.backend_choice is not None:
        return options.backend_choice.backend
    named = backends.named_backend(options.backend)
    if named is not None:
        return named[0] if named[0] in backends.BACKENDS else None  # an unknown name: choose() says so
    return backends.KERAS_DEFAULT if options.device != "gpu" else None


def _choose_backend(options: SearchOptions, visible_gpus: int) -> backends.BackendChoice:
    if options.backend_choice is not None:
        return options.backend_choice
    named = backends.named_backend(options.backend)
    if options.device == "gpu" and named is None and visible_gpus == 0:
        # On a cluster from a driver without a GPU: the nodes' backends cannot be asked from here.
        raise UserError(
            "--device gpu on a Ray cluster from a machine without a GPU: name the backend the GPU nodes have "
            "(--backend jax)"
        )
    return backends.choose(options.device, named, cuda_major=environment.cuda_driver_major())


def _check_batch_sizes(spec: ExperimentSpec) -> None:
    """A batch larger than the training set would run as a smaller one (or, compiled, not at all): refuse it."""
    batches = [int(b) for b in _values(spec, "batch_size")]
    if not batches or spec.dataset not in SHAPES:
        return
    full = SHAPES[spec.dataset].train
    smallest = min((int(n) or full for n in _values(spec, "train_size")), default=full)
    if max(batches) > min(smallest, full):
        raise UserError(
            f"batch_size {max(batches)} is more than the {min(smallest, full)} training samples "
            f"({spec.dataset}{', train_size' if smallest < full else ''}); use a batch_size of at most that"
        )


def _check_data_parallel(spec: ExperimentSpec, backend: str, gpus_per_trial: float) -> None:
    """Several whole GPUs per trial means data parallelism, which runs on JAX's compiled loop only."""
    workload = spec.workload
    loops = set(_values(spec, "train_loop"))
    if workload.framework != "keras" or backend != "jax" or loops != {"compiled"}:
        raise UserError(
            f"--gpus-per-trial {gpus_per_trial:g} spreads each trial over {gpus_per_trial:g} GPUs (data parallelism), "
            f"which needs a Keras model on --backend jax with train_loop=compiled; use --gpus-per-trial 1 or below"
        )
    uneven = sorted(size for size in _values(spec, "batch_size") if size % int(gpus_per_trial))
    if uneven:
        raise UserError(
            f"batch_size {uneven[0]} does not split evenly over {gpus_per_trial:g} GPUs; "
            f"use multiples of {gpus_per_trial:g}"
        )


def _values(spec: ExperimentSpec, name: str) -> tuple:
    """Every value a hyperparameter takes in the search: its axis, or its fixed value."""
    return tuple(spec.grid[name]) if name in spec.grid else ((spec.params[name],) if name in spec.params else ())


def _check_room(options: SearchOptions) -> None:
    """Before anything is written: room for Ray's session and Tune's files, and for a compile cache kept on disk."""
    disk_space.check_room(
        lifecycle.SearchDirectory.parent(),
        "Ray's session and the search's files",
        "set TMPDIR to a directory with room",
    )


def _usable_cache(options: SearchOptions) -> tuple[SearchOptions, str]:
    """A persistent compile cache that cannot take programs is no reason to refuse a search: it compiles in its own.

    Says so in one line (stderr). Returns the options the search runs with, and what the cache holds (or why not).
    """
    if options.compile_cache != compile_cache.PERSISTENT:
        return options, "empty" if options.compile_cache == compile_cache.SEARCH else "off"
    path = compile_cache.persistent_dir()
    reason = compile_cache.unusable(path)
    if reason is None:
        return options, compile_cache.state(path)
    why = f"cannot write the compile cache {path} ({reason})"
    print(
        f"gridbench: {why}; compiling in this search's own directory instead (set {compile_cache.CACHE_DIR_ENV} "
        f"to a writable directory with room to keep programs across searches)",
        file=sys.stderr,
    )
    return replace(options, compile_cache=compile_cache.SEARCH), why
