"""What a trial sends from its worker to the driver: one TrialOutcome, checked where it crosses.

Ray carries it as a plain dict (`to_dict`) in the trial's one reported result; the
driver rebuilds it with `from_dict`, which refuses a malformed one instead of
recording half of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from gridbench.tracking.schema import TrialStatus


class MalformedOutcome(ValueError):
    """A trial reported something that is not a TrialOutcome."""


@dataclass
class TrialOutcome:
    status: TrialStatus
    started_at: float  # Unix time, the worker's clock
    ended_at: float
    repeat: int
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    epoch_times: list[float] = field(default_factory=list)
    error: str | None = None  # one line
    traceback: str | None = None
    # A trial that trains a workload's inner axis reports one outcome per value here.
    group: list[TrialOutcome] | None = None
    value: Any = None  # the inner axis' value, in a group's outcome

    @property
    def finished(self) -> bool:
        return self.status is TrialStatus.FINISHED

    def to_dict(self) -> dict[str, Any]:
        data = {key: getattr(self, key) for key in _FIELDS}
        data["status"] = self.status.value
        data["group"] = None if self.group is None else [member.to_dict() for member in self.group]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialOutcome:
        """Raises MalformedOutcome naming what is wrong."""
        if not isinstance(data, Mapping):
            raise MalformedOutcome(f"expected a mapping, got {type(data).__name__}")
        unknown = set(data) - set(_FIELDS)
        if unknown:
            raise MalformedOutcome(f"unknown fields {sorted(unknown)}")
        try:
            status = TrialStatus(data["status"])
            outcome = cls(
                status=status,
                started_at=float(data["started_at"]),
                ended_at=float(data["ended_at"]),
                repeat=int(data.get("repeat", 0)),
                metrics={str(k): float(v) for k, v in (data.get("metrics") or {}).items()},
                tags={str(k): str(v) for k, v in (data.get("tags") or {}).items()},
                epoch_times=[float(t) for t in data.get("epoch_times") or ()],
                error=None if data.get("error") is None else str(data["error"]),
                traceback=data.get("traceback"),
                group=None if data.get("group") is None else [cls.from_dict(member) for member in data["group"]],
                value=data.get("value"),
            )
        except MalformedOutcome:
            raise
        except KeyError as missing:
            raise MalformedOutcome(f"missing {missing}") from None
        except (TypeError, ValueError, AttributeError) as err:
            raise MalformedOutcome(str(err)) from None
        if outcome.status is TrialStatus.FAILED and not outcome.error:
            raise MalformedOutcome("a FAILED outcome without an error")
        return outcome


_FIELDS = (
    "status",
    "started_at",
    "ended_at",
    "repeat",
    "metrics",
    "tags",
    "epoch_times",
    "error",
    "traceback",
    "group",
    "value",
)
