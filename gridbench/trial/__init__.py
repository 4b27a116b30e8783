"""The worker's side: one trial in a Ray worker process, timed, returning its outcome to the driver.

Nothing here writes to the store; gridbench.workloads is what a trial trains.
"""

from gridbench.trial.context import FUSED_GROUP_KEY, REPEAT_KEY, DeviceMismatch, TrialContext, configure_process
from gridbench.trial.trial_runner import run_trial

__all__ = ["FUSED_GROUP_KEY", "REPEAT_KEY", "DeviceMismatch", "TrialContext", "configure_process", "run_trial"]
