"""What placement answers about one request: may this task go on this worker (`Assigned`),
and where does the convergence stand (`Outlook`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Assigned(Enum):
    """What `Placement.assign` did: truthy only for OK; otherwise the reason it refused."""

    OK = "assigned"
    UNKNOWN_TASK = "no such task"
    UNKNOWN_WORKER = "no such worker"
    OWNER = "the worker already runs a replica of the task"
    COMPLETE = "the task already has all its replicas"
    EXCLUDED = "the task is excluded from the worker"
    LABELS = "the worker lacks a label the task requires"
    NO_ROOM = "the worker has no room for the task"
    ZONE = "another replica of the task is in the worker's zone (zone spread is required)"

    def __bool__(self) -> bool:
        return self is Assigned.OK


@dataclass(frozen=True)
class Outlook:
    """Where the convergence stands (`Placement.outlook`), for status views."""

    balanced: bool  # nothing pending fits and the criterion holds: convergence is done
    planned_moves: int  # moves the current plan still holds
    complete: bool  # the plan reaches the fixed point (False: more moves will follow)
