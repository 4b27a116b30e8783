"""What a search is asked to do (SearchOptions) and what its plan checked it can do (SearchPlan).

plan.py builds a SearchPlan from a spec and SearchOptions; everything after it reads one.
"""

from __future__ import annotations

from dataclasses import dataclass

from gridbench import compile_cache
from gridbench.compile_cache import AHEAD_AUTO
from gridbench.datasets import DataSource
from gridbench.gridsearch import backends, fusion, placement
from gridbench.spec import ExperimentSpec

# --prestart-workers' default: off. On 2 cores it did not pay: the workers can be asked for only once Ray is up, and
# their imports ran beside the driver's own start, ending 6-11 s after Tune's start (docs/results/prestart-2core). On
# one H100, with the worker's GPU started in its hook too, the headline took as long with it as without (9 pairs,
# docs/results/around-training.md, "eighth"); on 4 GPUs the results were mixed.
PRESTART_DEFAULT = False


@dataclass(frozen=True)
class SearchOptions:
    device: str = "cpu"
    # None: KERAS_BACKEND, else chosen by device (gridbench.gridsearch.backends.choose).
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
    max_trials: int = 10_000  # configurations x repeats a search may run: a typo'd grid is refused, not started
    # JAX's persistent compilation cache (gridbench.compile_cache): persistent (kept), search (per search) or off.
    compile_cache: str = compile_cache.DEFAULT
    # Compiling the programs in processes of their own while Ray starts (gridsearch.precompile): auto, on, off.
    compile_ahead: str = AHEAD_AUTO
    tracking_uri: str | None = None
    data_dir: str | None = None
    synthetic: bool = False  # random data of the dataset's real shapes: speed only, accuracy never reported
    command_line: str = ""
    retries: int = 0  # runs again a trial whose worker died, up to this many times (each attempt recorded)
    keep_ray_logs: bool = False  # keep the search's directory (Ray's session and logs) instead of removing it
    trial_timeout_s: float | None = None  # stop a trial past this many seconds (FAILED, timeout); None: the spec's
    # A local Ray's workers started, and their imports run, as soon as Ray is up (gridbench.gridsearch.prestart).
    prestart_workers: bool = PRESTART_DEFAULT


def prestarts_workers(options: SearchOptions) -> bool:
    """Whether a search with `options` starts its workers ahead: asked to, on a local Ray."""
    return options.prestart_workers and not options.address  # a cluster's nodes would each need asking


@dataclass(frozen=True)
class SearchPlan:
    """Everything a search needs, checked; building it writes nothing."""

    spec: ExperimentSpec  # as it runs on the chosen backend ("auto" choices resolved)
    options: SearchOptions
    tracking_uri: str
    data: DataSource
    backend_choice: backends.BackendChoice  # the Keras backend (or what a non-Keras workload computes with), and why
    cpus_per_trial: int
    gpus_per_trial: float  # 0 on CPU
    gpus: int  # GPUs Ray may hand out; 0 on CPU (and on a cluster: the cluster's)
    cpus: int  # cores Ray may hand out here (on a cluster: the cluster's)
    trials_total: int
    user_check_s: float = 0.0  # checking a user's model and data in a subprocess (gridbench.gridsearch.user_check)
    # Under --execution fused: configurations x repeats in groups, one Ray trial each (gridbench.gridsearch.fusion).
    fused_groups: tuple[tuple[fusion.Member, ...], ...] = ()
    # What the compile cache held as the search was planned ('empty', 'N entries, X MB'), or why a persistent one
    # could not be used (the search then compiled in its own directory).
    compile_cache_state: str = ""
    # The order in which Tune starts the trials, as Tune points (gridbench.gridsearch.trial_order); (): the grid's.
    trial_order: tuple[dict, ...] = ()

    @property
    def execution(self) -> str:
        return self.spec.execution

    @property
    def backend(self) -> str:
        return self.backend_choice.backend

    @property
    def trial_timeout_s(self) -> float | None:
        """Seconds a trial may run (--trial-timeout, else the spec's trial_timeout); None: no limit."""
        given = self.options.trial_timeout_s
        return given if given is not None else self.spec.trial_timeout

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
        if self.fused_groups:
            return len(self.fused_groups)
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
