"""What a `Router` knows about each worker's health, in one place.

A worker's health comes from three sources: sends (a send that finds no live connection means
*refusing*, tried again after ``refused_retry``), replies (each carries a load report and a
lame-duck flag) and the map (each worker's state). This part keeps them — refusing workers,
lame ducks, the latest load report of each — and tells both of the router's pickers (the
`Balancer` for ``call_any``, the `ReplicaChooser` for a task's owners) the same thing, so
they never disagree. In-flight counts stay with each picker: they are per path.
"""

from __future__ import annotations

from collections.abc import Mapping

from corral.common.balancer import Balancer
from corral.common.balancer.backends import BackendEvent
from corral.common.balancer.replicas import ReplicaChooser
from corral.common.balancer.weights import LoadReport
from corral.common.wire.routemap import READY, WorkerEntry


class Health:
    def __init__(self, balancer: Balancer, chooser: ReplicaChooser,
                 refused_retry: float) -> None:
        self._balancer = balancer
        self._chooser = chooser
        self._retry = refused_retry
        self._refused: dict[str, float] = {}  # worker -> when to try it again
        self._lame: set[str] = set()  # workers whose last word was "lame duck"
        self.reports: dict[str, LoadReport] = {}  # each worker's latest load report
        self._mapped: Mapping[str, WorkerEntry] = {}  # the workers of the current map

    def sizes(self) -> dict[str, int]:
        """Entries per table (each per worker), for `Router.table_sizes`."""
        return {"health_refused": len(self._refused), "health_lame": len(self._lame),
                "health_reports": len(self.reports)}

    def _event(self, worker: str, event: BackendEvent) -> None:
        self._balancer.handle(worker, event)
        self._chooser.handle(worker, event)

    def refused(self, worker: str, now: float) -> None:
        """A send to ``worker`` found no live connection."""
        self._event(worker, BackendEvent.REFUSED)
        self._refused[worker] = now + self._retry

    def replied(self, worker: str, report: LoadReport, lame_duck: bool) -> None:
        """A reply from ``worker``: its load report and its lame-duck flag (ignored when it
        left the map while the request was in flight: nothing is kept for it)."""
        if worker not in self._mapped:
            return
        self.reports[worker] = report
        if lame_duck != (worker in self._lame):
            self._set_lame(worker, lame_duck)

    def _set_lame(self, worker: str, lame: bool) -> None:
        if lame:
            self._lame.add(worker)
            self._event(worker, BackendEvent.LAME_DUCK)
        else:
            self._lame.discard(worker)
            self._event(worker, BackendEvent.READY)

    def tick(self, now: float) -> None:
        """Refusing workers whose retry time came are tried again."""
        if self._refused:
            for worker, at in list(self._refused.items()):
                if now >= at:
                    del self._refused[worker]
                    self._event(worker, BackendEvent.CONNECTED)

    def new_map(self, old: Mapping[str, WorkerEntry], new: Mapping[str, WorkerEntry]) -> None:
        """The map changed: forget departed workers; take each worker's state where it
        changed (edge-triggered, so a fresher lame-duck flag from a reply is kept)."""
        self._mapped = new
        self._lame &= new.keys()
        for gone in self.reports.keys() - new.keys():
            del self.reports[gone]
        for gone in self._refused.keys() - new.keys():
            del self._refused[gone]
        for w, e in new.items():
            was = old.get(w)
            if was is None or was.state != e.state:
                self._set_lame(w, e.state != READY)
