"""corral-sim: the simulations (small sizes) and the command line (CliRunner and the script)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from corral.sim.cli import main
from corral.sim.histogram import text_histogram
from corral.sim.policies_sim import POLICIES, RunConfig, simulate_policies
from corral.sim.subsetting_sim import simulate_subsetting
from corral.sim.world import FleetConfig, build_fleet

SUBSETTING_KEYS = {"min", "mean", "max", "min_over_mean", "max_over_mean"}
POLICY_KEYS = {
    "cpu_max_over_min", "wasted_fraction", "error_rate", "p50_ms", "p99_ms",
    "failing_backend_share",
}  # fmt: skip
SMALL = FleetConfig(backends=12, clients=12, subset_size=4, seed=1)
SHORT = RunConfig(duration=8.0, warmup=12.0)


# -- subsetting ------------------------------------------------------------------------------


def test_random_subsetting_spreads_connections_widely_and_deterministic_does_not() -> None:
    rnd = simulate_subsetting("random", 100, 100, 10)
    det = simulate_subsetting("deterministic", 100, 100, 10)
    assert rnd.mean == det.mean == 10
    assert rnd.to_json()["min_over_mean"] < 0.7 and rnd.to_json()["max_over_mean"] > 1.3
    assert det.max - det.min <= 1
    assert set(det.to_json()) == SUBSETTING_KEYS


def test_a_resize_adds_churn_and_its_ideal() -> None:
    det = simulate_subsetting("deterministic", 50, 40, 8, resize_to=41)
    low = simulate_subsetting("low-churn", 50, 40, 8, resize_to=41)
    assert set(det.to_json()) == SUBSETTING_KEYS | {"churn"}
    assert det.ideal_churn == low.ideal_churn == pytest.approx(1 / 41)
    assert low.churn is not None and det.churn is not None
    assert low.churn < det.churn / 4
    shrink = simulate_subsetting("random", 50, 40, 8, resize_to=30)
    assert shrink.churn is not None and shrink.churn >= 10 / 40 * 0.5


def test_text_histograms() -> None:
    assert text_histogram([]) == ["(no values)"]
    lines = text_histogram([15, 16, 17, 30, 45], bins=3)
    assert [line.split("│")[0].strip() for line in lines] == ["15–25", "26–36", "37–47"]
    assert [line.rsplit(" ", 1)[1] for line in lines] == ["3", "1", "1"]
    assert text_histogram([0.5, 0.5])[0].startswith("0.5 │")
    assert len(text_histogram([0.1, 0.2, 0.9], bins=4)) == 4


# -- policies --------------------------------------------------------------------------------


def test_the_fleet_is_the_same_for_every_policy_and_seeded() -> None:
    assert build_fleet(SMALL) == build_fleet(SMALL)
    assert build_fleet(SMALL).speeds != build_fleet(FleetConfig(backends=12, seed=2)).speeds
    speeds = build_fleet(FleetConfig(backends=300)).speeds
    assert min(speeds) >= 0.8 and max(speeds) <= 1.5


def test_policies_report_every_key_and_are_deterministic() -> None:
    one = simulate_policies(POLICIES, SMALL, SHORT)
    again = simulate_policies(("wrr",), SMALL, SHORT)
    assert one["wrr"] == again["wrr"]
    for policy, result in one.items():
        doc = result.to_json()
        assert set(doc) == POLICY_KEYS, policy
        assert doc["failing_backend_share"] is None
        assert doc["error_rate"] == 0.0
        assert doc["cpu_max_over_min"] >= 1.0 and 0.0 <= doc["wasted_fraction"] < 1.0
        assert 0 < doc["p50_ms"] <= doc["p99_ms"]
        assert len(result.utilization) == 12 and result.requests > 1000


def test_without_error_counting_least_loaded_sinkholes_into_the_failing_backend() -> None:
    fleet = FleetConfig(backends=10, clients=6, subset_size=5, seed=3, failing_backend=True)
    got = simulate_policies(("rr", "llrr", "llrr-naive"), fleet, SHORT)
    share = {p: r.failing_backend_share for p, r in got.items()}
    assert share["rr"] is not None and share["llrr"] is not None
    assert share["llrr-naive"] is not None and share["llrr-naive"] > 2 * share["rr"]
    assert share["llrr"] < share["rr"] / 2
    assert all(len(r.utilization) == 9 for r in got.values())  # the failing one left out
    assert got["llrr-naive"].error_rate == pytest.approx(share["llrr-naive"])


def test_weighted_round_robin_evens_cpu_better_than_round_robin() -> None:
    got = simulate_policies(("rr", "wrr"), FleetConfig(backends=20, clients=20, subset_size=8),
                            RunConfig(duration=20.0, warmup=15.0))  # fmt: skip
    assert got["wrr"].cpu_max_over_min < got["rr"].cpu_max_over_min
    assert got["wrr"].wasted_fraction < got["rr"].wasted_fraction


def test_bad_configs() -> None:
    for bad in ({"backends": 0}, {"load": 1.0}, {"backends": 1, "failing_backend": True},
                {"subsetting": "sticky"}):  # fmt: skip
        with pytest.raises(ValueError):
            FleetConfig(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RunConfig(report_window=0.5)


# -- the command line ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "options"),
    [
        (["subsetting"], ["--clients", "--backends", "--subset-size", "--algo", "--seed",
                          "--resize", "--lot-size", "--tradeoff", "--steps", "--output",
                          "--plot"]),
        (["policies"], ["--policy", "--clients", "--backends", "--subset-size", "--seed",
                        "--failing-backend", "--duration", "--warmup", "--load",
                        "--wrr-feedback", "--output", "--plot"]),
    ],
)  # fmt: skip
def test_help_explains_every_option_and_its_default(command: list[str], options: list[str]) -> None:
    out = CliRunner().invoke(main, [*command, "--help"], terminal_width=200)
    assert out.exit_code == 0
    for option in options:
        line = next(line for line in out.output.splitlines() if option in line)
        block = out.output[out.output.index(line) :].split("\n  -")[0]
        assert "default" in block, option


def test_subsetting_json_has_exactly_the_issue_keys() -> None:
    args = ["subsetting", "--clients", "50", "--backends", "50", "--subset-size", "5"]
    out = CliRunner().invoke(main, [*args, "--algo", "random", "-o", "json", "--resize", "51"])
    assert out.exit_code == 0, out.output
    assert set(json.loads(out.output)) == SUBSETTING_KEYS | {"churn"}


def test_policies_json_has_exactly_the_issue_keys() -> None:
    args = ["policies", "--backends", "6", "--clients", "4", "--subset-size", "3"]
    out = CliRunner().invoke(main, [*args, "--duration", "2", "--warmup", "1", "-o", "json",
                                    "--failing-backend"])  # fmt: skip
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert set(doc) == {"backends", "clients", *POLICIES}
    assert doc["backends"] == 6 and doc["clients"] == 4
    assert all(set(doc[p]) == POLICY_KEYS for p in POLICIES)
    assert all(doc[p]["failing_backend_share"] is not None for p in POLICIES)


def test_the_tradeoff_of_churn_against_balance() -> None:
    args = ["subsetting", "--tradeoff", "--clients", "100", "--backends", "100",
            "--subset-size", "10", "--steps", "10"]  # fmt: skip
    out = CliRunner().invoke(main, [*args, "-o", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    rows = {r["variant"]: r for r in doc["variants"]}
    assert {"random", "deterministic", "low-churn", "stable, 3 arcs (= stable)",
            "steady (the default)"} <= set(rows)
    ratio = {v: r["churn_over_minimum"] for v, r in rows.items()}
    assert ratio["stable, 3 arcs (= stable)"] < ratio["low-churn"] < ratio["deterministic"]
    steady = rows["steady (the default)"]  # K = 10 < 21: a block of 50 re-spaced per step
    assert ratio["steady (the default)"] < ratio["low-churn"] and steady["max_over_mean"] < 1.15
    assert rows["deterministic"]["max_over_mean"] == rows["deterministic"]["min_over_mean"] == 1
    assert all(r["minimum"] == pytest.approx(sum(1 / b for b in range(101, 111)))
               for r in rows.values())  # fmt: skip
    text = CliRunner().invoke(main, args)
    assert text.exit_code == 0 and "÷ minimum" in text.output and "stable, 8 arcs" in text.output


def test_a_resize_compares_every_algorithm_step_by_step() -> None:
    args = ["subsetting", "--clients", "60", "--backends", "64", "--subset-size", "24",
            "--resize", "70"]  # fmt: skip
    out = CliRunner().invoke(main, [*args, "-o", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    rows = {r["variant"]: r for r in doc["variants"]}
    assert set(rows) == {"random", "deterministic", "low-churn", "stable", "steady",
                         "steady, clients uncounted"}  # fmt: skip
    least = sum(1 / b for b in range(65, 71))
    assert all(r["minimum"] == pytest.approx(least) for r in rows.values())
    assert rows["deterministic"]["spread"] <= 1 and rows["deterministic"]["worst_step_loss"] > 1
    assert rows["steady"]["spread"] <= 2 and rows["steady"]["churn_over_minimum"] < 2
    assert rows["steady"]["worst_step_loss"] == rows["steady"]["worst_single_loss"] == 1
    assert rows["random"]["worst_single_loss"] == 1  # a rendezvous order moves only the change
    text = CliRunner().invoke(main, args)
    assert text.exit_code == 0 and "lost/any" in text.output and "steady" in text.output


def test_text_reports() -> None:
    out = CliRunner().invoke(main, ["subsetting", "--algo", "low-churn", "--resize", "301"])
    assert out.exit_code == 0
    assert "churn" in out.output and "ideal" in out.output
    args = ["policies", "--policy", "rr", "--backends", "5", "--clients", "3", "--subset-size"]
    out = CliRunner().invoke(main, [*args, "2", "--duration", "2", "--warmup", "1"])
    assert out.exit_code == 0 and "CPU max÷min" in out.output and "rr:" in out.output


@pytest.mark.parametrize(
    "args",
    [
        ["subsetting", "--subset-size", "0"],
        ["subsetting", "--algo", "sticky"],
        ["subsetting", "--algo", "low-churn", "--lot-size", "3"],
        ["subsetting", "--tradeoff", "--steps", "0"],
        ["policies", "--wrr-feedback", "2"],
        ["policies", "--policy", "fastest"],
        ["policies", "--load", "1.5"],
        ["policies", "--backends", "1", "--failing-backend"],
    ],
)
def test_bad_arguments_are_usage_errors(args: list[str]) -> None:
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 2
    lines = out.output.strip().splitlines()
    assert len(lines) == 1, out.output  # one clear line naming the command and the problem
    assert lines[0].split(":")[0].endswith(args[0])
    assert "Traceback" not in out.output


def test_plot_without_matplotlib_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    out = CliRunner().invoke(main, ["subsetting", "--plot", "out.png"])
    assert out.exit_code == 1
    assert "pip install 'corral[plot]'" in out.output


def test_plot_writes_a_png(tmp_path: Path) -> None:
    import matplotlib  # noqa: F401 (the test extra has it: this test never skips)
    png = tmp_path / "subsets.png"
    out = CliRunner().invoke(main, ["subsetting", "--algo", "random", "--plot", str(png)])
    assert out.exit_code == 0, out.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    png = tmp_path / "tradeoff.png"
    args = ["subsetting", "--tradeoff", "--backends", "20", "--clients", "20", "--subset-size"]
    out = CliRunner().invoke(main, [*args, "4", "--steps", "3", "--plot", str(png)])
    assert out.exit_code == 0, out.output
    assert png.read_bytes()[:4] == b"\x89PNG"
    png = tmp_path / "policies.png"
    args = ["policies", "--backends", "5", "--clients", "3", "--subset-size", "2"]
    out = CliRunner().invoke(main, [*args, "--duration", "2", "--warmup", "1", "--plot", str(png)])
    assert out.exit_code == 0, out.output
    assert png.read_bytes()[:4] == b"\x89PNG"


