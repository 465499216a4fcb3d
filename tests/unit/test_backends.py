"""Backend states, flow control, panic threshold and error memory (BackendTable)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.common.balancer.backends import (
    TRANSITIONS,
    BackendEvent,
    BackendState,
    BackendTable,
    HealthConfig,
)
from corral.common.balancer.pickers import PICKERS, make_picker

H, R, L = BackendState.HEALTHY, BackendState.REFUSING, BackendState.LAME_DUCK
E = BackendEvent


def table(n: int, picker: str = "rr", **config: float) -> BackendTable:
    names = [f"b{i}" for i in range(n)]
    return BackendTable(names, make_picker(picker, n, random.Random(0)), HealthConfig(**config))  # type: ignore[arg-type]


def test_transitions_are_the_documented_ones() -> None:
    assert TRANSITIONS == {
        (H, E.REFUSED): R, (R, E.REFUSED): R, (L, E.REFUSED): R,
        (H, E.CONNECTED): H, (R, E.CONNECTED): H, (L, E.CONNECTED): L,
        (H, E.LAME_DUCK): L, (R, E.LAME_DUCK): L, (L, E.LAME_DUCK): L,
        (H, E.READY): H, (R, E.READY): H, (L, E.READY): H,
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted(PICKERS))
@given(
    events=st.lists(
        st.tuples(st.sampled_from([*BackendEvent, "pick", "end", "fail"]), st.integers(0, 5)),
        max_size=120,
    ),
    limit=st.integers(1, 4),
)
def test_lame_ducks_never_get_new_picks(
    name: str, events: list[tuple[str, int]], limit: int
) -> None:
    t = table(6, name, max_active=limit)
    in_flight: list[int] = []
    now = 0.0
    for what, i in events:
        now += 0.3
        t.expire(now)
        if what == "pick":
            got = t.picker.pick()
            if got >= 0:
                assert t.states[got] is not L
                if not t.panic:
                    assert t.states[got] is H and t.picker.active[got] <= limit
                t.started(got)
                in_flight.append(got)
        elif what in ("end", "fail") and in_flight:
            t.finished(in_flight.pop(i % len(in_flight)), what == "end", now)
        elif what in BackendEvent.__members__.values():
            t.handle(f"b{i}", BackendEvent(what))
        healthy_open = sum(s is H and t.picker.active[j] < limit for j, s in enumerate(t.states))
        assert t.available == healthy_open
        assert t.panic == (healthy_open < 3)


def test_flow_control_stops_new_requests_at_the_limit_until_one_ends() -> None:
    t = table(4, "rr", max_active=2)
    for _ in range(8):
        t.started(t.picker.pick())
    assert t.picker.active == [2, 2, 2, 2]
    assert t.available == 0 and t.panic  # all full: panic lets them take more
    assert t.picker.pick() >= 0
    t = table(4, "rr", max_active=2, panic_threshold=0.0)  # no panic: flow control holds
    for _ in range(8):
        t.started(t.picker.pick())
    assert t.picker.pick() == -1
    t.finished(2, True, 0.0)
    assert t.picker.pick() == 2


def test_panic_uses_the_refusing_backends_but_never_the_lame_ducks() -> None:
    t = table(4)
    t.handle("b0", E.REFUSED)
    assert not t.panic and t.available == 3
    assert 0 not in {t.picker.pick() for _ in range(12)}
    t.handle("b1", E.REFUSED)
    t.handle("b2", E.LAME_DUCK)  # 1 of 4 available: panic
    assert t.panic
    assert {t.picker.pick() for _ in range(12)} == {0, 1, 3}
    t.handle("b0", E.CONNECTED)  # 2 of 4: no panic any more
    assert not t.panic
    assert {t.picker.pick() for _ in range(12)} == {0, 3}


def test_a_lame_duck_finishes_its_requests_and_can_come_back() -> None:
    t = table(2)
    got = t.picker.pick()
    t.started(got)
    t.handle(f"b{got}", E.LAME_DUCK)
    t.finished(got, True, 1.0)  # the in-flight request ends normally
    assert t.picker.active[got] == 0
    assert {t.picker.pick() for _ in range(4)} == {1 - got}
    assert t.handle(f"b{got}", E.CONNECTED) is L
    assert t.handle(f"b{got}", E.READY) is H


def test_errors_count_as_load_for_the_error_window() -> None:
    t = table(2, "llrr", error_window=2.0)
    assert t.picker.pick() == 0
    t.started(0)
    t.finished(0, False, 10.0)  # slot 0's request failed at t=10
    assert t.picker.errors == [1, 0]
    assert t.pending_errors() == [(12.0, "b0")]
    t.expire(11.9)
    assert t.picker.errors == [1, 0]
    t.expire(12.0)
    assert t.picker.errors == [0, 0]


def test_states_given_up_front_and_bad_config() -> None:
    names = ["a", "b"]
    t = BackendTable(names, make_picker("rr", 2, random.Random(0)), states={"a": L})
    assert t.state("a") is L and t.state("b") is H
    with pytest.raises(ValueError, match="one slot per backend"):
        BackendTable(names, make_picker("rr", 3, random.Random(0)))
    for bad in ({"max_active": 0}, {"panic_threshold": 1.5}, {"error_window": -1.0}):
        with pytest.raises(ValueError):
            HealthConfig(**bad)  # type: ignore[arg-type]
