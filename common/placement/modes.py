"""A worker's mode: what placement may do with it (the one switch besides its max_load)."""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    """What placement may do with a worker.

    eligible — keeps its tasks and takes new ones;
    hold     — keeps its tasks, takes nothing new (starting, lame duck awaiting make-before-break,
               drained by an operator, capacity unknown).
    A worker that is gone (inactive, dead, evicted) is removed with `Placement.remove_worker`.
    """

    ELIGIBLE = "eligible"
    HOLD = "hold"
