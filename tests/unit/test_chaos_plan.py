"""The chaos harness's fault plan (scripts/chaostools/schedule.py); its proxy, which moves real
bytes, is tested in tests/component/test_chaos_proxy.py."""

from __future__ import annotations

from chaostools import schedule

WORKERS = ["w1", "w2", "w3", "w4"]
TASKS = [f"task-{i:03d}" for i in range(24)]


def make(seed: int, span: float = 40.0) -> list[schedule.Step]:
    return schedule.plan(seed, span, WORKERS, TASKS, 2, schedule.Timings())


def test_the_same_seed_gives_the_same_plan_and_another_seed_another() -> None:
    assert make(7) == make(7)
    assert make(7) != make(8)


def test_every_kind_comes_up_and_steps_stay_in_the_span() -> None:
    steps = make(1)
    kinds = {schedule.kind_of(s) for s in steps if s.begins}
    assert kinds == set(schedule.KINDS)
    assert all(s.at >= 0 for s in steps) and all(s.at < 40 for s in steps if s.begins)
    assert [s.at for s in steps] == sorted(s.at for s in steps)


def test_replicas_plus_one_workers_stay_healthy_and_one_fault_per_worker() -> None:
    for seed in range(20):
        down: dict[str, float] = {}  # worker -> when it is healthy again
        gone: set[str] = set()
        alive = set(WORKERS)
        for s in make(seed):
            if s.action == "spawn_worker":  # a join, or a drained worker's replacement
                alive.add(str(s.target))
            if not s.begins or s.action == "spawn_worker":
                continue
            kind = schedule.kind_of(s)
            if s.target is not None:
                assert down.get(s.target, 0.0) <= s.at, f"seed {seed}: two faults on a worker"
            ends = [e.at for e in make(seed) if e.fault == s.fault and not e.begins]
            if kind in ("kill_worker", "stop_worker", "partition", "ctl_drain"):
                down[str(s.target)] = ends[0]
            elif kind == "drain_worker":
                gone.add(str(s.target))
            healthy = [w for w in alive - gone if down.get(w, 0.0) <= s.at]
            if kind == "kill_supervisor":
                assert all(t <= s.at for t in down.values()), f"seed {seed}"
            assert len(healthy) >= 3, f"seed {seed}: {healthy} at {s.at}"


def test_task_changes_add_new_names_and_keep_some_tasks() -> None:
    changes = [s for s in make(3, 120.0) if s.action == "tasks"]
    assert changes
    seen = set(TASKS)
    for s in changes:
        assert s.args["tasks"] and not set(s.args["added"]) & seen
        seen |= set(s.args["added"])
