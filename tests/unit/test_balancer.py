"""The Balancer: subset + health + flow control + picker behind pick() / acquire() / release()."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from corral.common.balancer import Balancer, BalancerConfig, NoBackendAvailable
from corral.common.balancer.backends import BackendEvent, BackendState, HealthConfig
from corral.common.balancer.subsetting import subset
from corral.common.balancer.weights import LoadReport, WeightConfig

from ..support import FakeClock

BACKENDS = [f"w{i:02d}" for i in range(12)]


def test_the_subset_is_the_configured_algorithms() -> None:
    cfg = BalancerConfig(subsetting="deterministic", subset_size=4, seed=3)
    b = Balancer(cfg, BACKENDS, client=5)
    assert b.subset == subset("deterministic", BACKENDS, 5, 4, seed=3)


def test_pick_records_outcome_and_latency_with_the_callers_clock() -> None:
    clock = FakeClock()
    b = Balancer(BalancerConfig(picker="rr", subset_size=3), BACKENDS, 0, clock=clock)
    with b.pick() as r:
        clock.now += 0.25
    with pytest.raises(RuntimeError), b.pick() as failed:
        clock.now += 0.5
        raise RuntimeError("backend said no")
    with b.pick() as soft:
        soft.fail()
    stats = b.stats()
    assert stats[r.backend].requests == 1 and stats[r.backend].latency_ewma == 0.25
    assert stats[failed.backend].errors == 1 and stats[failed.backend].latency_ewma == 0.5
    assert stats[soft.backend].errors == 1
    assert len({r.backend, failed.backend, soft.backend}) == 3  # round robin


def test_pick_needs_a_clock() -> None:
    b = Balancer(BalancerConfig(), BACKENDS, 0)
    with pytest.raises(TypeError, match="clock"), b.pick():
        pass


def test_lame_ducks_get_nothing_and_an_all_lame_duck_subset_raises() -> None:
    b = Balancer(BalancerConfig(picker="p2c", subset_size=3), BACKENDS, 1)
    first, *rest = b.subset
    assert b.handle(first, BackendEvent.LAME_DUCK) is BackendState.LAME_DUCK
    assert b.handle("not-in-subset", BackendEvent.LAME_DUCK) is None
    picked = Counter(b.acquire(0.0).backend for _ in range(30))
    assert first not in picked and set(picked) == set(rest)
    for name in rest:
        b.handle(name, BackendEvent.LAME_DUCK)
    with pytest.raises(NoBackendAvailable):
        b.acquire(1.0)


def test_flow_control_limit_comes_from_the_config() -> None:
    health = HealthConfig(max_active=1, panic_threshold=0.0)
    b = Balancer(BalancerConfig(picker="llrr", subset_size=2, health=health), BACKENDS, 0)
    one, two = b.acquire(0.0), b.acquire(0.0)
    assert {one.backend, two.backend} == set(b.subset)
    with pytest.raises(NoBackendAvailable):
        b.acquire(0.0)
    b.release(one, 0.1)
    assert b.acquire(0.2).backend == one.backend


def test_weighted_round_robin_follows_reports_after_the_blackout() -> None:
    weights = WeightConfig(blackout=5.0, update_period=1.0)
    b = Balancer(BalancerConfig(picker="wrr", subset_size=2, weights=weights), BACKENDS, 0)
    fast, slow = b.subset
    for t in range(7):
        b.report(fast, LoadReport(qps=300, utilization=0.5), float(t))
        b.report(slow, LoadReport(qps=100, utilization=0.5), float(t))
    b.report("not-in-subset", LoadReport(1, 1), 6.0)  # ignored
    assert b.weights(6.0) == pytest.approx([600, 200])
    picked = Counter()
    for _ in range(4000):
        r = b.acquire(6.0)
        picked[r.backend] += 1
        b.release(r, 6.0)
    assert picked[fast] == pytest.approx(3000, abs=3)


def test_release_carries_a_load_report() -> None:
    weights = WeightConfig(blackout=0.0)
    b = Balancer(BalancerConfig(subset_size=2, weights=weights), BACKENDS, 0)
    r = b.acquire(0.0)
    b.release(r, 0.1, report=LoadReport(qps=50, utilization=0.25))
    assert b.weights(0.2)[b.subset.index(r.backend)] == pytest.approx(200)


def test_a_subset_change_keeps_what_is_known_about_backends_that_stay() -> None:
    cfg = BalancerConfig(picker="llrr", subsetting="random", subset_size=6, seed=1)
    b = Balancer(cfg, BACKENDS, 0)
    keep, gone = b.subset[0], b.subset[-1]
    b.handle(keep, BackendEvent.REFUSED)
    in_flight = [b.acquire(0.0) for _ in range(8)]
    failed = in_flight.pop()
    b.release(failed, 0.5, ok=False)
    b.set_backends([n for n in BACKENDS if n != gone])
    assert gone not in b.subset and keep in b.subset
    assert b.state(keep) is BackendState.REFUSING
    # Requests handed out before the change are released against the new subset.
    for r in in_flight:
        b.release(r, 1.0)
    assert all(s.requests <= 2 for s in b.stats().values())
    assert gone not in b.stats()
    b.set_backends([n for n in BACKENDS if n != gone])  # no change: nothing happens
    r = b.acquire(1.0)
    assert r.backend != keep


def test_in_flight_requests_and_errors_survive_a_subset_change() -> None:
    cfg = BalancerConfig(picker="llrr", subset_size=4)
    b = Balancer(cfg, BACKENDS[:3], 0)  # all three are in the subset
    a = b.acquire(0.0)
    b.release(a, 0.1, ok=False)  # an error on a.backend, remembered for 1 s
    busy = b.acquire(0.2)  # and a request in flight on another
    assert busy.backend != a.backend
    b.set_backends(BACKENDS[:4])
    idle = set(BACKENDS[:4]) - {a.backend, busy.backend}
    # Least loaded goes first to the two with neither an error nor a request in flight.
    assert {b.acquire(0.3).backend, b.acquire(0.3).backend} == idle


def test_config_is_validated() -> None:
    for bad in ({"picker": "fastest"}, {"subsetting": "sticky"}, {"subset_size": 0},
                {"latency_smoothing": 0.0}):  # fmt: skip
        with pytest.raises(ValueError):
            replace(BalancerConfig(), **bad)  # type: ignore[arg-type]


def test_a_backend_that_leaves_and_comes_back_starts_its_weight_over() -> None:
    """A58: weights are forgotten when a backend leaves; and a reconnect starts a blackout."""
    weights = WeightConfig(blackout=5.0, utilization_feedback=0.0)
    b = Balancer(BalancerConfig(picker="wrr", subset_size=3, weights=weights), BACKENDS[:3], 0)
    first, *others = BACKENDS[:3]

    def weight(at: float) -> dict[str, float]:
        return dict(zip(b.subset, b.weights(at), strict=True))

    for t in range(7):
        for name in BACKENDS[:3]:
            b.report(name, LoadReport(qps=300 if name == first else 100, utilization=0.5), t)
    assert weight(6.0) == pytest.approx({first: 600, others[0]: 200, others[1]: 200})
    b.set_backends(others)  # the first leaves...
    b.set_backends(BACKENDS[:3])  # ...and comes back: nothing is known about it
    b.report(first, LoadReport(qps=300, utilization=0.5), 7.0)
    assert weight(7.0)[first] == pytest.approx(200)  # the mean, until the blackout is over
    b.report(first, LoadReport(qps=300, utilization=0.5), 12.0)
    assert weight(12.0)[first] == pytest.approx(600)
    b.handle(first, BackendEvent.REFUSED)
    b.handle(first, BackendEvent.CONNECTED)  # a reconnect: blackout again
    b.report(first, LoadReport(qps=300, utilization=0.5), 12.5)
    assert weight(12.5)[first] == pytest.approx(200)
