"""Capability weights from backend load reports: score, blackout, expiry, mean, floor."""

from __future__ import annotations

import pytest

from corral.common.weights import LoadReport, WeightConfig, WeightTracker

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


def test_forget_and_bad_values() -> None:
    w = WeightTracker(CFG)
    trusted(w, "a", LoadReport(100, 0.5), 20)
    w.forget("a")
    w.forget("never-seen")
    assert w.weights(["a"], 20.0) == [1.0]
    with pytest.raises(ValueError, match="negative"):
        LoadReport(qps=-1, utilization=0.5)
    with pytest.raises(ValueError):
        WeightConfig(expiry=0)
    with pytest.raises(ValueError):
        WeightConfig(min_fraction=0)


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
