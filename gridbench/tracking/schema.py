"""What gridbench records in MLflow: every tag, param and metric name it writes or reads, in one place.

Each name is declared once with its kind, its type, the run it sits on and its meaning;
code uses the constants, so that renaming a name renames it for the writer and every
reader alike (`compare` prices what these names say). Every run carries its schema
version in the tag `gridbench.schema`. Runs written before the tag existed read as
version 1; `upgrade` fills what they lack from explicit defaults keyed by version.

A workload may report further metrics and tags of its own (kernel_ridge's `gram_s`,
a Keras model's `model.params`); they are recorded under the names it gives and
described in the README's "What is measured". Names gridbench itself reads back are
all declared here. Families of names (`version.<library>`, `gpu.<index>.<fact>`) are
declared by their prefix.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Mapping

SCHEMA_VERSION = 11


class Kind(enum.Enum):
    TAG = "tag"
    PARAM = "param"
    METRIC = "metric"


class On(enum.Enum):
    """The run a name sits on."""

    SEARCH = "search"  # a search's parent run
    TRIAL = "trial"  # a trial's nested run
    SUMMARY = "summary"  # a comparison's or a scale's run


class TrialStatus(str, enum.Enum):
    """How a trial ended, as the worker reports it and MLflow records it."""

    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"  # still running when the search was stopped (SIGINT, SIGTERM)


class SearchStatus(str, enum.Enum):
    """How a search ended (the parent run's MLflow status)."""

    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"


@dataclass(frozen=True)
class Field:
    name: str
    kind: Kind
    type: type
    on: tuple[On, ...]
    meaning: str
    since: int = 1  # the first schema version that writes it on every such run
    default: str | float | None = None  # how a run older than `since` reads when it lacks it


FIELDS: dict[tuple[Kind, str], Field] = {}


def _declare(name: str, kind: Kind, type_: type, on: On | tuple[On, ...], meaning: str, **options) -> str:
    if (kind, name) in FIELDS:
        raise ValueError(f"schema {kind.value} {name!r} declared twice")
    FIELDS[kind, name] = Field(name, kind, type_, on if isinstance(on, tuple) else (on,), meaning, **options)
    return name


def _tag(name, on, meaning, **options):
    return _declare(name, Kind.TAG, str, on, meaning, **options)


def _metric(name, on, meaning, **options):
    return _declare(name, Kind.METRIC, float, on, meaning, **options)


def _param(name, type_, on, meaning, **options):
    return _declare(name, Kind.PARAM, type_, on, meaning, **options)


BOTH = (On.SEARCH, On.TRIAL)
EVERY = (On.SEARCH, On.TRIAL, On.SUMMARY)

# --- Every run ---------------------------------------------------------------------------------------------------
SCHEMA = _tag("gridbench.schema", EVERY, "the schema version the run was written with", since=2, default="1")
KIND = _tag("gridbench.kind", EVERY, "search, trial, comparison or scale")

# --- A search (parent run) -----------------------------------------------------------------------------------------
DEVICE = _tag("device", BOTH, "the device asked for: cpu or gpu")
BACKEND = _tag("backend", BOTH, "the Keras backend, or what a non-Keras workload computes with")
BACKEND_REASON = _tag("backend.reason", On.SEARCH, "why that backend, in one line", since=2, default="")
SPEC_NAME = _tag("spec.name", On.SEARCH, "the experiment's name")
SPEC_HASH = _tag("spec.hash", On.SEARCH, "a hash of the spec as it ran (overrides applied)")
SPEC_SOURCE = _tag("spec.source", On.SEARCH, "the spec's file")
DATASET = _tag("dataset", On.SEARCH, "the dataset's name")
DATA_PATH = _tag("data.path", On.SEARCH, "where the data was read from")
DATA_SYNTHETIC = _tag(
    "data.synthetic", BOTH, "true: random data of the real shapes (no accuracy)", since=2, default="false"
)
MODEL = _tag("model", On.SEARCH, "the workload's name")
METRIC = _tag("metric", On.SEARCH, "the metric that ranks trials")
METRIC_MODE = _tag("metric.mode", On.SEARCH, "max or min")
METRIC_TARGET = _tag("metric.target", On.SEARCH, "the value for time to accuracy; empty: none")
TIMING_TRAIN = _tag(
    "timing.train", On.SEARCH, "the metric that says how long training took", since=2, default="steady_epoch_s"
)
COMMAND = _tag("command", On.SEARCH, "the command line")
CPUS_PER_TRIAL = _tag("cpus_per_trial", On.SEARCH, "cores Ray reserved per trial")
GPUS_PER_TRIAL = _tag("gpus_per_trial", On.SEARCH, "GPUs Ray reserved per trial (0 on CPU)")
GPUS_USED = _tag("gpus_used", On.SEARCH, "GPUs the search could use")
CPUS_USED = _tag("cpus_used", On.SEARCH, "cores the search could use")
TRIALS_PER_GPU = _tag("trials_per_gpu", On.SEARCH, "trials packed on one GPU (0 on CPU)")
DATA_PARALLEL = _tag("data_parallel", On.SEARCH, "true: each trial spreads over several GPUs")
RAY_ADDRESS = _tag("ray.address", On.SEARCH, "local, or the Ray cluster joined")
RAY_NODES = _tag("ray.nodes", On.SEARCH, "live Ray nodes")
COMPILE_CACHE = _tag(
    "compile_cache", BOTH, "per search, persistent (kept across searches) or off: JAX's compilation cache"
)
COMPILE_WARMUP = _tag(
    "compile_warmup",
    On.SEARCH,
    "--device both and scale: what the warm-up phase before the timed searches compiled and found in the cache "
    "(its seconds are in the first search's account, account.compile_warmup_s)",
)
COMPILE_CACHE_STATE = _tag(
    "compile_cache.state",
    On.SEARCH,
    "what the compile cache held as the search was planned: empty, 'N entries, X MB', off, or why a persistent one "
    "could not be written (the search compiled in its own directory)",
    since=6,
    default="",
)
EXECUTION = _tag("execution", BOTH, "trials, or fused (same-program groups)", since=3, default="trials")
RESUME_ARGUMENTS = _tag(
    "gridbench.resume_arguments",
    On.SEARCH,
    "a search the command line started: its spec and options as `gridbench search` arguments (a JSON list, the "
    "store left out), which `gridbench search --resume RUN_ID` alone runs again",
)
BASELINE = _tag("baseline", On.SEARCH, "GridSearchCV(...): a scikit-learn baseline recorded as a search")
PILOT = _tag("pilot", On.SEARCH, "true: a pilot, one configuration per program for a few epochs (search --pilot)")
PILOT_WHOLE = _tag(
    "pilot.whole",
    On.SEARCH,
    "a pilot's whole search as written (JSON): epochs, configs, repeats, concurrency, each program's configurations",
)
PILOT_WHOLE_KEY = _tag("pilot.whole_key", On.SEARCH, "the whole search's parameters, hashed (records.params_key)")
ERROR = _tag("error", BOTH, "why the run failed")
COMPARED_IN = _tag("gridbench.compared_in", On.SEARCH, "the comparison run that compared this search")
SCALE_RUN = _tag("gridbench.scale_run", On.SEARCH, "the scale run this search belongs to")
SCALE_ID = _tag("scale.id", (On.SEARCH, On.SUMMARY), "one scale's searches share it")
SCALE_COUNT = _tag("scale.count", On.SEARCH, "the GPU or core count this search ran at")
TRIAL_ORDER = _tag("trial_order", On.SEARCH, "the order Tune started the trials in, where not the grid's")
TRIAL_ORDER_PLAN = _tag(
    "trial_order.plan", On.SEARCH, "that order's plan: its fullest slot predicted, against longest first; planning s"
)
# The environment (gridbench.environment.collect), by prefix or name.
HOST = _tag("host", BOTH, "the machine's name")
CPU_MODEL = _tag("cpu.model", On.SEARCH, "the CPU")
CPU_CORES_USABLE = _tag("cpu.cores_usable", On.SEARCH, "cores this process may run on")
GPU_COUNT = _tag("gpu.count", On.SEARCH, "GPUs NVML sees")
GPU_PREFIX = _tag("gpu.", On.SEARCH, "gpu.<index>.name, .memory_gib, .driver, .cuda_driver: each GPU's facts")
VERSION_PREFIX = _tag("version.", BOTH, "version.<library>: library versions")
ENV_PREFIX = _tag(
    "env.",
    On.SEARCH,
    "env.<VARIABLE>: a variable that changes what the frameworks compile or compute (XLA_FLAGS, ...), where set "
    "in the driver (a local Ray's workers inherit it)",
)

PARAM_REPEATS = _param("repeats", int, On.SEARCH, "each configuration's repeats")
PARAM_SEED = _param("seed", int, BOTH, "the spec's seed (a repeat adds its index)")
GRID_PREFIX = _param("grid.", list, On.SEARCH, "grid.<axis>: the axis' values, as JSON")
PARAM_REPEAT = _param("repeat", int, On.TRIAL, "the trial's repeat index")

MAKESPAN_S = _metric(
    "makespan_s",
    (On.SEARCH, On.SUMMARY),
    "Tuner.fit() from start to end, with a CPU search's wait for its compilations ahead before it (a scale: "
    "_<count>); a resumed search: the last session's, each at its step",
)
RAY_START_S = _metric("ray_start_s", On.SEARCH, "starting or joining Ray")
BACKEND_PROBE_S = _metric("backend_probe_s", On.SEARCH, "asking backends whether they see a GPU", since=2, default=0.0)
TIME_TO_FIRST_TRIAL_S = _metric("time_to_first_trial_s", On.SEARCH, "from the command's start to the first trial's")
TRIAL_WALL_SUM_S = _metric("trial_wall_sum_s", On.SEARCH, "the trials' wall times added up")
TRIALS_TOTAL = _metric("trials_total", On.SEARCH, "configurations x repeats")
TRIALS_FINISHED = _metric("trials_finished", On.SEARCH, "trials that finished")
TRIALS_FAILED = _metric("trials_failed", On.SEARCH, "trials that failed")
CONCURRENCY = _metric("concurrency", On.SEARCH, "trials the resources allowed at once")
OVERHEAD_RATIO = _metric("overhead_ratio", On.SEARCH, "makespan / (trial wall sum / concurrency)")
OVERHEAD_S = _metric("overhead_s", On.SEARCH, "makespan - trial wall sum / concurrency")
BEST_METRIC = _metric("best_metric", On.SEARCH, "the best value of the ranking metric (diverged trials left out)")
TRIALS_DIVERGED = _metric("trials_diverged", On.SEARCH, "finished trials whose training loss became NaN or inf")
EPOCHS_SUM_S = _metric(
    "epochs_sum_s", On.SEARCH, "every trial's epochs added up, warm-up epochs included (a shared epoch once)", since=3
)
TRAINING_SHARE = _metric(
    "training_share",
    On.SEARCH,
    "training_sum_s / (makespan x concurrency): the share of the search spent training at the steady pace (schema "
    "3-5: every epoch, the warm-up epoch's compiling included)",
    since=3,
)
TRAINING_SUM_S = _metric(
    "training_sum_s",
    On.SEARCH,
    "every trial's epochs at their steady time added up: the epochs less each first epoch's excess (warm-up)",
    since=6,
)
# The account (gridbench.account): the whole command in parts that add up to it, wall seconds.
ACCOUNT_PREFIX = _metric(
    "account.",
    On.SEARCH,
    "account.<part>: startup_s (command start to the first trial), compile_s (compiling not hidden), "
    "worker_start_s (each worker's first trial beyond later ones: imports, device), trial_overhead_s (setup, "
    "evaluation, recording, gaps between trials), warmup_s (first epochs beyond a steady epoch), training_s "
    "(epochs at their steady time), failed_s (FAILED trials' whole time; absent before issue 42), end_s (last trial to "
    "the search's end); trials' parts / concurrency",
    since=6,
)
WHOLE_COMMAND_S = _metric(
    "whole_command_s",
    On.SEARCH,
    "from the command's start (or --device both's request for this half) to the search's end, Ray stopped: the "
    "account's parts added up",
    since=6,
)
STARTUP_S = _metric(
    "startup_s", On.SEARCH, "from the command's start to the makespan's: what overlapping left", since=3
)
# Compiling ahead (gridbench.gridsearch.precompile): 0 where a search compiled nothing ahead, or predates it.
COMPILE_AHEAD = _tag(
    "compile_ahead", On.SEARCH, "--compile-ahead: auto, on or off (older searches: off)", since=5, default="off"
)
PRESTART_WORKERS = _tag(
    "prestart_workers",
    On.SEARCH,
    "--prestart-workers: on (a local Ray's workers started, and their imports run, as soon as Ray was up) or off "
    "(each worker starts with its first trial; always on a cluster, --address)",
    since=7,
    default="off",
)
RAY_START = _tag(
    "ray.start",
    On.SEARCH,
    "how a local Ray was started: lean (its workers started through gridbench.trial.ray_worker_setup, no API server, "
    "no autoscaler monitor: gridbench.gridsearch.local_ray) or ray (as ray.init starts it: a cluster, "
    "GRIDBENCH_RAY_START=ray, and every search before schema 8)",
    since=8,
    default="ray",
)
TRIAL_WORKERS = _tag(
    "trial_workers",
    On.SEARCH,
    "how Tune's trial actors got their workers: plain (a local Ray's workers inherited Tune's variables and the "
    "actors had no runtime_env of Tune's, taking the workers_prestarted workers asked for as soon as Ray was up: "
    "plain ones, or with --prestart-workers ones that imported ahead in the job's setup hook; "
    "gridbench.gridsearch.plain_workers, the default on a local Ray of one node since 2026-12-07, off with "
    "GRIDBENCH_PLAIN_WORKERS=0) or runtime_env (Tune's own, merged with the job's: each worker started when its "
    "trial was due, or with --prestart-workers before; a cluster, a runtime_env of the search's own, one node per "
    "GPU, and every search before schema 10)",
    since=10,
    default="runtime_env",
)
WORKERS_PRESTARTED = _metric(
    "workers_prestarted",
    On.SEARCH,
    "idle workers asked of a local Ray as soon as it was up: with --prestart-workers, or plain ones (trial_workers)",
    since=7,
    default=0.0,
)
WORKERS_STARTED_AHEAD = _metric(
    "workers_started_ahead",
    On.SEARCH,
    "the trials' workers whose process started before Tune's start (the makespan's): those asked for ahead that the "
    "trials took (known from worker.process_started_at: before schema 11, only where they imported ahead)",
    since=7,
    default=0.0,
)
WORKERS_IMPORTED_AHEAD = _metric(
    "workers_imported_ahead",
    On.SEARCH,
    "workers whose trials found their imports done ahead (worker.imported_ahead)",
    since=7,
    default=0.0,
)
IMPORT_AHEAD_S = _metric(
    "import_ahead_s",
    On.SEARCH,
    "those workers' imports ahead added up (worker.import_ahead_s): outside the trials, within the command",
    since=7,
    default=0.0,
)
IMPORT_AHEAD_AFTER_LAUNCH_S = _metric(
    "import_ahead_after_launch_s",
    On.SEARCH,
    "how long after Tune's start (the makespan's) the last worker's imports ahead ended; 0: all done before",
    since=7,
    default=0.0,
)
STORE_OPEN_AFTER_LAUNCH_S = _metric(
    "store_open_after_launch_s",
    On.SEARCH,
    "how long after Tune's start the store was open and the parent run created (they go on beside it); 0: before",
    since=8,
    default=0.0,
)
PRECOMPILE_PROCESSES = _metric(
    "precompile_processes", On.SEARCH, "processes that compiled the search's programs ahead", since=5, default=0.0
)
PROGRAMS_PRECOMPILED = _metric(
    "programs_precompiled",
    On.SEARCH,
    "programs those processes compiled (not loaded from a cache)",
    since=5,
    default=0.0,
)
PROGRAMS_PRECOMPILE_LOADED = _metric(
    "programs_precompile_loaded",
    On.SEARCH,
    "programs those processes found in the compile cache already (an earlier search's: --compile-cache persistent)",
    since=5,
    default=0.0,
)
PROGRAMS_PRECOMPILE_FAILED = _metric(
    "programs_precompile_failed",
    On.SEARCH,
    "programs those processes failed to compile: the trials that need them compile them",
    since=5,
    default=0.0,
)
PRECOMPILE_S = _metric(
    "precompile_s",
    On.SEARCH,
    "those processes' wall time, from their start to the last one's end",
    since=5,
    default=0.0,
)
PRECOMPILE_COMPILE_S = _metric(
    "precompile_compile_s", On.SEARCH, "XLA's compilations in those processes, added up", since=5, default=0.0
)
PRECOMPILE_WAIT_S = _metric(
    "precompile_wait_s",
    On.SEARCH,
    "what the trials' start waited for those processes, within the makespan (CPU searches: no compilation "
    "beside a timed epoch)",
    since=5,
    default=0.0,
)
PRECOMPILE_BESIDE_FIRST_TRIAL_S = _metric(
    "precompile_beside_first_trial_s",
    On.SEARCH,
    "how long those processes still ran after the first trial began (0: they had ended): the first workers started "
    "beside them, and how their wait split between the account's workers' start and compiling depends on timing; "
    "their sum is what to read",
    since=9,
    default=0.0,
)
SEARCH_MAKESPAN_S = _metric(
    "search_makespan_s",
    On.SEARCH,
    "every session's makespan added up: the whole search's, where a search was resumed (makespan_s is the last "
    "session's)",
)
SESSIONS = _metric("sessions", On.SEARCH, "sessions that ran the search: 1, plus one per --resume")
TRIALS_RESUMED = _metric(
    "trials_resumed", On.SEARCH, "trials finished in earlier sessions; makespan_s and the overheads cover the others"
)
# The journal and the store writer (tracking/journal.py, journaled.py): what recording cost, apart from the makespan.
JOURNAL_WRITE_S = _metric("journal_write_s", On.SEARCH, "appending and fsyncing trials to the journal (Tune's thread)")
STORE_WRITE_S = _metric("store_write_s", On.SEARCH, "writing trials to the store, retries included (a writer thread)")
STORE_LAG_MAX_S = _metric("store_lag_max_s", On.SEARCH, "the longest a trial waited from journal to store")
STORE_RETRIES = _metric("store_retries", On.SEARCH, "store writes that failed and were tried again")

# --- Bookkeeping in gridbench's namespace, and where a run ran as params (schema 6) ---------------------------------
# MLflow's compare view sets runs side by side, params and tags apart; its "show diff only" keeps what differs.
# Until schema 5 the device, backend and resources were tags only, and the bookkeeping that differs between any
# two runs (a driver's pid, a journal's path) sat among them as bare names. Since schema 6 the bookkeeping tags
# are gridbench.* (RENAMED: new name -> the name before; readers take either, see `tag_value` and `upgrade`) and
# device, backend, cores and GPUs per trial are params on every search and trial run as well as tags.
# Who runs the search now: a RUNNING search whose driver is gone from this host is stale (gridbench.tracking.stale).
DRIVER_HOST = _tag("gridbench.driver.host", On.SEARCH, "the host of the driver process running the search")
DRIVER_PID = _tag("gridbench.driver.pid", On.SEARCH, "the driver's process id")
DRIVER_STARTED = _tag(
    "gridbench.driver.started", On.SEARCH, "the driver's process start (Unix time): a reused pid is not it"
)
# The journal (tracking/journal.py, journaled.py).
JOURNAL_PATH = _tag(
    "gridbench.journal.path", On.SEARCH, "the search's journal: every record, before the store (gridbench sync)"
)
JOURNAL_ID = _tag(
    "gridbench.journal.id", On.SEARCH, "the journal's id: how `gridbench sync` finds the parent run again"
)
RENAMED = {
    DRIVER_HOST: "driver.host",
    DRIVER_PID: "driver.pid",
    DRIVER_STARTED: "driver.started",
    JOURNAL_PATH: "journal.path",
    JOURNAL_ID: "journal.id",
}
PARAM_DEVICE = _param("device", str, BOTH, "cpu or gpu: the tag device, as a param", since=6)
PARAM_BACKEND = _param("backend", str, BOTH, "the tag backend, as a param", since=6)
PARAM_CPUS_PER_TRIAL = _param("cpus_per_trial", int, BOTH, "cores Ray reserved per trial, as a param", since=6)
PARAM_GPUS_PER_TRIAL = _param("gpus_per_trial", float, BOTH, "GPUs Ray reserved per trial, as a param", since=6)
# Where a search ran, not what it trained: never a hyperparameter to match (gridbench.comparison.pairing).
PLACEMENT_PARAMS = (PARAM_DEVICE, PARAM_BACKEND, PARAM_CPUS_PER_TRIAL, PARAM_GPUS_PER_TRIAL)


def tag_value(tags: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    """A tag of any schema version: under its name, else under the name it had before (RENAMED)."""
    if name in tags:
        return tags[name]
    return tags.get(RENAMED.get(name, name), default)


# --- A trial (nested run) ------------------------------------------------------------------------------------------
PARENT_RUN = _tag("mlflow.parentRunId", On.TRIAL, "the search's run (MLflow's own tag)")
TRIAL_ID = _tag("trial_id", On.TRIAL, "Ray Tune's trial id")
CONFIG_KEY = _tag("config_key", On.TRIAL, "the grid point: 'axis=value axis=value'")
PID = _tag("pid", On.TRIAL, "the worker's process id")
RAY_NODE_ID = _tag("ray.node_id", On.TRIAL, "the Ray node the trial ran on")
DEVICE_REQUESTED = _tag("device.requested", On.TRIAL, "cpu or gpu")
DEVICE_ACTUAL = _tag("device.actual", On.TRIAL, "where the framework put the model, read back from it: cpu:0, gpu:0")
TRAIN_LOOP = _tag("train_loop", On.TRIAL, "fit or compiled: the loop that ran")
SHARED_BY = _tag("shared_by", On.TRIAL, "configurations trained together in one trial (a metric too)")
GPU_ASSIGNED = _tag("gpu.assigned", On.TRIAL, "the GPU indices Ray assigned")
THREADS_PREFIX = _tag("threads.", On.TRIAL, "threads.<pool>: thread counts the trial ran with")
ATTEMPT = _tag("attempt", On.TRIAL, "1, or the retry (--retries) this run records; a trial's every attempt has a run")
RETRIED = _tag("retried", On.TRIAL, "true: this attempt's worker died and the trial was run again")
ENDED_BY = _tag("ended_by", On.TRIAL, "what ended a KILLED trial: SIGINT, SIGTERM")
# A diverged trial ran to its end (FINISHED) but its numbers mean nothing: it is kept out of best and time to accuracy.
DIVERGED = _tag("diverged", On.TRIAL, "true: the training loss became NaN or inf (diverged_epoch says when)")
# Why a FAILED trial failed (gridbench.trial.failure): its kind, and one line with what happened and the fix.
FAILURE_KIND = _tag(
    "failure.kind", On.TRIAL, "a FAILED trial's cause: gpu_memory, host_memory, worker_crashed, exception or timeout"
)
FAILURE_MESSAGE = _tag("failure.message", On.TRIAL, "a FAILED trial's cause in one line, with what a user can do")

PROCESS_SETUP_S = _metric(
    "process_setup_s",
    On.TRIAL,
    "before its imports: the process configured for the trial, its data's read and its device's start begun on "
    "threads of their own, and its GPU's facts read (NVML, started once per worker)",
)
IMPORT_S = _metric("import_s", On.TRIAL, "importing the framework in this worker (0 once reused)")
# Imports ahead (--prestart-workers, gridbench.trial.prestart): in Ray's setup hook, before the worker's first trial.
WORKER_IMPORTED_AHEAD = _tag(
    "worker.imported_ahead",
    On.TRIAL,
    "true: the trial's worker imported its framework and the trial's modules in Ray's setup hook, before its first "
    "trial (--prestart-workers); import_s is what the trial itself still imported",
    since=7,
    default="false",
)
WORKER_IMPORT_AHEAD_S = _metric(
    "worker.import_ahead_s",
    On.TRIAL,
    "on the worker's first trial: its imports ahead, seconds, outside the trial's wall time (the search's "
    "import_ahead_s adds them up)",
)
WORKER_IMPORT_AHEAD_STARTED_AT = _metric(
    "worker.import_ahead_started_at", On.TRIAL, "on the worker's first trial: when its imports ahead began (Unix time)"
)
WORKER_IMPORT_AHEAD_ENDED_AT = _metric(
    "worker.import_ahead_ended_at", On.TRIAL, "on the worker's first trial: when its imports ahead ended (Unix time)"
)
WORKER_PROCESS_STARTED_AT = _metric(
    "worker.process_started_at",
    On.TRIAL,
    "on a worker's first trial: when its process started (Unix time; before schema 11, only where it imported ahead)",
)
WORKER_DATA_READ_AHEAD_STARTED_AT = _metric(
    "worker.data_read_ahead_started_at",
    On.TRIAL,
    "on the first trial of a worker that imported ahead and read its data there (mnist, cifar10; on a CPU, or "
    "where the hook started the worker's one GPU): when Ray's setup hook began reading them on a thread (Unix "
    "time); the trial's data_read_s counts from then, its data_wait_s is what it still waited",
)
WORKER_DEVICE_START_AHEAD_S = _metric(
    "worker.device_start_ahead_s",
    On.TRIAL,
    "on the first trial of a worker that imported ahead and saw one GPU only (JAX): its GPU backend's start in Ray's "
    "setup hook, on a thread beside the imports ahead (inside worker.import_ahead_s, outside the trial's wall time)",
)
# The worker's GPU backend (JAX), started on a thread beside its imports (gridbench.trial.steps): its first trial only.
DEVICE_START_S = _metric(
    "device_start_s",
    On.TRIAL,
    "on a worker's first GPU trial (JAX): starting the GPU backend, then (with a compile cache) cuBLAS, by one small "
    "matrix product, on a thread beside the worker's imports",
)
DEVICE_WAIT_S = _metric(
    "device_wait_s",
    On.TRIAL,
    "on a worker's first GPU trial (JAX): what the trial waited for its backend's start after its imports (and "
    "its data's read), before its setup (inside its wall time)",
)
DATA_READ_S = _metric(
    "data_read_s",
    On.TRIAL,
    "on a worker's first trial, for data read from files that import nothing (mnist, cifar10, synthetic): reading "
    "and scaling them on a thread from the trial's start, beside its imports and its device's start (its setup "
    "then finds them read); mnist's and cifar10's, in a worker whose setup hook read them, from that hook "
    "(worker.data_read_ahead_started_at)",
)
DATA_WAIT_S = _metric(
    "data_wait_s",
    On.TRIAL,
    "on a worker's first trial whose data were read on a thread (data_read_s): what the trial still waited for "
    "them before its setup (inside its wall time)",
)
SETUP_S = _metric("setup_s", On.TRIAL, "loading the data and building the model")
COMPILE_S = _metric(
    "compile_s", On.TRIAL, "tracing and compiling the trial's program, or waiting for it (about 0: reused)", since=3
)
PROGRAM_REUSED = _tag("program.reused", On.TRIAL, "yes: the program was compiled before this trial needed it", since=3)
PROGRAM_CACHED = _tag(
    "program.cached",
    On.TRIAL,
    "yes: JAX's persistent cache served every compilation the trial's program needed, or its executables were "
    "read from the programs saved beside it (compiled by another worker, or by an earlier search under "
    "--compile-cache persistent)",
    since=4,
)
# compile_s as JAX's own clocks split it (gridbench.compile_cache.PROGRAM_PHASES), on trials whose thread got
# the program itself; what compile_s holds beyond their sum is Python: building the step, locks, waiting.
PROGRAM_TRACE_S = _metric("program.trace_s", On.TRIAL, "of compile_s: tracing the program to a jaxpr")
PROGRAM_LOWER_S = _metric("program.lower_s", On.TRIAL, "of compile_s: lowering the jaxpr to StableHLO")
PROGRAM_BACKEND_S = _metric(
    "program.backend_s",
    On.TRIAL,
    "of compile_s: the backend's step: the cache key and the entry's read (a hit), or XLA's compile (a miss)",
)
PROGRAM_CACHE_READ_S = _metric(
    "program.cache_read_s", On.TRIAL, "of program.backend_s: reading and loading entries from the persistent cache"
)
# gridbench's own parts of compile_s beside JAX's (gridbench.workloads.saved_programs).
PROGRAM_EXECUTABLE_READ_S = _metric(
    "program.executable_read_s",
    On.TRIAL,
    "of compile_s: reading and loading the program's saved executables (no tracing, lowering or backend step)",
)
PROGRAM_EXECUTABLE_WRITE_S = _metric(
    "program.executable_write_s", On.TRIAL, "of compile_s: saving the compiled program's executables for later workers"
)
PROGRAM_PHASE_METRICS = {
    "trace_s": PROGRAM_TRACE_S,
    "lower_s": PROGRAM_LOWER_S,
    "backend_s": PROGRAM_BACKEND_S,
    "cache_read_s": PROGRAM_CACHE_READ_S,
    "executable_read_s": PROGRAM_EXECUTABLE_READ_S,
    "executable_write_s": PROGRAM_EXECUTABLE_WRITE_S,
}
PROGRAMS_AHEAD = _metric(
    "programs_compiled_ahead", On.TRIAL, "programs of later trials this trial started compiling in the background"
)
TRAIN_EPOCHS_S = _metric(
    "train_epochs_s", On.TRIAL, "this trial's epochs added up, the warm-up epoch included (its share, when shared)"
)
FIT_S = _metric("fit_s", On.TRIAL, "training, warm-up included")
FIT_OUTSIDE_EPOCHS_S = _metric("fit_outside_epochs_s", On.TRIAL, "what fit() spends outside its epochs")
EVAL_S = _metric("eval_s", On.TRIAL, "scoring the held-out set")
WARMUP_EPOCH_S = _metric("warmup_epoch_s", On.TRIAL, "the first epoch (with fit, its tracing and compilation too)")
STEADY_EPOCH_S = _metric("steady_epoch_s", On.TRIAL, "median of the epochs after the first")
STEADY_EPOCH_MEAN_S = _metric("steady_epoch_mean_s", On.TRIAL, "their mean")
STEADY_EPOCH_STD_S = _metric("steady_epoch_std_s", On.TRIAL, "their standard deviation (0 with one)")
STEADY_EPOCH_MIN_S = _metric("steady_epoch_min_s", On.TRIAL, "the fastest")
STEADY_EPOCH_MAX_S = _metric("steady_epoch_max_s", On.TRIAL, "the slowest")
STEADY_EPOCHS = _metric("steady_epochs", On.TRIAL, "how many timed epochs")
EPOCH_S = _metric("epoch_s", On.TRIAL, "every epoch's time, one step each")
SAMPLES_PER_S = _metric("samples_per_s", On.TRIAL, "training samples / steady epoch")
TRIAL_WALL_S = _metric("trial_wall_s", On.TRIAL, "the whole trial, as a user waits for it")
_metric(SHARED_BY, On.TRIAL, "configurations trained together in one trial (a tag too)")
FUSED_WITH = _tag("fused_with", On.TRIAL, "configurations in this trial's fused group, itself included (a metric too)")
_metric(FUSED_WITH, On.TRIAL, "configurations in this trial's fused group, itself included (a tag too)")
GROUP_WARMUP_EPOCH_S = _metric("group_warmup_epoch_s", On.TRIAL, "a fused group's first epoch, the whole group's")
GROUP_STEADY_EPOCH_S = _metric("group_steady_epoch_s", On.TRIAL, "a fused group's median later epoch, the group's")
GROUP_FIT_S = _metric("group_fit_s", On.TRIAL, "a fused group's training, warm-up included, the whole group's")
GROUP_WALL_S = _metric("group_wall_s", On.TRIAL, "the whole trial that trained a group of configurations")
TEST_ACCURACY = _metric("test_accuracy", On.TRIAL, "accuracy on the held-out set (none on synthetic data)")
TRAIN_LOSS = _metric("train_loss", On.TRIAL, "the last epoch's training loss")
DIVERGED_EPOCH = _metric("diverged_epoch", On.TRIAL, "the first epoch (from 1) whose training loss was NaN or inf")
GPU_METRIC_PREFIX = _metric("gpu_", On.TRIAL, "gpu_util_pct_*, gpu_mem_used_gib_*, gpu_process_mem_gib_*: NVML samples")

# --- A comparison or a scale (summary run) --------------------------------------------------------------------------
COMPARE_BASELINE = _tag("compare.baseline", On.SUMMARY, "the baseline search's run id")
COMPARE_RUNS = _tag("compare.runs", On.SUMMARY, "the compared searches' run ids")
SCALE_RUNS = _tag("scale.runs", On.SUMMARY, "the scale's searches' run ids, smallest count first")
PRICES_SOURCE = _tag("prices.source", On.SUMMARY, "where the $/hour prices came from")
MISMATCHES = _tag("mismatches", On.SUMMARY, "what differed between searches compared anyway")
SEARCH_PREFIX = _tag("search.", On.SUMMARY, "search.<i>: each compared search's label, the baseline first")
SCALE_PREFIX = _tag("scale.", On.SUMMARY, "scale.resource, .counts, .data_parallel and what every count shared")
# Headline figures of a comparison, suffixed _1, _2, ... when several searches are compared to one baseline.
MAKESPAN_SPEEDUP = _metric("makespan_speedup", On.SUMMARY, "baseline makespan / other makespan")
GEOMEAN_TRAIN_SPEEDUP = _metric("geomean_train_speedup", On.SUMMARY, "geometric mean of the training speedups")
GEOMEAN_WALL_SPEEDUP = _metric("geomean_wall_speedup", On.SUMMARY, "geometric mean of the trial wall speedups")
RELATIVE_COST = _metric("relative_cost", On.SUMMARY, "other search's cost / baseline's")
CONFIGS_CPU_FASTER = _metric("configs_cpu_faster", On.SUMMARY, "configurations that trained faster on the CPU")
CONFIGS_CPU_CHEAPER = _metric("configs_cpu_cheaper", On.SUMMARY, "configurations that were cheaper on the CPU")
BASELINE_TRAINING_SHARE = _metric(
    "baseline_training_share", On.SUMMARY, "the baseline search's training_share (absent: recorded before it)"
)
OTHER_TRAINING_SHARE = _metric(
    "other_training_share", On.SUMMARY, "the other search's training_share (absent: recorded before it)"
)
# A scale's figures per count: <figure>_<count>.
SCALE_FIGURES = (
    "makespan_s",
    "throughput_per_h",
    "speedup",
    "efficiency",
    "efficiency_steady",
    "efficiency_amdahl",
    "training_share",
)
for figure in SCALE_FIGURES[1:]:  # makespan_s is declared above
    _metric(f"{figure}_", On.SUMMARY, f"{figure}_<count>: a scale's {figure} at each count")
del figure


def declared(kind: Kind, name: str) -> Field | None:
    """The field a name of this kind belongs to, directly or by a declared prefix."""
    if (kind, name) in FIELDS:
        return FIELDS[kind, name]
    return next(
        (f for (k, p), f in FIELDS.items() if k is kind and p.endswith((".", "_")) and name.startswith(p)), None
    )


def version_of(tags: Mapping[str, str]) -> int:
    return int(tags.get(SCHEMA, "1"))


def defaults(version: int, kind: Kind, on: On) -> dict[str, str | float]:
    """What a run of schema `version` lacks and reads as: fields written on every run only since later."""
    return {
        f.name: f.default
        for f in FIELDS.values()
        if f.kind is kind and on in f.on and f.since > version and f.default is not None
    }


def upgrade(tags: Mapping[str, str], metrics: Mapping[str, float], on: On) -> tuple[dict, dict]:
    """A run's tags and metrics as the current schema reads them: an older run's gaps filled by their defaults."""
    version = version_of(tags)
    renamed = {new: tags[old] for new, old in RENAMED.items() if old in tags and new not in tags}
    return (
        {**defaults(version, Kind.TAG, on), **tags, **renamed},
        {**defaults(version, Kind.METRIC, on), **metrics},
    )
