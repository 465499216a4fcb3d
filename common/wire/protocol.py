"""Every message corral sends, defined once: each class is the domain type *and* its wire schema.

Worker → supervisor: `Status` (one-way, every report interval and after any change).
Supervisor → worker: `Instructions` (an instruction set: reset / add / remove, plus the lease
renewal, the fencing token and spec of every task it adds) and `Refusal` (the worker is not
accepted, e.g. a second live worker with a taken id).
CLI ↔ supervisor: `ControlRequest` / `ControlReply`, with a fixed-shape `ControlError`.
Client ↔ serving worker: `Request` / `Reply` (request routing, docs/routing.md); every reply
carries the worker's load report.

The classes are frozen msgspec structs. The bounds in their annotations (`Id`, `UInt`, …) are
the wire's rules: `codec.decode` checks every one of them while it parses, in C, and builds the
instance directly; the constructor, used by our own code, does not check (Python's own types
are trusted). Containers are plain dicts and tuples for speed on the hot path; treat them as
read-only. ``codec`` holds the envelope and the few checks msgspec cannot express.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Final, Literal

import msgspec

PROTOCOL_VERSION = 2  # 2: fencing tokens in `running`, specs, zones and labels, set parts

MAX_FRAME_BYTES = 16 * 1024 * 1024
MAX_ID_CHARS = 256  # worker ids, task ids, verbs, addresses, zones, label keys and values
MAX_TASKS = 200_000  # entries in one list or map of tasks
MAX_TEXT_CHARS = 4096  # free text (reasons, messages)
MAX_SPEC_BYTES = 64 * 1024  # one task's spec, as JSON text
MAX_LABELS = 64
MAX_PARTS = 65_536  # parts of one instruction set
MAX_UINT = 2**63 - 1
MAX_NUMBER = 1e15  # times (seconds of a monotonic clock) and other plain numbers
MAX_LOAD = 100_000.0  # a worker's max_load: half the tasks one report can list
MAX_UTILIZATION = 1e3  # a serving worker's utilization (may exceed 1 with several cores)
MAX_RATE = 1e12  # a serving worker's qps and errors per second

# -- fencing tokens ----------------------------------------------------------------------------
# A token is the supervisor's epoch in the high bits and a per-task assignment counter in the
# low ones, so it only grows for a task across owners, epochs and supervisor restarts: every
# new epoch is larger than the last, and within one the counter counts up. An epoch is at most
# MAX_EPOCH, so that every token fits the wire's 63 bits; HA leaders' epochs start at
# HA_EPOCH_BASE (above any a state file may hold: MAX_STATE_EPOCH).
TOKEN_BITS = 22  # up to ~4 million assignments of one task within one supervisor epoch
MAX_EPOCH = MAX_UINT >> TOKEN_BITS  # 2**41 - 1
HA_EPOCH_BASE = 1 << 40
MAX_STATE_EPOCH = HA_EPOCH_BASE - (1 << 20) - 1  # room for a million restarts below HA's

UInt = Annotated[int, msgspec.Meta(ge=0, le=MAX_UINT)]
Num = Annotated[float, msgspec.Meta(ge=0, le=MAX_NUMBER)]
Epoch = Annotated[int, msgspec.Meta(ge=0, le=MAX_EPOCH)]
Load = Annotated[float, msgspec.Meta(ge=0, le=MAX_LOAD)]
Utilization = Annotated[float, msgspec.Meta(ge=0, le=MAX_UTILIZATION)]
Rate = Annotated[float, msgspec.Meta(ge=0, le=MAX_RATE)]
Id = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_CHARS)]
Text = Annotated[str, msgspec.Meta(max_length=MAX_TEXT_CHARS)]
Zone = Annotated[str, msgspec.Meta(max_length=MAX_ID_CHARS)]
SpecText = Annotated[str, msgspec.Meta(max_length=MAX_SPEC_BYTES)]
TaskMap = Annotated[dict[Id, UInt], msgspec.Meta(max_length=MAX_TASKS)]
TaskList = Annotated[tuple[Id, ...], msgspec.Meta(max_length=MAX_TASKS)]
Labels = Annotated[dict[Id, Id], msgspec.Meta(max_length=MAX_LABELS)]
Specs = Annotated[dict[Id, SpecText], msgspec.Meta(max_length=MAX_TASKS)]
ReplyCode = Literal["ok", "not_owner", "error"]
MAX_ERROR_CHARS = 200  # a task's last error in a report: one short line
# One line of text: no control character (a newline, an escape) may come from a report.
ErrorText = Annotated[str, msgspec.Meta(max_length=MAX_ERROR_CHARS,
                                        pattern=r"\A[^\x00-\x1f\x7f]*\Z")]
LastErrors = Annotated[dict[Id, tuple[Num, ErrorText]], msgspec.Meta(max_length=MAX_TASKS)]

def make_token(epoch: int, n: int) -> int:
    """The fencing token of a task's ``n``-th assignment under ``epoch``; ValueError for an
    epoch out of range (its tokens would not fit the wire).

    >>> make_token(3, 1) > make_token(2, 4_000_000) > make_token(2, 1)
    True
    >>> token_epoch(make_token(7, 12))
    7
    """
    if not 0 <= epoch <= MAX_EPOCH:
        raise ValueError(f"epoch {epoch} is outside 0..{MAX_EPOCH}")
    return (epoch << TOKEN_BITS) | min(n, (1 << TOKEN_BITS) - 1)


def token_epoch(token: int) -> int:
    return token >> TOKEN_BITS


class WorkerState(StrEnum):
    """What a worker says about itself in its reports.

    starting -> ready        its handler is ready (``ready()`` or ``--ready-after``)
    ready -> lame_duck       it was asked to stop (SIGTERM): no new tasks, drains the ones it has
    starting -> lame_duck    stopped before it was ever ready
    any -> handing_over      SIGUSR2 (``exec``): its last report; it leaves its tasks running
                             to its lease keeper, and the next process with its id adopts them
    """

    STARTING = "starting"
    READY = "ready"
    LAME_DUCK = "lame_duck"
    HANDING_OVER = "handing_over"


class _Message(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True,
               gc=False):
    """Frozen, unknown fields refused, and fields at their default left off the wire. Not
    tracked by Python's cycle collector (``gc=False``): a message is a tree of plain values
    and can be in no cycle, and the collector's passes over every report's objects cost a
    fleet-scale supervisor a quarter of its CPU (BENCHMARKS.md)."""


class Status(_Message, frozen=True):
    """A worker's report of itself. Self-contained: a lost one is replaced by the next.

    ``running`` maps each task the worker holds to the fencing token of the assignment it runs
    it under (`make_token`; the epoch is ``token_epoch(token)``). ``sent_at`` is the worker's
    monotonic clock when it sent this report; the supervisor echoes it back so the worker can
    count its lease from it. ``applied`` is the last instruction set it applied, as
    ``(epoch, seq)``. ``failures`` counts recent failures per failing task. ``lease_held`` is
    False while the worker has no valid lease (never had one, or it lapsed). ``utilization``,
    ``qps`` and ``errors`` are a serving worker's load (0 otherwise). ``zone`` (a failure
    domain, hierarchical with "/") and ``labels`` are fixed for the incarnation. ``starting``
    lists the held tasks that are not running now — waiting to start (no lease yet) or in
    restart backoff: a task covers its assignment only once it runs. ``drained`` repeats what
    the supervisor's sets say (an operator drained this worker), for the next supervisor.
    ``last_errors`` gives each task in ``failures`` its last failure: when (the worker's
    monotonic clock) and why, one line of at most `MAX_ERROR_CHARS`.
    """

    worker: Id
    incarnation: UInt
    seq: UInt
    sent_at: Num
    max_load: Load
    running: TaskMap
    state: WorkerState = WorkerState.READY
    utilization: Utilization = 0.0
    qps: Rate = 0.0
    errors: Rate = 0.0
    applied: tuple[Epoch, UInt] = (0, 0)
    serve: Id | None = None
    failures: TaskMap = msgspec.field(default_factory=dict)
    lease_held: bool = False
    zone: Zone = ""
    labels: Labels = msgspec.field(default_factory=dict)
    starting: TaskList = ()
    drained: bool = False
    last_errors: LastErrors = msgspec.field(default_factory=dict)


class StatusGlance(_Message, frozen=True):
    """A `Status` frame read with its maps left as encoded bytes (not a message of its own:
    `codec.glance_status`). A settled worker's report is the one it sent last time; the
    supervisor tells that from these fields and the maps' bytes, and builds the maps' strings
    only for a report that changed (`codec.decode_as(frame, Status)`, fully checked then).
    The fields are `Status`'s, with the same checks."""

    worker: Id
    incarnation: UInt
    seq: UInt
    sent_at: Num
    max_load: Load
    running: msgspec.Raw
    state: WorkerState = WorkerState.READY
    utilization: Utilization = 0.0
    qps: Rate = 0.0
    errors: Rate = 0.0
    applied: tuple[Epoch, UInt] = (0, 0)
    serve: Id | None = None
    failures: msgspec.Raw = msgspec.Raw(b"\x80")  # an empty map
    lease_held: bool = False
    zone: Zone = ""
    labels: msgspec.Raw = msgspec.Raw(b"\x80")
    starting: msgspec.Raw = msgspec.Raw(b"\x90")  # an empty array
    drained: bool = False
    last_errors: msgspec.Raw = msgspec.Raw(b"\x80")  # changes only with ``failures``


class Instructions(_Message, frozen=True):
    """One instruction set for one worker incarnation; every one renews the worker's lease.

    Applied in ``(epoch, seq)`` order; a worker drops anything not newer than what it applied.
    ``reset`` means: the worker should run exactly ``add`` (tasks in both keep running, the
    rest stop, the missing start) — only sent after a supervisor restart or to reconcile.
    The lease is counted by the worker from ``answers_sent_at``, the send time of the report
    this set answers (its own clock), so it always ends before the supervisor's count does.

    ``drained`` tells the worker that an operator drained it: it reports that back, so a
    restarted supervisor (or a new HA leader) keeps the drain. ``tokens`` gives the fencing
    token of every task in ``add``; ``specs`` the spec (a JSON
    object, as text) of those that have one. A task already held that comes with another
    spec is restarted with the new one. A big set travels in ``parts`` frames with the same
    ``(epoch, seq)``, numbered by ``part`` from 0; the worker applies it when it has them all.
    """

    epoch: Epoch
    seq: UInt
    incarnation: UInt
    lease: Num
    answers_seq: UInt
    answers_sent_at: Num
    reset: bool = False
    add: TaskList = ()
    remove: TaskList = ()
    tokens: TaskMap = msgspec.field(default_factory=dict)
    specs: Specs = msgspec.field(default_factory=dict)
    part: UInt = 0
    parts: Annotated[int, msgspec.Meta(ge=1, le=MAX_PARTS)] = 1
    drained: bool = False


class Renewal(_Message, frozen=True):
    """An instruction set with nothing in it — a bare lease renewal — as the supervisor builds
    it (most of what it sends: one per report). On the wire it is an `Instructions` with its
    defaults left off (the same kind, the same bytes), and a worker decodes it as one. Built
    this way it makes no empty containers (less than half the cost of an `Instructions`).
    (The fields repeat `Instructions`' first six and its last on purpose: the two must encode
    alike, which tests/unit/test_protocol.py checks.)"""

    epoch: Epoch
    seq: UInt
    incarnation: UInt
    lease: Num
    answers_seq: UInt
    answers_sent_at: Num
    drained: bool = False


class Refusal(_Message, frozen=True):
    """The supervisor will not accept this worker incarnation (``code`` says why)."""

    epoch: Epoch
    incarnation: UInt
    code: Id
    reason: Text


class ControlRequest(_Message, frozen=True):
    """A control verb for the supervisor (see the verb registry in the supervisor package).
    ``args`` hold plain values only (`codec` checks them: depth, finite numbers)."""

    request_id: UInt
    verb: Id
    args: dict[Id, Any] = msgspec.field(default_factory=dict)


class ControlError(_Message, frozen=True):
    """The fixed shape of every control error: a stable ``code`` and a sentence."""

    code: Id
    message: Text


class ControlReply(_Message, frozen=True):
    """The answer to one `ControlRequest`: ``result`` when ``error`` is None."""

    request_id: UInt
    result: Any = None
    error: ControlError | None = None


class Request(_Message, frozen=True):
    """A request for a serving worker (a client's `Router` → the worker's ``--serve`` socket).

    ``task`` is the task it is for — the worker answers it only while it owns that task — or
    None for any worker (``call_any``). ``body`` is the application's: any msgpack value.
    ``id`` is the client's own number for it, echoed in the reply.
    """

    id: UInt
    task: Id | None
    body: Any = None


class Reply(_Message, frozen=True):
    """A serving worker's answer to one `Request`, with its load report.

    ``code``: ``ok`` (``body`` is the handler's reply), ``not_owner`` (the worker did not run
    the handler, or dropped its result: it does not own the task — the client should refresh
    its map and go elsewhere), ``error`` (the handler raised; ``error`` says what).
    ``version`` is the assignment the worker holds: the ``(epoch, seq)`` of the last instruction
    set it applied. ``qps``, ``utilization`` and ``errors`` (per second) are measured over the
    worker's recent past, from all its clients; ``lame_duck`` asks for no new requests.
    """

    id: UInt
    code: ReplyCode = "ok"
    body: Any = None
    error: Text | None = None
    version: tuple[Epoch, UInt] = (0, 0)
    # Any number the wire carries: the client ignores (and counts) figures no real load
    # produces, and still takes the reply (`LoadReport.checked`).
    qps: Num = 0.0
    utilization: Num = 0.0
    errors: Num = 0.0
    lame_duck: bool = False


# Reply codes.
REPLY_OK: Final = "ok"
REPLY_NOT_OWNER: Final = "not_owner"
REPLY_ERROR: Final = "error"

# Error codes of ControlError; scripts may rely on them.
ERR_BAD_REQUEST = "bad_request"
ERR_UNKNOWN_VERB = "unknown_verb"
ERR_NOT_FOUND = "not_found"
ERR_NOT_LEADER = "not_leader"  # a standby: ask the leader (the message names it when known)
ERR_INTERNAL = "internal"

# Refusal codes.
REFUSE_DUPLICATE_ID = "duplicate_id"
REFUSE_UNAUTHORIZED = "unauthorized"

Message = Status | Instructions | Refusal | ControlRequest | ControlReply | Request | Reply

# The kind each message travels under, in the envelope ``[version, kind, body]``.
KINDS: dict[type[Message], str] = {
    Status: "status", Instructions: "instructions", Refusal: "refusal",
    ControlRequest: "control_request", ControlReply: "control_reply",
    Request: "request", Reply: "reply",
}
