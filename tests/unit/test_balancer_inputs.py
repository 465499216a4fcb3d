"""No input breaks the balancer core: whatever the backend lists (duplicates, none, thousands),
load reports (NaN, ±inf, subnormals, 1e308) and times (any float, in any order), a pick returns
a listed backend that may take the request, or raises NoBackendAvailable — nothing else."""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.common.balancer import Balancer, BalancerConfig, NoBackendAvailable, Request
from corral.common.balancer.backends import BackendEvent, BackendState, HealthConfig
from corral.common.balancer.pickers import PICKERS
from corral.common.balancer.subsetting import ALGORITHMS
from corral.common.balancer.weights import LoadReport, WeightConfig

NAMES = [f"w{i}" for i in range(8)]
names = st.sampled_from(NAMES) | st.text(max_size=2)
backend_lists = st.lists(names, max_size=24)
EXTREMES = [0.0, -0.0, 5e-324, 1e-300, 0.5, 1.0, 1e15, 1e308, math.inf, -math.inf, math.nan,
            -1.0]  # fmt: skip
values = st.sampled_from(EXTREMES) | st.floats()
reports = st.builds(LoadReport, values, values, values)
times = st.sampled_from([0.0, 0.5, 3.0, 1e9, -1.0, math.nan, math.inf, -math.inf]) | st.floats()
operations = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), times),
        st.tuples(st.just("release"), st.integers(0, 99), times, st.booleans(),
                  st.none() | reports),
        st.tuples(st.just("report"), names, reports, times),
        st.tuples(st.just("event"), names, st.sampled_from(list(BackendEvent))),
        st.tuples(st.just("backends"), backend_lists),
    ),
    max_size=60,
)


def check_pick(b: Balancer, listed: set[str], now: float) -> Request | None:
    """Acquire at ``now`` and check the contract; None when it raised NoBackendAvailable."""
    subset = b.subset
    states = {n: b.state(n) for n in subset}
    panic = b.panic
    try:
        r = b.acquire(now)
    except NoBackendAvailable:
        # Only when nothing could take it: no backend, or every one a lame duck or (outside
        # panic) unhealthy or at its flow-control limit.
        assert panic is False or all(s is BackendState.LAME_DUCK for s in states.values())
        return None
    assert r.backend in listed and r.backend in subset
    assert states[r.backend] is not BackendState.LAME_DUCK
    if not panic:
        assert states[r.backend] is BackendState.HEALTHY
    return r


def run(b: Balancer, backends: list[str], ops: list[tuple[Any, ...]]) -> None:
    listed = set(backends)
    in_flight: list[Request] = []
    for op in ops:
        kind = op[0]
        if kind == "acquire":
            r = check_pick(b, listed, op[1])
            if r is not None:
                in_flight.append(r)
        elif kind == "release" and in_flight:
            _, k, now, ok, report = op
            b.release(in_flight.pop(k % len(in_flight)), now, ok, report)
        elif kind == "report":
            b.report(op[1], op[2], op[3])
        elif kind == "event":
            b.handle(op[1], op[2])
        elif kind == "backends":
            listed = set(op[1])
            b.set_backends(op[1])
        weights = b.weights(1.0)
        assert all(math.isfinite(w) and w > 0 for w in weights)
    check_pick(b, listed, 1e6)


@settings(max_examples=300)
@given(
    picker=st.sampled_from(sorted(PICKERS)),
    subsetting=st.sampled_from(ALGORITHMS),
    backends=backend_lists,
    ops=operations,
    size=st.integers(1, 8),
    max_active=st.integers(1, 4),
    blackout=st.sampled_from([0.0, 2.0]),
)
def test_a_pick_returns_a_backend_that_may_take_it_or_raises_no_backend_available(
    picker: str, subsetting: str, backends: list[str], ops: list[tuple[Any, ...]], size: int,
    max_active: int, blackout: float,
) -> None:
    config = BalancerConfig(
        picker=picker, subsetting=subsetting, subset_size=size,
        health=HealthConfig(max_active=max_active),
        weights=WeightConfig(blackout=blackout, update_period=0.5),
    )  # fmt: skip
    run(Balancer(config, backends, client=3), backends, ops)


@settings(max_examples=15, deadline=None)
@given(
    picker=st.sampled_from(["wrr", "llrr", "p2c"]),
    count=st.integers(1000, 4000),
    seed=st.integers(0, 2**32),
    ops=operations,
)
def test_thousands_of_backends_with_repeats(
    picker: str, count: int, seed: int, ops: list[tuple[Any, ...]]
) -> None:
    # Drawn here rather than by hypothesis, which is slow to build and shrink long lists.
    rnd = random.Random(seed)
    backends = [f"b{rnd.randrange(3000)}" for _ in range(count)]
    config = BalancerConfig(picker=picker, subset_size=50, weights=WeightConfig(blackout=0.0))
    b = Balancer(config, backends, client=11)
    assert b.counters["duplicate_backends"] == len(backends) - len(set(backends))
    assert len(b.subset) == len(set(b.subset)) == 50
    run(b, backends, ops)


def test_a_lame_duck_listed_twice_gets_no_picks() -> None:
    backends = ["a", "b", "c", "a", "a"]
    b = Balancer(BalancerConfig(picker="rr", subset_size=3), backends, client=0)
    assert sorted(b.subset) == ["a", "b", "c"]
    assert b.counters["duplicate_backends"] == 2
    b.handle("a", BackendEvent.LAME_DUCK)
    picked = Counter(b.acquire(float(t)).backend for t in range(60))
    assert picked == {"b": 30, "c": 30}
    b.set_backends(["b", "b", "c"])
    assert b.counters["duplicate_backends"] == 3


def test_the_report_from_the_issue_through_the_balancer() -> None:
    """One extreme report used to make every acquire raise ValueError for the whole subset."""
    cfg = BalancerConfig(picker="wrr", subset_size=3, weights=WeightConfig(blackout=0.0))
    b = Balancer(cfg, ["a", "b", "c"], client=0)
    r = b.acquire(0.0)
    b.release(r, 0.1, report=LoadReport(qps=1e15, utilization=1e-300))
    b.report("b", LoadReport(qps=math.nan, utilization=math.inf, eps=-1), 0.2)
    b.report("c", LoadReport(qps=1e12, utilization=1e-9), 0.3)  # in range: clamped score
    picked = Counter(b.acquire(5.0 + t / 100).backend for t in range(300))
    assert set(picked) <= {"a", "b", "c"} and sum(picked.values()) == 300
    counters = b.counters
    assert counters["bad_reports"] == 2 and counters["clamped"] == 1


def test_bad_times_are_replaced_by_the_latest_good_one() -> None:
    b = Balancer(BalancerConfig(picker="llrr", subset_size=2), ["a", "b"], client=0)
    r = b.acquire(10.0)
    b.release(r, math.nan, ok=False)  # the error is remembered from 10.0, not from NaN
    later = b.acquire(5.0)  # earlier than 10: taken as 10
    assert later.started == 10.0 and b.counters["bad_times"] == 1
    b.release(later, 10.5)
    # The error expires one error_window (1 s) after 10.0: then both are equally loaded.
    assert {b.acquire(11.5).backend, b.acquire(11.5).backend} == {"a", "b"}
