"""Every message corral sends, as frozen dataclasses. The wire format lives in `codec`.

Worker → supervisor: `Status` (one-way, every report interval and after any change).
Supervisor → worker: `Instructions` (an instruction set: reset / add / remove, plus the lease
renewal) and `Refusal` (the worker is not accepted, e.g. a second live worker with a taken id).
CLI ↔ supervisor: `ControlRequest` / `ControlReply`, with a fixed-shape `ControlError`.
Client ↔ serving worker: `Request` / `Reply` (request routing, docs/routing.md); every reply
carries the worker's load report.

Containers are plain dicts and tuples for speed on the hot path; treat them as read-only.
The classes are frozen but deliberately not ``slots``: the decoder builds an instance by
installing the validated field dict in one call, which is ~10x cheaper than a frozen
``__init__`` (14 ``object.__setattr__`` calls) on the supervisor's hottest path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

PROTOCOL_VERSION = 1


class WorkerState(StrEnum):
    """What a worker says about itself in its reports.

    starting -> ready        its handler is ready (``ready()`` or ``--ready-after``)
    ready -> lame_duck       it was asked to stop (SIGTERM): no new tasks, drains the ones it has
    starting -> lame_duck    stopped before it was ever ready
    """

    STARTING = "starting"
    READY = "ready"
    LAME_DUCK = "lame_duck"


@dataclass(frozen=True)
class Status:
    """A worker's report of itself. Self-contained: a lost one is replaced by the next.

    ``running`` maps each task the worker runs to the assignment epoch it was given under.
    ``sent_at`` is the worker's monotonic clock when it sent this report; the supervisor echoes
    it back so the worker can count its lease from it. ``applied`` is the last instruction set
    it applied, as ``(epoch, seq)``. ``failures`` counts recent failures per failing task.
    ``lease_held`` is False while the worker has no valid lease (never had one, or it lapsed).
    """

    worker: str
    incarnation: int
    seq: int
    sent_at: float
    max_load: float
    running: dict[str, int]
    state: WorkerState = WorkerState.READY
    utilization: float = 0.0
    qps: float = 0.0
    errors: float = 0.0
    applied: tuple[int, int] = (0, 0)
    serve: str | None = None
    failures: dict[str, int] = field(default_factory=dict)
    lease_held: bool = False


@dataclass(frozen=True)
class Instructions:
    """One instruction set for one worker incarnation; every one renews the worker's lease.

    Applied in ``(epoch, seq)`` order; a worker drops anything not newer than what it applied.
    ``reset`` means: the worker should run exactly ``add`` (tasks in both keep running, the
    rest stop, the missing start) — only sent after a supervisor restart or to reconcile.
    The lease is counted by the worker from ``answers_sent_at``, the send time of the report
    this set answers (its own clock), so it always ends before the supervisor's count does.
    """

    epoch: int
    seq: int
    incarnation: int
    lease: float
    answers_seq: int
    answers_sent_at: float
    reset: bool = False
    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refusal:
    """The supervisor will not accept this worker incarnation (``code`` says why)."""

    epoch: int
    incarnation: int
    code: str
    reason: str


@dataclass(frozen=True)
class ControlRequest:
    """A control verb for the supervisor (see the verb registry in the supervisor package)."""

    request_id: int
    verb: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ControlError:
    """The fixed shape of every control error: a stable ``code`` and a sentence."""

    code: str
    message: str


@dataclass(frozen=True)
class ControlReply:
    """The answer to one `ControlRequest`: ``result`` when ``error`` is None."""

    request_id: int
    result: Any = None
    error: ControlError | None = None


@dataclass(frozen=True)
class Request:
    """A request for a serving worker (a client's `Router` → the worker's ``--serve`` socket).

    ``task`` is the task it is for — the worker answers it only while it owns that task — or
    None for any worker (``call_any``). ``body`` is the application's: any msgpack value.
    ``id`` is the client's own number for it, echoed in the reply.
    """

    id: int
    task: str | None
    body: Any = None


@dataclass(frozen=True)
class Reply:
    """A serving worker's answer to one `Request`, with its load report.

    ``code``: ``ok`` (``body`` is the handler's reply), ``not_owner`` (the worker did not run
    the handler, or dropped its result: it does not own the task — the client should refresh
    its map and go elsewhere), ``error`` (the handler raised; ``error`` says what).
    ``version`` is the assignment the worker holds: the ``(epoch, seq)`` of the last instruction
    set it applied. ``qps``, ``utilization`` and ``errors`` (per second) are measured over the
    worker's recent past, from all its clients; ``lame_duck`` asks for no new requests.
    """

    id: int
    code: str = "ok"
    body: Any = None
    error: str | None = None
    version: tuple[int, int] = (0, 0)
    qps: float = 0.0
    utilization: float = 0.0
    errors: float = 0.0
    lame_duck: bool = False


# Reply codes.
REPLY_OK = "ok"
REPLY_NOT_OWNER = "not_owner"
REPLY_ERROR = "error"

# Error codes of ControlError; scripts may rely on them.
ERR_BAD_REQUEST = "bad_request"
ERR_UNKNOWN_VERB = "unknown_verb"
ERR_NOT_FOUND = "not_found"
ERR_NOT_LEADER = "not_leader"
ERR_INTERNAL = "internal"

# Refusal codes.
REFUSE_DUPLICATE_ID = "duplicate_id"
REFUSE_UNAUTHORIZED = "unauthorized"

Message = Status | Instructions | Refusal | ControlRequest | ControlReply | Request | Reply
