"""The client-side balancer: subset + health + flow control + picker, behind a small API.
docs/balancer.md ("Balancer") shows it in use and lists its defaults. ::

    balancer = Balancer(BalancerConfig(picker="wrr", subset_size=20), backends, client=7,
                        clock=time.monotonic)          # the caller supplies the clock
    with balancer.pick() as request:                   # or: acquire(now) ... release(...)
        reply = send(request.backend, ...)
        request.report = LoadReport(reply.qps, reply.utilization, reply.eps)  # optional

Leaving the block records the outcome (an exception is a failure; `Request.fail` marks one
without raising), the latency and any load report. Code that keeps many requests in flight (an
event loop, the simulator) calls ``acquire(now)`` and ``release(request, now, ok, report)``.
The balancer never reads a clock itself: `pick` calls the ``clock`` given to it, and `acquire`
/ `release` take ``now``. Randomness comes from ``random.Random(config.seed ^ client ×
0x9E3779B1)`` unless an ``rng`` is passed in.

Whatever it is given — backend lists with duplicates or none at all, any load report, any
time — `acquire` returns a backend of the subset that may take the request (see
`corral.common.balancer.backends`) or raises `NoBackendAvailable`, nothing else. Duplicate backend
names count once (``counters["duplicate_backends"]``); a time that is not a finite number, or
earlier than the latest one seen, is replaced by the latest one (``counters["bad_times"]`` for
the former), so a bad clock reading cannot stall the weights or the error window; bad load
reports are the weight tracker's to judge (`corral.common.balancer.weights`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..errors import CorralError
from .backends import BackendEvent, BackendState, BackendTable, HealthConfig
from .pickers import PICKERS, make_picker
from .subsetting import ALGORITHMS, DEFAULT_LOT_SIZE, STEADY, subset
from .weights import LoadReport, WeightConfig, WeightTracker

# Below any real time, so that the first one passes `_now <= now`; NaN and -inf fail it.
_NO_TIME = -1e308


class NoBackendAvailable(CorralError):
    """Every backend of the subset is a lame duck (or the subset is empty)."""


@dataclass(frozen=True)
class BalancerConfig:
    """Everything a `Balancer` needs besides the backends and the client's index."""

    picker: str = "wrr"
    subsetting: str = STEADY  # backends in index order (docs/balancer.md, "Subsetting")
    subset_size: int = 20  # the chapter: "typically 20 to 100"
    seed: int = 0  # shared by all clients of one service, so their subsets fit together
    lot_size: int = DEFAULT_LOT_SIZE
    clients: int = 0  # steady: how many clients share the seed (indexes 0..clients-1); 0: unknown
    health: HealthConfig = field(default_factory=HealthConfig)
    weights: WeightConfig = field(default_factory=WeightConfig)
    latency_smoothing: float = 0.1  # weight of a new sample in the per-backend latency EWMA

    def __post_init__(self) -> None:
        if self.picker not in PICKERS:
            raise ValueError(f"unknown picker {self.picker!r}; use one of {sorted(PICKERS)}")
        if self.subsetting not in ALGORITHMS:
            raise ValueError(f"unknown subsetting {self.subsetting!r}; use one of {ALGORITHMS}")
        if self.subset_size < 1:
            raise ValueError(f"subset_size must be at least 1, not {self.subset_size}")
        if self.clients < 0:
            raise ValueError(f"clients must be 0 (unknown) or more, not {self.clients}")
        if not 0 < self.latency_smoothing <= 1:
            raise ValueError("latency_smoothing must be in (0, 1]")


@dataclass(slots=True)
class Request:
    """One request the balancer handed out. Set ``report`` to pass on the backend's load
    report; call `fail` to record a failure without raising out of a ``with`` block."""

    backend: str
    slot: int
    started: float
    generation: int
    ok: bool = True
    report: LoadReport | None = None

    def fail(self) -> None:
        self.ok = False


@dataclass(slots=True)
class BackendStats:
    """What this client measured on one backend."""

    requests: int = 0
    errors: int = 0
    latency_ewma: float | None = None


class Balancer:
    """One client's view of a service: its subset, their health, and the picker."""

    def __init__(
        self,
        config: BalancerConfig,
        backends: Iterable[str | None],
        client: int,
        clock: Callable[[], float] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if config.clients and not 0 <= client < config.clients:
            raise ValueError(f"client {client} is not an index below clients={config.clients}")
        self.config = config
        self.client = client
        self._clock = clock
        self._rng = rng or random.Random(config.seed ^ (client * 0x9E3779B1))
        self._generation = 0
        self._wrr = config.picker == "wrr"
        self._next_weights = -math.inf
        self._now = _NO_TIME  # the latest time seen: times never go back
        self._counters = dict.fromkeys(("duplicate_backends", "bad_times"), 0)
        self._stats: dict[str, BackendStats] = {}
        self._weights = WeightTracker(config.weights)
        self._table = self._new_table(self._subset_of(backends), {}, [], {})

    # -- the subset ------------------------------------------------------------------------

    @property
    def subset(self) -> list[str]:
        """The backends this client uses, in slot order."""
        return list(self._table.names)

    def _subset_of(self, backends: Iterable[str | None]) -> list[str]:
        listed = list(backends)
        present = [b for b in listed if b is not None]
        self._counters["duplicate_backends"] += len(present) - len(set(present))
        c = self.config
        # steady reads indexes from the order (None: an empty index); the others sort names.
        return subset(c.subsetting, listed, self.client, c.subset_size, c.seed, c.lot_size,
                      c.clients or None)

    def set_backends(self, backends: Iterable[str | None]) -> None:
        """The service's backends changed: recompute the subset. Backends that stay keep their
        state, in-flight count, remembered errors, weights and statistics."""
        names = self._subset_of(backends)
        if names == self._table.names:
            return
        old = self._table
        states = {n: old.states[i] for i, n in enumerate(old.names)}
        active = {n: old.picker.active[i] for i, n in enumerate(old.names)}
        self._table = self._new_table(names, states, old.pending_errors(), active)
        self._generation += 1
        self._next_weights = float("-inf")
        for name in old.names:
            if name not in self._table.slot:
                self._weights.forget(name)
                self._stats.pop(name, None)

    def _new_table(
        self,
        names: Sequence[str],
        states: dict[str, BackendState],
        errors: list[tuple[float, str]],
        active: dict[str, int],
    ) -> BackendTable:
        picker = make_picker(self.config.picker, len(names), self._rng)
        for i, name in enumerate(names):
            if active.get(name):  # requests still in flight load the backend
                picker.add_active(i, active[name])
        table = BackendTable(names, picker, self.config.health, states)
        for at, name in errors:
            if name in table.slot:
                table.remember_error(name, at)
        return table

    # -- what the client learns ----------------------------------------------------------

    def handle(self, backend: str, event: BackendEvent) -> BackendState | None:
        """A health event for ``backend``; ignored (None) if it is not in the subset. A backend
        that was refusing connections and takes them again starts its weight over."""
        table = self._table
        if backend not in table.slot:
            return None
        was = table.state(backend)
        state = table.handle(backend, event)
        if was is BackendState.REFUSING and state is not BackendState.REFUSING:
            self._weights.reconnected(backend)
        return state

    def state(self, backend: str) -> BackendState:
        return self._table.state(backend)

    def report(self, backend: str, report: LoadReport, now: float) -> None:
        """A load report from ``backend`` (with a response or a health check)."""
        if backend in self._table.slot:
            self._weights.report(backend, report, self._time(now))

    @property
    def counters(self) -> dict[str, int]:
        """Bad input seen and survived: ``duplicate_backends``, ``bad_times``, and the weight
        tracker's (``bad_reports``, ``empty_reports``, ``clamped``; its ``bad_times`` are
        counted here, as times are checked before they reach it)."""
        return {**self._weights.counters, **self._counters}

    @property
    def panic(self) -> bool:
        return self._table.panic

    def stats(self) -> dict[str, BackendStats]:
        return {n: self._stats.setdefault(n, BackendStats()) for n in self._table.names}

    def sizes(self) -> dict[str, int]:
        """Entries per table (per backend of the subset, or per recent error), for a
        long-running owner to publish."""
        return {"subset": len(self._table.names), "stats": len(self._stats),
                "recent_errors": self._table.remembered, **self._weights.sizes()}

    def weights(self, now: float) -> list[float]:
        """The weights ``wrr`` would use at ``now``, in slot order."""
        return self._weights.weights(self._table.names, now)

    # -- requests ------------------------------------------------------------------------

    def _time(self, now: float) -> float:
        """``now``, or the latest time seen if ``now`` is earlier or not a finite number (0.0
        if there was none)."""
        if self._now <= now < math.inf:
            self._now = now
            return now
        if not -math.inf < now < math.inf:
            self._counters["bad_times"] += 1
        if self._now == _NO_TIME:
            self._now = 0.0
        return self._now

    def acquire(self, now: float) -> Request:
        """Choose a backend for a new request starting at ``now``."""
        if not self._now <= now < math.inf:  # written out: this is every request's path
            now = self._time(now)
        else:
            self._now = now
        table = self._table
        table.expire(now)
        if now >= self._next_weights and self._wrr:
            self._weights.adjust(table.names, now)
            table.picker.set_weights(self._weights.weights(table.names, now))
            self._next_weights = now + self.config.weights.update_period
        i = table.picker.pick()
        if i < 0:
            raise NoBackendAvailable(
                f"no backend available among {len(table.names)} (all lame duck or none)"
            )
        table.started(i)
        return Request(table.names[i], i, now, self._generation)

    def release(
        self, request: Request, now: float, ok: bool = True, report: LoadReport | None = None
    ) -> None:
        """Request ``request`` ended at ``now``: record outcome, latency and load report."""
        if not self._now <= now < math.inf:
            now = self._time(now)
        else:
            self._now = now
        table = self._table
        if request.generation == self._generation:
            i: int | None = request.slot
        else:  # the subset changed meanwhile: find the backend's new slot, if it stayed
            i = table.slot.get(request.backend)
        if i is None:  # it left the subset meanwhile: nothing is kept for it any more
            return
        table.finished(i, ok, now)
        if report is not None:
            self._weights.report(request.backend, report, now)
        stats = self._stats.get(request.backend)
        if stats is None:
            stats = self._stats[request.backend] = BackendStats()
        stats.requests += 1
        stats.errors += not ok
        latency = now - request.started
        a = self.config.latency_smoothing
        ewma = stats.latency_ewma
        stats.latency_ewma = latency if ewma is None else ewma + a * (latency - ewma)

    @contextmanager
    def pick(self) -> Iterator[Request]:
        """``with balancer.pick() as request:`` — times the block with the caller's clock;
        an exception leaving the block is recorded as a failure and re-raised."""
        if self._clock is None:
            raise TypeError("Balancer.pick() needs the clock= given to the Balancer")
        request = self.acquire(self._clock())
        try:
            yield request
        except BaseException:
            self.release(request, self._clock(), ok=False, report=request.report)
            raise
        self.release(request, self._clock(), ok=request.ok, report=request.report)
