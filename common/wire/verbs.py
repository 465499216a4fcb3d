"""The control verbs as data: names, arguments, help, and whether a verb changes state. One
table for `corralctl` (which builds its commands from it), the supervisor (which maps each name
to what runs it: supervisor/verbs.py) and tests. Requests are checked against it by
`check_args`; errors have a fixed shape (a `ControlError` with a stable code, protocol.ERR_*).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .ids import bad_char
from .protocol import MAX_ID_CHARS, MAX_TEXT_CHARS

MAX_PAGE = 10_000  # rows per answer: a whole 100,000-worker fleet would not fit in a frame


@dataclass(frozen=True)
class Arg:
    name: str
    kind: type  # str, bool or int
    help: str
    positional: bool = False
    required: bool = False
    minimum: int | None = None  # for ints
    text: bool = False  # free text (at most MAX_TEXT_CHARS), not an id (MAX_ID_CHARS)


@dataclass(frozen=True)
class Verb:
    name: str
    help: str
    args: tuple[Arg, ...] = ()
    mutating: bool = False


_WORKER = Arg("worker", str, "the worker id", positional=True, required=True)
_LIMIT = Arg("limit", int, f"at most this many rows (capped at {MAX_PAGE}; the answer's "
             "`next` continues)", minimum=1)
_AFTER = Arg("after", str, "start after this id (the `next` of the previous page)")

VERBS: dict[str, Verb] = {
    v.name: v
    for v in (
        Verb("status", "phase, epoch, balance and counts of workers and tasks"),
        Verb("workers", "workers: state, load, last report, zone (paged; filter by state or "
             "zone)",
             args=(_LIMIT, _AFTER,
                   Arg("state", str, "only workers in this state (ready, inactive, drained, "
                       "starting, lame_duck, handing_over)"),
                   Arg("zone", str, "only workers in this zone or below it (eu-1 matches "
                       "eu-1/rack-7)"))),
        Verb("tasks", "tasks with owners, fencing tokens and why any are pending (paged)",
             args=(Arg("worker", str, "only this worker's tasks"),
                   Arg("pending", bool, "only tasks short of replicas"),
                   Arg("handoffs", bool, "only tasks in a make-before-break hand-off"),
                   Arg("task", str, "only tasks whose id starts with this"), _LIMIT, _AFTER)),
        Verb("assignments", "task -> workers, with the assignment version (paged)",
             args=(Arg("task", str, "only tasks whose id starts with this"), _LIMIT, _AFTER)),
        Verb("map", "the request-routing map: task -> serving owners, worker -> serve address "
             "and state (nothing when --if-newer-than is current)",
             args=(Arg("if_newer_than", int, "the map version the caller holds", minimum=0),
                   Arg("epoch", int, "the epoch of the map the caller holds", minimum=0))),
        Verb("events", "the change feed: what happened after a cursor (joins, timeouts, moves "
             "and why, hand-offs, task lists, HA roles, refusals)",
             args=(Arg("after", int, "the cursor of the last answer (omit: the newest events)",
                       minimum=0),
                   Arg("limit", int, "at most this many events", minimum=1))),
        Verb("counters", "the supervisor's counters (what --metrics exports)"),
        Verb("drain", "move a worker's tasks elsewhere (make-before-break); it takes no new ones",
             (_WORKER,), True),
        Verb("undrain", "let a drained worker take tasks again", (_WORKER,), True),
        Verb("forget", "drop a silent (inactive) worker's record now, instead of after "
             "--forget-after", (_WORKER,), True),
        Verb("query", "query the task source now", (), True),
        Verb("shutdown", "stop the supervisor (workers keep their tasks until their lease ends)",
             (Arg("reason", str, "why, for the log", text=True),), True),
    )
}
# What a standby answers itself; everything else is the leader's (ERR_NOT_LEADER names it).
STANDBY_VERBS = frozenset({"status", "counters", "shutdown"})


def check_args(verb: Verb, args: dict[str, Any]) -> dict[str, Any]:
    """``args`` if they fit the verb's table; ValueError naming what does not."""
    known = {a.name: a for a in verb.args}
    extra = sorted(set(args) - set(known))
    if extra:
        raise ValueError(f"{verb.name}: unknown argument(s) {', '.join(extra)}")
    for a in verb.args:
        v = args.get(a.name)
        if v is None:
            if a.required:
                raise ValueError(f"{verb.name}: {a.name} is required")
            continue
        if (not isinstance(v, a.kind) or (a.kind is str and not v)
                or (a.kind is int and isinstance(v, bool))):
            kind = "an integer" if a.kind is int else f"a {a.kind.__name__}"
            raise ValueError(f"{verb.name}: {a.name} must be {kind}")
        if a.minimum is not None and isinstance(v, int) and v < a.minimum:
            raise ValueError(f"{verb.name}: {a.name} must be at least {a.minimum}")
        if isinstance(v, str):
            limit = MAX_TEXT_CHARS if a.text else MAX_ID_CHARS
            if len(v) > limit:
                raise ValueError(f"{verb.name}: {a.name} must be at most {limit} characters, "
                                 f"got {len(v)}")
            ch = None if a.text else bad_char(v)
            if ch is not None:
                raise ValueError(f"{verb.name}: {a.name} holds {ch}, which no id may hold")
    return args
