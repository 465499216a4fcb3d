"""What the HA election decided, as the state machine sees it: a plain value (the election
itself, with its threads and etcd, is supervisor/ha.py; only the daemon talks to it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Role:
    """What the election decided. ``leader_until`` (monotonic) is when a leader must stop;
    ``heard`` is how many workers each member hears, as published in etcd (ours included)."""

    leader: bool
    epoch: int = 0
    leader_until: float = 0.0
    leader_info: dict[str, Any] | None = None
    members: tuple[str, ...] = ()
    error: str | None = None
    heard: tuple[tuple[str, int], ...] = ()
