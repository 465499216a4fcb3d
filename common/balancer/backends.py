"""Backend health, flow control and the panic threshold, as one client sees its subset
(docs/balancer.md, "Backend health, flow control, panic").

`BackendTable` turns three things into the picker's per-slot ``eligible`` flags:

* **state** (`BackendState`) — healthy, refusing connections, or lame duck;
* **flow control** — the client's active requests on a backend; at ``max_active`` (default
  100, the chapter's figure) the backend takes no new requests from this client until one ends;
* **panic** — if fewer than ``panic_threshold`` (default half) of the subset is *available*
  (healthy and under the flow-control limit), every backend that is not a lame duck becomes
  eligible again. When most of a subset looks bad the signal is more likely wrong (a partition
  between this client and its backends, a health-check fault, flow control tripping on slow
  requests) than right, and piling all traffic on the few left would overload them too. Lame
  ducks stay out even then: that state is the backend's explicit request, not a guess.

Errors are remembered for ``error_window`` seconds (`finished(..., ok=False, now)` and
`expire(now)`); load-aware pickers count them as active requests, so a backend that fails fast
does not look idle. Time is always a parameter.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from .pickers import Picker


class BackendState(StrEnum):
    """A backend as one client sees it. Transitions (`TRANSITIONS`), event → new state:

    ``refused``   any state → REFUSING (a connection attempt failed or the connection dropped);
    ``connected`` REFUSING → HEALTHY (a lame duck that accepts a connection stays a lame duck);
    ``lame-duck`` any state → LAME_DUCK (no new requests; requests in flight finish normally);
    ``ready``     any state → HEALTHY (the backend says it serves, e.g. after pre-warming).
    """

    HEALTHY = "healthy"
    REFUSING = "refusing"
    LAME_DUCK = "lame-duck"


class BackendEvent(StrEnum):
    """What a client learns about a backend (see `BackendState` for the effects)."""

    REFUSED = "refused"
    CONNECTED = "connected"
    LAME_DUCK = "lame-duck"
    READY = "ready"


TRANSITIONS: dict[tuple[BackendState, BackendEvent], BackendState] = {
    (state, event): (
        BackendState.REFUSING
        if event is BackendEvent.REFUSED
        else BackendState.LAME_DUCK
        if event is BackendEvent.LAME_DUCK
        else BackendState.HEALTHY
        if event is BackendEvent.READY or state is BackendState.REFUSING
        else state
    )
    for state in BackendState
    for event in BackendEvent
}


@dataclass(frozen=True)
class HealthConfig:
    """Flow control, panic and error memory for one client's subset."""

    max_active: int = 100  # active requests per backend before it takes no new ones
    panic_threshold: float = 0.5  # fraction of the subset that must be available
    error_window: float = 1.0  # seconds an error counts as an active request

    def __post_init__(self) -> None:
        if self.max_active < 1:
            raise ValueError(f"max_active must be at least 1, not {self.max_active}")
        if not 0 <= self.panic_threshold <= 1:
            raise ValueError(f"panic_threshold must be in [0, 1], not {self.panic_threshold}")
        if self.error_window < 0:
            raise ValueError(f"error_window must be non-negative, not {self.error_window}")


class BackendTable:
    """States, flow control and panic for the slots of one picker."""

    def __init__(
        self,
        names: Sequence[str],
        picker: Picker,
        config: HealthConfig | None = None,
        states: Mapping[str, BackendState] | None = None,
    ) -> None:
        if picker.n != len(names):
            raise ValueError("the picker must have one slot per backend")
        self.config = config or HealthConfig()
        self.names = list(names)
        self.slot = {name: i for i, name in enumerate(self.names)}
        self.picker = picker
        given = states or {}
        self.states = [given.get(name, BackendState.HEALTHY) for name in self.names]
        self._errors: deque[tuple[float, int]] = deque()  # (expires at, slot), oldest first
        self._available = [False] * len(self.names)
        self._count = 0
        self.panic = False
        for i in range(len(self.names)):
            self._refresh(i)

    # -- state ---------------------------------------------------------------------------

    def handle(self, name: str, event: BackendEvent) -> BackendState:
        """Apply ``event`` to backend ``name``; returns its new state."""
        i = self.slot[name]
        self.states[i] = TRANSITIONS[self.states[i], event]
        self._refresh(i)
        return self.states[i]

    def state(self, name: str) -> BackendState:
        return self.states[self.slot[name]]

    @property
    def available(self) -> int:
        """Backends that are healthy and under the flow-control limit."""
        return self._count

    # -- requests ------------------------------------------------------------------------

    def started(self, i: int) -> None:
        """The picker just gave slot i a request: it may have reached the flow-control limit."""
        if self.picker.active[i] >= self.config.max_active:
            self._refresh(i)

    def finished(self, i: int, ok: bool, now: float) -> None:
        """A request on slot i ended at ``now``; a failure counts as load for a while."""
        picker = self.picker
        picker.release(i)
        if not ok:
            picker.add_error(i)
            self._errors.append((now + self.config.error_window, i))
        if picker.active[i] == self.config.max_active - 1:
            self._refresh(i)

    def expire(self, now: float) -> None:
        """Forget errors older than the error window."""
        errors = self._errors
        while errors and errors[0][0] <= now:
            self.picker.drop_error(errors.popleft()[1])

    def pending_errors(self) -> list[tuple[float, str]]:
        """Remembered errors as (expires at, backend), to carry over into a new table."""
        return [(at, self.names[i]) for at, i in self._errors]

    @property
    def remembered(self) -> int:
        """Errors remembered (within the error window, until the next `expire`)."""
        return len(self._errors)

    def remember_error(self, name: str, expires_at: float) -> None:
        """Re-add a remembered error (after a subset change), in expiry order."""
        i = self.slot[name]
        self.picker.add_error(i)
        self._errors.append((expires_at, i))

    # -- eligibility ---------------------------------------------------------------------

    def _refresh(self, i: int) -> None:
        ok = (
            self.states[i] is BackendState.HEALTHY
            and self.picker.active[i] < self.config.max_active
        )
        if ok != self._available[i]:
            self._available[i] = ok
            self._count += 1 if ok else -1
        panic = self._count < self.config.panic_threshold * len(self.names)
        if panic != self.panic:
            self.panic = panic
            for j in range(len(self.names)):
                self.picker.set_eligible(j, self._eligible(j))
        else:
            self.picker.set_eligible(i, self._eligible(i))

    def _eligible(self, i: int) -> bool:
        if self.panic:
            return self.states[i] is not BackendState.LAME_DUCK
        return self._available[i]
