"""Zones and labels under hypothesis: 1–5 zones of uneven size (flat, or under two regions),
labelled workers, per-task replicas and required labels, mixed costs. After placing and
converging — and again after a whole zone dies, and after it comes back — every invariant of
the placement checkers holds (books, the criterion, coverage, pending only where nothing
fits), required labels are never violated, the zone-degraded gauge says exactly what the
definition says, no degraded task is left that a move could repair, no rebalance move
lowered a task's spread (checked pass by pass in `converge`), and with room everywhere no
task is degraded at all: spread is maximal for the live zones."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from corral.common.placement import Mode, Placement, TaskShape

from .placement_checks import (
    check_balanced,
    check_books,
    check_coverage,
    check_pending_fits_nowhere,
    converge,
    degraded,
)

GPU = {"gpu": "true"}

zone_sizes = st.lists(st.integers(1, 4), min_size=1, max_size=5)
shapes = st.lists(
    st.tuples(st.sampled_from([1.0, 1.0, 2.0, 0.5]), st.sampled_from([None, None, 1, 2, 3]),
              st.sampled_from([False, False, False, True])),
    max_size=25,
)


def build(sizes: list[int], regions: bool, ample: bool, caps: list[float], gpu_every: int,
          replicas: int, tasks: list[tuple[float, int | None, bool]]) -> Placement:
    p = Placement(replicas)
    n = 0
    for z, size in enumerate(sizes):
        zone = f"r{z % 2}/z{z}" if regions else f"z{z}"
        for _ in range(size):
            cap = 100.0 if ample else caps[n % len(caps)]
            p.upsert_worker(f"w{n:02d}", cap, zone=zone,
                            labels=GPU if gpu_every and n % gpu_every == 0 else {})
            n += 1
    p.add_tasks({f"t{k:02d}": TaskShape(cost, reps, GPU if gpu else {})
                 for k, (cost, reps, gpu) in enumerate(tasks)})
    return p


def check_all(p: Placement, ample: bool) -> None:
    check_books(p)  # includes: every owner has every label its task requires
    check_balanced(p, 0.0)  # includes: no degraded task left that a move could repair
    check_coverage(p)
    check_pending_fits_nowhere(p)
    assert p.view.zone_degraded() == sum(1 for t in p.view.tasks if degraded(p, t)), "gauge is off"
    if ample and all(p.view.mode(w) is Mode.ELIGIBLE for w in p.view.workers):
        assert p.view.zone_degraded() == 0, p.view.degraded()
    for task, reason in p.view.pending_reasons().items():
        if p.view.shape(task).require and not any(p.view.labels(w) == GPU for w in p.view.workers):
            assert reason == "no live worker has gpu=true"


@given(
    sizes=zone_sizes,
    regions=st.booleans(),
    ample=st.booleans(),
    caps=st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.0, 5.0, 8.0]), min_size=1, max_size=6),
    gpu_every=st.sampled_from([0, 2, 3]),
    replicas=st.integers(1, 3),
    tasks=shapes,
    dead=st.integers(0, 4),
    budget=st.sampled_from([1, 3, 20]),
)
def test_zones_labels_and_replicas_keep_every_promise(
    sizes: list[int], regions: bool, ample: bool, caps: list[float], gpu_every: int,
    replicas: int, tasks: list[tuple[float, int | None, bool]], dead: int, budget: int,
) -> None:
    p = build(sizes, regions, ample, caps, gpu_every, replicas, tasks)
    converge(p, 0.0, budget)
    check_all(p, ample)
    # A whole zone dies at once: its replicas go to the zones left, spread as they allow.
    view = p.view
    zone = view.zone(sorted(view.workers)[0]).rsplit("z", 1)[0] + f"z{dead % len(sizes)}"
    gone = {w: (view.max_load(w), view.labels(w)) for w in view.workers if view.zone(w) == zone}
    for w in gone:
        p.remove_worker(w)
    converge(p, 0.0, budget)
    check_all(p, ample)
    # It comes back: degraded tasks regain their spread through repair moves.
    for w, (cap, labels) in gone.items():
        p.upsert_worker(w, cap, zone=zone, labels=labels)
    converge(p, 0.0, budget)
    check_all(p, ample)


def test_a_required_label_is_a_hard_constraint() -> None:
    p = Placement(replicas=2)
    p.upsert_worker("cpu1", 100, zone="a")
    p.upsert_worker("cpu2", 100, zone="b")
    p.upsert_worker("gpu1", 1, zone="a", labels=GPU)
    p.add_tasks({"train": TaskShape(require=GPU), "other": TaskShape(2.0, require=GPU)})
    converge(p, 0.0, 20)
    assert p.view.owners("train") == ("gpu1",) and p.view.owners("other") == ()
    assert p.view.pending_reasons() == {
        "train": "needs 2 replicas, only 1 live workers with gpu=true",
        "other": "needs 2 replicas, only 1 live workers with gpu=true",
    }
    p.upsert_worker("gpu1", 1, Mode.HOLD)
    assert p.view.pending_reasons()["other"] == "no live worker has gpu=true"


def test_bulk_placement_in_zones_spreads_balances_and_survives_a_zone() -> None:
    """The block path (fill_zoned_blocks): 10 zones x 10 workers, 2,000 tasks x 2, every
    fifth worker with gpu=true and every twentieth task requiring it."""
    p = Placement(replicas=2)
    for i in range(100):
        p.upsert_worker(f"w{i:03d}", 60 + 20 * (i % 3), zone=f"zone-{i % 10}",
                        labels=GPU if i % 5 == 0 else {})
    p.add_tasks({f"t{i:05d}": TaskShape(require=GPU) if i % 20 == 0 else 1.0
                 for i in range(2000)})
    p.place()
    assert not p.view.pending() and p.view.zone_degraded() == 0
    assert all(len({p.view.zone(w) for w in p.view.owners(t)}) == 2 for t in p.view.tasks)
    assert p.is_balanced(0.0)
    for w in p.view.workers:  # many partners, not one
        assert len({o for t in p.view.tasks_of(w) for o in p.view.owners(t) if o != w}) >= 10
    check_books(p)
    for w in [w for w in p.view.workers if p.view.zone(w) == "zone-3"]:
        p.remove_worker(w)
    p.place()
    assert not p.view.pending() and p.view.zone_degraded() == 0
    converge(p, 0.0, 20, light=True)
    check_books(p)


def test_three_replicas_in_two_zones_split_two_and_one() -> None:
    p = Placement(replicas=3)
    for i in range(20):
        p.upsert_worker(f"w{i:02d}", 100, zone="ab"[i % 2])
    p.add_tasks([f"t{i:04d}" for i in range(400)])
    p.place()
    assert all(sorted(Counter(p.view.zone(w) for w in p.view.owners(t)).values()) == [1, 2]
               for t in p.view.tasks)
    assert p.view.zone_degraded() == 0 and p.is_balanced(0.0)
