"""The assignment map for request routing: which workers serve which task, and where
(docs/routing.md, "The map").

The supervisor serves it on its control endpoint (verb ``map``); clients (`Router`) cache it
and refresh it when its version moves. Its JSON shape, a contract::

    {"version": 3, "epoch": 2,
     "workers": {"w1": {"serve": "tcp://10.0.0.7:7770", "state": "ready"}, ...},
     "tasks": {"room-7": ["w1"], "room-8": ["w2", "w3"], "room-9": []}}

``tasks`` lists every task with the workers that run it *and serve requests* (a worker that
reports the task running, is meant to run it or is handing it over, and has a serve address);
``workers`` every active worker with a serve address and its own state (``starting``,
``ready``, ``lame_duck``). A map is identified by ``(epoch, version)``, compared in that
order: ``version`` counts the content's changes within the supervisor's epoch, so a restarted
supervisor's (or a new HA leader's) maps come after its predecessor's. (Two numbers, not one:
an HA epoch is above 2⁴⁰, with no room left in 64 bits for a count.)

Where a request goes by a map (keys → tasks on a hash ring, and why) is the client's:
`corral.client.routes`. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from ..errors import ProtocolError

READY, STARTING, LAME_DUCK = "ready", "starting", "lame_duck"


@dataclass(frozen=True)
class WorkerEntry:
    serve: str
    state: str  # ready | starting | lame_duck


@dataclass(frozen=True)
class RouteMap:
    version: int
    epoch: int = 0
    workers: Mapping[str, WorkerEntry] = field(default_factory=dict)
    tasks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def key(self) -> tuple[int, int]:
        """``(epoch, version)``: the later map has the larger key."""
        return self.epoch, self.version


EMPTY = RouteMap(-1, -1)  # what a client holds before its first fetch: any map is newer


class _WorkerWire(msgspec.Struct):
    serve: str
    state: Literal["ready", "starting", "lame_duck"]


class _MapWire(msgspec.Struct):  # unknown keys are let through: the view may grow
    version: int
    workers: dict[str, _WorkerWire]
    tasks: dict[str, list[str]]
    epoch: int = 0


def parse(result: Any) -> RouteMap:
    """The map from a ``map`` verb's result, or `ProtocolError` saying what is wrong with it.
    Owners that are not listed among the workers are left out (nothing to route to), and an
    owner listed twice for a task counts once."""
    try:
        wire = msgspec.convert(result, _MapWire)
    except msgspec.ValidationError as exc:
        raise ProtocolError(f"map: {exc}") from None
    workers = {w: WorkerEntry(e.serve, e.state) for w, e in wire.workers.items()}
    # A worker listed twice for a task would get a double share of its requests: once each.
    tasks = {t: tuple(dict.fromkeys(w for w in owners if w in workers))
             for t, owners in wire.tasks.items()}
    return RouteMap(wire.version, wire.epoch, workers, tasks)


def to_result(m: RouteMap) -> dict[str, Any]:
    """The JSON shape of ``m`` (what the ``map`` verb returns)."""
    return {
        "version": m.version,
        "epoch": m.epoch,
        "workers": {w: {"serve": e.serve, "state": e.state} for w, e in m.workers.items()},
        "tasks": {t: list(owners) for t, owners in m.tasks.items()},
    }


class MapVersions:
    """Numbers a map's successive contents. ``current(signature, build)`` rebuilds only when
    the signature (anything cheap that changes whenever the content may have) moved, and moves
    the version only when the rebuilt content differs.

    >>> v = MapVersions(epoch=2)
    >>> v.current(1, lambda: ({"a": ("w1",)}, {})).key
    (2, 1)
    >>> v.current(2, lambda: ({"a": ("w1",)}, {})).key  # same content
    (2, 1)
    >>> v.current(3, lambda: ({"a": ("w2",)}, {})).key
    (2, 2)
    """

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self._count = 0
        self._signature: Any = object()
        self._map = RouteMap(0, epoch)  # nothing yet, but this epoch's
        self._result: dict[str, Any] | None = None

    def current(
        self,
        signature: Any,
        build: Callable[[], tuple[Mapping[str, tuple[str, ...]], Mapping[str, WorkerEntry]]],
    ) -> RouteMap:
        if signature != self._signature:
            self._signature = signature
            tasks, workers = build()
            if tasks != self._map.tasks or workers != self._map.workers:
                self._count += 1
                self._map = RouteMap(self._count, self.epoch, workers, tasks)
                self._result = None
        return self._map

    def result(self) -> dict[str, Any]:
        """`to_result` of the current map, built once per version (treat it as read-only)."""
        if self._result is None:
            self._result = to_result(self._map)
        return self._result
