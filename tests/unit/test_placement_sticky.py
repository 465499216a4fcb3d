"""What the best sticky assignors test themselves for, in our words, on long random histories
(seeded): the placement is balanced after every generation (every event followed by a
convergence), a generation moves only what it must — a leave re-places the departed replicas
and nothing else, a join moves replicas only to the joiner and no more than its fair share —
and within a generation no replica moves twice. Fleets of 30–40 workers and 1,500–2,000 tasks,
mixed max loads, one and two replicas."""

from __future__ import annotations

import math
import random

import pytest

from corral.common.placement import Placement

from .placement_checks import EPS, check_books, check_pending_fits_nowhere, converge, is_open


def check_balanced_unit(p: Placement, tolerance: float = 0.0) -> None:
    """The criterion for unit costs without zones or labels, in O(W²): no worker a holds a
    task that a worker b with room may take (b does not own it) while a's utilization is
    more than the tolerance above b's after taking it."""
    workers = [w for w in p.view.workers if is_open(p, w)]
    for a in workers:
        mine, ua = set(p.view.tasks_of(a)), p.view.utilization(a)
        if not mine:
            continue
        for b in workers:
            if b == a or p.view.load(b) + 1 > p.view.max_load(b) + EPS:
                continue
            if mine - set(p.view.tasks_of(b)):
                after = (p.view.load(b) + 1) / p.view.max_load(b)
                assert ua - after <= tolerance + EPS, f"{a} ({ua:.4f}) could give {b} a task"


def fleet(p: Placement, rng: random.Random, n: int, caps: list[float]) -> None:
    for i in range(n):
        p.upsert_worker(f"w{i:03d}", rng.choice(caps))


def fair_share(p: Placement, worker: str) -> float:
    placed = sum(len(p.view.owners(t)) for t in p.view.tasks)
    return placed * p.view.max_load(worker) / sum(p.view.max_load(w) for w in p.view.workers)


@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("caps", [[100.0], [50.0, 100.0, 150.0]])
def test_balanced_and_sticky_after_every_generation(replicas: int, caps: list[float]) -> None:
    rng = random.Random(11 * replicas + len(caps))
    p = Placement(replicas)
    fleet(p, rng, 30, caps)
    p.add_tasks([f"t{i:05d}" for i in range(1500)])
    converge(p, 0.0, 20, light=True)
    joined = 0
    for generation in range(25):
        event = rng.choice(["join", "leave", "resize", "add", "remove"])
        if event == "join":
            w = f"new{joined:02d}"
            joined += 1
            p.upsert_worker(w, rng.choice(caps))
            moves = converge(p, 0.0, 20, light=True)
            assert all(m.target == w for m in moves), "a join moved something elsewhere"
            assert len(moves) <= math.ceil(fair_share(p, w)) + 1
        elif event == "leave":
            w = rng.choice(sorted(p.view.workers))
            departed = len(p.view.tasks_of(w))
            before = {t: set(p.view.owners(t)) for t in p.view.tasks}
            short = sum(p.view.pending().values())
            p.remove_worker(w)
            diff = p.place()
            # The departed replicas that fit somewhere are placed (when the fleet is short
            # of room, the rest wait as pending), and nothing else moves — unless a task
            # left with no replica at all takes the place of another's second one.
            if not any(d.remove for d in diff.workers.values()):
                assert diff.moved() == departed - (sum(p.view.pending().values()) - short)
                assert all(before[t] - {w} <= set(p.view.owners(t)) for t in p.view.tasks)
            moves = converge(p, 0.0, 20, light=True)
            assert not moves, "a leave needed moves beyond its replicas"
        elif event == "resize":
            p.upsert_worker(rng.choice(sorted(p.view.workers)), rng.choice(caps))
            converge(p, 0.0, 20, light=True)
        elif event == "add":
            p.add_tasks([f"g{generation:02d}-{i:03d}" for i in range(60)])
            converge(p, 0.0, 20, light=True)
        else:
            p.remove_tasks(rng.sample(sorted(p.view.tasks), 60))
            converge(p, 0.0, 20, light=True)
        check_books(p)
        check_balanced_unit(p)
        check_pending_fits_nowhere(p)


def test_a_join_takes_its_fair_share_from_the_most_utilized_and_nothing_else() -> None:
    """Equal workers: the joiner takes exactly floor or ceil of its share, from the most
    loaded workers down to the new level; nobody else trades."""
    p = Placement(1)
    for i in range(10):
        p.upsert_worker(f"w{i}", 100)
    p.add_tasks([f"t{i:04d}" for i in range(503)])
    p.place()
    before = {w: p.view.load(w) for w in p.view.workers}
    p.upsert_worker("new", 100)
    moves = converge(p, 0.0, 20)
    share = 503 / 11
    assert math.floor(share) <= len(moves) <= math.ceil(share)
    assert all(m.target == "new" for m in moves)
    loads = [p.view.load(w) for w in p.view.workers]
    assert max(loads) - min(loads) <= 1
    assert all(p.view.load(w) >= min(loads) for w in before)  # nobody gave more than its surplus


def test_a_long_history_of_small_fleets_with_everything_checked() -> None:
    """200 generations over 3–12 workers with max loads from 0 to huge and replicas 1–3:
    after each, the full criterion by brute force (tests/unit/placement_checks.py)."""
    from .placement_checks import check_balanced, check_coverage

    rng = random.Random(5)
    for history in range(4):
        p = Placement(1 + history % 3)
        caps = [0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 1000.0]
        for i in range(rng.randint(3, 8)):
            p.upsert_worker(f"w{i}", rng.choice(caps))
        p.add_tasks([f"t{i:02d}" for i in range(rng.randint(5, 30))])
        for generation in range(50):
            event = rng.choice(["join", "leave", "resize", "add", "remove"])
            if event == "join" and len(p.view.workers) < 12:
                p.upsert_worker(f"j{history}-{generation}", rng.choice(caps))
            elif event == "leave" and len(p.view.workers) > 2:
                p.remove_worker(rng.choice(sorted(p.view.workers)))
            elif event == "resize":
                p.upsert_worker(rng.choice(sorted(p.view.workers)), rng.choice(caps))
            elif event == "add":
                p.add_tasks([f"a{generation}-{i}" for i in range(rng.randint(1, 4))])
            elif p.view.tasks:
                p.remove_tasks(rng.sample(sorted(p.view.tasks), min(len(p.view.tasks), 3)))
            converge(p, 0.0, rng.choice([1, 3, 20]))
            check_balanced(p, 0.0)
            check_coverage(p)
            check_pending_fits_nowhere(p)
