"""A search: an experiment's grid run as Ray Tune trials, each recorded in MLflow as it ends.

    spec -> preflight (every check, nothing written) -> Ray Tune trials -> MLflow -> SearchResult

The driver is the only process that writes to MLflow: a Tune callback turns each
finished or failed trial into a TrialRecord and hands it to the SearchRecorder.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Protocol

from gridbench import backends, datasets, environment, placement
from gridbench.errors import UserError
from gridbench.records import SearchSummary, TrialRecord
from gridbench.spec import ExperimentSpec
from gridbench.tracking import SearchRecorder, check_tracking_uri, resolve_tracking_uri
from gridbench.trial import REPEAT_KEY, TrialContext, run_trial

DEVICES = ("cpu", "gpu")

TrialRunner = Callable[[Mapping[str, Any], TrialContext], dict]


class SearchObserver(Protocol):
    """Hears of a search's progress, in the driver: a progress bar, a test."""

    def start(self, total: int) -> None: ...
    def trial_started(self, config: Mapping[str, Any]) -> None: ...
    def trial_ended(self, record: TrialRecord) -> None: ...
    def stop(self) -> None: ...


@dataclass(frozen=True)
class SearchOptions:
    device: str = "cpu"
    # None: KERAS_BACKEND, else chosen by device (gridbench.backends.choose).
    backend: str | None = None
    # A choice already made for this request (the other half of --device both, another count
    # of a scale), taken as it is instead of asking the backends again.
    backend_choice: backends.BackendChoice | None = None
    cpus_per_trial: int | None = None  # default: the cores shared evenly among concurrent trials
    gpus_per_trial: float | None = None  # --device gpu only; default 1 (a fraction packs trials)
    gpus: int | None = None  # --device gpu only; default every visible GPU
    cpus: int | None = None  # cores the search may use in all; default every usable core
    address: str | None = None  # an existing Ray cluster to join ("auto", "HOST:PORT"); None: start one here
    max_concurrent: int | None = None
    compile_cache: bool = True  # share compiled JAX programs among a search's trials
    tracking_uri: str | None = None
    data_dir: str | None = None
    synthetic: bool = False  # random data of the dataset's real shapes: speed only, accuracy never reported
    command_line: str = ""


@dataclass(frozen=True)
class SearchPlan:
    """Everything a search needs, checked; building it writes nothing."""

    spec: ExperimentSpec  # as it runs on the chosen backend ("auto" choices resolved)
    options: SearchOptions
    tracking_uri: str
    data: datasets.DataSource
    backend_choice: backends.BackendChoice  # the Keras backend (or what a non-Keras workload computes with), and why
    cpus_per_trial: int
    gpus_per_trial: float  # 0 on CPU
    gpus: int  # GPUs Ray may hand out; 0 on CPU (and on a cluster: the cluster's)
    cpus: int  # cores Ray may hand out here (on a cluster: the cluster's)
    trials_total: int

    @property
    def backend(self) -> str:
        return self.backend_choice.backend

    @property
    def inner_values(self) -> tuple:
        """The values of the workload's inner axis, which each Ray trial trains together."""
        inner = self.spec.workload.inner_axis
        if inner is None:
            return ()
        return tuple(self.spec.grid[inner]) if inner in self.spec.grid else (self.spec.params[inner],)

    @property
    def trial_groups(self) -> int:
        """Ray trials: configurations x repeats, less those trained together in one trial."""
        return self.trials_total // max(1, len(self.inner_values))

    @property
    def data_parallel(self) -> bool:
        """Each trial spreads its batches over several whole GPUs (Keras' DataParallel)."""
        return self.gpus_per_trial > 1

    @property
    def concurrency(self) -> int:
        """Trials this machine's resources allow at once (see concurrency_on for a cluster)."""
        return self.concurrency_on(self.cpus, self.gpus)

    def concurrency_on(self, cpus: float, gpus: float) -> int:
        """Trials that `cpus` cores and `gpus` GPUs allow at once."""
        allowed = min(int(cpus) // self.cpus_per_trial, self.trial_groups)
        if self.options.device == "gpu":
            allowed = min(allowed, placement.gpu_slots(int(gpus), self.gpus_per_trial))
        if self.options.max_concurrent:
            allowed = min(allowed, self.options.max_concurrent)
        return max(1, allowed)


@dataclass(frozen=True)
class SearchResult:
    plan: SearchPlan
    parent_run_id: str
    experiment_name: str
    trials: tuple[TrialRecord, ...]
    summary: SearchSummary


def plan_search(spec: ExperimentSpec, options: SearchOptions) -> SearchPlan:
    """Checks the request against this machine, the data and the store; raises UserError.

    The checks that need no backend come first, then the backend (asking backends whether
    they see a GPU takes seconds), then the data and the store.
    """
    if options.device not in DEVICES:
        raise UserError(f"--device must be one of {', '.join(DEVICES)}, got {options.device!r}")
    if options.max_concurrent is not None and options.max_concurrent <= 0:
        raise UserError(f"--max-concurrent must be > 0, got {options.max_concurrent}")
    if options.address and (options.gpus is not None or options.cpus is not None):
        raise UserError("--gpus and --cpus limit this machine's Ray; on a cluster (--address) every node's count")
    workload = spec.workload
    trials_total = spec.grid_size * spec.repeats
    inner = workload.inner_axis
    ray_trials = trials_total // len(spec.grid.get(inner, (1,))) if inner else trials_total
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
    if workload.framework == "keras":
        choice = _choose_backend(options, visible_gpus)
    else:
        if options.device == "gpu" and importlib.util.find_spec("cupy") is None:
            raise UserError(
                f"model {workload.name} on --device gpu needs CuPy: pip install 'gridbench[cuda13]' (or [cuda12])"
            )
        choice = backends.BackendChoice(workload.framework, f"model {workload.name} computes with {workload.framework}")
    spec = spec.for_backend(choice.backend, options.device)
    if gpus_per_trial > 1:
        _check_data_parallel(spec, choice.backend, gpus_per_trial)
    data = datasets.locate(spec.dataset, options.data_dir, options.synthetic)
    tracking_uri = resolve_tracking_uri(options.tracking_uri)
    check_tracking_uri(tracking_uri)
    return SearchPlan(
        spec=spec,
        options=options,
        tracking_uri=tracking_uri,
        data=data,
        backend_choice=choice,
        cpus_per_trial=cpus,
        gpus_per_trial=gpus_per_trial,
        gpus=gpus,
        cpus=cores,
        trials_total=trials_total,
    )


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


def _start_ray(plan: SearchPlan) -> None:
    import ray

    quiet = {"log_to_driver": False, "logging_level": "ERROR", "configure_logging": True}
    if plan.options.address:
        try:
            # The cluster's nodes bring their own resources; they must reach the same data path.
            ray.init(address=plan.options.address, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise UserError(
                f"--address {plan.options.address}: cannot join the Ray cluster ({first}); "
                f"start it with `ray start --head` or fix --address"
            ) from None
        return
    ray.init(
        num_cpus=plan.cpus,  # --cpus N: Ray hands out N cores
        num_gpus=plan.gpus,  # --gpus N: Ray hands out GPUs 0..N-1 only; none to a CPU search
        include_dashboard=False,
        **quiet,
    )


def _trainable(config: dict, context: TrialContext, runner: TrialRunner) -> None:
    """Ray Tune's function trainable: run the trial, report its outcome once."""
    import ray
    from ray import tune

    outcome = runner(config, context)
    outcome.setdefault("tags", {})["ray.node_id"] = ray.get_runtime_context().get_node_id()
    tune.report({"gridbench": outcome})


def _quiet_ray() -> None:
    # Tune's own CSV/JSON/TensorBoard loggers and console output are replaced by
    # MLflow and gridbench's progress bar; usage-stats prompts need no network here.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # Ctrl-C should stop the search at once (finished trials are already in MLflow),
    # not be swallowed by Tune's own graceful-stop handler.
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def run_search(
    plan: SearchPlan,
    observer: SearchObserver | None = None,
    runner: TrialRunner = run_trial,
    requested_at: float | None = None,
    extra_tags: Mapping[str, str] | None = None,
) -> SearchResult:
    """Runs the planned search; `observer` (gridbench.report.SearchProgress) hears of each trial.

    `requested_at` (Unix time) is when the user asked for this search, for its time
    to first trial; by default the command's start (this process's creation).
    """
    spec, options = plan.spec, plan.options
    _quiet_ray()
    import ray
    from ray import tune

    from gridbench.tune_callback import RecordingCallback

    env = environment.collect()
    # Importing MLflow and opening its store takes seconds; do it while Ray starts.
    with ThreadPoolExecutor(max_workers=1) as pool:
        opening = pool.submit(SearchRecorder, plan.tracking_uri, spec.name)
        ray_start = time.perf_counter()
        _start_ray(plan)
        ray_start_s = time.perf_counter() - ray_start
        try:
            recorder = opening.result()
            # Before anything is written: Ray would queue a trial no node can hold forever.
            placement.check_cluster(ray.nodes(), plan.cpus_per_trial, plan.gpus_per_trial)
            resources = ray.cluster_resources()
            concurrency = plan.concurrency_on(resources.get("CPU", 0), resources.get("GPU", 0))
            # On a cluster, what it offers; here, what the plan gave Ray.
            gpus_used = int(resources.get("GPU", 0)) if options.device == "gpu" else 0
        except BaseException:
            ray.shutdown()
            raise
    storage = tempfile.mkdtemp(prefix="gridbench-ray-")
    status, error, summary = "FAILED", None, None
    try:
        context = TrialContext(
            workload=spec.model,
            params=dict(spec.params),
            data=plan.data,
            device=options.device,
            backend=plan.backend,
            cpus=plan.cpus_per_trial,
            seed=spec.seed,
            gpus_per_trial=plan.gpus_per_trial,
            inner_axis=spec.workload.inner_axis,
            inner_values=plan.inner_values,
            compile_cache_dir=os.path.join(storage, "jax-cache") if options.compile_cache else None,
        )
        parent_tags = {
            **env,
            "device": options.device,
            "backend": plan.backend,
            "backend.reason": plan.backend_choice.reason,
            "spec.name": spec.name,
            "spec.hash": spec.spec_hash,
            "spec.source": spec.source,
            "dataset": spec.dataset,
            "data.path": plan.data.description,
            "data.synthetic": str(plan.data.synthetic).lower(),
            "model": spec.model,
            "metric": spec.metric,
            "metric.mode": spec.mode,
            "timing.train": spec.workload.train_metric,
            "metric.target": "" if spec.target is None else f"{spec.target:g}",
            "command": options.command_line or shlex.join(sys.argv),
            "cpus_per_trial": str(plan.cpus_per_trial),
            "gpus_per_trial": f"{plan.gpus_per_trial:g}",
            "gpus_used": str(gpus_used),
            "cpus_used": str(int(resources.get("CPU", 0))),
            "data_parallel": str(plan.data_parallel).lower(),
            "ray.address": plan.options.address or "local",
            "ray.nodes": str(sum(1 for n in ray.nodes() if n.get("Alive"))),
            "trials_per_gpu": str(placement.trials_per_gpu(plan.gpus_per_trial)) if gpus_used else "0",
            "gridbench.kind": "search",
            **(extra_tags or {}),
            "compile_cache": "per search" if options.compile_cache and plan.backend == "jax" else "off",
        }
        recorder.start(
            run_name=f"{spec.name} {options.device} {plan.backend} "
            + (f"{plan.gpus_per_trial:g} GPU/trial" if gpus_used else f"{plan.cpus_per_trial} CPU/trial")
            + (" synthetic" if plan.data.synthetic else ""),
            params={
                **spec.params,
                **{f"grid.{axis}": list(values) for axis, values in spec.grid.items()},
                "repeats": spec.repeats,
                "seed": spec.seed,
            },
            tags=parent_tags,
            documents={"spec.json": spec.to_dict(), "environment.json": env},
        )
        trial_params = {**spec.params, "seed": spec.seed, "dataset": spec.dataset, "model": spec.model}
        trial_tags = {
            "device": options.device,
            "backend": plan.backend,
            "compile_cache": parent_tags["compile_cache"],
            "data.synthetic": parent_tags["data.synthetic"],
            "gridbench.kind": "trial",
        }
        callback = RecordingCallback(
            recorder, trial_params, trial_tags, observer, inner=(spec.workload.inner_axis, plan.inner_values)
        )
        if observer is not None:
            observer.start(plan.trials_total)

        param_space = {
            axis: tune.grid_search(list(values))
            for axis, values in sorted(spec.grid.items())
            if axis != spec.workload.inner_axis  # trained inside each trial
        }
        param_space[REPEAT_KEY] = tune.grid_search(list(range(spec.repeats)))
        trainable = tune.with_resources(
            tune.with_parameters(_trainable, context=context, runner=runner),
            {"cpu": plan.cpus_per_trial, "gpu": plan.gpus_per_trial},
        )
        tuner = tune.Tuner(
            trainable,
            param_space=param_space,
            tune_config=tune.TuneConfig(max_concurrent_trials=concurrency, reuse_actors=True),
            run_config=tune.RunConfig(
                name=f"{spec.name}-{int(time.time())}",
                storage_path=storage,
                callbacks=[callback],
                verbose=0,
                failure_config=tune.FailureConfig(max_failures=0),
            ),
        )
        fit_start = time.perf_counter()
        tuner.fit()
        makespan = time.perf_counter() - fit_start

        trials = tuple(callback.records)
        finished = [t for t in trials if t.finished]
        values = [t.metrics[spec.metric] for t in finished if spec.metric in t.metrics]
        best = (max if spec.mode == "max" else min)(values) if values else None
        process_start = requested_at if requested_at is not None else _process_start_time()
        summary = SearchSummary(
            trials_total=plan.trials_total,
            trials_finished=len(finished),
            trials_failed=len(trials) - len(finished),
            concurrency=concurrency,
            makespan_s=makespan,
            ray_start_s=ray_start_s,
            backend_probe_s=plan.backend_choice.probe_s,
            time_to_first_trial_s=min((t.started_at for t in trials), default=process_start) - process_start,
            trial_wall_sum_s=sum(t.metrics.get("trial_wall_s", 0.0) for t in trials),
            best_metric=best,
        )
        status = "FINISHED"
        if len(trials) < plan.trials_total:
            status, error = "KILLED", f"the search stopped after {len(trials)} of {plan.trials_total} trials"
        return SearchResult(plan, recorder.parent_run_id, recorder.experiment_name, trials, summary)
    except KeyboardInterrupt:
        status, error = "KILLED", "interrupted"
        raise
    except BaseException as err:
        error = f"{type(err).__name__}: {err}"
        raise
    finally:
        if observer is not None:
            observer.stop()
        recorder.finish(summary, status, error)
        ray.shutdown()
        shutil.rmtree(storage, ignore_errors=True)


def _process_start_time() -> float:
    import psutil

    return psutil.Process().create_time()
