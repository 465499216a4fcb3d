"""The errors corral raises on bad input. Each carries one clear, human-readable message."""

from __future__ import annotations


class CorralError(Exception):
    """Base class of corral's own errors."""


class ProtocolError(CorralError):
    """A frame could not be decoded into a valid message (garbage, wrong shape, out of range).

    The decoder raises this and nothing else, whatever the bytes are, so a daemon can catch
    exactly this, count it, and carry on.
    """


class ConfigError(CorralError):
    """A configuration value (flag, environment variable, file key) is unknown or invalid."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


class TaskSourceError(CorralError):
    """A task source failed or returned something that is not a task list."""
