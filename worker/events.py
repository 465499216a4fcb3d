"""What goes into the worker state machine (events) and what comes out (actions).

The I/O loop turns sockets, signals, child processes and the clock into events, feeds them to
`WorkerMachine.handle(event, now)`, and carries out the actions it returns. Executing a
`StartTask` or `StopTask` yields further events (`TaskStarted`, `TaskFailed`, `TaskStopped`),
which the loop feeds back before it looks at anything else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from corral.common.wire.protocol import Instructions, Refusal, Status

from .sets import Grant

# -- events ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tick:
    """Time has passed: due deadlines fire, and a report goes out if one is due or anything
    changed since the last one. The loop sends one after every batch of other events, so many
    changes in one wake-up make one report."""


@dataclass(frozen=True)
class Received:
    """A decoded message from the supervisor."""

    message: Instructions | Refusal


@dataclass(frozen=True)
class StopRequested:
    """SIGTERM or SIGINT: the first one drains (lame duck), the second stops at once."""


@dataclass(frozen=True)
class HandOverRequested:
    """SIGUSR2 with ``exec``: leave the tasks running to the lease keeper, for the next agent
    of this id, and exit (with another handler the loop sends `StopRequested` instead)."""


@dataclass(frozen=True)
class Adopted:
    """At start: the lease keeper handed over ``grants`` (task -> its `Grant`), processes a
    previous agent of this id left running, under a lease that lasts until ``lease_expires``."""

    grants: Mapping[str, Grant]
    lease_expires: float


@dataclass(frozen=True)
class HandlerReady:
    """The handler's ``ready()`` returned true."""


@dataclass(frozen=True)
class TaskStarted:
    """The handler started the task."""

    task: str


@dataclass(frozen=True)
class TaskFailed:
    """The task could not be started, or it ended without being asked to. ``by_keeper``: the
    lease keeper ended it and writes its stop line (the agent does not)."""

    task: str
    reason: str
    by_keeper: bool = False


@dataclass(frozen=True)
class TaskStopped:
    """A task the machine asked to stop has really stopped (``by_keeper``: see `TaskFailed`)."""

    task: str
    by_keeper: bool = False


@dataclass(frozen=True)
class KeeperLost:
    """The lease keeper process is gone (``exec``): nothing would stop the tasks if the agent
    froze now, so the agent stops them and exits with `EXIT_KEEPER_LOST`."""

    reason: str


Event = (Tick | Received | StopRequested | HandOverRequested | Adopted | HandlerReady
         | TaskStarted | TaskFailed | TaskStopped | KeeperLost)

# -- actions -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StartTask:
    """Start ``task`` under the assignment whose fencing token is ``token``, with ``spec`` (the
    task's spec as canonical JSON text, None when it has none)."""

    task: str
    token: int = 0
    spec: str | None = None


@dataclass(frozen=True)
class StopTask:
    """Stop ``task``; ``lapsed``: because the lease lapsed (with ``exec`` the keeper acts on
    the same deadline: a group it is ending already is its stop, and its journal line)."""

    task: str
    lapsed: bool = False


@dataclass(frozen=True)
class SendStatus:
    status: Status


@dataclass(frozen=True)
class LeaseExtended:
    """The lease now lasts until ``expires`` (the loop's monotonic clock). Emitted before any
    `StartTask` it allows, so the lease keeper always knows a deadline that covers every task
    it may have to kill."""

    expires: float


@dataclass(frozen=True)
class Reconnect:
    """The lease lapsed and stayed lapsed for half of it: no answer came back to the reports,
    whatever path carried them. The loop opens every connection to the supervisors again: a
    path that acknowledges what it is sent and holds it (a proxy, a middlebox) is invisible to
    TCP, and no ZMTP heartbeat is kept (they cost the supervisor more than the reports do)."""


@dataclass(frozen=True)
class HandOver:
    """Leave every task running to the lease keeper (after the last report, which says
    ``handing_over``); the `Exit` that follows stops nothing."""


@dataclass(frozen=True)
class Log:
    """A line for the operator; the machine decides what is worth saying, the loop says it."""

    level: str  # debug | info | warning | error
    event: str
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Exit:
    """Every task is stopped: the process ends with this status."""

    code: int


Action = StartTask | StopTask | SendStatus | LeaseExtended | Reconnect | HandOver | Log | Exit

# Exit statuses of `corral-worker run`.
EXIT_OK = 0
EXIT_ERROR = 1  # an unexpected error (logged with its traceback)
EXIT_CONFIG = 2  # a bad flag, variable or file key, or a handler that cannot be loaded
EXIT_REFUSED = 3  # the supervisor refused this worker (e.g. its id is taken)
EXIT_KEEPER_LOST = 4  # exec: the lease keeper process died; the tasks were stopped first
