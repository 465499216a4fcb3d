"""Task handlers: what starting and stopping a task means.

A handler given as ``--handler python:module:Class`` is any class with this shape (it is
created with no arguments, once per worker process; ``module`` must be importable, e.g. via
``PYTHONPATH``)::

    class Recorder:
        def start(self, task: str) -> None: ...   # begin the task; return once it runs
        def stop(self, task: str) -> None: ...    # end it; return once it has ended
        def ready(self) -> bool: ...              # optional: False while warming up

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

import importlib
from typing import Any, Protocol

from corral.common import logs
from corral.common.errors import ConfigError


class Handler(Protocol):
    """The interface of a ``python:module:Class`` handler (``ready`` is optional: `Prewarmed`)."""

    def start(self, task: str) -> None: ...

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

    def start(self, task: str) -> None:
        self._log.info("task started", task=task)

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
    return handler  # type: ignore[no-any-return]
