"""The serving worker's load report (`LoadMeter`), with a fake clock."""

from __future__ import annotations

import doctest

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.common.balancer import loadmeter
from corral.common.balancer.loadmeter import LoadMeter


def test_doctests() -> None:
    assert doctest.testmod(loadmeter).failed == 0


def test_the_report_covers_complete_buckets_only() -> None:
    m = LoadMeter(width=0.5, buckets=4, now=0.0)
    for i in range(10):  # 10 requests of 10 ms in the first bucket
        m.record(i * 0.04, i * 0.04 + 0.01, ok=True)
    assert (m.qps, m.utilization) == (0.0, 0.0)  # the bucket is not complete yet
    m.roll(0.5)
    assert m.qps == pytest.approx(20.0) and m.utilization == pytest.approx(0.2)
    m.roll(1.0)  # an empty bucket joins the window: the rates halve
    assert m.qps == pytest.approx(10.0) and m.utilization == pytest.approx(0.1)
    m.roll(2.5)  # four buckets later the busy one has left the window
    assert (m.qps, m.utilization, m.errors) == (0.0, 0.0, 0.0)


def test_errors_are_counted_apart_and_utilization_is_capped() -> None:
    m = LoadMeter(width=1.0, buckets=1, now=0.0)
    m.record(0.0, 0.1, ok=False)
    m.record(-5.0, 0.9, ok=True)  # a request that began long before: busy past the bucket
    m.roll(1.0)
    assert (m.qps, m.errors, m.utilization) == (1.0, 1.0, 1.0)


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError):
        LoadMeter(width=0, buckets=4)
    with pytest.raises(ValueError):
        LoadMeter(width=1, buckets=0)


@given(st.lists(st.tuples(st.floats(0, 0.2), st.floats(0, 0.05), st.booleans()), max_size=60))
def test_rates_match_a_model_over_the_window(requests: list[tuple[float, float, bool]]) -> None:
    """Requests back to back; at the end the report equals counts over the last 4 buckets."""
    m = LoadMeter(width=0.25, buckets=4, now=0.0)
    t, log = 0.0, []
    for gap, length, ok in requests:
        start = t + gap
        t = start + length
        m.record(start, t, ok)
        log.append((start, t, ok))
    end = (int(t / 0.25) + 1) * 0.25
    m.roll(end)
    window = [r for r in log if r[1] >= end - 1.0]
    span = min(1.0, end)
    assert m.qps == pytest.approx(sum(1 for r in window if r[2]) / span)
    assert m.errors == pytest.approx(sum(1 for r in window if not r[2]) / span)
    assert m.utilization == pytest.approx(min(1.0, sum(r[1] - r[0] for r in window) / span))
