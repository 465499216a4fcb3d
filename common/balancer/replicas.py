"""Which owner of a task gets a request: the client's policy over the task's few owners
(docs/routing.md, "The client").

A task has one owner, or a few replicas; unlike ``call_any``'s subset (the `Balancer`), the
candidates change from request to request, so what the client knows about each worker — its
state, its requests in flight, its recent errors, its load reports — is kept per worker and
shared by every task. A pick considers, in order, the first non-empty tier of owners under the
flow-control limit (``max_active`` requests in flight from this client):

1. healthy ones;
2. lame ducks (draining, or still prewarming): they still answer for the tasks they own, and
   during a hand-off the old owner may be the only one running the task;
3. refusing ones: the signal may be stale, and the send will tell.

Among them, the policy (the `Balancer`'s picker names): ``rr`` takes turns; ``llrr`` the least
loaded (active + recent errors), turns among ties; ``llrr-naive`` counts active requests only;
``p2c`` the less loaded of two random ones; ``random``; ``wrr`` a weighted draw by the
capability weights of `WeightTracker` (with utilization feedback over the workers of the
map, `set_workers`). A single owner is returned at once. Pure: time is a parameter, the
randomness a seeded ``random.Random``.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Sequence

from .backends import TRANSITIONS, BackendEvent, BackendState, HealthConfig
from .pickers import PICKERS
from .weights import LoadReport, WeightConfig, WeightTracker

_HEALTHY, _LAME = BackendState.HEALTHY, BackendState.LAME_DUCK


class ReplicaChooser:
    """Per-worker client state, and `pick` among a task's owners by policy."""

    def __init__(self, policy: str, health: HealthConfig | None = None,
                 weights: WeightConfig | None = None, rng: random.Random | None = None) -> None:
        if policy not in PICKERS:
            raise ValueError(f"unknown policy {policy!r}; use one of {sorted(PICKERS)}")
        self.policy = policy
        self.health = health or HealthConfig()
        self.weights = WeightTracker(weights)
        self._update_period = self.weights.config.update_period
        self._rng = rng or random.Random(0)
        self.active: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self._expiry: deque[tuple[float, str]] = deque()  # (forget at, worker), oldest first
        self.states: dict[str, BackendState] = {}
        self._workers: list[str] = []
        # The map's workers once `set_workers` was called (None before: every worker counts).
        # What arrives for a worker not in it (a late reply) changes no count and keeps nothing.
        self._known: frozenset[str] | None = None
        self._turn = 0
        self._next_adjust = float("-inf")

    # -- what the client learns ------------------------------------------------------------

    def handle(self, worker: str, event: BackendEvent) -> BackendState:
        """A health event; a worker that takes connections again after refusing them starts
        its weight over (A58: it may be a new process)."""
        was = self.states.get(worker, _HEALTHY)
        state = TRANSITIONS[was, event]
        if self._known is not None and worker not in self._known:
            return state
        self.states[worker] = state
        if was is BackendState.REFUSING and state is not BackendState.REFUSING:
            self.weights.reconnected(worker)
        return state

    def state(self, worker: str) -> BackendState:
        return self.states.get(worker, _HEALTHY)

    def set_workers(self, workers: Iterable[str]) -> None:
        """The workers of the current map. What was known about the others is dropped
        (requests still in flight there end through `finished` as usual)."""
        keep = self._known = frozenset(workers)
        # All of `states`, not only the old map's workers: entries made before the first map.
        for w in [w for w in self.states if w not in keep]:
            del self.states[w]
        self.weights.retain(keep)
        self._workers = sorted(keep)

    def sizes(self) -> dict[str, int]:
        """Entries per table (each per worker, `_expiry` per recent error), for a long-running
        owner to publish."""
        return {"chooser_active": len(self.active), "chooser_errors": len(self.errors),
                "chooser_error_expiry": len(self._expiry), "chooser_states": len(self.states),
                "chooser_workers": len(self._workers), **self.weights.sizes()}

    # -- requests --------------------------------------------------------------------------

    def pick(self, owners: Sequence[str], now: float, avoid: str | None = None) -> str | None:
        """The owner that gets the next request, counted as started; None when every owner is
        at the flow-control limit (or there are none). ``avoid`` is left out unless it is the
        only candidate (a retry after it answered ``not_owner``)."""
        limit, active = self.health.max_active, self.active
        if self._expiry:  # here, before the single-owner path: errors must age with time
            self._expire(now)
        if len(owners) == 1:
            w = owners[0]
            if active.get(w, 0) >= limit:
                return None
            active[w] = active.get(w, 0) + 1
            return w
        states = self.states
        tiers: tuple[list[str], list[str], list[str]] = ([], [], [])
        for w in owners:
            if active.get(w, 0) < limit and w != avoid:
                s = states.get(w, _HEALTHY)
                tiers[0 if s is _HEALTHY else 1 if s is _LAME else 2].append(w)
        found = tiers[0] or tiers[1] or tiers[2]
        if not found:
            if avoid is None or avoid not in owners or active.get(avoid, 0) >= limit:
                return None
            found = [avoid]
        w = found[0] if len(found) == 1 else self._choose(found, now)
        active[w] = active.get(w, 0) + 1
        return w

    def finished(self, worker: str, ok: bool, now: float,
                 report: LoadReport | None = None) -> None:
        """A request to ``worker`` ended at ``now``; a failure counts as load for a while."""
        n = self.active.get(worker, 0)
        if n > 1:
            self.active[worker] = n - 1
        else:
            self.active.pop(worker, None)
        if self._known is not None and worker not in self._known:
            return  # it left the map while the request was in flight
        if not ok:
            self.errors[worker] = self.errors.get(worker, 0) + 1
            self._expiry.append((now + self.health.error_window, worker))
        if report is not None:
            self.weights.report(worker, report, now)

    def report(self, worker: str, report: LoadReport, now: float) -> None:
        """A load report that came by another path (a reply to ``call_any``)."""
        if self._known is None or worker in self._known:
            self.weights.report(worker, report, now)

    def _expire(self, now: float) -> None:
        expiry, errors = self._expiry, self.errors
        while expiry and expiry[0][0] <= now:
            w = expiry.popleft()[1]
            if errors[w] > 1:
                errors[w] -= 1
            else:
                del errors[w]

    # -- policies --------------------------------------------------------------------------

    def _load(self, w: str) -> int:
        return self.active.get(w, 0) + (0 if self.policy == "llrr-naive" else
                                        self.errors.get(w, 0))

    def _choose(self, found: list[str], now: float) -> str:
        policy = self.policy
        self._turn += 1
        if policy == "rr":
            return found[self._turn % len(found)]
        if policy == "random":
            return found[int(self._rng.random() * len(found))]
        if policy == "p2c":
            x = self._rng.random() * len(found)
            a = int(x)
            b = int((x - a) * (len(found) - 1))
            b += b >= a
            return found[b] if self._load(found[b]) < self._load(found[a]) else found[a]
        if policy == "wrr":
            return self._weighted(found, now)
        least = min(self._load(w) for w in found)  # llrr, llrr-naive
        ties = [w for w in found if self._load(w) == least]
        return ties[self._turn % len(ties)]

    def _weighted(self, found: list[str], now: float) -> str:
        if now >= self._next_adjust:  # utilization feedback over every worker heard from
            self._next_adjust = now + self._update_period
            self.weights.adjust(self._workers, now)
        weights = self.weights.weights(found, now)
        x = self._rng.random() * sum(weights)
        for w, weight in zip(found, weights, strict=True):
            x -= weight
            if x < 0:
                return w
        return found[-1]
