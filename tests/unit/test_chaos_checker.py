"""The chaos harness's journal checker on hand-made journals: it passes what the protocol
allows and fails what it does not (scripts/chaostools/checker.py)."""

from __future__ import annotations

from typing import Any

from chaostools import checker
from chaostools.checker import Fault, Process
from chaostools.schedule import Timings

# lease 3, margin 1, tick .25, report .5 -> failover 5.25; slack 1 -> handoff 3.6, wake 1
BOUNDS = checker.Bounds.from_timings(Timings(), slack=1.0)


def line(t: float, event: str, task: str = "T", worker: str = "a") -> dict[str, Any]:
    return {"t": t, "event": event, "task": task, "worker": worker}


def run(journals: dict[str, list[dict[str, Any]]], *, replicas: int = 1,
        processes: dict[str, Process] | None = None, faults: list[Fault] | None = None,
        history: list[tuple[float, list[str]]] | None = None,
        end: float = 20.0) -> checker.Result:
    procs = processes or {}
    for key in journals:
        procs.setdefault(key, Process(key, key.split("#")[0], 0.0))
    return checker.check(journals, procs, faults or [], history or [(0.0, ["T"])], replicas,
                         BOUNDS, 1.0, end)


def rules(res: checker.Result) -> list[str]:
    return [v["rule"] for v in res.violations]


def test_a_steady_owner_passes() -> None:
    res = run({"a#1": [line(0.5, "start")]})
    assert res.violations == [] and res.lost_tasks == [] and res.max_uncovered_s == 0


def test_make_before_break_hand_off_is_counted_not_a_violation() -> None:
    res = run({"a#1": [line(0.5, "start"), line(5.02, "stop")],
               "b#1": [line(5.0, "start", worker="b")]})
    assert res.violations == []
    assert len(res.handoffs) == 1 and abs(res.handoffs[0] - 0.02) < 1e-6
    assert res.double_owner_s == 0


def test_an_old_owner_that_stops_late_is_a_double_owner() -> None:
    res = run({"a#1": [line(0.5, "start"), line(9.0, "stop")],
               "b#1": [line(5.0, "start", worker="b")]})
    assert rules(res) == ["exclusive"]
    assert res.violations[0]["window"] == [5.0, 9.0]
    assert abs(res.double_owner_s - 4.0) < 1e-6


def test_two_extra_owners_are_a_violation_even_briefly() -> None:
    res = run({"a#1": [line(0.5, "start"), line(5.01, "stop")],
               "b#1": [line(5.0, "start", worker="b")],
               "c#1": [line(5.0, "start", worker="c"), line(5.01, "stop", worker="c")]})
    assert rules(res) == ["replicas+1"] and "3 owners" in res.violations[0]["detail"]


def test_more_owners_than_replicas_at_the_end_is_a_violation() -> None:
    res = run({"a#1": [line(0.5, "start")], "b#1": [line(19.0, "start", worker="b")]})
    assert rules(res) == ["exclusive"]


def test_a_gap_without_a_fault_is_a_coverage_violation() -> None:
    res = run({"a#1": [line(0.5, "start"), line(3.0, "stop")],
               "b#1": [line(5.0, "start", worker="b")]})
    assert rules(res) == ["coverage"] and res.violations[0]["window"] == [3.0, 5.0]
    assert abs(res.max_uncovered_s - 2.0) < 1e-6


def test_replicas_are_counted() -> None:
    res = run({"a#1": [line(0.5, "start")], "b#1": [line(0.5, "start", worker="b"),
                                                    line(8.0, "stop", worker="b")]},
              replicas=2)
    assert rules(res) == ["coverage"] and res.lost_tasks == ["T"]


def test_a_killed_worker_holds_nothing_and_its_gap_is_excused_within_failover() -> None:
    procs = {"a#1": Process("a#1", "a", 0.0, ended=3.0)}
    kill = Fault(0, "kill_worker", "a", 3.0, 3.0)
    ok = run({"a#1": [line(0.5, "start")], "b#1": [line(8.0, "start", worker="b")]},
             processes=dict(procs), faults=[kill])
    assert ok.violations == [] and ok.recovery[0]["recovery_s"] == 5.0
    late = run({"a#1": [line(0.5, "start")], "b#1": [line(12.0, "start", worker="b")]},
               processes=dict(procs), faults=[kill])
    assert rules(late) == ["coverage"]  # 3 + 5.25 + 1 slack < 12
    assert late.violations[0]["window"][0] == 3.0 + BOUNDS.failover + BOUNDS.slack


def test_a_zombie_that_stops_at_once_on_waking_is_counted_apart() -> None:
    procs = {"a#1": Process("a#1", "a", 0.0, frozen=((2.0, 9.0),))}
    stop = Fault(0, "stop_worker", "a", 2.0, 9.0)
    ok = run({"a#1": [line(0.5, "start"), line(9.01, "stop")],
              "b#1": [line(7.5, "start", worker="b")]},
             processes=dict(procs), faults=[stop])
    assert ok.violations == [] and len(ok.zombies) == 1 and ok.handoffs == []
    late = run({"a#1": [line(0.5, "start"), line(11.0, "stop")],
                "b#1": [line(7.5, "start", worker="b")]},
               processes=dict(procs), faults=[stop])
    assert rules(late) == ["exclusive"] and "zombie" in late.violations[0]["detail"]


def test_a_zombie_waking_into_a_hand_off_is_its_wake_up_not_a_third_owner() -> None:
    # Found by `scripts/chaos --seed 11 --handler log`: a frozen worker's in-process task
    # woke up (and stopped at once) while the task's new owners were handing it over.
    procs = {"a#1": Process("a#1", "a", 0.0, frozen=((2.0, 9.0),))}
    stop = Fault(0, "stop_worker", "a", 2.0, 9.0)
    res = run({"a#1": [line(0.5, "start"), line(9.01, "stop")],
               "b#1": [line(7.5, "start", worker="b"), line(9.02, "stop", worker="b")],
               "c#1": [line(8.9, "start", worker="c")]},
              processes=dict(procs), faults=[stop])
    assert "replicas+1" not in rules(res) and len(res.zombies) == 1
    # Not a zombie (it ran on long after waking): three owners are a violation.
    late = run({"a#1": [line(0.5, "start"), line(12.0, "stop")],
                "b#1": [line(7.5, "start", worker="b"), line(11.9, "stop", worker="b")],
                "c#1": [line(11.0, "start", worker="c")]},
               processes=dict(procs), faults=[stop])
    assert "replicas+1" in rules(late)


def test_an_exec_worker_s_tasks_run_on_while_it_is_frozen_until_the_keeper_ends_them() -> None:
    procs = {"a#1": Process("a#1", "a", 0.0, frozen=((2.0, 9.0),), exec=True)}
    stop = Fault(0, "stop_worker", "a", 2.0, 9.0)
    # The keeper ended it at the lease's end (2 + 3), before b was given it: no overlap.
    ok = run({"a#1": [line(0.5, "start"), line(5.01, "stop")],
              "b#1": [line(7.5, "start", worker="b")]}, processes=dict(procs), faults=[stop])
    assert ok.violations == [] and ok.zombies == []
    spans = checker.build_spans({"a#1": [line(0.5, "start"), line(5.01, "stop")]}, procs)
    assert [(s.start, s.end, s.frozen_at) for s in spans] == [(0.5, 2.0, None),
                                                               (2.0, 5.01, 2.0)]
    # No keeper: the process lives on until the agent wakes, next to b's.
    none = run({"a#1": [line(0.5, "start"), line(9.01, "stop")],
                "b#1": [line(7.5, "start", worker="b")]}, processes=dict(procs), faults=[stop])
    assert sorted(rules(none)) == ["exclusive", "keeper"]
    assert "two live processes" in next(v["detail"] for v in none.violations
                                        if v["rule"] == "exclusive")


def test_a_hand_off_interrupted_by_a_freeze_ends_with_the_keeper() -> None:
    procs = {"a#1": Process("a#1", "a", 0.0, frozen=((2.0, 9.0),), exec=True)}
    stop = Fault(0, "stop_worker", "a", 2.0, 9.0)
    journals = {"a#1": [line(0.5, "start"), line(5.01, "stop")],
                "b#1": [line(1.9, "start", worker="b")]}  # the new owner, just before
    res = run(journals, processes=dict(procs), faults=[stop])
    assert res.violations == [] and len(res.handoffs) == 1


def test_frozen_time_is_cut_out_of_spans() -> None:
    procs = {"a#1": Process("a#1", "a", 0.0, frozen=((2.0, 4.0), (6.0, None)))}
    spans = checker.build_spans({"a#1": [line(1.0, "start"), line(5.0, "stop"),
                                         line(5.5, "start", "U")]}, procs)
    assert [(s.task, s.start, s.end, s.resumed) for s in spans] == [
        ("T", 1.0, 2.0, False), ("T", 4.0, 5.0, True), ("U", 5.5, 6.0, False)]


def test_a_partitioned_old_owner_must_stop_when_its_lease_ends() -> None:
    cut = Fault(0, "partition", "a", 2.0, 12.0, {"proxy": "up+down"})
    ok = run({"a#1": [line(0.5, "start"), line(5.0, "stop")],
              "b#1": [line(7.4, "start", worker="b")]}, faults=[cut])
    assert ok.violations == []  # stopped at its lease (2 + 3); the gap is in the window
    late = run({"a#1": [line(0.5, "start"), line(8.0, "stop")],
                "b#1": [line(7.4, "start", worker="b")]}, faults=[cut])
    assert rules(late) == ["exclusive"]  # still running past lease + margin


def test_a_removed_task_must_stop() -> None:
    history = [(0.0, ["T", "U"]), (5.0, ["U"])]
    ok = run({"a#1": [line(0.5, "start"), line(5.5, "stop"), line(0.5, "start", "U")]},
             history=history)
    assert ok.violations == []
    late = run({"a#1": [line(0.5, "start"), line(15.0, "stop"), line(0.5, "start", "U")]},
               history=history)
    assert rules(late) == ["removed"]


def test_an_added_task_gets_its_window_and_an_unplaced_one_is_lost() -> None:
    history = [(0.0, ["T"]), (5.0, ["T", "U"])]
    add = Fault(0, "tasks", None, 5.0, 5.0, {"added": ["U"]})
    ok = run({"a#1": [line(0.5, "start"), line(6.0, "start", "U")]}, history=history,
             faults=[add])
    assert ok.violations == [] and ok.lost_tasks == []
    lost = run({"a#1": [line(0.5, "start")]}, history=history, faults=[add])
    assert lost.lost_tasks == ["U"] and rules(lost) == ["coverage"]


def test_a_task_placed_on_a_worker_while_it_was_down_is_in_that_fault_window() -> None:
    # b is frozen at 4; the supervisor, not knowing yet, gives it T at 5 (a died at 3.5): T
    # stays uncovered until b's freeze is noticed — within b's window, not a violation.
    procs = {"a#1": Process("a#1", "a", 0.0, ended=3.5),
             "b#1": Process("b#1", "b", 0.0, frozen=((4.0, 20.0),))}
    faults = [Fault(0, "kill_worker", "a", 3.5, 3.5), Fault(1, "stop_worker", "b", 4.0, 20.0)]
    journals = {"a#1": [line(0.5, "start")], "c#1": [line(12.0, "start", worker="c")],
                "b#1": []}
    without = run(journals, processes=dict(procs), faults=faults)
    assert rules(without) == ["coverage"]  # a's window ends at 3.5 + 5.25 + 1
    res = checker.check(journals, {**procs, "c#1": Process("c#1", "c", 0.0)}, faults,
                        [(0.0, ["T"])], 1, BOUNDS, 1.0, 20.0, [(5.0, {"T": ["b"]})])
    assert res.violations == []


def test_a_new_owner_cut_off_during_a_hand_off_gives_the_task_up_at_its_lease() -> None:
    # Found by a 180 s run: b was partitioned (its reports lost, instructions delivered) when
    # a drain handed it T; it started T under a lease that was still good, then gave T up when
    # the lease ran out — a hand-off overlap of 0.4 s, not a violation.
    cut = Fault(0, "partition", "b", 7.5, 11.0, {"proxy": "up"})
    res = run({"a#1": [line(0.5, "start")],
               "b#1": [line(10.0, "start", worker="b"), line(10.4, "stop", worker="b")]},
              faults=[cut])
    assert res.violations == [] and len(res.handoffs) == 1
    late = run({"a#1": [line(0.5, "start")],
                "b#1": [line(10.0, "start", worker="b"), line(11.5, "stop", worker="b")]},
               faults=[cut])
    assert rules(late) == ["exclusive"]  # held past its lease (7.5 + 3 + 0.5)


def test_an_exec_worker_s_task_outlives_a_kill_until_the_next_process_adopts_it() -> None:
    procs = {"a#1": Process("a#1", "a", 0.0, ended=3.0, exec=True),
             "a#2": Process("a#2", "a", 4.0, exec=True)}
    adopted = {"a#1": [line(0.5, "start")], "a#2": [line(4.5, "adopt")]}
    spans = checker.build_spans(adopted, procs)
    assert sorted((s.owner, s.start, s.end) for s in spans) == [
        ("a#1", 0.5, 3.0), ("a#1", 3.0, 4.5), ("a#2", 4.5, float("inf"))]
    res = run(adopted, processes=dict(procs))
    assert res.violations == [] and res.max_uncovered_s == 0  # one process, never uncovered


def test_an_exec_worker_s_task_not_adopted_must_end_with_the_lease() -> None:
    procs = {"a#1": Process("a#1", "a", 0.0, ended=3.0, exec=True),
             "a#2": Process("a#2", "a", 8.0, exec=True), "b#1": Process("b#1", "b", 0.0)}
    # The keeper ended it at the lease's end (3 + 3; its line lands in the journal of the
    # agent that attached last), and b got it after lease + margin.
    ok = {"a#1": [line(0.5, "start")], "a#2": [line(6.0, "stop") | {"by": "keeper"}],
          "b#1": [line(7.5, "start", worker="b")]}
    spans = checker.build_spans(ok, procs)
    assert ("a#1", 3.0, 6.0) in [(s.owner, s.start, s.end) for s in spans]
    kill = [Fault(0, "kill_worker", "a", 3.0, 8.0)]
    assert run(ok, processes=dict(procs), faults=kill).violations == []
    late = {"a#1": [line(0.5, "start")], "a#2": [line(8.5, "stop") | {"by": "keeper"}],
            "b#1": [line(7.5, "start", worker="b")]}
    assert sorted(rules(run(late, processes=dict(procs), faults=kill))) == ["exclusive", "keeper"]
