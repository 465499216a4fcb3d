"""Every control verb, defined once. `corralctl` builds its commands from this registry, the
daemon answers control requests and signals through `call`, and tests use it directly.

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
    ERR_UNKNOWN_VERB,
    ControlError,
)

from . import views
from .events import Action, Command

if TYPE_CHECKING:
    from .core import SupervisorCore


@dataclass(frozen=True)
class Arg:
    name: str
    kind: type  # str, bool or int
    help: str
    positional: bool = False
    required: bool = False


@dataclass(frozen=True)
class Verb:
    name: str
    help: str
    run: Callable[[SupervisorCore, dict[str, Any], float], tuple[Any, list[Action]]]
    args: tuple[Arg, ...] = ()
    mutating: bool = False


def _view(fn: Callable[..., Any]) -> Callable[[SupervisorCore, dict[str, Any], float], Any]:
    def run(core: SupervisorCore, args: dict[str, Any], now: float) -> tuple[Any, list[Action]]:
        return fn(core, args, now), []

    return run


def _command(verb: str, result: Callable[[dict[str, Any]], Any]) -> Callable[..., Any]:
    def run(core: SupervisorCore, args: dict[str, Any], now: float) -> tuple[Any, list[Action]]:
        actions = core.handle(Command(verb, args), now)
        return result(args), actions

    return run


_WORKER = Arg("worker", str, "the worker id", positional=True, required=True)

VERBS: dict[str, Verb] = {
    v.name: v
    for v in (
        Verb("status", "phase, epoch and counts of workers and tasks",
             _view(lambda c, a, now: views.status(c, now))),
        Verb("workers", "every worker: state, load, last report",
             _view(lambda c, a, now: views.workers(c, now))),
        Verb("tasks", "tasks with their owners (--worker W: one worker's; --pending: short ones)",
             _view(lambda c, a, now: views.tasks(c, a.get("worker"), bool(a.get("pending")))),
             args=(Arg("worker", str, "only this worker's tasks"),
                   Arg("pending", bool, "only tasks short of replicas"))),
        Verb("assignments", "task -> workers, with the assignment version",
             _view(lambda c, a, now: views.assignments(c))),
        Verb("map", "the request-routing map: task -> serving owners, worker -> serve address "
             "and state (nothing when --if-newer-than is current)",
             _view(lambda c, a, now: views.route_map(c, a.get("if_newer_than"))),
             args=(Arg("if_newer_than", int, "the map version the caller holds"),)),
        Verb("counters", "the supervisor's counters (what --metrics exports)",
             _view(lambda c, a, now: c.counters.as_dict())),
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
    return args


def call(
    core: SupervisorCore, verb: str, args: dict[str, Any], now: float
) -> tuple[Any, ControlError | None, list[Action]]:
    """Run a verb: ``(result, None, actions)`` or ``(None, error, [])``. Never raises."""
    v = VERBS.get(verb)
    if v is None:
        return None, ControlError(ERR_UNKNOWN_VERB, f"unknown verb {verb!r}; known: "
                                  f"{', '.join(VERBS)}"), []
    try:
        result, actions = v.run(core, _check_args(v, args), now)
    except ValueError as exc:
        return None, ControlError(ERR_BAD_REQUEST, str(exc)), []
    except LookupError as exc:
        return None, ControlError(ERR_NOT_FOUND, str(exc.args[0] if exc.args else exc)), []
    except Exception as exc:  # a bug must not take the daemon down; it is reported instead
        core.log.exception("control verb failed", verb=verb)
        return None, ControlError(ERR_INTERNAL, f"{type(exc).__name__}: {exc}"), []
    return result, None, actions
