"""What runs each control verb (the table of names, arguments and help is data:
`corral.common.wire.verbs`). The daemon answers control requests and signals through `call`;
tests use it directly. Read-only verbs build their answer from the query API (views.py);
state-changing ones step the core with a `Command`.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corral.common.wire.protocol import (
    ERR_BAD_REQUEST,
    ERR_INTERNAL,
    ERR_NOT_FOUND,
    ERR_NOT_LEADER,
    ERR_UNKNOWN_VERB,
    MAX_TEXT_CHARS,
    ControlError,
)
from corral.common.wire.verbs import STANDBY_VERBS, VERBS, check_args

from . import views
from .events import Action, Command, Log
from .queries import Queries

if TYPE_CHECKING:
    from .core import SupervisorCore

Runner = Callable[["SupervisorCore", dict[str, Any], float], tuple[Any, list[Action]]]


def _view(fn: Callable[[Queries, dict[str, Any], float], Any]) -> Runner:
    """A read-only verb: its answer from the query API."""
    def run(core: SupervisorCore, args: dict[str, Any], now: float) -> tuple[Any, list[Action]]:
        return fn(core.queries, args, now), []

    return run


def _command(verb: str, result: Callable[[dict[str, Any]], Any]) -> Runner:
    """A verb that changes state: one `Command` through the core."""
    def run(core: SupervisorCore, args: dict[str, Any], now: float) -> tuple[Any, list[Action]]:
        actions = core.handle(Command(verb, args), now)
        return result(args), actions

    return run


RUNNERS: dict[str, Runner] = {
    "status": _view(lambda q, a, now: views.status(q, now)),
    "workers": _view(lambda q, a, now: views.workers(q, now, a.get("limit"), a.get("after"),
                                                       a.get("state"), a.get("zone"))),
    "tasks": _view(lambda q, a, now: views.tasks(q, a.get("worker"), bool(a.get("pending")),
                                                   a.get("task"), a.get("limit"),
                                                   a.get("after"), bool(a.get("handoffs")),
                                                   now)),
    "assignments": _view(lambda q, a, now: views.assignments(q, a.get("task"), a.get("limit"),
                                                               a.get("after"), now)),
    "map": _view(lambda q, a, now: views.route_map(q, a.get("if_newer_than"), a.get("epoch"))),
    "events": _view(lambda q, a, now: views.events(q, now, a.get("after"), a.get("limit"))),
    "counters": _view(lambda q, a, now: q.counters()),
    "drain": _command("drain", lambda a: {"drained": a["worker"]}),
    "undrain": _command("undrain", lambda a: {"undrained": a["worker"]}),
    "forget": _command("forget", lambda a: {"forgotten": a["worker"]}),
    "query": _command("query", lambda a: {"query": "started"}),
    "shutdown": _command("shutdown", lambda a: {"shutdown": True}),
}

# Signals are control verbs too: the daemon's handlers only enqueue these.
SIGNALS: dict[int, tuple[str, dict[str, Any]]] = {
    signal.SIGTERM: ("shutdown", {"reason": "SIGTERM"}),
    signal.SIGINT: ("shutdown", {"reason": "SIGINT"}),
    signal.SIGHUP: ("query", {}),
}


def _not_leader(core: SupervisorCore) -> str:
    role = core.life.role
    info = (role.leader_info or {}) if role is not None and not role.leader else {}
    if info.get("control"):
        return (f"this supervisor is a standby; the leader is {info.get('name')} at "
                f"{info['control']}")
    return "this supervisor is a standby and no leader is known yet"


def call(
    core: SupervisorCore, verb: str, args: dict[str, Any], now: float
) -> tuple[Any, ControlError | None, list[Action]]:
    """Run a verb: ``(result, None, actions)`` or ``(None, error, [])``. Never raises."""
    v = VERBS.get(verb)
    if v is None:
        return None, ControlError(ERR_UNKNOWN_VERB, f"unknown verb {verb!r:.80}; known: "
                                  f"{', '.join(VERBS)}"), []
    if not core.life.leader and core.config.ha and verb not in STANDBY_VERBS:
        return None, ControlError(ERR_NOT_LEADER, _not_leader(core)), []
    try:
        result, actions = RUNNERS[verb](core, check_args(v, args), now)
    except ValueError as exc:
        return None, _error(ERR_BAD_REQUEST, str(exc)), []
    except LookupError as exc:
        return None, _error(ERR_NOT_FOUND, str(exc.args[0] if exc.args else exc)), []
    except Exception as exc:  # a bug must not take the daemon down; it is reported instead
        return None, _error(ERR_INTERNAL, f"{type(exc).__name__}: {exc}"), [
            Log("error", "control verb failed", {"verb": verb, "error": repr(exc)[:1000]})]
    return result, None, actions


def _error(code: str, message: str) -> ControlError:
    """An error reply that fits the wire, whatever the message quotes."""
    if len(message) > MAX_TEXT_CHARS:
        message = message[:MAX_TEXT_CHARS - 1] + "…"
    return ControlError(code, message)
