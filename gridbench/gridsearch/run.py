"""Running a search: an experiment's grid as Ray Tune trials, each recorded in MLflow as it ends.

    SearchPlan -> Ray Tune trials (gridbench.trial, in workers) -> TrialRecords -> MLflow -> SearchResult

The driver is the only process that writes to MLflow: a Tune callback turns each
finished or failed trial into a TrialRecord and hands it to the Recorder.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import shlex
import signal
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from gridbench import account, compile_cache, environment, space
from gridbench.errors import UserError
from gridbench.gridsearch import lifecycle, placement, precompile, user_check
from gridbench.gridsearch.lifecycle import SearchInterrupted
from gridbench.gridsearch.plan import SearchPlan
from gridbench.gridsearch.precompile import Precompiler, PrecompileReport
from gridbench.spec import ExperimentSpec
from gridbench.tracking import schema
from gridbench.tracking.journaled import open_journaled_recorder
from gridbench.tracking.records import SearchSummary, TrialRecord
from gridbench.tracking.schema import SearchStatus, TrialStatus
from gridbench.tracking.stale import driver_tags
from gridbench.tracking.store import Recorder
from gridbench.trial import FUSED_GROUP_KEY, REPEAT_KEY, TrialContext, run_trial
from gridbench.trial.outcome import TrialOutcome
from gridbench.workloads import RUNTIME_HYPERPARAMETERS, program_key

if TYPE_CHECKING:
    from gridbench.gridsearch.plan import SearchOptions
    from gridbench.gridsearch.resume import ResumePoint

TrialRunner = Callable[[Mapping[str, Any], TrialContext], TrialOutcome]


class SearchObserver(Protocol):
    """Hears of a search's progress, in the driver: a progress bar, a test."""

    def start(self, total: int) -> None: ...
    def trial_started(self, config: Mapping[str, Any]) -> None: ...
    def trial_ended(self, record: TrialRecord) -> None: ...
    def stop(self) -> None: ...


@dataclass(frozen=True)
class SearchResult:
    plan: SearchPlan
    parent_run_id: str
    experiment_name: str
    trials: tuple[TrialRecord, ...]
    summary: SearchSummary


def _start_ray(
    address: str | None, cpus: int, gpus: int, ray_dir: str | None = None, runtime_env: dict | None = None
) -> None:
    import ray

    quiet = {"log_to_driver": False, "logging_level": "ERROR", "configure_logging": True}
    if address:
        placement.check_address_answers(address)  # else ray.init retries for minutes, printing its C++ warnings
        try:
            # The cluster's nodes bring their own resources; they must reach the same data path.
            ray.init(address=address, runtime_env=runtime_env, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise UserError(
                f"--address {address}: cannot join the Ray cluster ({first}); "
                f"start it with `ray start --head` or fix --address"
            ) from None
        return
    ray.init(
        # A user's model and loader modules, uploaded so that every worker imports them.
        runtime_env=runtime_env,
        # Its own Ray, even where another was started on this machine: ray.init() alone would join that one.
        address="local",
        num_cpus=cpus,  # --cpus N: Ray hands out N cores
        num_gpus=gpus,  # --gpus N: Ray hands out GPUs 0..N-1 only; none to a CPU search
        include_dashboard=False,
        _temp_dir=ray_dir,  # its session (logs, sockets) inside the search's directory, removed with it
        # By default ray.init waits until it has started one idle worker per core, and Tune's trial actors
        # never take them: Tune gives its actors a runtime_env of their own (PL_DISABLE_FORK), and Ray hands
        # an actor only a worker started with the same one. So Ray starts each trial's worker when it is due.
        _system_config={"prestart_worker_first_driver": False},
        **quiet,
    )


class RaySession:
    """This search's Ray and what it leaves behind: started once, stopped on every path.

    It starts early where it can: plan_search calls `start` (its `while_probing`) while
    the backends are asked about GPUs in subprocesses, and MLflow and Ray Tune are
    imported meanwhile in a thread. Once the plan is complete, still beside Ray's start,
    `planned` starts compiling the programs ahead and, with `open_store_early`, opening
    the store. Otherwise run_search starts Ray, and opens the store beside it. `stop`
    shuts Ray down, ends by PID what it started, removes the search's directory and
    restores the signal handlers, also when planning fails after the start.
    """

    def __init__(self, open_store_early: bool = False) -> None:
        self.ray_start_s: float | None = None
        self.signals: lifecycle.StopSignals | None = None
        self.directory: lifecycle.SearchDirectory | None = None
        self.processes: lifecycle.OwnProcesses | None = None
        self.watchdog: lifecycle.Watchdog | None = None
        self.precompiler: Precompiler | None = None
        self.open_store_early = open_store_early
        self._store: Future | None = None  # the default store, opening since the plan was complete
        self._lock = threading.Lock()  # planning's thread may start compiling ahead while this one starts Ray

    @property
    def started(self) -> bool:
        return self.ray_start_s is not None

    def _search_directory(self, keep: bool) -> lifecycle.SearchDirectory:
        with self._lock:
            if self.directory is None:
                self.directory = lifecycle.SearchDirectory(keep=keep)
            return self.directory

    def planned(self, plan: SearchPlan) -> None:
        """What the complete plan lets start beside Ray's start: compiling ahead, and the store's opening.

        plan_search calls it as soon as the plan is complete, while Ray is still starting. The
        store opens early only on a local Ray: joining a cluster fails on a bad --address, which
        must leave no store behind, and a local Ray's start has no input left to refuse.
        """
        self.precompile(plan)
        if self.open_store_early and not plan.options.address and self._store is None:
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gridbench-open-store")
            self._store = pool.submit(_open_store, open_journaled_recorder, plan)
            pool.shutdown(wait=False)  # its one task goes on; run_search takes its result

    def take_store(self) -> Future | None:
        """The default store's opening, if `planned` started it: once."""
        store, self._store = self._store, None
        return store

    def precompile(self, plan: SearchPlan) -> None:
        """Starts compiling the plan's programs ahead, in processes of their own, where it has any (once).

        `planned` calls it; run_search calls it otherwise (gridbench.gridsearch.precompile).
        """
        if self.precompiler is not None:
            return
        programs = precompile.program_count(plan, len(program_representatives(plan.spec)))
        if programs == 0:
            return
        directory = self._search_directory(plan.options.keep_ray_logs)
        context = trial_context(plan, directory.tune_dir, precompiled=True)
        try:
            self.precompiler = Precompiler.start(plan, context, programs, os.path.join(directory.path, "precompile"))
        except Exception:  # noqa: BLE001 - e.g. a user's model that pickle cannot name: its trials compile it
            self.precompiler = None

    def start(self, options: SearchOptions, cpus: int, gpus: int, runtime_env: dict | None = None) -> None:
        _quiet_ray()
        if not options.address:
            lifecycle.local_ray_environment()
        self.signals = lifecycle.StopSignals()
        self.signals.install()
        self._search_directory(options.keep_ray_logs)
        # Before OwnProcesses: the watchdog is not among the processes to end; it ends them if this driver is killed.
        self.watchdog = lifecycle.Watchdog(self.directory)
        self.processes = lifecycle.OwnProcesses()
        if self.precompiler is not None:  # started before Ray (run_search): the watchdog ends them too
            self.processes.adopt(self.precompiler.pids)
        threading.Thread(target=_import_for_later, name="gridbench-import", daemon=True).start()
        start = time.perf_counter()
        try:
            _start_ray(options.address, cpus, gpus, self.directory.ray_dir, runtime_env)
        except SystemExit as exited:
            # ray.init's own SIGTERM handler (installed during init) exits with the signal's number.
            if exited.code == signal.SIGTERM:
                raise SearchInterrupted(signal.SIGTERM) from None
            raise
        finally:
            self.processes.note()
            self.watchdog.guard(self.processes.seen)
            self.signals.install()  # ray.init replaced SIGTERM's handler with its own sys.exit
        self.signals.check()  # a Ctrl-C that ray.init swallowed still stops the search
        self.ray_start_s = time.perf_counter() - start

    def stop(self) -> None:
        if self.precompiler is not None:
            self.precompiler.stop()
        if self.processes is not None:
            _stop_ray(self.processes)
        if self.directory is not None:
            self.directory.remove()
            if self.directory.keep:
                print(
                    f"gridbench: Ray's logs and the search's files are kept in {self.directory.path}", file=sys.stderr
                )
        if self.watchdog is not None:
            self.watchdog.leave()
        if self.signals is not None:
            self.signals.restore()
        self.ray_start_s = self.signals = self.directory = self.processes = self.watchdog = self.precompiler = None
        self._store = None  # opened and never taken (the command failed after planning): it wrote no run


def _import_for_later() -> None:
    # Imported for their side effect, beside Ray's start: the store then opens, and Tune starts, without waiting.
    import mlflow  # noqa: F401
    from ray import tune  # noqa: F401


def _trainable(config: dict, context: TrialContext, runner: TrialRunner) -> None:
    """Ray Tune's function trainable: run the trial, report its outcome once (as a dict: Ray carries plain data)."""
    import ray
    from ray import tune

    outcome = runner(config, context)
    outcome.tags[schema.RAY_NODE_ID] = ray.get_runtime_context().get_node_id()
    tune.report({"gridbench": outcome.to_dict()})


def _quiet_ray() -> None:
    # Tune's own CSV/JSON/TensorBoard loggers and console output are replaced by
    # MLflow and gridbench's progress bar; usage-stats prompts need no network here.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # Ctrl-C should stop the search at once (finished trials are already in MLflow),
    # not be swallowed by Tune's own graceful-stop handler.
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
    # A trial whose worker died is recorded with Ray's reason (RecordingCallback), not printed as a traceback.
    os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")
    logging.getLogger("ray.tune.tune").setLevel(logging.CRITICAL)  # "Trials did not complete": recorded as FAILED
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def run_search(
    plan: SearchPlan,
    observer: SearchObserver | None = None,
    runner: TrialRunner = run_trial,
    requested_at: float | None = None,
    extra_tags: Mapping[str, str] | None = None,
    open_recorder: Callable[[str, str], Recorder] = open_journaled_recorder,
    resume: ResumePoint | None = None,
    session: RaySession | None = None,
    compile_warmup_s: float = 0.0,
) -> SearchResult:
    """Runs the planned search; `observer` (gridbench.gridsearch.progress.SearchProgress) hears of each trial.

    `requested_at` (Unix time) is when the user asked for this search, for its time
    to first trial; by default the command's start (this process's creation).
    `open_recorder(tracking_uri, spec_name)` opens where the records go: by default MLflow
    behind a journal (gridbench.tracking.journaled), written off Tune's callback thread.
    `resume` (gridbench.gridsearch.resume.locate) continues that search: only its trials not
    FINISHED run, recorded under its parent run. `session`: the Ray that planning started
    (RaySession); by default Ray starts here. `compile_warmup_s`: the command compiled every search's
    programs that long before this one (gridbench.gridsearch.warmup), within `requested_at`'s span.

    SIGINT or SIGTERM raise SearchInterrupted once the parent is KILLED and the running
    trials recorded as KILLED; on every path Ray's processes and the search's directory go.
    """
    session = session or RaySession()
    recorder, callback, fit_started, fit_started_at = None, None, None, None
    status, error, summary, stop = SearchStatus.FAILED, None, None, None
    concurrency, ray_start_s = 1, 0.0
    process_start = requested_at if requested_at is not None else _process_start_time()
    try:
        import ray

        env = environment.collect()
        recorder, ray_start_s, resources = _start(plan, open_recorder, session)
        concurrency = plan.concurrency_on(resources.get("CPU", 0), resources.get("GPU", 0))
        tags = search_tags(plan, env, resources, len([n for n in ray.nodes() if n.get("Alive")]), extra_tags)
        tags.update(driver_tags())
        if resume is not None:
            recorder.resume(resume.parent_run_id, tags)
        else:
            recorder.start(
                run_name=search_run_name(plan, resources),
                params={**search_params(plan.spec), **placement_params(plan)},
                tags=tags,
                documents={"spec.json": plan.spec.to_dict(), "environment.json": env},
            )
        callback = _recording_callback(plan, recorder, tags, observer, resume)
        context = trial_context(plan, session.directory.tune_dir, precompiled=session.precompiler is not None)
        if observer is not None:
            observer.start(plan.trials_total if resume is None else resume.remaining)
        fit_started, fit_started_at = time.perf_counter(), time.time()
        if session.precompiler is not None and plan.options.device == "cpu":
            # No compilation shares the cores of a timed CPU epoch. The wait is in the makespan: compiling that
            # Ray's start did not hide is the search's own, as it is on a GPU, where trials train beside it.
            session.precompiler.wait()
        _fit(plan, runner, callback, concurrency, context, session.directory.tune_dir, resume)
        session.signals.check()
        makespan = time.perf_counter() - fit_started
        trials = tuple(callback.records)
        summary = summarise(
            plan, trials, concurrency, makespan, ray_start_s, process_start, resume, fit_started_at, _report(session)
        )
        status = SearchStatus.FINISHED
        if summary.trials_finished + summary.trials_failed < plan.trials_total:
            ran = summary.trials_finished + summary.trials_failed
            status, error = SearchStatus.KILLED, f"the search stopped after {ran} of {plan.trials_total} trials"
    except BaseException as err:
        stop = _as_stop(err, session, recorder)
        if stop is None:
            error = f"{type(err).__name__}: {err}"
            raise
        status, error = SearchStatus.KILLED, stop.report()
        if callback is not None:
            callback.record_unfinished(stop.ended_by)
            if fit_started is not None:  # the time it ran, so that a resumed search's sessions all count
                makespan = time.perf_counter() - fit_started
                summary = summarise(
                    plan, tuple(callback.records), concurrency, makespan, ray_start_s, process_start, resume,
                    fit_started_at, _report(session),
                )  # fmt: skip
        if isinstance(stop, lifecycle.SearchOutOfSpace) and hasattr(recorder, "announce_unsynced"):
            recorder.announce_unsynced = False  # the stop's one line names the sync command
        if stop is not err:
            raise stop from None
        raise
    finally:
        if observer is not None:
            observer.stop()
        try:
            session.stop()  # before the account ends: Ray's shutdown is part of the command a user waits for
        finally:
            if summary is not None and callback is not None:
                summary = with_account(plan, summary, callback.records, process_start, time.time(), compile_warmup_s)
            try:
                if recorder is not None:
                    recorder.finish(summary, status, error)
            finally:
                if stop is not None:
                    stop.hint = _stop_hint(plan, recorder, callback, resume, stop)
    return SearchResult(plan, recorder.parent_run_id, recorder.experiment_name, tuple(callback.records), summary)


def _as_stop(err: BaseException, session: RaySession, recorder) -> lifecycle.SearchStopped | None:
    """What stopped the search, if something outside it did: a signal, or a disk that filled; else None."""
    if isinstance(err, lifecycle.SearchStopped):
        return err
    fault = getattr(recorder, "fault", None)
    received = session.signals.received if session.signals is not None else None
    if isinstance(err, KeyboardInterrupt):
        # Ray's C++ side turns the handler's exception into a plain KeyboardInterrupt: the handler knows the signal.
        if received is None and fault is not None:
            return lifecycle.SearchOutOfSpace(fault)
        return SearchInterrupted(received or signal.SIGINT)
    if space.is_out_of_space(err):  # Tune's own files, Ray's session, a store write outside the writer
        return lifecycle.SearchOutOfSpace(fault or space.fault_of(err))
    return None


def _stop_hint(plan: SearchPlan, recorder, callback, resume, stop: lifecycle.SearchStopped) -> str:
    """What was kept and how to go on, for the stop's one line."""
    if recorder is None or recorder.parent_run_id is None:
        later = " once there is space" if isinstance(stop, lifecycle.SearchOutOfSpace) else ""
        return f"nothing was recorded; run the search again{later}"
    run_id = recorder.parent_run_id
    kept = sum(t.finished for t in callback.records) if callback is not None else 0
    kept += len(resume.finished) if resume else 0
    hint = f"search {run_id} KILLED with {kept} of {plan.trials_total} trials finished"
    resume_command = f"`gridbench search {plan.spec.name} --resume {run_id}`"
    if not isinstance(stop, lifecycle.SearchOutOfSpace):
        return f"{hint}; continue it with {resume_command}"
    lost = getattr(recorder, "lost", 0)
    hint += f" ({lost} of them written nowhere)" if lost else " (in the store or its journal)"
    unsynced = recorder.unsynced_hint() if hasattr(recorder, "unsynced_hint") else None
    if unsynced:
        hint += f"; free some space, write what the store lacks with `{recorder.sync_command()}`, then continue"
        return f"{hint} with {resume_command}"
    return f"{hint}; free some space, then continue it with {resume_command}"


def _report(session: RaySession) -> PrecompileReport | None:
    return session.precompiler.report() if session.precompiler is not None else None


def _stop_ray(processes: lifecycle.OwnProcesses) -> None:
    """Shuts Ray down, then ends by PID whatever it started and left running (agents once outlived it)."""
    processes.note()
    if "ray" in sys.modules:
        import ray

        ray.shutdown()
    processes.end()


def _start(plan: SearchPlan, open_recorder, session: RaySession) -> tuple[Recorder, float, dict[str, float]]:
    """Starts Ray (unless planning did) while the store opens; checks the cluster before anything is written.

    Returns the recorder, Ray's start time in seconds and the cluster's resources.
    """
    import ray

    session.precompile(plan)  # unless planning started it: XLA compiles while Ray starts
    # Importing MLflow and opening its store takes seconds; do it while Ray starts.
    early = session.take_store() if open_recorder is open_journaled_recorder else None
    with ThreadPoolExecutor(max_workers=1) as pool:
        opening = early or pool.submit(_open_store, open_recorder, plan)
        if not session.started:
            session.start(plan.options, plan.cpus, plan.gpus, user_check.runtime_env(plan.spec))
        ray_start_s = session.ray_start_s
        try:
            recorder, stale = opening.result()
            for run_id in stale:
                print(
                    f"gridbench: search {run_id} was left RUNNING by a driver that died; marked KILLED "
                    f"(continue it with `gridbench search {plan.spec.name} --resume {run_id}`)",
                    file=sys.stderr,
                )
            # Ray would queue a trial no node can hold forever.
            placement.check_cluster(ray.nodes(), plan.cpus_per_trial, plan.gpus_per_trial)
            return recorder, ray_start_s, dict(ray.cluster_resources())
        except BaseException:
            ray.shutdown()
            raise


def _open_store(open_recorder, plan: SearchPlan) -> tuple[Recorder, list[str]]:
    """The recorder, and the searches of this spec left RUNNING by a dead driver, now marked KILLED."""
    recorder = open_recorder(plan.tracking_uri, plan.spec.name)
    try:
        from mlflow import MlflowClient

        from gridbench.tracking.stale import mark_stale_searches
        from gridbench.tracking.store import experiment_name

        client = MlflowClient(plan.tracking_uri)
        experiment = client.get_experiment_by_name(experiment_name(plan.spec.name))
        experiment_ids = [experiment.experiment_id] if experiment else []
        return recorder, mark_stale_searches(client, experiment_ids, plan.tracking_uri)
    except Exception:  # noqa: BLE001 - a courtesy to earlier searches; never a reason to stop this one
        return recorder, []


def search_tags(
    plan: SearchPlan,
    env: Mapping[str, str],
    resources: Mapping[str, float],
    nodes: int,
    extra_tags: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The parent run's tags: the machine, the spec, the placement, the backend and why."""
    spec, options = plan.spec, plan.options
    gpus_used = _gpus_used(plan, resources)
    return {
        **env,
        **spec_tags(spec, plan.data.description, plan.data.synthetic),
        schema.DEVICE: options.device,
        schema.BACKEND: plan.backend,
        schema.BACKEND_REASON: plan.backend_choice.reason,
        schema.COMMAND: options.command_line or shlex.join(sys.argv),
        schema.CPUS_PER_TRIAL: str(plan.cpus_per_trial),
        schema.GPUS_PER_TRIAL: f"{plan.gpus_per_trial:g}",
        schema.GPUS_USED: str(gpus_used),
        schema.CPUS_USED: str(int(resources.get("CPU", 0))),
        schema.DATA_PARALLEL: str(plan.data_parallel).lower(),
        schema.RAY_ADDRESS: options.address or "local",
        schema.RAY_NODES: str(nodes),
        schema.TRIALS_PER_GPU: str(placement.trials_per_gpu(plan.gpus_per_trial)) if gpus_used else "0",
        schema.KIND: "search",
        schema.EXECUTION: plan.execution,
        **(extra_tags or {}),
        schema.COMPILE_CACHE: compile_cache.tag(options.compile_cache, plan.backend),
        schema.COMPILE_CACHE_STATE: plan.compile_cache_state if plan.backend == "jax" else "off",
        schema.COMPILE_AHEAD: options.compile_ahead,
    }


def spec_tags(spec: ExperimentSpec, data_path: str, synthetic: bool) -> dict[str, str]:
    """What a search of `spec` says about the experiment (also a baseline's, for compare to pair them)."""
    return {
        schema.SPEC_NAME: spec.name,
        schema.SPEC_HASH: spec.spec_hash,
        schema.SPEC_SOURCE: spec.source,
        schema.DATASET: spec.dataset,
        schema.DATA_PATH: data_path,
        schema.DATA_SYNTHETIC: str(synthetic).lower(),
        schema.MODEL: spec.model,
        schema.METRIC: spec.metric,
        schema.METRIC_MODE: spec.mode,
        schema.TIMING_TRAIN: spec.workload.train_metric,
        schema.METRIC_TARGET: "" if spec.target is None else f"{spec.target:g}",
    }


def search_params(spec: ExperimentSpec) -> dict[str, Any]:
    return {
        **spec.params,
        **{f"{schema.GRID_PREFIX}{axis}": list(values) for axis, values in spec.grid.items()},
        schema.PARAM_REPEATS: spec.repeats,
        schema.PARAM_SEED: spec.seed,
    }


def placement_params(plan: SearchPlan) -> dict[str, Any]:
    """Where the trials run, as params as well as the tags: MLflow's compare view sets params side by side."""
    return {
        schema.PARAM_DEVICE: plan.options.device,
        schema.PARAM_BACKEND: plan.backend,
        schema.PARAM_CPUS_PER_TRIAL: plan.cpus_per_trial,
        schema.PARAM_GPUS_PER_TRIAL: f"{plan.gpus_per_trial:g}",
    }


def search_run_name(plan: SearchPlan, resources: Mapping[str, float]) -> str:
    share = f"{plan.gpus_per_trial:g} GPU/trial" if _gpus_used(plan, resources) else f"{plan.cpus_per_trial} CPU/trial"
    synthetic = " synthetic" if plan.data.synthetic else ""
    fused = f" fused ({len(plan.fused_groups)} groups)" if plan.fused_groups else ""
    return f"{plan.spec.name} {plan.options.device} {plan.backend} {share}{fused}{synthetic}"


def _gpus_used(plan: SearchPlan, resources: Mapping[str, float]) -> int:
    # On a cluster, what it offers; here, what the plan gave Ray.
    return int(resources.get("GPU", 0)) if plan.options.device == "gpu" else 0


def _recording_callback(plan: SearchPlan, recorder: Recorder, tags: Mapping[str, str], observer, resume=None):
    from gridbench.gridsearch.tune_callback import RecordingCallback

    spec = plan.spec
    trial_params = {**spec.params, schema.PARAM_SEED: spec.seed, schema.DATASET: spec.dataset, schema.MODEL: spec.model}
    trial_params.update(placement_params(plan))
    trial_tags = {
        key: tags[key]
        for key in (schema.DEVICE, schema.BACKEND, schema.COMPILE_CACHE, schema.DATA_SYNTHETIC, schema.EXECUTION)
    }
    trial_tags[schema.KIND] = "trial"
    inner = (spec.workload.inner_axis, plan.inner_values)
    finished = resume.finished if resume is not None else ()
    return RecordingCallback(
        recorder, trial_params, trial_tags, observer, inner=inner, finished=finished, fused=plan.fused_groups
    )


def trial_context(plan: SearchPlan, storage: str, precompiled: bool = False) -> TrialContext:
    """What every trial of the search shares; `storage` is the search's Tune directory (its compile cache is inside)."""
    spec, options = plan.spec, plan.options
    return TrialContext(
        workload=spec.model,
        user_workload=spec.workload if spec.user_model else None,
        params=dict(spec.params),
        data=plan.data,
        device=options.device,
        backend=plan.backend,
        cpus=plan.cpus_per_trial,
        seed=spec.seed,
        gpus_per_trial=plan.gpus_per_trial,
        inner_axis=spec.workload.inner_axis,
        inner_values=plan.inner_values,
        compile_cache_dir=compile_cache.directory(options.compile_cache, storage),
        programs=program_representatives(spec),
        fused_groups=plan.fused_groups,
        precompiled=precompiled,
    )


def _fit(
    plan: SearchPlan, runner: TrialRunner, callback, concurrency: int, context: TrialContext, storage: str, resume=None
) -> float:
    """Runs every trial through Ray Tune (a resumed search: those not finished); returns the makespan in seconds."""
    from ray import tune

    spec = plan.spec
    param_space = {
        axis: tune.grid_search(list(values))
        for axis, values in grid_order(spec)
        if axis != spec.workload.inner_axis  # trained inside each trial
    }
    param_space[REPEAT_KEY] = tune.grid_search(list(range(spec.repeats)))
    if plan.fused_groups:  # one trial per group: its members' configurations and repeats travel in the context
        param_space = {FUSED_GROUP_KEY: tune.grid_search(list(range(len(plan.fused_groups))))}
    trainable = tune.with_resources(
        tune.with_parameters(_trainable, context=context, runner=runner),
        {"cpu": plan.cpus_per_trial, "gpu": plan.gpus_per_trial},
    )
    search = {}
    if resume is not None:
        from ray.tune.search.basic_variant import BasicVariantGenerator

        # Only these grid points: each one overrides every axis of the grid, one Tune trial each.
        points = resume.tune_points(plan)
        search = {"search_alg": BasicVariantGenerator(points_to_evaluate=points), "num_samples": len(points)}
    tuner = tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tune.TuneConfig(max_concurrent_trials=concurrency, reuse_actors=True, **search),
        run_config=tune.RunConfig(
            name=f"{spec.name}-{int(time.time())}",
            storage_path=storage,
            callbacks=[callback],
            verbose=0,
            # --retries: a trial whose worker died runs again; each attempt is recorded (RecordingCallback).
            failure_config=tune.FailureConfig(max_failures=plan.options.retries),
        ),
    )
    start = time.perf_counter()
    tuner.fit()
    return time.perf_counter() - start


def grid_order(spec: ExperimentSpec) -> list[tuple[str, tuple]]:
    """The grid's axes in the order Tune enumerates them: the first varies fastest.

    Axes that change the program come first, the runtime ones (learning rate, dropout
    rate) after them, so that the first trials cover the distinct programs and the
    later ones find theirs compiled.
    """
    return sorted(spec.grid.items(), key=lambda item: (item[0] in RUNTIME_HYPERPARAMETERS, item[0]))


def program_representatives(spec: ExperimentSpec) -> tuple[dict[str, Any], ...]:
    """One grid point per distinct program of the search, in Tune's order (workers compile them ahead)."""
    axes = [(axis, values) for axis, values in grid_order(spec) if axis != spec.workload.inner_axis]
    seen, representatives = set(), []
    # Tune varies the first axis fastest: itertools.product varies the last, so reverse both ways.
    for point in itertools.product(*(values for _, values in reversed(axes))):
        configuration = dict(zip((axis for axis, _ in reversed(axes)), point))
        key = program_key({**spec.params, **configuration})
        if key not in seen:
            seen.add(key)
            representatives.append(configuration)
    return tuple(representatives)


def summarise(
    plan: SearchPlan,
    trials: Sequence[TrialRecord],
    concurrency: int,
    makespan_s: float,
    ray_start_s: float,
    process_start: float,
    resume: ResumePoint | None = None,
    fit_started_at: float | None = None,
    precompiled: PrecompileReport | None = None,
) -> SearchSummary:
    """The search's totals from its trials: pure arithmetic, no Ray, no store.

    A resumed search counts the trials finished before among its finished trials and its
    best metric; its makespan and trial times are this session's (`trials_resumed` says how many were not).
    """
    spec = plan.spec
    finished = [t for t in trials if t.finished]
    # A retried attempt is not a failed trial: the trial ran again.
    failed = [t for t in trials if t.status is TrialStatus.FAILED and t.tags.get(schema.RETRIED) != "true"]
    # A diverged trial's accuracy (a constant prediction's) is no result: it never is the best.
    values = [t.metrics[spec.metric] for t in finished if t.ranked and spec.metric in t.metrics]
    resumed = len(resume.finished) if resume is not None else 0
    values += list(resume.metric_values) if resume is not None else []
    best = (max if spec.mode == "max" else min)(values) if values else None
    return SearchSummary(
        trials_total=plan.trials_total,
        trials_finished=len(finished) + resumed,
        trials_failed=len(failed),
        concurrency=concurrency,
        makespan_s=makespan_s,
        ray_start_s=ray_start_s,
        backend_probe_s=plan.backend_choice.probe_s,
        time_to_first_trial_s=min((t.started_at for t in trials), default=process_start) - process_start,
        trial_wall_sum_s=sum(t.metrics.get(schema.TRIAL_WALL_S, 0.0) for t in trials),
        best_metric=best,
        session=resume.sessions_before + 1 if resume is not None else 1,
        trials_resumed=resumed,
        epochs_sum_s=sum(t.metrics.get(schema.TRAIN_EPOCHS_S, 0.0) for t in trials),
        training_sum_s=sum(account.trial_parts(t.metrics, spec.workload.train_metric)["training_s"] for t in trials),
        startup_s=(fit_started_at if fit_started_at is not None else process_start) - process_start,
        trials_diverged=sum(t.diverged for t in finished),
        **_precompile_fields(precompiled or PrecompileReport()),
    )


def with_account(
    plan: SearchPlan,
    summary: SearchSummary,
    trials: Sequence[TrialRecord],
    command_start: float,
    command_end: float,
    compile_warmup_s: float = 0.0,
) -> SearchSummary:
    """The summary with the account of the whole command (gridbench.account), now that the search has ended."""
    summary = dataclasses.replace(summary, compile_warmup_s=compile_warmup_s)
    members = [(f"{t.tags.get(schema.HOST, '')}:{t.tags.get(schema.PID, '')}", t.started_at, t.ended_at, t.metrics)
               for t in trials]  # fmt: skip
    timings = account.timings_of(members, plan.spec.workload.train_metric)
    parts = account.account(
        timings, command_start, command_end, summary.concurrency, summary.precompile_wait_s, summary.compile_warmup_s
    )
    return dataclasses.replace(summary, account=parts.account.parts())


def _precompile_fields(report: PrecompileReport) -> dict[str, float]:
    return {
        "precompile_processes": report.processes,
        "programs_precompiled": report.programs,
        "programs_precompile_loaded": report.loaded,
        "programs_precompile_failed": report.failed,
        "precompile_s": report.wall_s,
        "precompile_compile_s": report.compile_sum_s,
        "precompile_wait_s": report.wait_s,
    }


def _process_start_time() -> float:
    """When this process started (Unix time), to the clock tick.

    psutil's create_time adds the start to the boot time in whole seconds, up to a second off: too coarse
    for an account that must add up to the command within 2%. Linux says how long ago, in ticks since boot.
    """
    try:
        with open("/proc/self/stat") as stat:
            ticks = int(stat.read().rpartition(")")[2].split()[19])  # field 22, starttime, after the name
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        import psutil

        return psutil.Process().create_time()
