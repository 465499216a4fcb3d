"""Task handlers: what starting and stopping a task means.

A handler given as ``--handler python:module:Class`` is any class with this shape (it is
created with no arguments, once per worker process; ``module`` must be importable, e.g. via
``PYTHONPATH``)::

    class Recorder:
        def start(self, task: str, spec: dict, ctx: TaskContext) -> None: ...  # begin it
        def stop(self, task: str) -> None: ...    # end it; return once it has ended
        def ready(self) -> bool: ...              # optional: False while warming up

``start`` may take one argument (the task id), two (and its spec: a dict, ``{}`` when the
task has none) or three (and a `TaskContext`: the fencing token, the spec's version and
``lease_expires()``); the worker looks at its signature once, when it loads the handler.

``start`` and ``stop`` run on the agent's only thread, so they must return promptly (start
background work and return; do not run the task inline). An exception from ``start`` counts as
a failure of that task: it is reported and retried with backoff. An exception from ``stop`` is
logged and the task is taken as stopped. Neither ever stops the agent.

A worker started with ``--serve`` also answers requests (docs/routing.md); its handler then
needs ``serve(task, request) -> reply`` (`Serving`), and may have ``abandon(task, request,
reply)`` to drop or roll back work whose reply was withheld because the worker lost the task
while serving it. ``log`` echoes each request back.

The built-in handlers are ``log`` (`LogHandler`: logs, and with ``--journal`` leaves a record)
and ``exec`` (`corral.worker.process.ExecRunner`: one process group per task).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from corral.cli import logs
from corral.common.errors import ConfigError


@dataclass(frozen=True)
class TaskContext:
    """One assignment of a task, as a handler (or the exec runner) gets it.

    ``token`` is the assignment's fencing token: it only grows for a task, across owners,
    epochs and supervisor restarts, so the task's own storage can refuse a write that carries
    an older one (a zombie's). ``spec`` is the task's spec (``{}`` when none) and
    ``spec_version`` a short hash of its text (``""`` when none). ``lease_expires()`` is when
    this worker's lease ends, on `time.monotonic`'s clock (``inf`` under
    ``--on-lease-loss keep``): a background thread that must not outlive the lease can compare
    it with ``time.monotonic()`` and stop by itself — a frozen agent cannot stop it, and the
    lease keeper watches only ``exec`` processes.
    """

    task: str
    token: int = 0
    spec: Mapping[str, Any] = field(default_factory=dict)
    spec_text: str | None = None  # the spec as it came (canonical JSON), None for none
    lease_expires: Callable[[], float] = lambda: 0.0

    @property
    def spec_version(self) -> str:
        return spec_version(self.spec_text)


def spec_version(text: str | None) -> str:
    """A short hash of a spec's canonical text; ``""`` for no spec.

    >>> spec_version('{"a":1}'), spec_version(None)
    ('015abd7f5cc5', '')
    """
    return hashlib.sha256(text.encode()).hexdigest()[:12] if text is not None else ""


class SpecError(ValueError):
    """A task's spec is not a JSON object, or lacks what the handler needs: a failure of that
    task (reported and retried), never of the agent."""


class StartError(RuntimeError):
    """A start that failed for a reason its message says in full (``cannot run 'rec': No such
    file or directory``): reported as it is, not as an exception's repr."""


def parse_spec(text: str | None) -> dict[str, Any]:
    """The spec as a dict (``{}`` for none), or `SpecError`."""
    if text is None:
        return {}
    try:
        spec = json.loads(text)
    except ValueError as exc:
        raise SpecError(f"the task's spec is not JSON: {exc}") from None
    if not isinstance(spec, dict):
        raise SpecError(f"the task's spec is not a JSON object: {text[:60]!r}")
    return spec


class Handler(Protocol):
    """The interface of a ``python:module:Class`` handler (``ready`` is optional: `Prewarmed`).
    ``start`` may also be ``start(task)`` or ``start(task, spec)`` (see the module doc)."""

    def start(self, task: str, spec: dict[str, Any], ctx: TaskContext) -> None: ...

    def stop(self, task: str) -> None: ...


class Prewarmed(Handler, Protocol):
    """A handler that needs time before it can take tasks: the worker reports ``starting``,
    and gets no tasks, until ``ready()`` returns true (or ``--ready-after`` has passed)."""

    def ready(self) -> bool: ...


class Serving(Handler, Protocol):
    """A handler that answers requests (``--serve``). ``serve`` runs on the agent's thread,
    one request at a time, only while the worker owns ``task`` (None: a request for any worker,
    ``call_any``); what it returns is the reply body (any msgpack value), what it raises is
    sent back as an error. Keep it short: the agent does nothing else meanwhile."""

    def serve(self, task: str | None, request: Any) -> Any: ...


class Abandoning(Serving, Protocol):
    """Optional: the worker lost ``task`` while ``serve`` ran, so ``reply`` is not sent (the
    client gets ``not_owner`` and retries elsewhere): drop or roll back what it did."""

    def abandon(self, task: str, request: Any, reply: Any) -> None: ...


class LogHandler:
    """Runs nothing: logs each start and stop, echoes each request. For demos and tests."""

    def __init__(self) -> None:
        self._log = logs.get("task")

    def start(self, task: str, spec: dict[str, Any], ctx: TaskContext) -> None:
        self._log.info("task started", task=task, token=ctx.token,
                       spec=ctx.spec_version or None)

    def stop(self, task: str) -> None:
        self._log.info("task stopped", task=task)

    def serve(self, task: str | None, request: Any) -> Any:
        return request


def load_handler(spec: str) -> Handler:
    """The handler object for ``log`` or ``python:module:Class`` (not ``exec``, which is a
    runner of processes, see `corral.worker.runner.build`)."""
    return LogHandler() if spec == "log" else load_python_handler(spec)


def load_python_handler(spec: str) -> Handler:
    """The handler object named by ``python:module:Class``, or `ConfigError` saying why not."""
    _, module_name, class_name = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any error while importing user code means "cannot load it"
        raise ConfigError("handler", f"cannot import {module_name}: {exc!r}") from None
    cls: Any = getattr(module, class_name, None)
    if not callable(cls):
        raise ConfigError("handler", f"{module_name} has no class {class_name}")
    try:
        handler = cls()
    except Exception as exc:  # the constructor is user code too
        raise ConfigError("handler", f"{spec.split(':', 1)[1]}() raised {exc!r}") from None
    missing = [m for m in ("start", "stop") if not callable(getattr(handler, m, None))]
    if missing:
        raise ConfigError("handler", f"{class_name} has no {' or '.join(missing)} method")
    if start_arity(handler.start) == 0:
        raise ConfigError("handler", f"{class_name}.start must take the task id "
                                     "(start(task), start(task, spec) or start(task, spec, ctx))")
    return handler  # type: ignore[no-any-return]


def start_arity(start: Callable[..., Any]) -> int:
    """How many of (task, spec, ctx) ``start`` takes: 1, 2 or 3 (0: none, unusable).

    >>> class H:
    ...     def start(self, task, spec=None): ...
    >>> start_arity(H().start), start_arity(lambda *args: None), start_arity(print)
    (2, 3, 3)
    """
    try:
        params = inspect.signature(start).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: give it everything
        return 3
    n = 0
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            return 3
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            n += 1
    return min(n, 3)


def caller(handler: Handler) -> Callable[[TaskContext], None]:
    """``handler.start`` called with as many of (task, spec, ctx) as it takes."""
    start: Callable[..., None] = handler.start
    arity = start_arity(start)
    if arity == 1:
        return lambda ctx: start(ctx.task)
    if arity == 2:
        return lambda ctx: start(ctx.task, dict(ctx.spec))
    return lambda ctx: start(ctx.task, dict(ctx.spec), ctx)
