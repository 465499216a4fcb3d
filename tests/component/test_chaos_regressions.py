"""Bugs the chaos harness (scripts/chaos) and the bad-input tests found, each pinned down with
the pure supervisor core, model workers and a fake clock (tests/component/fleet.py)."""

from __future__ import annotations

from corral.supervisor import verbs

from .fleet import Harness, ModelWorker, config

TASKS = {f"t{i:02d}": 1.0 for i in range(12)}


def most_owners(h: Harness) -> int:
    return max((len(o) for o in h.owners().values()), default=0)


def test_a_rebalance_moves_one_replica_of_a_task_at_a_time() -> None:
    # Found by `scripts/chaos --seed 3`: two workers joined, one rebalance moved both replicas
    # of a task at once, and make-before-break gave it replicas + 2 owners for a second.
    h = Harness(config(replicas=2), dict(TASKS))
    # Both run every task (a supervisor restart finds them so), listed in the same order.
    a, b = (h.add(ModelWorker(w, max_load=12, running=dict.fromkeys(TASKS, 1), lease_until=9.0))
            for w in "ab")
    h.until(h.running)
    h.step(1.0)
    assert len(a.running) == len(b.running) == 12
    h.add(ModelWorker("c", max_load=12))
    h.add(ModelWorker("d", max_load=12))
    most = 0
    for _ in range(60):
        h.step(0.5)
        most = max(most, most_owners(h))
    assert most <= 3, "a task had more than replicas + 1 owners during a rebalance"
    owners = h.owners()
    assert all(len(owners[t]) == 2 for t in TASKS)
    assert sorted(len(w.running) for w in h.workers.values()) == [6, 6, 6, 6]


def test_the_kept_worker_of_a_duplicate_id_still_applies_what_it_is_sent() -> None:
    # Found by the bad-input test: a report under a live worker's id with another incarnation
    # (an impostor, or a second process started with the same id) was taken for a restart;
    # the live worker's next reports got the newcomer refused and the live one kept — but its
    # instruction sets were numbered from 1 again, below what it had applied, so it dropped
    # every one as stale, its lease ran out and it stopped all its tasks.
    h = Harness(config(replicas=1, lease=4.0))
    h.source = dict(TASKS)
    a = h.add(ModelWorker("a"))
    h.add(ModelWorker("b"))
    h.until(h.running)
    for _ in range(20):  # a long-lived worker has applied many sets
        h.step(0.5)
    mine = dict(a.running)
    assert mine and a.machine.applied[1] > 5
    other = h.add(ModelWorker("a", incarnation=99, now=h.now))
    h.report(other)  # a second process says it is "a"
    h.workers.pop(other.identity)  # and goes quiet
    for _ in range(20):
        h.step(0.5)
        assert a.running.keys() == mine.keys(), "the live worker lost its tasks"
    assert h.core.counters.duplicate_ids == 1 and a.lease_until > h.now
    assert not any(s for s in a.journal if s[1] == "stop")


def test_a_drain_waits_for_a_hand_off_in_flight_then_moves_the_task() -> None:
    # Found by `scripts/chaos --seed 11`: a worker drained while the other replica of one of
    # its tasks was moving; its replica was rightly held back (no replicas + 2 owners) but
    # never moved once that hand-off ended, so the drain timed out and stopped it.
    h = Harness(config(replicas=2), {"t0": 1.0})
    a, c = h.add(ModelWorker("a", max_load=1)), h.add(ModelWorker("c", max_load=1))
    h.until(h.running)
    h.step(1.0)
    for name in "bd":
        h.add(ModelWorker(name, max_load=1))
    for _ in range(4):
        h.step(0.5)
    assert sorted(h.owners()["t0"]) == ["a", "c"]
    h.run(verbs.call(h.core, "drain", {"worker": "a"}, h.now)[2])  # a's replica moves
    h.run(verbs.call(h.core, "drain", {"worker": "c"}, h.now)[2])  # c's waits for that
    most = 0
    for _ in range(20):
        h.step(0.5)
        most = max(most, most_owners(h))
        assert len(h.owners().get("t0", ())) >= 2, "t0 lost a replica"
    assert most <= 3, "t0 had more than replicas + 1 owners"
    assert not a.running and not c.running and sorted(h.owners()["t0"]) == ["b", "d"]
