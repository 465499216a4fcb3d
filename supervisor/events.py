"""The supervisor state machine's events (what happened) and actions (what to do about it).

Named tuples, not dataclasses: one `Report` is made per worker message on the hot path.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from corral.common.protocol import Instructions, Refusal, Status

from .ha import Role

# -- events ------------------------------------------------------------------------------------


class Report(NamedTuple):
    identity: bytes
    status: Status


class TasksFetched(NamedTuple):
    tasks: dict[str, float] | None  # None when the query failed
    error: str | None
    reset: bool


class RoleChanged(NamedTuple):
    """HA: the election's latest decision (see ha.Role)."""

    role: Role


class Command(NamedTuple):
    verb: str  # drain | undrain | query | shutdown
    args: dict[str, Any]


# -- actions -----------------------------------------------------------------------------------


class Send(NamedTuple):
    identity: bytes
    message: Instructions | Refusal


class Fetch(NamedTuple):
    reset: bool


class PersistEpoch(NamedTuple):
    epoch: int


class Stop(NamedTuple):
    reason: str


Action = Send | Fetch | PersistEpoch | Stop
_NONE: list[Action] = []

# Timer keys: a worker's timeout is keyed by its id (a str); everything else by a tuple.
WARMUP = ("warmup",)
QUERY = ("query",)
QUERY_RETRY = ("query_retry",)
REBALANCE = ("rebalance",)
