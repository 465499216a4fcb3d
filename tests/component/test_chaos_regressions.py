"""Bugs the chaos harness (scripts/chaos) and the bad-input tests found, each pinned down with
the pure supervisor core, model workers and a fake clock (tests/component/fleet.py)."""

from __future__ import annotations

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
