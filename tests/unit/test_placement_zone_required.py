"""Hard fault zones (issue 31, item 3; Helix's fault-zone constraint): with the zone spread
required, no two replicas of a task are ever in one zone; replicas beyond the live zones stay
pending with the reason and are placed when a zone returns. Random fleets of uneven zones and
capacities under odd names, through zones dying and coming back."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.common.placement import REQUIRE, Assigned, Placement, TaskShape

from .placement_checks import check_books, check_pending_fits_nowhere, converge, zone

names = st.lists(st.text(min_size=1, max_size=5), min_size=2, max_size=9, unique=True)


@settings(max_examples=150)
@given(names, st.data(), st.integers(1, 4), st.integers(1, 25))
def test_no_two_replicas_in_one_zone_through_a_zone_dying_and_coming_back(
        workers: list[str], data: st.DataObject, replicas: int, ntasks: int) -> None:
    zones = data.draw(st.lists(st.sampled_from(["eu/r1", "eu/r2", "us", "ap/x", ""]),
                               min_size=len(workers), max_size=len(workers)), label="zones")
    caps = data.draw(st.lists(st.sampled_from([1, 2, 3, 5, 8, 2.5]), min_size=len(workers),
                              max_size=len(workers)), label="caps")
    p = Placement(replicas, spread=REQUIRE)
    for w, z, c in zip(workers, zones, caps, strict=True):
        p.upsert_worker(w, c, zone=z)
    wants = data.draw(st.lists(st.sampled_from([None, 1, 2, 3]), min_size=ntasks,
                               max_size=ntasks), label="wants")
    p.add_tasks({f"t{i}": TaskShape(1.0, want) for i, want in enumerate(wants)})
    converge(p, 0.0, 20)
    check_books(p)  # no two replicas in one zone, pending reasons name the zones
    check_pending_fits_nowhere(p)
    gone_zone = data.draw(st.sampled_from(sorted({z.split("/")[0] for z in zones})),
                          label="zone that dies")
    dead = [w for w in workers if zone(p, w) == gone_zone]
    for w in dead:
        p.remove_worker(w)
    converge(p, 0.0, 20)
    check_books(p)
    check_pending_fits_nowhere(p)
    live = {zone(p, w) for w in p.view.workers if p.view.max_load(w) > 0}
    for task, why in p.view.pending_reasons().items():
        if len(live) < p.view.replicas_of(task) <= len(p.view.workers):
            assert "distinct zones" in why, why
    for w in dead:  # the zone comes back: its replicas are placed again
        p.upsert_worker(w, caps[workers.index(w)], zone=zones[workers.index(w)])
    converge(p, 0.0, 20)
    check_books(p)
    check_pending_fits_nowhere(p)


def test_replicas_beyond_the_live_zones_wait_and_come_back_with_a_zone() -> None:
    p = Placement(3, spread=REQUIRE)
    for w, z in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("c1", "c")):
        p.upsert_worker(w, 10, zone=z)
    p.add_tasks(["t"])
    p.place()
    assert sorted(zone(p, w) for w in p.view.owners("t")) == ["a", "b", "c"]
    p.remove_worker("c1")
    assert not p.place()  # a2 has room, but zone a holds a replica already
    assert p.view.pending() == {"t": 1}
    assert p.view.pending_reason("t") == "needs 3 replicas in distinct zones, only 2 live zones"
    assert p.can_assign("t", "a2") is Assigned.ZONE
    p.upsert_worker("c2", 1, zone="c")
    assert [w for w, d in p.place().workers.items() if "t" in d.add] == ["c2"]
    assert not p.view.pending()


def test_prefer_is_todays_spread_and_require_refuses_what_prefer_allows() -> None:
    for spread, owners in (("prefer", 2), ("require", 1)):
        p = Placement(2, spread=spread)
        for w in ("x", "y"):
            p.upsert_worker(w, 5, zone="only")
        p.add_tasks(["t"])
        p.place()
        assert len(p.view.owners("t")) == owners
    assert p.view.pending_reason("t") == "needs 2 replicas in distinct zones, only 1 live zones"


def test_a_crowded_zone_reported_by_workers_is_refused_in_a_rebuild() -> None:
    """A restarted supervisor adopts what workers run, but never a second replica in a zone."""
    p = Placement(2, spread=REQUIRE)
    for w, z in (("a1", "a"), ("a2", "a"), ("b1", "b")):
        p.upsert_worker(w, 5, zone=z)
    p.add_tasks(["t"])
    assert p.assign("t", "a1") and p.assign("t", "a2") is Assigned.ZONE
    assert p.assign_many("a2", ["t"]) == []
    assert [w for w, d in p.place().workers.items() if "t" in d.add] == ["b1"]
