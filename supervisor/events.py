"""The supervisor state machine's events (what happened) and actions (what to do about it).

Frozen msgspec structs, like the protocol's messages: one `Report` and one `Send` are made per
message on the hot path, and a struct is built several times faster than a frozen dataclass.
`SupervisorCore.handle(event, now)` takes the events; the daemon carries out the actions, in
order. See docs/architecture.md for the path of one report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from corral.common.wire.protocol import Instructions, Refusal, Renewal, Status, StatusGlance
from corral.common.wire.tasklist import TaskEntry

from .role import Role


class _Frozen(msgspec.Struct, frozen=True, gc=False):
    """Immutable and cheap to build."""


# -- events ------------------------------------------------------------------------------------


class Report(_Frozen, frozen=True):
    """A worker's status, from the connection ``identity``. ``key_name`` is the name the
    sender's CurveZMQ key is authorised as (None without Curve, or for an unknown key)."""

    identity: bytes
    status: Status
    key_name: str | None = None


class RawReport(_Frozen, frozen=True):
    """A report as the daemon reads it: the frame, and its fields with the task maps still
    encoded (`StatusGlance`). The core decodes the maps only when the report is not the one
    the worker sent last time; most are (a settled fleet), and building their strings was the
    biggest cost of a report at 100,000 workers."""

    identity: bytes
    glance: StatusGlance
    frame: bytes
    key_name: str | None = None


class BatchStart(_Frozen, frozen=True):
    """The reports that follow, up to `BatchEnd`, were read in one wake-up and are one batch:
    placement that arrivals ask for (a worker joining or back, a capacity change) runs once,
    at the end — after a stall, thousands of workers come back together, and placing pending
    replicas once per arrival would cost O(pending) each — and every action waits for the
    end, in order: the daemon hands each report over as it reads it, so what it read is freed
    while still in cache, and the renewals and sets leave in one burst, waking ZeroMQ's I/O
    thread once rather than per message."""


class BatchEnd(_Frozen, frozen=True):
    """The batch `BatchStart` opened is over: its placement runs, and its sets leave."""


class TasksFetched(_Frozen, frozen=True):
    """A task query ended, or a watching source saw a change: the list (task id -> entry),
    or None and why it failed. (A list equal to the last one is no event at all.)"""

    tasks: Mapping[str, TaskEntry] | None
    error: str | None
    reset: bool


class RoleChanged(_Frozen, frozen=True):
    """HA: the election's latest decision (see ha.Role)."""

    role: Role


class Command(_Frozen, frozen=True):
    """A control verb that changes state: drain | undrain | query | shutdown."""

    verb: str
    args: Mapping[str, Any]


class PeerGone(_Frozen, frozen=True):
    """A send to ``identity`` found no such connection: that worker process is gone."""

    identity: bytes


class Tick(_Frozen, frozen=True):
    """Time passed: due timers fire, and a leader past its deadline stops acting.

    ``read_until``: the last time the daemon found no report waiting (None: now). Reports sent
    after it may still wait unread, so a worker's silence is judged as of then (but at most
    half a lease behind): a supervisor behind on reading does not take its backlog for dead
    workers, and one that never catches up still sees deaths."""

    read_until: float | None = None


class Continue(_Frozen, frozen=True):
    """The loop has read what was waiting: run the next slice of work that is cut into slices
    (the warm-up's rebuild, while `SupervisorCore.busy`)."""


class Stalled(_Frozen, frozen=True):
    """The daemon spent ``seconds`` in one step without reading a report (a full placement
    at a million tasks, a swapped-out process): reports sent meanwhile wait unread, so no
    worker may count as silent for lease + margin from now."""

    seconds: float


Event = (Report | RawReport | BatchStart | BatchEnd | TasksFetched | RoleChanged | Command
         | PeerGone | Tick | Continue | Stalled)

# -- actions -----------------------------------------------------------------------------------


class Send(_Frozen, frozen=True):
    identity: bytes
    message: Instructions | Renewal | Refusal


class Fetch(_Frozen, frozen=True):
    """Query the task source (``reset``: the first query after the warm-up)."""

    reset: bool


class PersistEpoch(_Frozen, frozen=True):
    epoch: int


class Stop(_Frozen, frozen=True):
    reason: str


class Heard(_Frozen, frozen=True):
    """HA: how many workers this supervisor hears now (supervisor/hearing.py), for the election
    thread to publish and compare."""

    count: int


class Log(_Frozen, frozen=True):
    """A line for the daemon's log (the core does no I/O)."""

    level: str  # debug | info | warning | error
    event: str
    fields: Mapping[str, Any] = msgspec.field(default_factory=dict)


Action = Send | Fetch | PersistEpoch | Stop | Log | Heard
