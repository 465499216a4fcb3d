"""The rebuild that ends the warm-up runs in slices, with reports read in between
(supervisor/rebuild.py): cut anywhere it gives the assignment the one-step rebuild gives, and
what happens between slices — a worker falling silent, joining, restarting, a newer task list,
a demotion — is taken into account, with every lease renewed meanwhile."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.common.wire.protocol import Instructions, make_token
from corral.common.wire.tasklist import entry
from corral.supervisor import verbs
from corral.supervisor.events import Continue, RoleChanged, TasksFetched
from corral.supervisor.lifecycle import Phase
from corral.supervisor.role import Role

from .modelfleet import Harness, ModelWorker, config


def rebuilt(h: Harness, dt: float = 0.5, limit: float = 200.0,
            silent: tuple[ModelWorker, ...] = ()) -> None:
    """Until the supervisor runs and its rebuild (resets included) is over."""
    h.until(lambda: h.running() and h.core.rebuilding is None, dt=dt, limit=limit,
            silent=silent)


def settle(h: Harness) -> None:
    """Until no hand-off is in flight, and two report intervals more."""
    h.until(lambda: not h.core.assigner.handoffs.pinned, limit=20.0)
    h.step(1.0)
    h.step(1.0)


def assignment(h: Harness) -> dict[str, list[str]]:
    view = h.core.assigner.placement.view
    return {t: sorted(ws) for t, ws in view.assignment().items() if ws}


def fleet(workers: list[tuple[int, dict[str, int]]]) -> list[ModelWorker]:
    return [ModelWorker(f"w{i}", max_load=cap, running=running, lease_until=30.0)
            for i, (cap, running) in enumerate(workers)]


@st.composite
def histories(draw: st.DrawFn) -> tuple[int, dict[str, float], list[tuple[int, dict[str, int]]]]:
    """A task list, and workers (capacity, what each runs with its token) as a supervisor
    restart finds them: overlapping claims, stale tokens, tasks no longer listed, overfull
    workers."""
    replicas = draw(st.integers(1, 2))
    n_tasks = draw(st.integers(1, 25))
    tasks = {f"t{i:02d}": draw(st.sampled_from([1.0, 1.0, 2.0, 0.5])) for i in range(n_tasks)}
    names = [*tasks, "gone-1", "gone-2"]
    workers = []
    for _ in range(draw(st.integers(1, 6))):
        cap = draw(st.integers(0, 8))
        ran = draw(st.lists(st.sampled_from(names), max_size=10, unique=True))
        workers.append((cap, {t: make_token(draw(st.integers(1, 3)), draw(st.integers(1, 4)))
                              for t in ran}))
    return replicas, tasks, workers


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.integers(1, 9))
def test_a_rebuild_cut_into_slices_gives_the_one_step_assignment(
        history: tuple[int, dict[str, float], list[tuple[int, dict[str, int]]]],
        budget: int) -> None:
    replicas, tasks, workers = history
    results = []
    for slice_items in (10**9, budget):
        h = Harness(config(replicas=replicas), dict(tasks), epoch=5)
        h.core.rebuild_slice = slice_items
        for w in fleet(workers):
            h.add(w)
        h.until(h.running, dt=0.25, limit=200.0)
        results.append(assignment(h))  # the rebuild's (rebalance passes may follow)
        rebuilt(h, dt=0.25)
        view = h.core.assigner.placement.view
        for w in view.workers:  # and it is a valid assignment
            assert view.load(w) <= view.max_load(w) + 1e-9
        assert all(len(ws) <= replicas for ws in assignment(h).values())
        settle(h)
        assert {t: sorted(ws) for t, ws in h.owners().items()} == assignment(h), (
            "the workers do not run what they were assigned")
    assert results[0] == results[1]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.sampled_from([1, 3, 10**9]))
def test_each_worker_gets_its_set_once_from_a_rebuild(
        history: tuple[int, dict[str, float], list[tuple[int, dict[str, int]]]],
        budget: int) -> None:
    # Found at 100,000 workers: the first placement went out as each worker's set, and the
    # resets that end the rebuild then sent every worker the same set again.
    replicas, tasks, workers = history
    # No rebalance pass (move budget 0): its moves are sets of their own after the rebuild.
    h = Harness(config(replicas=replicas, move_budget=0), dict(tasks), epoch=5)
    h.core.rebuild_slice = budget
    for w in fleet(workers):
        h.add(w)
    rebuilt(h, dt=0.25)
    content = [(w, m) for w, m in h.sent
               if isinstance(m, Instructions) and (m.reset or m.add or m.remove)]
    got = [w for w, _ in content]
    assert sorted(got) == sorted(w.id for w in h.workers.values()), (
        "not one set with content per worker")
    assert all(m.reset for _, m in content)  # each worker's whole set
    for w, m in content:
        assert set(m.add) == set(h.core.assigner.desired(w))


def test_the_running_log_says_when_each_stage_of_the_rebuild_ended() -> None:
    tasks = {f"t{i:02d}": 1.0 for i in range(40)}
    h = Harness(config(), tasks, epoch=3)
    h.core.rebuild_slice = 3
    for i in range(3):
        h.add(ModelWorker(f"w{i}", running={t: make_token(2, 1) for t in list(tasks)[i::3]},
                          max_load=40, lease_until=30.0))
    h.until(lambda: h.core.rebuilding is not None)
    began = h.now
    h.until(h.running, dt=0.25)
    stages = h.log_fields["running"]["rebuild_stages_s"]
    assert list(stages) == ["tasks", "workers", "claims", "finish"]
    ends = list(stages.values())
    assert ends == sorted(ends) and ends[0] > 0 and ends[-1] <= h.now - began
    assert h.log_fields["running"]["rebuild_slices"] > 10


def test_the_task_list_starts_the_rebuild_and_its_slices_are_steps_of_their_own() -> None:
    # A slice can take half a second at a million tasks: inside the list's own step it made
    # that step a stall.
    tasks = {f"t{i:02d}": entry(1.0 + i % 2) for i in range(12)}
    core = Harness(config(), {}, epoch=3).core
    core.rebuild_slice = 4
    assert core.life.end_warmup()
    core.handle(TasksFetched(tasks, None, True), 1.0)
    job = core.rebuilding
    assert job is not None and job.slices == 0
    core.handle(Continue(), 1.0)
    assert job.slices == 1


def test_leases_are_renewed_between_slices() -> None:
    tasks = {f"t{i:02d}": 1.0 for i in range(40)}
    h = Harness(config(lease=4.0), tasks, epoch=3)
    h.core.rebuild_slice = 1  # ~100 slices, one per half second: far longer than a lease
    ws = [h.add(ModelWorker(f"w{i}", running={t: make_token(2, 1) for t in list(tasks)[i::2]},
                            max_load=40, lease_until=4.0)) for i in range(2)]
    h.until(lambda: h.core.rebuilding is not None)
    slices = 0
    while h.core.rebuilding is not None:
        h.step(0.5)
        slices += 1
        assert all(w.lease_until > h.now for w in ws), "a worker's lease ran out mid-rebuild"
    assert slices > 20
    assert not [e for w in ws for e in w.journal if e[1] == "stop"]  # nothing stopped
    assert all(len(w.running) == 20 for w in ws)


def test_a_worker_silent_mid_rebuild_leaves_and_its_tasks_go_elsewhere() -> None:
    tasks = {f"t{i:02d}": 1.0 for i in range(30)}
    h = Harness(config(lease=4.0, lease_margin=1.0), tasks, epoch=3)
    h.core.rebuild_slice = 1
    a, b, c = (h.add(ModelWorker(n, max_load=30, running={t: make_token(2, 1)
                                                           for t in list(tasks)[i::3]},
                                 lease_until=4.0)) for i, n in enumerate("abc"))
    h.until(lambda: h.core.rebuilding is not None)
    assert h.core.registry.get("c").active  # type: ignore[union-attr]
    h.until(lambda: not h.core.registry.get("c").active,  # type: ignore[union-attr]
            silent=(c,), limit=10.0)
    assert h.core.rebuilding is not None, "the rebuild ended before c fell silent"
    rebuilt(h, silent=(c,))
    h.step(1.0, silent=(c,))
    owners = h.owners()
    assert set(owners) == set(tasks)
    assert all(ws in (["a"], ["b"]) for ws in owners.values()), sorted(owners.items())
    assert "c" not in h.core.assigner.placement.view.workers
    assert not [e for w in (a, b) for e in w.journal if e[1] == "stop"]


def test_a_worker_joining_or_restarting_mid_rebuild_takes_part() -> None:
    tasks = {f"t{i:02d}": 1.0 for i in range(30)}
    h = Harness(config(expect_workers=2), tasks, epoch=3)
    h.core.rebuild_slice = 1
    a = h.add(ModelWorker("a", running={t: make_token(2, 1) for t in list(tasks)[:15]},
                          max_load=20, lease_until=4.0))
    b = h.add(ModelWorker("b", running={t: make_token(2, 1) for t in list(tasks)[15:]},
                          lease_until=4.0))
    h.until(lambda: h.core.rebuilding is not None)
    h.step(0.5)
    c = h.add(ModelWorker("c", running={"t00": make_token(2, 1)}, now=h.now))  # a stray copy
    b2 = h.replace(b, b.restarted(h.now))  # b's process restarts: it runs nothing now
    h.step(0.5)
    assert h.core.rebuilding is not None and not h.running()
    rebuilt(h)
    h.step(1.0)
    h.step(1.0)
    owners = h.owners()
    assert set(owners) == set(tasks) and all(len(ws) == 1 for ws in owners.values())
    assert owners["t00"] == ["a"]  # a kept its claim; c's stray copy stopped
    assert not [e for e in a.journal if e[1] == "stop"]
    assert b2.running and c.running, "the joiner and the restarted worker got no share"
    view = h.core.assigner.placement.view
    assert sorted(view.workers) == ["a", "b", "c"]


def test_a_newer_task_list_mid_rebuild_starts_it_over() -> None:
    tasks = {f"t{i:02d}": 1.0 for i in range(30)}
    h = Harness(config(), dict(tasks), epoch=3)
    h.core.rebuild_slice = 2
    h.add(ModelWorker("a", running={t: make_token(2, 1) for t in tasks}, max_load=40,
                      lease_until=4.0))
    h.until(lambda: h.core.rebuilding is not None)
    h.source = {**{t: 1.0 for t in list(tasks)[10:]}, "new": 1.0}
    h.run(verbs.call(h.core, "query", {}, h.now)[2])  # answered at once by the harness
    assert ("info", "a new task list during the rebuild; starting over") in h.logs
    rebuilt(h)
    h.step(1.0)
    assert sorted(h.owners()) == sorted(h.source)
    assert sorted(h.core.assigner.placement.view.tasks) == sorted(h.source)


def test_a_demotion_mid_rebuild_drops_it() -> None:
    tasks = {f"t{i:02d}": 1.0 for i in range(30)}
    h = Harness(config(ha="http://127.0.0.1:1", warmup=2.0), tasks)
    h.core.rebuild_slice = 1
    h.add(ModelWorker("a", running={t: make_token(2, 1) for t in tasks}, max_load=40,
                      lease_until=4.0))
    h.run(h.core.handle(RoleChanged(Role(True, epoch=3, leader_until=1e9)), h.now))
    h.until(lambda: h.core.rebuilding is not None)
    h.run(h.core.handle(RoleChanged(Role(False, error="lost the key")), h.now))
    assert h.core.rebuilding is None and h.core.life.phase is Phase.WARMUP
    assert not h.core.assigner.placement.view.tasks
    assert not h.core.busy


def test_status_during_the_rebuild_plans_nothing() -> None:
    # Found by `scripts/bench scale` at 100,000 workers: every status poll planned a full
    # convergence over the half-built placement (seconds each), starving the rebuild.
    tasks = {f"t{i:02d}": 1.0 for i in range(30)}
    h = Harness(config(), tasks, epoch=3)
    h.core.rebuild_slice = 1
    h.add(ModelWorker("a", max_load=40, lease_until=4.0))
    h.until(lambda: h.core.rebuilding is not None)
    result, error, _ = verbs.call(h.core, "status", {}, h.now)
    assert error is None and result["phase"] == "querying"
    assert result["balanced"] is None and result["moves_planned"] is None
    rebuilt(h)
    result, error, _ = verbs.call(h.core, "status", {}, h.now)
    assert error is None and result["balanced"] in (True, False)
    assert isinstance(result["moves_planned"], int)
