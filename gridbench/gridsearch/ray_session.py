"""Ray's lifecycle for one search: started (early, where it can), checked, and stopped on every path.

RaySession owns Ray, the search's directory, the signal handlers, the watchdog and the processes
that compile ahead; start_search starts Ray while the store opens and checks the cluster.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from gridbench.errors import UserError, stderr_into
from gridbench.gridsearch import (
    gpu_nodes,
    lifecycle,
    local_ray,
    placement,
    plain_workers,
    precompile,
    prestart,
    user_check,
)
from gridbench.gridsearch.lifecycle import SearchInterrupted
from gridbench.gridsearch.options import SearchPlan, prestarts_workers
from gridbench.gridsearch.precompile import Precompiler, PrecompileReport
from gridbench.gridsearch.recording import open_store
from gridbench.gridsearch.tuning import program_representatives, trial_context
from gridbench.tracking.journaled import open_journaled_recorder
from gridbench.tracking.stale import resume_command
from gridbench.tracking.store import Recorder
from gridbench.trial.precompile import all_ready as programs_ready

if TYPE_CHECKING:
    from gridbench.gridsearch.options import SearchOptions
    from gridbench.trial import TrialContext


def _start_ray(
    address: str | None,
    cpus: int,
    gpus: int,
    ray_dir: str | None = None,
    runtime_env: dict | None = None,
    nodes: gpu_nodes.GpuNodes | None = None,
) -> tuple[str, gpu_nodes.StartedNodes]:
    """Starts (or joins) Ray; returns how (local_ray.LEAN or local_ray.RAY) and the nodes started after the head.

    With `nodes`, a local Ray that starts lean gets one node per GPU (gridbench.gridsearch.gpu_nodes).
    """
    import ray

    quiet = {"log_to_driver": False, "logging_level": "ERROR", "configure_logging": True}
    if address:
        placement.check_address_answers(address)  # else ray.init retries for minutes, printing its C++ warnings
        with tempfile.TemporaryFile() as held:
            try:
                # The cluster's nodes bring their own resources; they must reach the same data path.
                with stderr_into(held):  # Ray's C++ client warns on descriptor 2 at each retry
                    ray.init(address=address, runtime_env=runtime_env, **quiet)
            except (ConnectionError, RuntimeError, ValueError) as err:
                held.seek(0)
                raise UserError(cannot_join(address, err, held.read().decode(errors="replace"))) from None
        return local_ray.RAY, gpu_nodes.NO_NODES
    with local_ray.lean_start(nodes.head_env if nodes else None) as start:
        nodes = nodes if start == local_ray.LEAN else None  # the nodes' workers start as the head's do, or none
        ray.init(
            # A user's model and loader modules, uploaded so that every worker imports them.
            runtime_env=runtime_env,
            # Its own Ray, even where another was started on this machine: ray.init() alone would join that one.
            address="local",
            num_cpus=nodes.cpus[0] if nodes else cpus,  # --cpus N: Ray hands out N cores, over its nodes
            num_gpus=1 if nodes else gpus,  # --gpus N: Ray hands out the first N visible; none to a CPU search
            include_dashboard=False,
            _temp_dir=ray_dir,  # its session (logs, sockets) inside the search's directory, removed with it
            # By default ray.init waits until it has started one idle worker per core, which Tune's trial actors
            # take only where they have no runtime_env of their own (Ray hands an actor only a worker started with
            # the same one). A search asks for the workers its trials need itself, one per trial at once, as soon
            # as Ray is up (RaySession.prestart); otherwise Ray starts each trial's worker when it is due.
            _system_config={"prestart_worker_first_driver": False, **local_ray.system_config(start)},
            **quiet,
        )
        return start, gpu_nodes.add_nodes(nodes) if nodes else gpu_nodes.NO_NODES


def cannot_join(address: str, err: BaseException, ray_output: str) -> str:
    """The one line for a cluster ray.init could not join, from its error and what Ray's client printed."""
    if "InvalidAuthToken" in ray_output or "Unauthenticated" in ray_output:
        # Ray (2.60 here) turns token authentication on for a cluster that ray.init started, and a driver
        # given an explicit address sends no token unless RAY_AUTH_MODE says so.
        return (
            f"--address {address}: the cluster asks for Ray's authentication token, which this driver did not send; "
            f"set RAY_AUTH_MODE=token, with the cluster's token in RAY_AUTH_TOKEN or ~/.ray/auth_token"
        )
    first = str(err).splitlines()[0] if str(err) else type(err).__name__
    return (
        f"--address {address}: cannot join the Ray cluster ({first}); start it with `ray start --head` or fix --address"
    )


class RaySession:
    """This search's Ray and what it leaves behind: started once, stopped on every path.

    It starts early where it can: plan_search calls `start` (its `while_probing`) while
    the backends are asked about GPUs in subprocesses, and MLflow and Ray Tune are
    imported meanwhile in a thread. Once the plan is complete, still beside Ray's start,
    `planned` starts compiling the programs ahead and, with `open_store_early`, opening
    the store. Otherwise run_search starts Ray, and opens the store beside it. Once Ray is up
    and the plan complete, `prestart` asks a local Ray for the trials' workers: plain ones
    (gridbench.gridsearch.plain_workers), or with --prestart-workers ones that import ahead
    (gridbench.gridsearch.prestart). `stop`
    shuts Ray down, ends by PID what it started, removes the search's directory and
    restores the signal handlers, also when planning fails after the start.
    """

    def __init__(self, open_store_early: bool = False) -> None:
        self.ray_start_s: float | None = None
        self.ray_start = local_ray.RAY  # how this search's Ray was started (gridbench.gridsearch.local_ray)
        self.gpu_nodes = gpu_nodes.NO_NODES  # Ray's nodes after the head, one per GPU (gridbench.gridsearch.gpu_nodes)
        self.signals: lifecycle.StopSignals | None = None
        self.directory: lifecycle.SearchDirectory | None = None
        self.processes: lifecycle.OwnProcesses | None = None
        self.watchdog: lifecycle.Watchdog | None = None
        self.precompiler: Precompiler | None = None
        self._precompiling: TrialContext | None = None  # what the precompiler compiles for
        self.programs_ready = 0  # programs found ready in the persistent cache, so compiled by no process
        self.open_store_early = open_store_early
        self._store: Future | None = None  # the default store, opening since the plan was complete
        self._lock = threading.Lock()  # planning's thread may start compiling ahead while this one starts Ray
        # --prestart-workers (gridbench.gridsearch.prestart): asked of Ray once it is up and the plan complete.
        self.workers_prestarted = 0
        self.prestart_failure = ""  # why no worker was started ahead, where the request failed
        self._prestart_plan: SearchPlan | None = None
        self._prestart_state = "off"  # off, then waiting (Ray started with the hook, or plain), then asked
        # The environment a local Ray's workers inherit, where Tune's actors take plain workers (plain_workers).
        self.inherited_env: dict[str, str] | None = None
        self._env_added: list[str] = []  # what that set in this process's environment, unset once Ray has started
        self._actors_plain: bool | None = None  # whether Tune's actors go without their runtime_env: decided once
        self._tune_imported: threading.Event | None = None  # Ray Tune, then MLflow, imported beside Ray's start

    @property
    def started(self) -> bool:
        return self.ray_start_s is not None

    def _search_directory(self, keep: bool) -> lifecycle.SearchDirectory:
        with self._lock:
            if self.directory is None:
                self.directory = lifecycle.SearchDirectory(keep=keep)
            return self.directory

    def planned(self, plan: SearchPlan) -> None:
        """What the complete plan lets start beside Ray's start: compiling ahead, the store's opening, the workers.

        plan_search calls it as soon as the plan is complete, while Ray is still starting. The
        store opens early only on a local Ray: joining a cluster fails on a bad --address, which
        must leave no store behind, and a local Ray's start has no input left to refuse.
        """
        self.precompile(plan)
        if self.open_store_early and not plan.options.address and self._store is None:
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gridbench-open-store")
            self._store = pool.submit(open_store, open_journaled_recorder, plan)
            pool.shutdown(wait=False)  # its one task goes on; run_search takes its result
        self.prestart(plan)

    def prestart(self, plan: SearchPlan | None = None) -> None:
        """Asks a local Ray for one idle worker per trial that can run at once, once Ray is up and the plan complete.

        `planned`, `start` and start_search call it; whichever finds both ready asks, once. With --prestart-workers,
        the workers import ahead in Ray's setup hook (gridbench.trial.prestart), from the plan's file written here
        first; otherwise they are plain workers for Tune's actors (gridbench.gridsearch.plain_workers).
        """
        with self._lock:
            self._prestart_plan = plan or self._prestart_plan
            plan = self._prestart_plan
            if plan is None or self._prestart_state != "waiting":
                return
            self._prestart_state = "asked"
        if self.inherited_env is not None and not prestarts_workers(plan.options):
            self._start_plain_workers(plan.concurrency)
            return
        try:
            if self.inherited_env is None:
                self.imports_done()  # the actors' runtime_env is Tune's merged with the job's: from ray.tune
            prestart.write_plan(plan, self._plan_file())
            raylets = [None, *self.gpu_nodes.raylet_addresses()]  # the head's, then one per GPU's (gpu_nodes)
            for index, raylet in enumerate(raylets):
                count = plan.concurrency // len(raylets) + (index < plan.concurrency % len(raylets))
                if count:
                    prestart.prestart_workers(count, raylet, tune_env=self.inherited_env is None)
                    self.workers_prestarted += count
        except Exception as err:  # noqa: BLE001 - Ray's internal RPC changed, say: each worker starts with its trial
            self.prestart_failure = f"{type(err).__name__}: {err}".splitlines()[0][:200]
            print(
                f"gridbench: could not start the workers ahead ({self.prestart_failure}); each starts with its "
                f"first trial (--no-prestart-workers says so without trying)",
                file=sys.stderr,
            )

    def _start_plain_workers(self, count: int) -> None:
        """Plain idle workers for the first trials' actors; where Ray's internal RPC fails, each worker starts when
        its trial is due, as with Tune's runtime_env (the search's trial_workers tag still says plain)."""
        with contextlib.suppress(Exception):  # Ray's internal RPC changed: workers_prestarted says 0
            plain_workers.start_idle_workers(count)
            self.workers_prestarted += count

    @property
    def actors_plain(self) -> bool:
        """Whether Tune's trial actors go without a runtime_env of their own, decided once for the search (the tag
        says it, and Tune's run follows it). Where the workers were asked for with the job's runtime_env alone and
        the actors cannot go without theirs (a variable of Tune's changed since Ray's start), says so: no trial
        will take those workers."""
        if self._actors_plain is None:
            self._actors_plain = plain_workers.actors_can_inherit(self.inherited_env)
            if self.inherited_env is not None and not self._actors_plain and self.workers_prestarted:
                print(
                    "gridbench: Tune's trial actors keep their runtime_env (a variable of Tune's differs from the "
                    "workers'); the workers started ahead will not take trials",
                    file=sys.stderr,
                )
        return self._actors_plain

    @property
    def trial_workers(self) -> str:
        """The search's trial_workers tag: plain where Tune's actors run without a runtime_env of their own."""
        return "plain" if self.actors_plain else "runtime_env"

    def _start_imports(self) -> None:
        """Imports Ray Tune, then MLflow, on a thread while Ray starts: Tune starts, and the store opens, sooner."""
        self._tune_imported = threading.Event()
        threading.Thread(
            target=_import_for_later, args=(self._tune_imported,), name="gridbench-import", daemon=True
        ).start()

    def imports_done(self) -> None:
        """Waits for Ray Tune's import beside Ray's start, before this thread imports from Ray Tune.

        Two threads importing Ray Tune at once can meet in its circular imports, and Python then hands one of them
        a partly initialised module (ImportError: "partially initialized module 'ray.train._internal.
        checkpoint_manager'"): seen once Ray started faster than Tune imported, with --prestart-workers.
        """
        if self._tune_imported is not None:
            self._tune_imported.wait()

    def _plan_file(self) -> str:
        return os.path.join(self.directory.path, "prestart.json")

    def take_store(self) -> Future | None:
        """The default store's opening, if `planned` started it: once."""
        store, self._store = self._store, None
        return store

    def assumed(self, plan: SearchPlan) -> None:
        """Starts compiling ahead on the plan its backends' answer most likely confirms, before they are asked.

        plan_search calls it (its `before_asking`); `planned` then keeps the processes where the confirmed plan
        compiles the same programs, and ends them otherwise.
        """
        self.precompile(plan)

    def precompile(self, plan: SearchPlan) -> None:
        """Starts compiling the plan's programs ahead, in processes of their own, where it has any.

        `assumed` and `planned` call it; run_search calls it otherwise (gridbench.gridsearch.precompile). Once
        per search: a later call keeps what is compiling for the same programs, and ends what an assumed plan
        started for others.
        """
        programs = precompile.program_count(plan, len(program_representatives(plan.spec)))
        self.programs_ready = 0  # an assumed plan's count, where the confirmed plan has other programs or none
        directory, context = None, None
        if programs:
            directory = self._search_directory(plan.options.keep_ray_logs)
            context = trial_context(plan, directory.tune_dir, precompiled=True)
        if self.precompiler is not None:
            if context == self._precompiling:
                return
            self.precompiler.stop()  # an assumed plan's, which the backends' answer did not confirm
            self.precompiler = self._precompiling = None
        if context is None:
            return
        if programs_ready(context, programs):
            self.programs_ready = programs  # its trials load them from the cache: no process would do more
            return
        try:
            self.precompiler = Precompiler.start(plan, context, programs, os.path.join(directory.path, "precompile"))
        except Exception:  # noqa: BLE001 - e.g. a user's model that pickle cannot name: its trials compile it
            self.precompiler = None
            return
        self._precompiling = context
        self._adopt_precompiler()

    def _adopt_precompiler(self) -> None:
        """Counts the compiling processes among the search's own (the watchdog ends them if this driver is killed),
        whichever of Ray's start and an assumed plan's processes came first: both call it."""
        with self._lock:
            if self.precompiler is not None and self.processes is not None:
                self.processes.adopt(self.precompiler.pids)
                if self.watchdog is not None:  # also where it was told of the search's processes already
                    self.watchdog.guard(self.processes.seen)

    @property
    def compiling_ahead(self) -> bool:
        """Processes of the search's own compile its programs ahead (gridbench.gridsearch.precompile): its workers
        then queue none. Where every program was ready in the cache, none does: each GPU worker's first trial then
        queues the others for loading ahead, beside its training (gridbench.trial.steps.compile_others_ahead)."""
        return self.precompiler is not None

    def before_trials(self, plan: SearchPlan) -> None:
        """On a CPU, waits for the programs compiling ahead: no compilation shares the cores of a timed epoch.

        The wait is in the makespan: compiling that Ray's start did not hide is the search's own, as it is
        on a GPU, where trials train beside it.
        """
        if self.precompiler is not None and plan.options.device == "cpu":
            self.precompiler.wait()

    def start(
        self,
        options: SearchOptions,
        cpus: int,
        gpus: int,
        runtime_env: dict | None = None,
        trial_share: tuple[int, float] | None = None,
    ) -> None:
        """Starts a local Ray, or joins a cluster. `trial_share`, a trial's CPUs and GPUs: with --prestart-workers on
        a local Ray, the head's raylet names a search's one GPU, and several get one node per GPU where
        GRIDBENCH_NODE_PER_GPU=1 and the cores allow it (gridbench.gridsearch.gpu_nodes.layout)."""
        _quiet_ray()
        if not options.address:
            lifecycle.local_ray_environment()
        self.signals = lifecycle.StopSignals()
        self.signals.install()
        self._search_directory(options.keep_ray_logs)
        # Before OwnProcesses: the watchdog is not among the processes to end; it ends them if this driver is killed.
        self.watchdog = lifecycle.Watchdog(self.directory)
        self.processes = lifecycle.OwnProcesses()
        self._adopt_precompiler()  # started before Ray (run_search, or an assumed plan): the watchdog ends them too
        ahead = prestarts_workers(options)
        nodes = gpu_nodes.layout(gpus, cpus, *trial_share) if ahead and trial_share else None
        one_node = nodes is None or len(nodes.gpu_ids) == 1  # several: Tune's runtime_env, as measured on 4 GPUs
        if not options.address and runtime_env is None and one_node and plain_workers.wanted():
            # Before ray.init: its raylet takes the environment. With --prestart-workers, Tune's actors then take
            # the job's runtime_env alone, the setup hook's, and the workers are asked for without Tune's import.
            self.inherited_env, self._env_added = plain_workers.inherit_tune_env()
        if ahead:
            runtime_env = prestart.job_runtime_env(runtime_env, self._plan_file())
        start = time.perf_counter()
        try:
            # Ray's import first and alone, then the imports for later beside ray.init, which mostly waits for Ray's
            # processes: started before it, they slowed Ray's import by sharing the GIL. On 2 cores the trials were
            # launched after a median of 5.1 s against 5.4 s (docs/results/around-training/import-order-2core.txt).
            import ray  # noqa: F401

            self._start_imports()
            self.ray_start, self.gpu_nodes = _start_ray(
                options.address, cpus, gpus, self.directory.ray_dir, runtime_env, nodes
            )
        except SystemExit as exited:
            # ray.init's own SIGTERM handler (installed during init) exits with the signal's number.
            if exited.code == signal.SIGTERM:
                raise SearchInterrupted(signal.SIGTERM) from None
            raise
        finally:
            # The raylets have taken the environment (their workers inherit it): this process keeps its own.
            plain_workers.forget(self._env_added)
            self._env_added = []
            with self._lock:  # the probe's thread may adopt compiling processes meanwhile (_adopt_precompiler)
                self.processes.note()
                self.watchdog.guard(self.processes.seen)
                for pid, started in self.processes.matching(RAYLET_PROGRAM).items():  # a local Ray's raylets
                    self.watchdog.guard_raylet(pid, started)
            self.signals.install()  # ray.init replaced SIGTERM's handler with its own sys.exit
        self.signals.check()  # a Ctrl-C that ray.init swallowed still stops the search
        self.ray_start_s = time.perf_counter() - start
        ray_messages_to(self.directory.messages_log)
        if ahead or self.inherited_env is not None:
            with self._lock:
                self._prestart_state = "waiting"
            self.prestart()  # if the plan is complete already

    def describe_search(self, plan: SearchPlan, recorder: Recorder) -> None:
        """Tells the watchdog how to end this search if Ray's node dies and Ray ends this driver with it.

        Only a search with a journal (the default recorder): what finished is written from it to the store.
        """
        journal = getattr(recorder, "journal", None)
        if self.watchdog is None or journal is None or recorder.parent_run_id is None:
            return
        self.watchdog.describe_search(
            {
                "journal": str(journal.path),
                "tracking_uri": plan.tracking_uri,
                "parent_run_id": recorder.parent_run_id,
                "trials_total": str(plan.trials_total),
                "ray_dir": self.directory.ray_dir,
                "resume": resume_command(recorder.parent_run_id, plan.tracking_uri),
            }
        )

    def ending(self) -> None:
        """This driver ends its Ray itself from now on: the watchdog must not read the raylet's end as a death."""
        if self.watchdog is not None:
            self.watchdog.ending()

    def stop(self) -> None:
        self.ending()  # first: what comes before Ray's shutdown may fail, and Ray's exit handler shuts it down
        if self.precompiler is not None:
            self.precompiler.stop()
        self.gpu_nodes.stop()  # before Ray's shutdown and the end by PID (StartedNodes.stop)
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
        self._prestart_plan, self._prestart_state, self.workers_prestarted, self.prestart_failure = None, "off", 0, ""
        plain_workers.forget(self._env_added)  # where the start never came to Ray's
        self.inherited_env, self._env_added, self._actors_plain = None, [], None
        self.gpu_nodes = gpu_nodes.NO_NODES


_ray_messages_log: str | None = None  # where Ray's own messages to the driver go (ray_messages_to)


def ray_messages_to(path: str) -> None:
    """Ray's messages to the driver ("(raylet) A worker died or was killed ...") go to this file, not the terminal.

    Ray prints them from a thread of its own (ray._private.worker.listen_error_messages, through its module's
    print_to_stdstream), whatever log_to_driver says. gridbench names each trial's failure in its own line
    (gridbench.trial.failure); Ray's, with its lease and worker ids, stay in the search's directory.
    """
    global _ray_messages_log
    _ray_messages_log = path
    try:
        from ray._private import worker as ray_worker  # Ray's own module: another version may lack it
    except ImportError:
        return
    shown = getattr(ray_worker, "print_to_stdstream", None)
    if shown is None or getattr(shown, "gridbench_log", False):
        return

    def to_log(data, ignore_prefix, **kwargs):
        if data.get("pid") != "raylet" or _ray_messages_log is None:
            return shown(data, ignore_prefix, **kwargs)
        try:
            with open(_ray_messages_log, "a", encoding="utf-8") as log:
                log.writelines(f"{time.strftime('%H:%M:%S')} (raylet) {line}\n" for line in data.get("lines", ()))
        except OSError:  # the search's directory is gone (the search ended): nothing to keep it in
            pass

    to_log.gridbench_log = True
    ray_worker.print_to_stdstream = to_log


# What Tune's first fit imports beyond `ray.tune` (Ray's serializers for pydantic, starlette and Arrow among them, as
# the driver's first object is put): imported on the import thread before Tune's start, not by the main thread while
# that thread imports MLflow, which imports pydantic and starlette too. A module Ray no longer needs costs its import.
TUNE_FIT_IMPORTS = (
    "ray.train.trainer",
    "ray._private.arrow_serialization",
    "pyarrow.json",
    "pydantic.v1",
    "starlette.concurrency",
    "anyio.to_thread",
)


def _import_for_later(tune_imported: threading.Event) -> None:
    """Ray Tune first (Tune's start waits for it alone, RaySession.imports_done), then MLflow (the store's opening,
    which may go on beside Tune's start)."""
    try:
        from ray import tune  # noqa: F401

        for module in TUNE_FIT_IMPORTS:
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
    finally:
        tune_imported.set()  # a failed import is met again, and reported, where Tune starts
    import mlflow  # noqa: F401


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


RAY_MONITOR_SCRIPT = "autoscaler/_private/monitor.py"
RAYLET_PROGRAM = "raylet/raylet"  # its executable's path: core/src/ray/raylet/raylet
# Ray's processes by their command line: a worker's title once it runs ("ray::IDLE", "ray::ImplicitFunc"), its script
# before. Ray's agents are titled alike ("ray::RuntimeEnvAgent"), and so is a process a worker forked; a raylet's
# arguments name the script too, and one still alive after ray.shutdown has had its SIGTERM and SIGKILL.
RAY_WORKER_MARKS = ("ray::", "_private/workers/default_worker.py")


def _stop_ray(processes: lifecycle.OwnProcesses) -> None:
    """Shuts Ray down, then ends by PID whatever it started and left running (agents once outlived it)."""
    processes.note()
    if "ray" in sys.modules:
        import ray

        # Ray's autoscaler monitor answers SIGTERM by reporting to the GCS, which ray.shutdown stops before
        # it, so it hangs until Ray kills it a second later. A local Ray's monitor is ours: it goes first.
        processes.kill_matching(RAY_MONITOR_SCRIPT)
        with _no_collection():
            ray.shutdown()
    # A Ray worker still alive after ray.shutdown took 0.16-0.20 s to exit on a SIGTERM (2 cores); every trial is
    # recorded by now and Ray is gone, so Ray's processes are killed at once (around-training.md, twenty-eighth).
    processes.end(at_once=RAY_WORKER_MARKS)


@contextlib.contextmanager
def _no_collection():
    """No garbage collection in any thread while Ray's driver shuts down.

    A collection that frees an object reference calls into Ray's core worker; in the moment between the
    worker's reset and Python dropping it, that call ends the process (Ray's QuickExit, status 1). Seen
    once in CI: a finished search exited 1 with Ray's "core worker has already been shutdown" line from a
    thread other than the main one. Two kinds of thread collect: any that allocates (automatic collection),
    and Ray's own PythonGCThread, which collects when the raylet asks. After Ray is gone, garbage is harmless.
    """
    _stop_rays_collector()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _stop_rays_collector() -> None:
    try:
        from ray._private.gc_collect_manager import PythonGCThread  # Ray's own module: gone in another version
    except ImportError:
        return
    for thread in threading.enumerate():
        if isinstance(thread, PythonGCThread):
            thread.stop()  # ray.shutdown stops it too, later; stopping twice is harmless


def start_search(plan: SearchPlan, open_recorder, session: RaySession) -> tuple[Future, float, dict[str, float]]:
    """Starts Ray (unless planning did) while the store opens; checks the cluster before any trial starts.

    Returns the store's opening (a Future of open_store's recorder and stale searches: Tune may start before it
    ends, gridbench.gridsearch.store_opening), Ray's start time in seconds and the cluster's resources.
    """
    import ray

    session.precompile(plan)  # unless planning started it: XLA compiles while Ray starts
    # Importing MLflow and opening its store takes seconds; do it while Ray starts, and Tune's start.
    early = session.take_store() if open_recorder is open_journaled_recorder else None
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gridbench-open-store")
    opening = early or pool.submit(open_store, open_recorder, plan)
    pool.shutdown(wait=False)  # its one task, if any, goes on
    if not session.started:
        trial_share = (plan.cpus_per_trial, plan.gpus_per_trial)
        session.start(plan.options, plan.cpus, plan.gpus, user_check.runtime_env(plan.spec), trial_share)
    session.prestart(plan)  # unless planning asked already: the workers start while the store opens
    try:
        session.imports_done()  # Tune's start, next, imports from ray.tune in this thread
        # Ray would queue a trial no node can hold forever.
        placement.check_cluster(ray.nodes(), plan.cpus_per_trial, plan.gpus_per_trial)
        return opening, session.ray_start_s, dict(ray.cluster_resources())
    except BaseException:
        session.ending()
        ray.shutdown()
        raise


def precompile_report(session: RaySession) -> PrecompileReport | None:
    if session.precompiler is None:  # none started; or none needed, every program found ready
        return PrecompileReport(loaded=session.programs_ready) if session.programs_ready else None
    return session.precompiler.report()
