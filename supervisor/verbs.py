"""Every control verb, defined once. `corralctl` builds its commands from this registry, the
daemon answers control requests and signals through `call`, and tests use it directly.

`corralctl` is a process per command and needs only the table: the views and events a verb
runs with are imported when one runs (they took a fifth of its start-up).

Errors have a fixed shape: a `ControlError` with a stable code (protocol.ERR_*) and a sentence.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from corral.common.protocol import (
    ERR_BAD_REQUEST,
    ERR_INTERNAL,
    ERR_NOT_FOUND,
    ERR_NOT_LEADER,
    ERR_UNKNOWN_VERB,
    ControlError,
)

if TYPE_CHECKING:
    from types import ModuleType

    from .core import SupervisorCore
    from .events import Action

MAX_PAGE = 10_000  # rows per answer: a whole 100,000-worker fleet would not fit in a frame


@dataclass(frozen=True)
class Arg:
    name: str
    kind: type  # str, bool or int
    help: str
    positional: bool = False
    required: bool = False
    minimum: int | None = None  # for ints


@dataclass(frozen=True)
class Verb:
    name: str
    help: str
    run: Callable[[SupervisorCore, dict[str, Any], float], tuple[Any, list[Action]]]
    args: tuple[Arg, ...] = ()
    mutating: bool = False


def _view(fn: Callable[..., Any]) -> Callable[[SupervisorCore, dict[str, Any], float], Any]:
    """``fn(views, queries, args, now)``: a read-only verb."""
    def run(core: SupervisorCore, args: dict[str, Any], now: float) -> tuple[Any, list[Action]]:
        return fn(_views(), core.queries, args, now), []

    return run


def _command(verb: str, result: Callable[[dict[str, Any]], Any]) -> Callable[..., Any]:
    def run(core: SupervisorCore, args: dict[str, Any], now: float) -> tuple[Any, list[Action]]:
        from .events import Command

        actions = core.handle(Command(verb, args), now)
        return result(args), actions

    return run


_WORKER = Arg("worker", str, "the worker id", positional=True, required=True)
_LIMIT = Arg("limit", int, f"at most this many rows (capped at {MAX_PAGE}; the answer's "
             "`next` continues)", minimum=1)
_AFTER = Arg("after", str, "start after this id (the `next` of the previous page)")

VERBS: dict[str, Verb] = {
    v.name: v
    for v in (
        Verb("status", "phase, epoch, balance and counts of workers and tasks",
             _view(lambda v, q, a, now: v.status(q, now))),
        Verb("workers", "workers: state, load, last report, zone (paged; filter by state or "
             "zone)",
             _view(lambda v, q, a, now: v.workers(q, now, a.get("limit"), a.get("after"),
                                                   a.get("state"), a.get("zone"))),
             args=(_LIMIT, _AFTER,
                   Arg("state", str, "only workers in this state (ready, inactive, drained, "
                       "starting, lame_duck)"),
                   Arg("zone", str, "only workers in this zone or below it (eu-1 matches "
                       "eu-1/rack-7)"))),
        Verb("tasks", "tasks with owners, fencing tokens and why any are pending (paged)",
             _view(lambda v, q, a, now: v.tasks(q, a.get("worker"), bool(a.get("pending")),
                                                 a.get("task"), a.get("limit"), a.get("after"),
                                                 bool(a.get("handoffs")))),
             args=(Arg("worker", str, "only this worker's tasks"),
                   Arg("pending", bool, "only tasks short of replicas"),
                   Arg("handoffs", bool, "only tasks in a make-before-break hand-off"),
                   Arg("task", str, "only tasks whose id starts with this"), _LIMIT, _AFTER)),
        Verb("assignments", "task -> workers, with the assignment version (paged)",
             _view(lambda v, q, a, now: v.assignments(q, a.get("task"), a.get("limit"),
                                                       a.get("after"))),
             args=(Arg("task", str, "only tasks whose id starts with this"), _LIMIT, _AFTER)),
        Verb("map", "the request-routing map: task -> serving owners, worker -> serve address "
             "and state (nothing when --if-newer-than is current)",
             _view(lambda v, q, a, now: v.route_map(q, a.get("if_newer_than"),
                                                     a.get("epoch"))),
             args=(Arg("if_newer_than", int, "the map version the caller holds", minimum=0),
                   Arg("epoch", int, "the epoch of the map the caller holds", minimum=0))),
        Verb("events", "the change feed: what happened after a cursor (joins, timeouts, moves "
             "and why, hand-offs, task lists, HA roles, refusals)",
             _view(lambda v, q, a, now: v.events(q, now, a.get("after"), a.get("limit"))),
             args=(Arg("after", int, "the cursor of the last answer (omit: the newest events)",
                       minimum=0),
                   Arg("limit", int, "at most this many events", minimum=1))),
        Verb("counters", "the supervisor's counters (what --metrics exports)",
             _view(lambda v, q, a, now: q.counters())),
        Verb("drain", "move a worker's tasks elsewhere (make-before-break); it takes no new ones",
             _command("drain", lambda a: {"drained": a["worker"]}), (_WORKER,), True),
        Verb("undrain", "let a drained worker take tasks again",
             _command("undrain", lambda a: {"undrained": a["worker"]}), (_WORKER,), True),
        Verb("query", "query the task source now",
             _command("query", lambda a: {"query": "started"}), (), True),
        Verb("shutdown", "stop the supervisor (workers keep their tasks until their lease ends)",
             _command("shutdown", lambda a: {"shutdown": True}),
             (Arg("reason", str, "why, for the log"),), True),
    )
}
# What a standby answers itself; everything else is the leader's (ERR_NOT_LEADER names it).
STANDBY_VERBS = frozenset({"status", "counters", "shutdown"})

# Signals are control verbs too: the daemon's handlers only enqueue these.
SIGNALS: dict[int, tuple[str, dict[str, Any]]] = {
    signal.SIGTERM: ("shutdown", {"reason": "SIGTERM"}),
    signal.SIGINT: ("shutdown", {"reason": "SIGINT"}),
    signal.SIGHUP: ("query", {}),
}


def _check_args(verb: Verb, args: dict[str, Any]) -> dict[str, Any]:
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
    return args


def _not_leader(core: SupervisorCore) -> str:
    role = core.life.role
    info = (role.leader_info or {}) if role is not None and not role.leader else {}
    if info.get("control"):
        return (f"this supervisor is a standby; the leader is {info.get('name')} at "
                f"{info['control']}")
    return "this supervisor is a standby and no leader is known yet"


def _views() -> ModuleType:
    from . import views

    return views


def call(
    core: SupervisorCore, verb: str, args: dict[str, Any], now: float
) -> tuple[Any, ControlError | None, list[Action]]:
    """Run a verb: ``(result, None, actions)`` or ``(None, error, [])``. Never raises."""
    v = VERBS.get(verb)
    if v is None:
        return None, ControlError(ERR_UNKNOWN_VERB, f"unknown verb {verb!r}; known: "
                                  f"{', '.join(VERBS)}"), []
    if not core.life.leader and core.config.ha and verb not in STANDBY_VERBS:
        return None, ControlError(ERR_NOT_LEADER, _not_leader(core)), []
    try:
        result, actions = v.run(core, _check_args(v, args), now)
    except ValueError as exc:
        return None, ControlError(ERR_BAD_REQUEST, str(exc)), []
    except LookupError as exc:
        return None, ControlError(ERR_NOT_FOUND, str(exc.args[0] if exc.args else exc)), []
    except Exception as exc:  # a bug must not take the daemon down; it is reported instead
        from .events import Log

        return None, ControlError(ERR_INTERNAL, f"{type(exc).__name__}: {exc}"), [
            Log("error", "control verb failed", {"verb": verb, "error": repr(exc)})]
    return result, None, actions
