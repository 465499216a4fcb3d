"""Consistent hashing with virtual nodes and weights, and an optional bound on load.

`HashRing` puts ``round(vnodes × weight)`` points per node on a 64-bit ring (blake2b, so the
ring is the same in every process); a key belongs to the node of the first point at or after
the key's hash. Adding or removing a node of weight w moves only the keys that node gains or
loses — about w / Σw of them — and no key moves between two other nodes. 160 points per unit
of weight keep the spread of load to a few percent.

`BoundedLoad` places keys one at a time with consistent hashing with bounded loads (Mirrokni,
Thorup and Zadimoghaddam, 2018): no node takes more than ⌈c × its fair share⌉ keys, where the
fair share is the keys placed so far times the node's weight fraction and c > 1; a key whose
node is full goes on clockwise to the next node with room. A small c evens load at the cost of
more keys away from their first choice (and more movement when nodes change).

Example::

    >>> ring = HashRing({"a": 1.0, "b": 1.0, "c": 2.0})
    >>> ring.lookup("task-17") in {"a", "b", "c"}
    True
    >>> len(ring.lookup_n("task-17", 2)) == 2
    True
"""

from __future__ import annotations

import hashlib
import math
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping

DEFAULT_VNODES = 160


def ring_hash(text: str) -> int:
    """A 64-bit point on the ring; stable across processes (unlike ``hash()``)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class HashRing:
    """Nodes with weights, each holding ``round(vnodes × weight)`` (at least one) points."""

    def __init__(
        self, nodes: Mapping[str, float] | Iterable[str] = (), vnodes: int = DEFAULT_VNODES
    ) -> None:
        if vnodes < 1:
            raise ValueError(f"vnodes must be at least 1, not {vnodes}")
        self.vnodes = vnodes
        self._weights: dict[str, float] = {}
        self._points: list[int] = []
        self._owners: list[str] = []
        self._dirty = False
        items = nodes.items() if isinstance(nodes, Mapping) else ((n, 1.0) for n in nodes)
        for node, weight in items:
            self.add(node, weight)

    def add(self, node: str, weight: float = 1.0) -> None:
        """Add ``node`` (or change its weight)."""
        if not weight > 0:
            raise ValueError(f"a node's weight must be positive, not {weight}")
        self._weights[node] = weight
        self._dirty = True

    def remove(self, node: str) -> None:
        """Remove ``node``; its keys go to the nodes that follow its points."""
        del self._weights[node]
        self._dirty = True

    @property
    def nodes(self) -> dict[str, float]:
        """The nodes and their weights."""
        return dict(self._weights)

    def __len__(self) -> int:
        return len(self._weights)

    def __contains__(self, node: object) -> bool:
        return node in self._weights

    def _build(self) -> None:
        # Ties between two nodes' points (a 2**-64 chance) are broken by name, so every
        # process builds the same ring.
        points = sorted(
            (ring_hash(f"{node}#{i}"), node)
            for node, weight in self._weights.items()
            for i in range(max(1, round(self.vnodes * weight)))
        )
        self._points = [p for p, _ in points]
        self._owners = [n for _, n in points]
        self._dirty = False

    def successors(self, key: str) -> Iterator[str]:
        """The owners of the points from ``key``'s hash clockwise, once round the ring."""
        if self._dirty:
            self._build()
        if not self._points:
            raise LookupError("the hash ring has no nodes")
        start = bisect_left(self._points, ring_hash(key))
        owners = self._owners
        n = len(owners)
        for step in range(n):
            yield owners[(start + step) % n]

    def lookup(self, key: str) -> str:
        """The node that owns ``key``."""
        if self._dirty:
            self._build()
        if not self._points:
            raise LookupError("the hash ring has no nodes")
        i = bisect_left(self._points, ring_hash(key))
        return self._owners[i if i < len(self._owners) else 0]

    def lookup_n(self, key: str, count: int) -> list[str]:
        """The first ``count`` distinct nodes clockwise from ``key`` (for replicas); fewer if
        the ring has fewer nodes."""
        found: dict[str, None] = {}
        want = min(count, len(self._weights))
        for node in self.successors(key):
            if len(found) >= want:
                break
            found.setdefault(node)
        return list(found)


class BoundedLoad:
    """Keys placed on a `HashRing` with no node above ⌈c × its fair share⌉."""

    def __init__(self, ring: HashRing, c: float = 1.25) -> None:
        if not c > 1:
            raise ValueError(f"the load bound c must be greater than 1, not {c}")
        self.ring = ring
        self.c = c
        self._placed: dict[str, str] = {}
        self._load: dict[str, int] = {}

    def capacity(self, node: str, keys: int | None = None) -> int:
        """How many keys ``node`` may hold when ``keys`` (default: those placed) are placed."""
        weights = self.ring.nodes
        total = len(self._placed) if keys is None else keys
        return math.ceil(self.c * total * weights[node] / sum(weights.values()))

    def place(self, key: str) -> str:
        """Place ``key`` and return its node (its current node if it is placed already).

        Keys stay where they are when nodes change; to follow a change, `release` and
        `place` the keys again (those of a removed node at least)."""
        if key in self._placed:
            return self._placed[key]
        weights = self.ring.nodes
        share = self.c * (len(self._placed) + 1) / sum(weights.values())
        for node in self.ring.successors(key):
            if self._load.get(node, 0) < math.ceil(share * weights[node]):
                self._placed[key] = node
                self._load[node] = self._load.get(node, 0) + 1
                return node
        raise AssertionError("unreachable: the capacities add up to more than the keys")

    def release(self, key: str) -> None:
        """Take ``key`` off its node."""
        node = self._placed.pop(key)
        self._load[node] -= 1

    def load(self, node: str) -> int:
        return self._load.get(node, 0)

    @property
    def assignment(self) -> dict[str, str]:
        return dict(self._placed)
