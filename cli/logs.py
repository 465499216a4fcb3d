"""Logging set-up shared by the daemons: structlog, JSON lines when stderr is not a terminal,
readable console output when it is. Hot paths never log per message; they count."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

LEVELS = ("debug", "info", "warning", "error")


def configure(level: str = "info", json: bool | None = None, stream: TextIO | None = None) -> None:
    """Set up structlog for a daemon. ``json=None`` means: JSON unless stderr is a terminal."""
    stream = stream or sys.stderr
    if json is None:
        json = not stream.isatty()
    renderer: Any = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=True,
    )


def get(name: str, **bound: Any) -> Any:
    """A logger bound to a component name (and any fixed fields)."""
    return structlog.get_logger(component=name, **bound)
