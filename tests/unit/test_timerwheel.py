"""The timer wheel: never early, at most one tick late, polls without drift; fake clock only."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.common.timers import TimerKind, TimerWheel


def test_timeout_fires_at_first_tick_boundary_at_or_after_deadline() -> None:
    w: TimerWheel[str] = TimerWheel(tick=0.5, now=0.0)
    w.schedule_timeout("a", at=1.2)
    assert w.next_deadline() == 1.5
    assert w.expire(1.49) == []
    fired = w.expire(1.5)
    assert [(f.key, f.kind, f.deadline) for f in fired] == [("a", TimerKind.TIMEOUT, 1.2)]
    assert "a" not in w and len(w) == 0 and w.next_deadline() is None


def test_deadline_on_a_tick_boundary_fires_exactly_then() -> None:
    w: TimerWheel[str] = TimerWheel(tick=0.1, now=0.0)
    w.schedule_timeout("a", at=0.7)  # 0.7 / 0.1 is 6.999999999999999 in floating point
    assert w.expire(0.69) == []
    assert [f.key for f in w.expire(0.7)] == ["a"]


def test_rescheduling_a_timeout_moves_it() -> None:
    w: TimerWheel[str] = TimerWheel(tick=1.0, now=0.0)
    w.schedule_timeout("worker", at=5.0)
    w.schedule_timeout("worker", at=9.0)  # the worker reported: re-armed
    assert len(w) == 1
    assert w.expire(8.0) == []
    assert [f.key for f in w.expire(9.0)] == ["worker"]


def test_cancel() -> None:
    w: TimerWheel[str] = TimerWheel(tick=1.0, now=0.0)
    w.schedule_timeout("a", at=3.0)
    assert w.cancel("a") is True
    assert w.cancel("a") is False
    assert w.expire(10.0) == []


def test_poll_rearms_from_its_deadline_without_drift() -> None:
    w: TimerWheel[str] = TimerWheel(tick=0.5, now=0.0)
    w.schedule_poll("query", interval=3.0, first_at=3.0)
    seen = []
    now = 0.0
    while now < 20.0:
        now += 0.7  # the loop wakes up at awkward times
        seen += [f.deadline for f in w.expire(now)]
    assert seen == [3.0, 6.0, 9.0, 12.0, 15.0, 18.0]


def test_poll_skips_missed_periods_after_a_clock_jump() -> None:
    w: TimerWheel[str] = TimerWheel(tick=1.0, now=0.0)
    w.schedule_poll("query", interval=10.0, first_at=10.0)
    fired = w.expire(47.0)
    assert [f.deadline for f in fired] == [10.0]
    assert w.deadline("query") == 50.0


def test_jump_longer_than_a_revolution_fires_everything_due_in_order() -> None:
    w: TimerWheel[int] = TimerWheel(tick=1.0, now=0.0, slots=8)
    for i in range(30):
        w.schedule_timeout(i, at=float(30 - i))
    w.schedule_timeout(99, at=1000.0)
    fired = w.expire(100.0)
    assert [f.key for f in fired] == list(range(29, -1, -1))
    assert w.next_deadline() == 1000.0


def test_past_deadline_fires_on_next_expire() -> None:
    w: TimerWheel[str] = TimerWheel(tick=1.0, now=10.0)
    w.schedule_timeout("late", at=3.0)
    assert w.next_deadline() == 11.0
    assert [f.key for f in w.expire(11.0)] == ["late"]


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="tick"):
        TimerWheel(tick=0, now=0.0)
    w: TimerWheel[str] = TimerWheel(tick=1.0, now=0.0)
    with pytest.raises(ValueError, match="interval"):
        w.schedule_poll("p", interval=0, first_at=1.0)
    with pytest.raises(ValueError, match="finite"):
        w.schedule_timeout("t", at=math.inf)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("timeout"), st.integers(0, 9), st.floats(0, 200)),
        st.tuples(st.just("poll"), st.integers(0, 9), st.floats(0.5, 50)),
        st.tuples(st.just("cancel"), st.integers(0, 9), st.just(0.0)),
        st.tuples(st.just("advance"), st.just(0), st.floats(0, 60)),
    ),
    max_size=60,
)


@given(ops, st.sampled_from([0.25, 0.5, 1.0]), st.sampled_from([4, 16, 512]))
def test_wheel_matches_a_naive_model(script: list[tuple[str, int, float]], tick: float,
                                     slots: int) -> None:
    """Against a dict of deadlines: same firings; never early; at most one tick late;
    next_deadline never later than the earliest firing."""
    w: TimerWheel[int] = TimerWheel(tick=tick, now=0.0, slots=slots)
    model: dict[int, tuple[float, float, int]] = {}  # key -> (deadline, interval, due tick)
    now = 0.0
    processed = 0  # ticks up to this one were handled (the wheel was made at now=0)

    def due(at: float) -> int:
        # The first tick boundary at or after `at` that has not been processed yet.
        return max(math.ceil(at / tick - 1e-9), processed + 1)

    for op, key, x in script:
        if op == "timeout":
            model[key] = (now + x, 0.0, due(now + x))
            w.schedule_timeout(key, at=now + x)
        elif op == "poll":
            w.schedule_poll(key, interval=x, first_at=now + x)
            model[key] = (now + x, x, due(now + x))
        elif op == "cancel":
            assert w.cancel(key) == (key in model)
            model.pop(key, None)
        else:
            nd = w.next_deadline()
            if model:
                assert nd is not None and nd <= min(t for _, _, t in model.values()) * tick + 1e-9
            else:
                assert nd is None
            now += x
            last = math.floor(now / tick + 1e-9)
            fired = {f.key: f.deadline for f in w.expire(now)}
            expected = {}
            for k, (d, interval, t) in list(model.items()):
                if t <= last:
                    expected[k] = d
                    assert t * tick <= max(d, processed * tick) + tick + 1e-9  # <= 1 tick late
                    if interval:
                        periods = max(1, math.floor((now - d) / interval + 1e-9) + 1)
                        nxt = d + periods * interval
                        model[k] = (nxt, interval, max(math.ceil(nxt / tick - 1e-9), last + 1))
                    else:
                        del model[k]
            processed = max(processed, last)
            assert fired.keys() == expected.keys()
            for k, d in fired.items():
                assert d == pytest.approx(expected[k])
                assert now >= d - 1e-9  # never early
        assert len(w) == len(model)
