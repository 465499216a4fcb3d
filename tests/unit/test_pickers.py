"""Pickers: never an ineligible slot, the chapter's least-loaded example, weighted shares."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.common.balancer.pickers import PICKERS, LeastLoaded, make_picker


@pytest.mark.parametrize("name", sorted(PICKERS))
@given(
    n=st.integers(1, 12),
    ops=st.lists(st.tuples(st.sampled_from("peEwrx"), st.integers(0, 11)), max_size=200),
    seed=st.integers(0, 3),
)
def test_picks_are_eligible_and_counts_add_up(
    name: str, n: int, ops: list[tuple[str, int]], seed: int
) -> None:
    """Random pick / release / eligibility / error sequences against a model of the counts."""
    p = make_picker(name, n, random.Random(seed))
    eligible = [True] * n
    active = [0] * n
    errors = [0] * n
    for op, raw in ops:
        i = raw % n
        if op == "p":
            got = p.pick()
            if any(eligible):
                assert 0 <= got < n and eligible[got]
                active[got] += 1
            else:
                assert got == -1
        elif op == "r" and active[i]:
            p.release(i)
            active[i] -= 1
        elif op in "eE":
            eligible[i] = op == "e"
            p.set_eligible(i, eligible[i])
        elif op == "w":
            p.add_error(i)
            errors[i] += 1
        elif op == "x" and errors[i]:
            p.drop_error(i)
            errors[i] -= 1
        assert p.active == active and p.errors == errors


@pytest.mark.parametrize("name", ["llrr", "llrr-naive"])
@given(
    n=st.integers(1, 10),
    ops=st.lists(st.tuples(st.sampled_from("prwxE"), st.integers(0, 9)), max_size=150),
)
def test_least_loaded_always_picks_a_least_loaded_slot(
    name: str, n: int, ops: list[tuple[str, int]]
) -> None:
    p = make_picker(name, n, random.Random(0))
    counts_errors = name == "llrr"
    for op, raw in ops:
        i = raw % n
        if op == "p":
            loads = {
                j: p.active[j] + (p.errors[j] if counts_errors else 0)
                for j in range(n)
                if p.eligible[j]
            }
            got = p.pick()
            assert got == -1 if not loads else loads[got] == min(loads.values())
        elif op == "r" and p.active[i]:
            p.release(i)
        elif op == "w":
            p.add_error(i)
        elif op == "x" and p.errors[i]:
            p.drop_error(i)
        elif op == "E":
            p.set_eligible(i, not p.eligible[i])


def test_least_loaded_follows_the_chapters_example() -> None:
    # t0..t9 with 2 1 0 0 1 0 2 0 0 1 active requests (made here with errors, which llrr counts).
    p = make_picker("llrr", 10, random.Random(0))
    for t, load in enumerate([2, 1, 0, 0, 1, 0, 2, 0, 0, 1]):
        for _ in range(load):
            p.add_error(t)
    assert p.pick() == 2  # candidates t2, t3, t5, t7, t8
    assert [p.pick() for _ in range(4)] == [3, 5, 7, 8]
    # Everything but t0 and t6 is at 1 now; t4's request finishes, so t4 gets the next one.
    p.drop_error(4)
    assert p.pick() == 4


def test_naive_least_loaded_sinkholes_into_a_fast_failing_backend() -> None:
    """Slot 0 fails every request at once; the others take 10 steps. Naive least-loaded sends
    slot 0 most of the traffic, error-counting least-loaded almost none."""
    share = {}
    for name in ("llrr", "llrr-naive"):
        p = make_picker(name, 5, random.Random(0))
        in_flight: list[tuple[int, int]] = []  # (finishes at step, slot)
        errors: list[tuple[int, int]] = []  # (forgotten at step, slot)
        picks: Counter[int] = Counter()
        for step in range(5000):
            for entry in [e for e in errors if e[0] == step]:
                p.drop_error(entry[1])
                errors.remove(entry)
            for entry in [e for e in in_flight if e[0] == step]:
                p.release(entry[1])
                in_flight.remove(entry)
                if entry[1] == 0:
                    p.add_error(0)
                    errors.append((step + 50, 0))
            for _ in range(2):  # two new requests per step
                i = p.pick()
                picks[i] += 1
                in_flight.append((step + (1 if i == 0 else 10), i))
        share[name] = picks[0] / sum(picks.values())
    assert share["llrr-naive"] > 0.5
    assert share["llrr"] < 0.1


@given(
    weights=st.lists(st.floats(0.05, 20.0), min_size=1, max_size=30),
    seed=st.integers(0, 5),
)
def test_weighted_round_robin_shares_follow_the_weights_within_one_percent(
    weights: list[float], seed: int
) -> None:
    p = make_picker("wrr", len(weights), random.Random(seed))
    p.set_weights(weights)
    total = sum(weights)
    picks = 200 * len(weights) + int(100 * total / min(weights))  # ≥ 100 picks on the lightest
    got = Counter(p.pick() for _ in range(picks))
    for i, w in enumerate(weights):
        expected = picks * w / total
        assert abs(got[i] - expected) <= max(0.01 * expected, 1.0)


def test_weighted_round_robin_keeps_progress_when_weights_change() -> None:
    p = make_picker("wrr", 2, random.Random(0))
    p.set_weights([1.0, 1.0])
    first = Counter(p.pick() for _ in range(1000))
    p.set_weights([3.0, 1.0])
    second = Counter(p.pick() for _ in range(4000))
    assert first == {0: 500, 1: 500}
    assert abs(second[0] - 3000) <= 2


def test_weighted_round_robin_skips_an_ineligible_slot_without_a_burst_later() -> None:
    p = make_picker("wrr", 3, random.Random(0))
    p.set_eligible(1, False)
    assert 1 not in {p.pick() for _ in range(300)}
    p.set_eligible(1, True)
    window = Counter(p.pick() for _ in range(30))
    assert window[1] <= 11  # its fair share of 30 is 10


@pytest.mark.parametrize("name", sorted(PICKERS))
def test_every_eligible_slot_gets_traffic_and_none_when_nothing_is_eligible(name: str) -> None:
    p = make_picker(name, 8, random.Random(1))
    p.set_eligible(3, False)
    seen: Counter[int] = Counter()
    for _ in range(800):
        i = p.pick()
        seen[i] += 1
        p.release(i)
    assert set(seen) == {0, 1, 2, 4, 5, 6, 7}
    for i in range(8):
        p.set_eligible(i, False)
    assert p.pick() == -1


def test_round_robin_goes_round() -> None:
    p = make_picker("rr", 4, random.Random(2))
    first = p.pick()
    assert [p.pick() for _ in range(7)] == [(first + k) % 4 for k in range(1, 8)]


def test_power_of_two_prefers_the_less_loaded_of_its_two() -> None:
    p = make_picker("p2c", 2, random.Random(0))
    for _ in range(5):
        p.add_error(0)
    assert {p.pick() for _ in range(3)} == {1}


@given(
    loads=st.lists(st.integers(0, 6), min_size=2, max_size=2),
    errors=st.lists(st.integers(0, 3), min_size=2, max_size=2),
    seed=st.integers(0, 1000),
)
def test_power_of_two_with_two_backends_always_takes_the_less_loaded(
    loads: list[int], errors: list[int], seed: int
) -> None:
    """Finagle's and Envoy's P2C over two backends: both are always the two drawn, so the
    pick is the less loaded (active + recent errors), either one on a tie."""
    p = make_picker("p2c", 2, random.Random(seed))
    for i in range(2):
        p.add_active(i, loads[i])
        for _ in range(errors[i]):
            p.add_error(i)
    load = [loads[i] + errors[i] for i in range(2)]
    got = p.pick()
    assert load[got] == min(load)


@given(
    n=st.integers(3, 40),
    loads=st.lists(st.integers(0, 5), min_size=40, max_size=40),
    ineligible=st.sets(st.integers(0, 39), max_size=10),
    seed=st.integers(0, 1000),
)
def test_power_of_two_never_takes_the_more_loaded_of_its_two(
    n: int, loads: list[int], ineligible: set[int], seed: int
) -> None:
    """Whatever two slots it draws, it keeps the less loaded: so the single most loaded
    eligible slot is never picked while another eligible slot exists (it loses every draw it
    is in), and a pick never goes above the load of the second most loaded."""
    p = make_picker("p2c", n, random.Random(seed))
    for i in range(n):
        p.add_active(i, loads[i])
        if i in ineligible:
            p.set_eligible(i, False)
    eligible_loads = sorted(loads[i] for i in range(n) if i not in ineligible)
    for _ in range(50):
        got = p.pick()
        if not eligible_loads:
            assert got == -1
            return
        assert got not in ineligible
        if len(eligible_loads) > 1:
            assert p.active[got] - 1 <= eligible_loads[-2]
        p.release(got)


def test_least_loaded_serves_every_slot_once_per_level_in_a_burst() -> None:
    """Picks with no releases: the least load runs out every n picks, and each time every slot
    is queued at the next level, so each gets one pick per level."""
    p = make_picker("llrr", 5, random.Random(0))
    rounds = [[p.pick() for _ in range(5)] for _ in range(4)]
    assert all(sorted(r) == [0, 1, 2, 3, 4] for r in rounds)
    assert p.active == [4] * 5


@pytest.mark.parametrize("errors_at_a_high_level", [True, False])
def test_least_loaded_keeps_its_queues_bounded(errors_at_a_high_level: bool) -> None:
    """Stale entries are left at levels that no pick may reach for a long time: a slot that
    errors toggle high above the others, or (the usual one-request-at-a-time client) the level
    just above a minimum that never rises. They must not pile up."""
    p = make_picker("llrr", 3, random.Random(0))
    assert isinstance(p, LeastLoaded)
    p.add_error(2)
    p.add_error(2)  # slot 2 sits at load 2 while slots 0 and 1 cycle below it
    for _ in range(20_000):
        if errors_at_a_high_level:
            p.add_error(2)
            p.drop_error(2)
        p.release(p.pick())
    assert sum(len(q) for q in p._queues) <= p._budget_size + 3


def test_an_empty_picker_and_bad_arguments() -> None:
    for name in PICKERS:
        assert make_picker(name, 0, random.Random(0)).pick() == -1
    with pytest.raises(ValueError, match="unknown picker"):
        make_picker("fastest", 3, random.Random(0))
    with pytest.raises(ValueError, match="positive weight"):
        make_picker("wrr", 2, random.Random(0)).set_weights([1.0, 0.0])


@pytest.mark.parametrize("name", ["llrr", "llrr-naive", "rr", "wrr"])
@given(flaps=st.integers(1, 2_000), slot=st.integers(0, 4), seed=st.integers(0, 3))
def test_the_round_robin_order_survives_health_that_flaps(
        name: str, flaps: int, slot: int, seed: int) -> None:
    """Finagle's ApertureTest "order maintained when status flaps": one backend of five goes
    refused and connected again and again; then idle picks (each released at once) are shared
    evenly — 500 picks, 100 ± 1 each."""
    p = make_picker(name, 5, random.Random(seed))
    for _ in range(flaps):
        p.set_eligible(slot, False)
        p.set_eligible(slot, True)
    counts = Counter()
    for _ in range(500):
        i = p.pick()
        counts[i] += 1
        p.release(i)
    assert all(abs(counts[i] - 100) <= 1 for i in range(5)), counts


@given(ops=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), max_size=300))
def test_least_loaded_serves_each_idle_slot_once_a_round_whatever_came_before(
        ops: list[tuple[int, int]]) -> None:
    """Any history of flapping health, errors that came and went and requests that ended,
    then every slot eligible and idle: each round of five idle picks serves each slot once."""
    p = make_picker("llrr", 5, random.Random(0))
    for op, i in ops:
        if op == 0:
            p.set_eligible(i, not p.eligible[i])
        elif op == 1:
            p.add_error(i)
            p.drop_error(i)
        else:
            got = p.pick()
            if got >= 0:
                p.release(got)
    for i in range(5):
        p.set_eligible(i, True)
    for _ in range(4):
        served = []
        for _ in range(5):
            served.append(p.pick())
            p.release(served[-1])
        assert sorted(served) == [0, 1, 2, 3, 4], served
