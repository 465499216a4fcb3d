"""A discrete-event simulation of clients balancing requests over their subsets.

Each client runs a real `corral.common.balancer.Balancer` (the same code a worker embeds) with
one policy; the backends are multi-core FIFO servers on machines of different speeds (see
`corral.sim.world` for the world and where its numbers come from). Backends report
their successful qps, CPU utilization and errors per second every ``report_period`` seconds,
averaged over the last ``report_window`` seconds, to the clients that use them (``wrr`` builds
its weights from these; the other policies ignore them).

After ``warmup`` seconds the simulation measures for ``duration`` seconds:

* CPU utilization per backend — busy core-seconds / (cores × duration); the failing backend
  (which uses no CPU) is left out of the CPU figures;
* ``cpu_max_over_min`` — the most loaded backend's utilization over the least loaded's;
* ``wasted_fraction`` — the chapter's wasted capacity, Σ (CPU_max − CPU_i) as a fraction of the
  reserved CPU that traffic could use before the most loaded backend is full, = 1 − mean / max;
* ``error_rate``, latency ``p50_ms`` / ``p99_ms`` (send to response, queueing included), and
  ``failing_backend_share`` — the fraction of all requests sent to the failing backend.

Nothing here knows what a policy is "supposed" to do: every figure is counted from events.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, replace

from corral.common.balancer import Balancer, BalancerConfig, NoBackendAvailable, Request
from corral.common.balancer.weights import LoadReport, WeightConfig
from corral.sim.world import Fleet, FleetConfig, build_fleet, cost_sampler

POLICIES = ("rr", "llrr", "llrr-naive", "wrr", "p2c", "random")

_ARRIVAL, _CPU_DONE, _RESPONSE, _REPORT = 0, 1, 2, 3


@dataclass(frozen=True)
class RunConfig:
    """How long to simulate and how often backends report."""

    duration: float = 60.0  # simulated seconds measured
    warmup: float = 20.0  # simulated seconds before measuring (longer than wrr's blackout)
    report_period: float = 1.0
    report_window: float = 5.0

    def __post_init__(self) -> None:
        if self.duration <= 0 or self.warmup < 0:
            raise ValueError("duration must be positive and warmup non-negative")
        if self.report_period <= 0 or self.report_window < self.report_period:
            raise ValueError("report_period must be positive and report_window at least that")


@dataclass(frozen=True)
class PolicyResult:
    """What one policy did in the measured window."""

    policy: str
    utilization: tuple[float, ...]  # per backend, the failing one left out
    requests: int
    errors: int
    latencies_ms: tuple[float, float]  # p50, p99
    failing_requests: int | None  # requests sent to the failing backend, if there is one

    @property
    def cpu_max_over_min(self) -> float:
        low = min(self.utilization)
        return max(self.utilization) / low if low > 0 else math.inf

    @property
    def wasted_fraction(self) -> float:
        top = max(self.utilization)
        return 1 - sum(self.utilization) / len(self.utilization) / top if top > 0 else 0.0

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    @property
    def failing_backend_share(self) -> float | None:
        if self.failing_requests is None:
            return None
        return self.failing_requests / self.requests if self.requests else 0.0

    def to_json(self) -> dict[str, float | None]:
        """The keys of each policy in ``corral-sim policies -o json``."""
        return {
            "cpu_max_over_min": self.cpu_max_over_min,
            "wasted_fraction": self.wasted_fraction,
            "error_rate": self.error_rate,
            "p50_ms": self.latencies_ms[0],
            "p99_ms": self.latencies_ms[1],
            "failing_backend_share": self.failing_backend_share,
        }


class _Job:
    """One request on its way: who sent it, when, and the CPU it needs on its backend."""

    __slots__ = ("client", "ok", "request", "sent", "service")

    def __init__(self, client: int, request: Request, sent: float, service: float) -> None:
        self.client = client
        self.request = request
        self.sent = sent
        self.service = service
        self.ok = True


def _percentile(ordered: list[float], q: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def simulate_policy(
    policy: str, fleet: Fleet, run: RunConfig | None = None, wrr_feedback: float | None = None
) -> PolicyResult:
    """Run ``policy`` on ``fleet``; deterministic for a given fleet seed. ``wrr_feedback``
    overrides the default gain of wrr's utilization feedback (0 turns it off)."""
    run = run or RunConfig()
    cfg = fleet.config
    names = fleet.names
    index = {n: i for i, n in enumerate(names)}
    nb = cfg.backends
    weights = WeightConfig()
    if wrr_feedback is not None:
        weights = replace(weights, utilization_feedback=wrr_feedback)
    balancer_cfg = BalancerConfig(
        picker=policy,
        subsetting=cfg.subsetting,
        subset_size=cfg.subset_size,
        seed=cfg.seed,
        weights=weights,
    )
    balancers = [
        Balancer(balancer_cfg, names, c, rng=random.Random(f"corral-client:{cfg.seed}:{c}"))
        for c in range(cfg.clients)
    ]
    clients_of: list[list[Balancer]] = [[] for _ in range(nb)]
    for bal in balancers:
        for name in bal.subset:
            clients_of[index[name]].append(bal)

    rng = random.Random(f"corral-sim:{cfg.seed}")
    draw, expo = rng.random, rng.expovariate
    cheapest, log_range = cost_sampler(cfg, rng)
    exp = math.exp
    speeds, cores, failing = fleet.speeds, cfg.cores, fleet.failing
    wait_rate = 1 / cfg.mean_wait
    start, end = run.warmup, run.warmup + run.duration

    busy = [0] * nb  # cores in use
    queues: list[deque[_Job]] = [deque() for _ in range(nb)]
    cpu = [0.0] * nb  # busy core-seconds inside the measured window
    # This report period's successes, errors and busy core-seconds, then the last few periods'.
    period: list[list[float]] = [[0, 0, 0.0] for _ in range(nb)]
    periods_kept = max(1, round(run.report_window / run.report_period))
    history: list[deque[list[float]]] = [deque(maxlen=periods_kept) for _ in range(nb)]
    latencies: list[float] = []
    requests = errors = failing_requests = 0

    events: list[tuple[float, int, int, int, _Job | None]] = []
    seq = 0
    for c, rate in enumerate(fleet.rates):
        events.append((expo(rate), seq, _ARRIVAL, c, None))
        seq += 1
    events.append((run.report_period, seq, _REPORT, 0, None))
    heapq.heapify(events)
    push, pop = heapq.heappush, heapq.heappop

    def begin(b: int, job: _Job, now: float) -> None:
        """Start ``job`` on a free core of backend b."""
        nonlocal seq
        overlap = min(now + job.service, end) - max(now, start)
        if overlap > 0:
            cpu[b] += overlap
        seq += 1
        push(events, (now + job.service, seq, _CPU_DONE, b, job))

    while events:
        now, _, kind, x, job = pop(events)
        if now >= end:
            break
        if kind == _ARRIVAL:
            seq += 1
            push(events, (now + expo(fleet.rates[x]), seq, _ARRIVAL, x, None))
            measuring = now >= start
            requests += measuring
            try:
                request = balancers[x].acquire(now)
            except NoBackendAvailable:
                errors += measuring
                continue
            b = index[request.backend]
            job = _Job(x, request, now, cheapest * exp(log_range * draw()) / speeds[b])
            if b == failing:  # answers at once with an error, using no CPU
                failing_requests += measuring
                period[b][1] += 1
                job.ok = False
                seq += 1
                push(events, (now + cfg.fail_latency, seq, _RESPONSE, b, job))
            elif busy[b] < cores:
                busy[b] += 1
                begin(b, job, now)
            else:
                queues[b].append(job)
        elif kind == _CPU_DONE:
            assert job is not None
            seq += 1
            push(events, (now + expo(wait_rate), seq, _RESPONSE, x, job))
            stats = period[x]
            stats[0] += 1
            stats[2] += job.service
            if queues[x]:
                begin(x, queues[x].popleft(), now)
            else:
                busy[x] -= 1
        elif kind == _RESPONSE:
            assert job is not None
            balancers[job.client].release(job.request, now, ok=job.ok)
            if job.sent >= start:
                latencies.append(now - job.sent)
                errors += not job.ok
        else:
            _report(now, period, history, clients_of, names, cores, run, policy == "wrr")
            seq += 1
            push(events, (now + run.report_period, seq, _REPORT, 0, None))

    span = run.duration * cores
    utilization = tuple(cpu[b] / span for b in range(nb) if b != failing)
    latencies.sort()
    return PolicyResult(
        policy,
        utilization,
        requests,
        errors,
        (1000 * _percentile(latencies, 0.50), 1000 * _percentile(latencies, 0.99)),
        failing_requests if failing is not None else None,
    )


def _report(
    now: float,
    period: list[list[float]],
    history: list[deque[list[float]]],
    clients_of: list[list[Balancer]],
    names: list[str],
    cores: int,
    run: RunConfig,
    deliver: bool,
) -> None:
    """Close a report period; each backend tells its clients its recent qps, CPU and errors."""
    for b, stats in enumerate(period):
        history[b].append(list(stats))
        stats[0] = stats[1] = 0
        stats[2] = 0.0
        if not deliver:
            continue
        seconds = len(history[b]) * run.report_period
        ok = sum(h[0] for h in history[b])
        failed = sum(h[1] for h in history[b])
        used = sum(h[2] for h in history[b])
        report = LoadReport(ok / seconds, used / (cores * seconds), failed / seconds)
        for bal in clients_of[b]:
            bal.report(names[b], report, now)


def simulate_policies(
    policies: tuple[str, ...],
    config: FleetConfig,
    run: RunConfig | None = None,
    wrr_feedback: float | None = None,
) -> dict[str, PolicyResult]:
    """Each policy on the same fleet (same machines, rates and subsets)."""
    fleet = build_fleet(config)
    return {p: simulate_policy(p, fleet, run, wrr_feedback) for p in policies}
