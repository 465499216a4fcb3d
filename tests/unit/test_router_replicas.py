"""Picking among a task's owners (`ReplicaChooser`), with a fake clock and seeded randomness."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.common.balancer.backends import BackendEvent, BackendState, HealthConfig
from corral.common.balancer.replicas import ReplicaChooser
from corral.common.balancer.weights import LoadReport, WeightConfig


def chooser(policy: str, max_active: int = 100, **weights: float) -> ReplicaChooser:
    c = ReplicaChooser(policy, HealthConfig(max_active=max_active, error_window=1.0),
                       WeightConfig(**weights), random.Random(7))
    c.set_workers(["w1", "w2", "w3"])
    return c


def shares(c: ReplicaChooser, owners: list[str], n: int, now: float = 0.0) -> Counter[str]:
    got: Counter[str] = Counter()
    for _ in range(n):
        w = c.pick(owners, now)
        assert w is not None
        got[w] += 1
        c.finished(w, True, now)
    return got


def test_a_single_owner_is_taken_until_the_flow_control_limit() -> None:
    c = chooser("rr", max_active=2)
    c.handle("w1", BackendEvent.LAME_DUCK)  # the only owner: its state does not matter
    assert [c.pick(["w1"], 0.0) for _ in range(3)] == ["w1", "w1", None]
    c.finished("w1", True, 0.0)
    assert c.pick(["w1"], 0.0) == "w1"


def test_healthy_owners_first_then_lame_ducks_then_refusing_ones() -> None:
    c = chooser("rr")
    c.handle("w1", BackendEvent.REFUSED)
    c.handle("w2", BackendEvent.LAME_DUCK)
    assert set(shares(c, ["w1", "w2", "w3"], 10)) == {"w3"}
    c.handle("w3", BackendEvent.LAME_DUCK)
    assert set(shares(c, ["w1", "w2", "w3"], 10)) == {"w2", "w3"}
    c.handle("w1", BackendEvent.CONNECTED)
    assert set(shares(c, ["w1", "w2", "w3"], 10)) == {"w1"}
    assert c.state("w2") is BackendState.LAME_DUCK


def test_flow_control_moves_to_the_next_tier_and_then_gives_none() -> None:
    c = chooser("rr", max_active=1)
    c.handle("w2", BackendEvent.LAME_DUCK)
    assert c.pick(["w1", "w2"], 0.0) == "w1"
    assert c.pick(["w1", "w2"], 0.0) == "w2"  # w1 is full: the lame duck still answers
    assert c.pick(["w1", "w2"], 0.0) is None


def test_avoid_is_left_out_unless_it_is_the_only_candidate() -> None:
    c = chooser("rr")
    assert {c.pick(["w1", "w2"], 0.0, avoid="w1") for _ in range(5)} == {"w2"}
    c.handle("w2", BackendEvent.REFUSED)  # still a candidate: the last tier
    assert c.pick(["w1", "w2"], 0.0, avoid="w1") == "w2"
    c2 = chooser("rr", max_active=1)
    assert c2.pick(["w1", "w2"], 0.0) in ("w1", "w2")
    busy = "w1" if c2.active.get("w1") else "w2"
    other = "w2" if busy == "w1" else "w1"
    assert c2.pick(["w1", "w2"], 0.0, avoid=other) == other  # busy is full: avoid yields


def test_round_robin_takes_turns() -> None:
    got = shares(chooser("rr"), ["w1", "w2", "w3"], 300)
    assert got == Counter({"w1": 100, "w2": 100, "w3": 100})


def test_least_loaded_counts_errors_for_a_while_and_naive_does_not() -> None:
    for policy in ("llrr", "llrr-naive"):
        c = chooser(policy)
        for _ in range(2):  # w1 fails fast, twice
            c.active["w1"] = 1
            c.finished("w1", False, 0.0)
        got = shares(c, ["w1", "w2"], 10, now=0.5)
        if policy == "llrr":
            assert got == Counter({"w2": 10})  # two recent errors count as two requests
        else:
            assert got == Counter({"w1": 5, "w2": 5})  # the sinkholing pitfall
        assert c.errors == {"w1": 2}
        c.pick(["w1", "w2"], 1.5)  # forgotten after error_window
        assert c.errors == {}


def test_least_loaded_takes_the_one_with_fewer_in_flight() -> None:
    c = chooser("llrr")
    first = c.pick(["w1", "w2"], 0.0)
    second = c.pick(["w1", "w2"], 0.0)
    assert {first, second} == {"w1", "w2"}
    c.finished("w1", True, 0.0)
    assert c.pick(["w1", "w2"], 0.0) == "w1"


def test_p2c_prefers_the_less_loaded_and_random_spreads() -> None:
    c = chooser("p2c")
    for _ in range(5):
        c.active["w1"] = c.active.get("w1", 0) + 1  # w1 busy from elsewhere
    assert {c.pick(["w1", "w2"], 0.0) for _ in range(3)} == {"w2"}
    got = shares(chooser("random"), ["w1", "w2", "w3"], 3000)
    assert all(800 < n < 1200 for n in got.values()), got


def test_weighted_round_robin_follows_capacity_once_trusted() -> None:
    c = chooser("wrr", blackout=1.0, utilization_feedback=0.0)
    for t in (0.0, 0.5, 1.0, 1.5):  # w1 serves twice the qps at the same utilization
        c.finished("w1", True, t, LoadReport(qps=200, utilization=0.5))
        c.finished("w2", True, t, LoadReport(qps=100, utilization=0.5))
    early = shares(c, ["w1", "w2"], 2000, now=0.5)  # not trusted yet: equal weights
    assert abs(early["w1"] - early["w2"]) < 200, early
    late = shares(c, ["w1", "w2"], 3000, now=2.0)
    assert 1.7 < late["w1"] / late["w2"] < 2.3, late


def test_a_worker_that_reconnects_starts_its_weight_over() -> None:
    c = chooser("wrr", blackout=1.0, utilization_feedback=0.0)
    for t in (0.0, 1.0):
        c.finished("w1", True, t, LoadReport(qps=300, utilization=0.5))
        c.finished("w2", True, t, LoadReport(qps=100, utilization=0.5))
    assert c.weights.weights(["w1", "w2"], 1.0) == pytest.approx([600, 200])
    c.handle("w1", BackendEvent.REFUSED)
    c.handle("w1", BackendEvent.CONNECTED)
    c.finished("w1", True, 1.5, LoadReport(qps=300, utilization=0.5))
    assert c.weights.weights(["w1", "w2"], 1.5) == pytest.approx([200, 200])  # blacked out


def test_set_workers_forgets_the_departed() -> None:
    c = chooser("rr")
    c.handle("w3", BackendEvent.LAME_DUCK)
    c.set_workers(["w1", "w2"])
    assert c.state("w3") is BackendState.HEALTHY
    with pytest.raises(ValueError, match="unknown policy"):
        ReplicaChooser("fastest")


ops = st.lists(st.tuples(st.sampled_from(["pick", "finish", "fail", "event", "tick"]),
                         st.integers(0, 3), st.sampled_from(list(BackendEvent))), max_size=80)


@given(st.sampled_from(["rr", "llrr", "llrr-naive", "wrr", "p2c", "random"]), ops)
def test_invariants(policy: str, steps: list[tuple[str, int, BackendEvent]]) -> None:
    """A pick is an owner under the limit from the best tier available; counts stay true."""
    c = chooser(policy, max_active=2)
    owners = ["w1", "w2", "w3"]
    inflight: Counter[str] = Counter()
    now = 0.0
    rank = {BackendState.HEALTHY: 0, BackendState.LAME_DUCK: 1, BackendState.REFUSING: 2}
    for op, i, event in steps:
        w = owners[i % 3]
        if op == "pick":
            got = c.pick(owners[: i % 3 + 1], now)
            room = [o for o in owners[: i % 3 + 1] if inflight[o] < 2]
            if not room:
                assert got is None
                continue
            assert got in room
            assert rank[c.state(got)] == min(rank[c.state(o)] for o in room)
            inflight[got] += 1
        elif op in ("finish", "fail") and inflight[w]:
            inflight[w] -= 1
            c.finished(w, op == "finish", now, LoadReport(10, 0.5))
        elif op == "event":
            c.handle(w, event)
        else:
            now += 0.7
        assert {k: v for k, v in c.active.items() if v} == +inflight
