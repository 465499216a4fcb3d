"""Capability weights for weighted round robin, from what backends report about themselves.

Each backend reports, with its responses or health checks, the successful requests per second
it serves (``qps``, from all its clients), its ``utilization`` (CPU, 0..1) and its errors per
second (``eps``). Its capability score is ::

    weight = qps / (utilization + error_penalty × eps / qps)

— requests served per unit of utilization, i.e. its capacity, with failures penalized. So a
fast machine (more qps at the same utilization) gets more traffic, and a backend that fails
fast (errors, little CPU) gets less rather than more.

Rules, as in gRPC's weighted_round_robin policy:

* a report is *fresh* until ``expiry`` seconds old; a backend whose reports expired starts over;
* a backend's weight is trusted only after it has reported for ``blackout`` seconds without a
  gap, so a restarted or new backend — whose first numbers come from little traffic — does not
  get a flood on a noisy first report;
* a backend with no trusted weight gets the mean of the trusted weights (1.0 if there are none);
* a backend that reported only errors gets ``min_fraction`` × the mean, never zero, so it keeps
  getting a trickle and can show that it recovered.

**Utilization feedback.** A capacity score cannot see load that *other* clients put on a
backend: with small subsets and clients of different rates, the backends shared by busy clients
run hotter although every client splits its own traffic by capacity. So each client also keeps
a correction factor per backend and, whenever `adjust` sees a new report, multiplies it by
``(mean utilization of the subset / the backend's utilization) ** utilization_feedback``
(renormalized to mean 1, clamped to [1/max_correction, max_correction]). That is integral
control: it moves traffic until the utilizations the client sees are equal, whatever their
cause. Only new reports move it, so reports that come slowly do not make it overshoot.
``utilization_feedback = 0`` turns it off, leaving gRPC's capacity-only weights.

Time is a parameter (``now``); nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LoadReport:
    """What a backend says about itself: successful qps, CPU utilization (0..1), errors/s."""

    qps: float
    utilization: float
    eps: float = 0.0

    def __post_init__(self) -> None:
        if self.qps < 0 or self.utilization < 0 or self.eps < 0:
            raise ValueError(f"a load report cannot be negative: {self}")


@dataclass(frozen=True)
class WeightConfig:
    """How reports become weights (defaults as gRPC's weighted_round_robin)."""

    error_penalty: float = 1.0
    blackout: float = 10.0  # seconds of continuous reports before a weight is trusted
    expiry: float = 180.0  # seconds after which a report is stale
    update_period: float = 1.0  # seconds between weight recomputations (used by the balancer)
    min_fraction: float = 0.01  # floor, as a fraction of the mean weight
    utilization_feedback: float = 0.3  # gain of the correction per new report; 0 = off
    max_correction: float = 5.0  # the correction stays within [1/this, this]

    def __post_init__(self) -> None:
        if self.error_penalty < 0 or self.blackout < 0 or self.utilization_feedback < 0:
            raise ValueError("error_penalty, blackout and utilization_feedback must be >= 0")
        if self.max_correction < 1:
            raise ValueError(f"max_correction must be at least 1, not {self.max_correction}")
        if self.expiry <= 0 or self.update_period <= 0 or not 0 < self.min_fraction <= 1:
            raise ValueError("expiry and update_period must be positive, min_fraction in (0, 1]")


class WeightTracker:
    """The latest report per backend and the weights they give at a time ``now``."""

    def __init__(self, config: WeightConfig | None = None) -> None:
        self.config = config or WeightConfig()
        self._score: dict[str, float | None] = {}  # None: the report says nothing
        self._reported_at: dict[str, float] = {}
        self._since: dict[str, float] = {}  # start of the current run of reports
        self._utilization: dict[str, float] = {}
        self._correction: dict[str, float] = {}
        self._adjusted: dict[str, float] = {}  # time of the report the correction last used

    def report(self, backend: str, report: LoadReport, now: float) -> None:
        """Record ``backend``'s report, received at ``now``."""
        last = self._reported_at.get(backend)
        if last is None or now - last > self.config.expiry:
            self._since[backend] = now  # first report, or the first after a gap: blackout
            self._correction.pop(backend, None)  # and what we learnt before the gap is old
            self._adjusted.pop(backend, None)
        self._reported_at[backend] = now
        self._score[backend] = self._capability(report)
        self._utilization[backend] = report.utilization

    def forget(self, backend: str) -> None:
        """``backend`` left, or restarted: drop what we knew about it."""
        tables = (self._score, self._reported_at, self._since, self._utilization,
                  self._correction, self._adjusted)  # fmt: skip
        for table in tables:
            table.pop(backend, None)

    def _capability(self, r: LoadReport) -> float | None:
        if r.qps > 0 and r.utilization > 0:
            return r.qps / (r.utilization + self.config.error_penalty * r.eps / r.qps)
        if r.qps == 0 and r.eps > 0:
            return 0.0  # only errors: floored to min_fraction of the mean below
        return None  # idle, or no utilization figure: no information

    def _trusted(self, backend: str, now: float) -> float | None:
        score = self._score.get(backend)
        if score is None:
            return None
        cfg = self.config
        fresh = now - self._reported_at[backend] <= cfg.expiry
        return score if fresh and now - self._since[backend] >= cfg.blackout else None

    def weights(self, backends: Sequence[str], now: float) -> list[float]:
        """One positive weight per backend of ``backends``, as of ``now``."""
        trusted = [self._trusted(b, now) for b in backends]
        known = [w for w in trusted if w]  # an errors-only zero would drag the mean down
        mean = sum(known) / len(known) if known else 1.0
        floor = self.config.min_fraction * mean
        correction = self._correction
        return [
            (mean if w is None else max(w, floor)) * correction.get(b, 1.0)
            for b, w in zip(backends, trusted, strict=True)
        ]

    def adjust(self, backends: Sequence[str], now: float) -> None:
        """One step of utilization feedback over the client's subset ``backends``, using the
        reports that arrived since the last step (see the module doc)."""
        gain = self.config.utilization_feedback
        if not gain:
            return
        # Only backends with a trusted, positive score: a backend that only fails uses no
        # CPU, and its low utilization must not earn it more traffic.
        seen = {b: self._utilization[b] for b in backends if self._trusted(b, now)}
        seen = {b: u for b, u in seen.items() if u > 0}
        if len(seen) < 2:
            return
        mean = sum(seen.values()) / len(seen)
        correction, adjusted, at = self._correction, self._adjusted, self._reported_at
        for b, u in seen.items():
            if adjusted.get(b) != at[b]:
                adjusted[b] = at[b]
                correction[b] = correction.get(b, 1.0) * (mean / u) ** gain
        # Keep the corrections centred on 1 (they only redistribute), then clamp them.
        centre = sum(correction.get(b, 1.0) for b in backends) / len(backends)
        top = self.config.max_correction
        for b in backends:
            if b in correction:
                correction[b] = min(top, max(1 / top, correction[b] / centre))
