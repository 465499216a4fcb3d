"""Capability weights for weighted round robin, from what backends report about themselves.
docs/balancer.md ("wrr's weights") explains the lifecycle, where it departs from gRPC, and why.

In: each backend's `LoadReport` — successful ``qps`` (from all its clients), ``utilization``
(CPU, 0..1) and errors per second ``eps`` — with the time it arrived. Out: one positive, finite
weight per backend (`WeightTracker.weights`), the capability score ::

    weight = qps / (utilization + error_penalty × eps / qps)

times the backend's utilization-feedback correction. Its lifecycle is gRPC's (proposal A58):
a report without qps or utilization is *empty* and ignored (it does not keep the weight
fresh); a weight expires ``expiry`` after the report that set it, is trusted only
``blackout`` after the first report of its run, and starts over on `reconnected` and `forget`;
a backend without a trusted weight gets the mean of the trusted ones (1.0 if none). corral's
own additions: an errors-only report gives ``min_fraction`` × the mean, never zero; and
`adjust` multiplies a backend's correction, on each *new* report only (so slow reports do not
make it overshoot), by ``(mean utilization / its utilization) ** utilization_feedback``,
centred on 1 and clamped to [1/max_correction, max_correction] — integral control toward equal
utilization, which capacity alone cannot reach when other clients load the same backends.

No report can poison a weight: a value that is not a finite number, is negative or is beyond
`MAX_RATE` / `MAX_UTILIZATION` makes the tracker ignore the report; one below `TINY` counts as
zero; scores are clamped into [`MIN_SCORE`, `MAX_SCORE`], so sums of weights stay finite. Each
case is counted in `WeightTracker.counters` (no I/O here: the owner logs them if it wants to).
Time is a parameter (``now``); nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

# Bounds of a believable report. Beyond them a figure is a bug or a lie, not a measurement.
MAX_RATE = 1e12  # qps and eps: a million times more than one process serves
MAX_UTILIZATION = 1e3  # utilization may exceed 1 (several cores), never by this much
TINY = 1e-9  # a rate or utilization below this is noise (a subnormal, a rounding): zero
# Scores are clamped into this range where they are computed, so their sums stay finite.
MIN_SCORE = 1e-9
MAX_SCORE = 1e15

_INF = math.inf


@dataclass(frozen=True)
class LoadReport:
    """What a backend says about itself: successful qps, CPU utilization (0..1), errors/s.

    It holds whatever was said, even nonsense; `checked` says whether the tracker can use it."""

    qps: float
    utilization: float
    eps: float = 0.0

    def checked(self) -> LoadReport | None:
        """This report if every value is a finite number in range; a copy with the values
        below `TINY` set to zero; or None if a value is not a finite number, is negative or
        is above its bound (the report must be ignored)."""
        qps, utilization, eps = self.qps, self.utilization, self.eps
        # Written so that NaN fails every test: comparisons with NaN are false.
        if not (0 <= qps <= MAX_RATE and 0 <= eps <= MAX_RATE
                and 0 <= utilization <= MAX_UTILIZATION):  # fmt: skip
            return None
        if (qps >= TINY or not qps) and (eps >= TINY or not eps) and (
            utilization >= TINY or not utilization
        ):
            return self
        return LoadReport(
            qps if qps >= TINY else 0.0,
            utilization if utilization >= TINY else 0.0,
            eps if eps >= TINY else 0.0,
        )


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
        values = (self.error_penalty, self.blackout, self.expiry, self.update_period,
                  self.min_fraction, self.utilization_feedback, self.max_correction)  # fmt: skip
        if not all(math.isfinite(v) for v in values):
            raise ValueError(f"every weight setting must be a finite number: {self}")
        if self.error_penalty < 0 or self.blackout < 0:
            raise ValueError("error_penalty and blackout must be >= 0")
        if not 0 <= self.utilization_feedback <= 1:
            # A gain above 1 overshoots (and could overflow the correction).
            raise ValueError("utilization_feedback must be in [0, 1]")
        if self.max_correction < 1:
            raise ValueError(f"max_correction must be at least 1, not {self.max_correction}")
        if self.expiry <= 0 or self.update_period <= 0 or not 0 < self.min_fraction <= 1:
            raise ValueError("expiry and update_period must be positive, min_fraction in (0, 1]")


class WeightTracker:
    """The latest useful report per backend and the weights they give at a time ``now``.

    ``counters``: ``bad_reports`` (ignored: a value not a finite number, negative or out of
    range), ``bad_times`` (ignored: ``now`` not a finite number), ``empty_reports`` (ignored:
    nothing to weigh, as A58), ``clamped`` (used after setting a tiny value to zero or
    clamping the score into [MIN_SCORE, MAX_SCORE])."""

    def __init__(self, config: WeightConfig | None = None) -> None:
        self.config = config or WeightConfig()
        self.counters = dict.fromkeys(("bad_reports", "bad_times", "empty_reports", "clamped"), 0)
        self._score: dict[str, float] = {}
        self._reported_at: dict[str, float] = {}  # the last report that set the score
        self._since: dict[str, float] = {}  # start of the current run of reports
        self._utilization: dict[str, float] = {}
        self._correction: dict[str, float] = {}
        self._adjusted: dict[str, float] = {}  # time of the report the correction last used

    def report(self, backend: str, report: LoadReport, now: float) -> bool:
        """Record ``backend``'s report, received at ``now``; False if it was ignored."""
        counters = self.counters
        if not -_INF < now < _INF:
            counters["bad_times"] += 1
            return False
        usable = report.checked()
        if usable is None:
            counters["bad_reports"] += 1
            return False
        clamped = usable is not report
        score = self._capability(usable)
        if score and not MIN_SCORE <= score <= MAX_SCORE:  # 0.0 (errors only) is floored later
            score = min(MAX_SCORE, max(MIN_SCORE, score))
            clamped = True
        counters["clamped"] += clamped
        if score is None:
            counters["empty_reports"] += 1  # the last weight stays, and so does its age
            return False
        last = self._reported_at.get(backend)
        if last is None or not now - last <= self.config.expiry:
            self._since[backend] = now  # first report, or the first since it expired: blackout
            self._correction.pop(backend, None)  # and what we learnt before the gap is old
            self._adjusted.pop(backend, None)
        self._reported_at[backend] = now
        self._score[backend] = score
        self._utilization[backend] = usable.utilization
        return True

    def forget(self, backend: str) -> None:
        """``backend`` left, or restarted: drop what we knew about it."""
        tables = (self._score, self._reported_at, self._since, self._utilization,
                  self._correction, self._adjusted)  # fmt: skip
        for table in tables:
            table.pop(backend, None)

    def retain(self, backends: Collection[str]) -> None:
        """Only ``backends`` stay (the owner's current list): a report that came in after its
        backend left, a late reply, must not keep an entry for good. Every table's keys are
        among ``_reported_at``'s (a correction needs a trusted report)."""
        for gone in [b for b in self._reported_at if b not in backends]:
            self.forget(gone)

    def sizes(self) -> dict[str, int]:
        """Entries per table, for a long-running owner to publish (each is per backend)."""
        return {"weight_scores": len(self._score), "weight_reported_at": len(self._reported_at),
                "weight_since": len(self._since), "weight_utilization": len(self._utilization),
                "weight_corrections": len(self._correction),
                "weight_adjusted": len(self._adjusted)}

    def reconnected(self, backend: str) -> None:
        """``backend`` accepts connections again after refusing them: it may be a new process,
        so its weight starts over, with a blackout (A58)."""
        self.forget(backend)

    def _capability(self, r: LoadReport) -> float | None:
        """The score of a checked report (finite: the values are in range); 0.0 for errors
        only; None when the report says nothing (A58's empty report)."""
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
