"""Capability weights from backend load reports: score, blackout, expiry, mean, floor; gRPC
A58's weight lifecycle; and reports that try to poison the weights."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.common.balancer.weights import (
    MAX_SCORE,
    MIN_SCORE,
    LoadReport,
    WeightConfig,
    WeightTracker,
)

CFG = WeightConfig(blackout=10.0, expiry=60.0, error_penalty=1.0, min_fraction=0.01)


def trusted(tracker: WeightTracker, backend: str, report: LoadReport, at: float) -> None:
    """Report continuously from `at - blackout` to `at`, so the weight is trusted at `at`."""
    for t in range(int(at - CFG.blackout), int(at) + 1):
        tracker.report(backend, report, float(t))


def test_score_is_qps_per_utilization_with_errors_penalized() -> None:
    w = WeightTracker(CFG)
    trusted(w, "fast", LoadReport(qps=200, utilization=0.5), 20)
    trusted(w, "slow", LoadReport(qps=100, utilization=0.5), 20)
    trusted(w, "flaky", LoadReport(qps=100, utilization=0.4, eps=10), 20)
    assert w.weights(["fast", "slow", "flaky"], 20.0) == pytest.approx([400, 200, 200])


def test_new_backends_get_the_mean_until_the_blackout_is_over() -> None:
    w = WeightTracker(CFG)
    trusted(w, "a", LoadReport(100, 0.5), 20)  # 200
    trusted(w, "b", LoadReport(100, 0.25), 20)  # 400
    w.report("new", LoadReport(1000, 0.1), 15.0)  # 10000, but only 5 s of reports
    assert w.weights(["a", "b", "new", "silent"], 20.0) == pytest.approx([200, 400, 300, 300])
    w.report("new", LoadReport(1000, 0.1), 25.0)
    assert w.weights(["new"], 25.0) == pytest.approx([10000])


def test_stale_reports_expire_and_the_blackout_starts_over() -> None:
    w = WeightTracker(CFG)
    trusted(w, "a", LoadReport(100, 0.5), 20)
    trusted(w, "b", LoadReport(300, 0.5), 20)
    assert w.weights(["a", "b"], 80.0) == pytest.approx([200, 600])
    assert w.weights(["a", "b"], 80.5) == pytest.approx([1, 1])  # both stale: no information
    w.report("a", LoadReport(100, 0.5), 100.0)  # back after a gap: blackout again
    assert w.weights(["a", "b"], 105.0) == pytest.approx([1, 1])
    assert w.weights(["a", "b"], 110.0) == pytest.approx([200, 200])


def test_a_backend_with_only_errors_gets_the_floor_not_zero() -> None:
    w = WeightTracker(CFG)
    trusted(w, "ok", LoadReport(100, 0.5), 20)
    trusted(w, "dead", LoadReport(qps=0, utilization=0.01, eps=500), 20)
    trusted(w, "idle", LoadReport(qps=0, utilization=0.0), 20)
    assert w.weights(["ok", "dead", "idle"], 20.0) == pytest.approx([200, 2, 200])


def test_forget_and_bad_config() -> None:
    w = WeightTracker(CFG)
    trusted(w, "a", LoadReport(100, 0.5), 20)
    w.forget("a")
    w.forget("never-seen")
    assert w.weights(["a"], 20.0) == [1.0]
    for bad in ({"expiry": 0}, {"min_fraction": 0}, {"blackout": math.nan},
                {"error_penalty": math.inf}, {"utilization_feedback": 1.5},
                {"max_correction": math.inf}):  # fmt: skip
        with pytest.raises(ValueError):
            WeightConfig(**bad)  # type: ignore[arg-type]


# -- A58's weight lifecycle -------------------------------------------------------------------
# gRPC's weighted_round_robin (proposal A58), in our words: a weight counts only after a
# blackout since the backend's first non-empty report; a report with no qps or no
# utilization changes nothing, not even the age of the weight; a weight unrefreshed for the
# expiry period is dropped and the blackout starts again; so does a reconnect; a backend that
# leaves is forgotten. Backends without a weight get the mean of those with one.


def test_an_empty_report_keeps_the_weight_it_does_not_refresh_it() -> None:
    w = WeightTracker(CFG)  # blackout 10, expiry 60
    trusted(w, "a", LoadReport(100, 0.5), 20)  # 200, last set at 20
    trusted(w, "b", LoadReport(300, 0.5), 20)  # 600
    for t in range(21, 81):  # an idle "a" reports nothing, or qps without utilization
        w.report("a", LoadReport(0, 0.0) if t % 2 else LoadReport(50, 0.0), float(t))
    assert w.counters["empty_reports"] == 60
    assert w.weights(["a", "b"], 80.0) == pytest.approx([200, 600])  # kept, not wiped
    # Expiry counts from the last report that set the weight (20), not the empty ones.
    assert w.weights(["a", "b"], 80.5) == pytest.approx([1, 1])


def test_a_weight_that_expired_needs_a_new_blackout() -> None:
    w = WeightTracker(CFG)
    trusted(w, "a", LoadReport(100, 0.5), 20)
    trusted(w, "b", LoadReport(300, 0.5), 20)
    for t in range(21, 90):  # b stays fresh; a falls silent past its expiry (80)
        w.report("b", LoadReport(300, 0.5), float(t))
    w.report("a", LoadReport(1000, 0.5), 90.0)  # busy again: 2000, but only just
    assert w.weights(["a", "b"], 95.0) == pytest.approx([600, 600])  # blacked out: the mean
    w.report("b", LoadReport(300, 0.5), 100.0)
    assert w.weights(["a", "b"], 100.0) == pytest.approx([2000, 600])  # 10 s after 90


def test_a_reconnect_starts_the_blackout_over() -> None:
    w = WeightTracker(CFG)
    trusted(w, "a", LoadReport(100, 0.5), 20)
    trusted(w, "b", LoadReport(300, 0.5), 20)
    w.reconnected("a")  # it refused connections, then took them again: perhaps a new process
    w.report("a", LoadReport(100, 0.5), 21.0)
    w.report("b", LoadReport(300, 0.5), 21.0)
    assert w.weights(["a", "b"], 21.0) == pytest.approx([600, 600])
    w.report("a", LoadReport(100, 0.5), 31.0)
    assert w.weights(["a", "b"], 31.0) == pytest.approx([200, 600])


def test_with_one_weight_known_everyone_gets_it_and_with_none_all_are_equal() -> None:
    w = WeightTracker(CFG)
    assert w.weights(["a", "b", "c"], 0.0) == [1.0, 1.0, 1.0]
    trusted(w, "a", LoadReport(100, 0.25), 20)
    assert w.weights(["a", "b", "c"], 20.0) == pytest.approx([400, 400, 400])


# -- reports that try to poison the weights ---------------------------------------------------

EXTREMES = [0.0, 5e-324, 1e-310, 1e-300, 1e-9, 0.5, 1.0, 1e6, 1e15, 1e308, math.inf,
            -math.inf, math.nan, -0.0, -1.0, -5e-324]  # fmt: skip
any_value = st.sampled_from(EXTREMES) | st.floats()


def test_the_report_from_the_issue_does_not_break_the_weights() -> None:
    """qps 1e15 with utilization 1e-300 is within the wire's bounds, and used to make the
    weight infinite and every weight NaN."""
    w = WeightTracker(WeightConfig(blackout=0.0))
    w.report("ok", LoadReport(100, 0.5), 0.0)
    w.report("evil", LoadReport(qps=1e15, utilization=1e-300), 0.0)
    w.report("nan", LoadReport(qps=math.nan, utilization=0.5), 0.0)
    w.report("inf", LoadReport(qps=100, utilization=0.5, eps=math.inf), 0.0)
    weights = w.weights(["ok", "evil", "nan", "inf"], 0.0)
    assert all(math.isfinite(x) and x > 0 for x in weights)
    assert weights[0] == pytest.approx(200)
    assert w.counters["bad_reports"] == 3  # 1e15 qps is beyond MAX_RATE; NaN; inf
    w.report("tiny", LoadReport(qps=1e12, utilization=1e-9), 0.0)  # in range, score 1e21
    assert w.counters["clamped"] == 1
    assert w.weights(["tiny"], 0.0) == [pytest.approx(MAX_SCORE)]
    w.report("subnormal", LoadReport(qps=100, utilization=5e-324), 0.0)  # utilization → 0
    assert w.counters["clamped"] == 2 and w.counters["empty_reports"] == 1
    assert not w.report("ok", LoadReport(1, 1), math.nan)
    assert w.counters["bad_times"] == 1


@given(
    reports=st.lists(
        st.tuples(st.sampled_from("abcd"), any_value, any_value, any_value,
                  st.sampled_from([0.0, 1.0, 30.0, 1e9, -5.0, math.nan, math.inf]) | st.floats()),
        max_size=40,
    ),
    now=st.sampled_from([0.0, 10.0, 1e9, math.nan, math.inf, -math.inf]) | st.floats(),
    feedback=st.sampled_from([0.0, 0.3, 1.0]),
)
def test_no_report_makes_a_weight_anything_but_finite_and_positive(
    reports: list[tuple[str, float, float, float, float]], now: float, feedback: float
) -> None:
    w = WeightTracker(WeightConfig(blackout=0.0, utilization_feedback=feedback))
    for backend, qps, utilization, eps, at in reports:
        w.report(backend, LoadReport(qps, utilization, eps), at)
        w.adjust(list("abcd"), at)
    for x in w.weights(list("abcde"), now):
        assert math.isfinite(x) and x > 0
    assert all(MIN_SCORE <= s <= MAX_SCORE or s == 0.0 for s in w._score.values())


def test_checked_reports() -> None:
    fine = LoadReport(100, 0.5, 1)
    assert fine.checked() is fine
    assert LoadReport(100, 1e-12).checked() == LoadReport(100, 0.0)
    for bad in (LoadReport(-1, 0.5), LoadReport(math.nan, 0.5), LoadReport(1, math.inf),
                LoadReport(1, 0.5, 1e13), LoadReport(1, 1e4)):  # fmt: skip
        assert bad.checked() is None


def test_feedback_moves_weight_from_hotter_to_cooler_backends_on_new_reports_only() -> None:
    w = WeightTracker(CFG)  # utilization_feedback 0.3 by default
    trusted(w, "hot", LoadReport(qps=120, utilization=0.6), 20)  # capacity 200
    trusted(w, "cool", LoadReport(qps=60, utilization=0.3), 20)  # capacity 200
    w.adjust(["hot", "cool"], 20.0)
    hot, cool = w.weights(["hot", "cool"], 20.0)
    assert hot < 200 < cool
    # Mean utilization 0.45: hot × (0.45/0.6)**0.3, cool × (0.45/0.3)**0.3, a ratio of 2**0.3.
    assert cool / hot == pytest.approx(2**0.3, rel=1e-9)
    w.adjust(["hot", "cool"], 21.0)  # no new report since: nothing moves
    assert w.weights(["hot", "cool"], 21.0) == pytest.approx([hot, cool])
    w.report("hot", LoadReport(qps=120, utilization=0.6), 22.0)
    w.adjust(["hot", "cool"], 22.0)  # only the hot one reported again
    assert w.weights(["hot", "cool"], 22.0)[0] < hot


def test_feedback_is_clamped_and_skips_backends_that_only_fail() -> None:
    cfg = WeightConfig(blackout=0.0, max_correction=2.0, utilization_feedback=1.0)
    w = WeightTracker(cfg)
    for t in range(20):
        w.report("hot", LoadReport(qps=90, utilization=0.9), float(t))
        w.report("cool", LoadReport(qps=10, utilization=0.1), float(t))
        w.report("dead", LoadReport(qps=0, utilization=0.0, eps=100), float(t))
        w.adjust(["hot", "cool", "dead"], float(t))
    hot, cool, dead = w.weights(["hot", "cool", "dead"], 19.0)
    assert hot == pytest.approx(100 / 2) and cool == pytest.approx(100 * 2)
    assert dead == pytest.approx(1)  # the floor, not raised for its low utilization


def test_feedback_off_and_forgotten() -> None:
    off = WeightTracker(WeightConfig(blackout=0.0, utilization_feedback=0.0))
    on = WeightTracker(WeightConfig(blackout=0.0))
    for w in (off, on):
        w.report("a", LoadReport(qps=80, utilization=0.8), 0.0)
        w.report("b", LoadReport(qps=20, utilization=0.2), 0.0)
        w.adjust(["a", "b"], 0.0)
    assert off.weights(["a", "b"], 0.0) == pytest.approx([100, 100])
    assert on.weights(["a", "b"], 0.0) != pytest.approx([100, 100])
    on.forget("a")
    on.report("a", LoadReport(qps=80, utilization=0.8), 1.0)
    assert on.weights(["a"], 1.0) == pytest.approx([100])  # its correction went with it
