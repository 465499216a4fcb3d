"""Hash ring: a node change moves about 1/N of the keys and only to/from that node; weights;
bounded load keeps every node under ⌈c × fair share⌉."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.common.balancer.hashring import MAX_POINTS, BoundedLoad, EmptyRing, HashRing

KEYS = [f"task-{i}" for i in range(4000)]


def owners(ring: HashRing) -> dict[str, str]:
    return {k: ring.lookup(k) for k in KEYS}


@settings(max_examples=30)  # each example builds rings and looks up 8000 keys
@given(n=st.integers(2, 12), extra=st.integers(0, 99), vnodes=st.sampled_from([40, 160]))
def test_a_node_change_moves_about_one_nth_of_the_keys(n: int, extra: int, vnodes: int) -> None:
    names = [f"node-{i}" for i in range(n)]
    ring = HashRing(names, vnodes=vnodes)
    before = owners(ring)
    ring.add(f"node-new-{extra}")
    after = owners(ring)
    moved = [k for k in KEYS if before[k] != after[k]]
    assert all(after[k] == f"node-new-{extra}" for k in moved)  # only to the new node
    # About 1/(n+1): the spread of a node's share with v points is about 1/sqrt(v).
    assert abs(len(moved) / len(KEYS) - 1 / (n + 1)) < 3.5 / (n + 1) / vnodes**0.5 + 0.02
    ring.remove(f"node-new-{extra}")
    assert owners(ring) == before  # and back


def test_removing_a_node_moves_only_its_keys() -> None:
    ring = HashRing([f"n{i}" for i in range(8)])
    before = owners(ring)
    ring.remove("n3")
    after = owners(ring)
    assert {k for k in KEYS if before[k] != after[k]} == {k for k in KEYS if before[k] == "n3"}


def test_weights_scale_the_shares() -> None:
    ring = HashRing({"small": 1.0, "big": 3.0})
    share = Counter(owners(ring).values())["big"] / len(KEYS)
    assert share == pytest.approx(0.75, abs=0.05)


def test_the_ring_is_the_same_whatever_the_order_nodes_were_added_in() -> None:
    assert owners(HashRing(["a", "b", "c"])) == owners(HashRing(["c", "a", "b"]))


def test_lookup_n_gives_distinct_nodes_in_ring_order() -> None:
    ring = HashRing([f"n{i}" for i in range(5)])
    for key in KEYS[:200]:
        three = ring.lookup_n(key, 3)
        assert len(set(three)) == 3 and three[0] == ring.lookup(key)
    assert sorted(ring.lookup_n("k", 9)) == [f"n{i}" for i in range(5)]


@given(
    weights=st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=1, max_size=8),
    c=st.sampled_from([1.05, 1.25, 2.0]),
    count=st.integers(1, 600),
)
def test_bounded_load_keeps_every_node_under_c_times_its_share(
    weights: list[float], c: float, count: int
) -> None:
    ring = HashRing({f"n{i}": w for i, w in enumerate(weights)}, vnodes=20)
    bounded = BoundedLoad(ring, c)
    total = sum(weights)
    for i, key in enumerate(KEYS[:count], start=1):
        node = bounded.place(key)
        assert bounded.load(node) <= -(-c * i * ring.nodes[node] // total)  # ceil
    assert sum(bounded.load(n) for n in ring.nodes) == count
    for node in ring.nodes:
        assert bounded.load(node) <= bounded.capacity(node)


def test_bounded_load_prefers_the_rings_choice_and_release_frees_room() -> None:
    ring = HashRing([f"n{i}" for i in range(4)])
    bounded = BoundedLoad(ring, 1.25)
    placed = {k: bounded.place(k) for k in KEYS[:1000]}
    first_choice = sum(placed[k] == ring.lookup(k) for k in placed)
    assert first_choice > 700
    assert bounded.place(KEYS[0]) == placed[KEYS[0]]  # placed already
    bounded.release(KEYS[0])
    assert KEYS[0] not in bounded.assignment
    assert max(bounded.load(n) for n in ring.nodes) <= 313  # ⌈1.25 × 1000 / 4⌉


def test_errors() -> None:
    with pytest.raises(ValueError, match="positive"):
        HashRing({"a": 0.0})
    for bad in (math.inf, math.nan, -1.0):
        with pytest.raises(ValueError, match="finite positive"):
            HashRing().add("a", bad)
    with pytest.raises(ValueError, match="vnodes"):
        HashRing(vnodes=0)
    for c in (1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="above 1"):
            BoundedLoad(HashRing(["a"]), c)
    ring = HashRing(["a"])
    assert "a" in ring and len(ring) == 1


def test_an_empty_ring_fails_the_same_clear_way_for_lookups_and_bounded_load() -> None:
    ring = HashRing()
    bounded = BoundedLoad(ring)
    calls = [lambda: ring.lookup("k"), lambda: ring.lookup_n("k", 2),
             lambda: next(ring.successors("k")), lambda: bounded.place("k"),
             lambda: bounded.capacity("a")]  # fmt: skip
    for call in calls:
        with pytest.raises(EmptyRing, match="the hash ring has no nodes"):
            call()
    assert issubclass(EmptyRing, LookupError)
    ring.add("a")
    ring.remove("a")  # empty again, after having had a node
    with pytest.raises(EmptyRing):
        bounded.place("k")


@given(c=st.sampled_from([1.01, 1.25, 3.0]), count=st.integers(1, 300),
       weight=st.sampled_from([1e-300, 1.0, 1e300]))  # fmt: skip
def test_bounded_load_on_a_one_node_ring_puts_every_key_on_it(
    c: float, count: int, weight: float
) -> None:
    bounded = BoundedLoad(HashRing({"only": weight}), c)
    assert {bounded.place(k) for k in KEYS[:count]} == {"only"}
    assert bounded.load("only") == count <= bounded.capacity("only")


@settings(max_examples=15, deadline=None)
@given(weights=st.lists(st.sampled_from([0.25, 1.0, 2.0, 5.0]), min_size=2, max_size=5),
       scale=st.sampled_from([1.0, 1e-6, 1e6, 1e200]))  # fmt: skip
def test_ring_hash_shares_follow_the_weights_whatever_their_scale(
    weights: list[float], scale: float
) -> None:
    """Envoy's and gRPC's ring hash (A42) give each host a share of the keys in proportion to
    its weight. Scaled weights (1e200 would need ~1e202 points) fit under the cap and keep the
    proportions."""
    nodes = {f"n{i}": w * scale for i, w in enumerate(weights)}
    ring = HashRing(nodes, vnodes=160, max_points=4096)
    assert ring.points <= 4096 + len(nodes)
    keys = KEYS
    share = Counter(ring.lookup(k) for k in keys)
    total = sum(weights)
    for i, w in enumerate(weights):
        # Each node holds at least ~4096·w/Σw·… points: a share's relative error ~ 1/√points.
        points = ring.point_counts()[f"n{i}"]
        assert abs(share[f"n{i}"] / len(keys) - w / total) < 4 * (w / total) / points**0.5 + 0.02


def test_the_ring_caps_its_points_and_counts_repeated_nodes() -> None:
    ring = HashRing({"huge": 1e300, "tiny": 1e-300, "one": 1.0})
    counts = ring.point_counts()
    assert sum(counts.values()) <= MAX_POINTS + 3 and counts["tiny"] == counts["one"] == 1
    assert ring.lookup("k") in {"huge", "tiny", "one"}
    many = HashRing([f"n{i}" for i in range(4000)])  # 4000 × 160 points would pass the cap
    assert many.points <= MAX_POINTS
    assert HashRing(["a", "b", "a", "a"]).duplicates == 2
    assert HashRing(["a", "b"]).duplicates == 0
