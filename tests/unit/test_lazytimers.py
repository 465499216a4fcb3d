"""LazyTimers against a naive model: every arming comes out exactly once, never early, at
most one tick late, tick by tick; next_deadline is the earliest armed tick."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.common.timers import LazyTimers

ops = st.lists(
    st.one_of(
        st.tuples(st.just("arm"), st.integers(0, 5), st.floats(-3.0, 20.0)),
        st.tuples(st.just("advance"), st.just(0), st.floats(0.0, 6.0)),
    ),
    max_size=80,
)


@given(ops, st.sampled_from([0.1, 0.25, 0.5, 1.0]), st.floats(0.0, 100.0))
def test_lazy_timers_match_a_naive_model(script: list[tuple[str, int, float]], tick: float,
                                         start: float) -> None:
    t: LazyTimers[int] = LazyTimers(tick, start)
    pending: list[tuple[int, int, float]] = []  # (due tick, order, at) per arming
    now, processed, order = start, math.floor(start / tick + 1e-9), 0
    for op, key, x in script:
        if op == "arm":
            at = now + x  # may be in the past: it comes out at the next tick
            due = t.arm(key, at)
            assert due == max(math.ceil(at / tick - 1e-9), processed + 1)
            assert due * tick >= at - 1e-6 or due == processed + 1  # never early
            pending.append((due, order, key))
            order += 1
        else:
            nd = t.next_deadline()
            assert nd == (min(p[0] for p in pending) * tick if pending else None)
            now += x
            last = math.floor(now / tick + 1e-9)
            out = t.expire(now)
            due_now = sorted(p for p in pending if p[0] <= last)
            assert out == [k for _, _, k in due_now]  # tick by tick, in arming order
            pending = [p for p in pending if p[0] > last]
            processed = max(processed, last)
            assert t.next_tick == processed + 1
    assert len(t) == len(pending)


def test_a_deadline_must_be_finite() -> None:
    t: LazyTimers[str] = LazyTimers(0.5, 0.0)
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="finite"):
            t.arm("w", bad)
    with pytest.raises(ValueError, match="tick"):
        LazyTimers(0.0, 0.0)
