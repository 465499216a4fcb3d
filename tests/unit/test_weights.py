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
