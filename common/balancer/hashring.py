"""Consistent hashing with virtual nodes and weights, and an optional bound on load.
docs/balancer.md ("Hash ring") explains the choices and measures the spread.

`HashRing`: blake2b points on a 64-bit ring (the same in every process); a key belongs to the
node of the first point at or after its hash. The lightest node gets ``vnodes`` points and the
others points in proportion to their weights, all scaled down together past ``max_points``
(default 2¹⁸). Adding or removing a node moves only the keys that node gains or loses, unless
it moves the lightest weight or the scale. Weights must be finite and positive; a node listed
twice counts once (``duplicates`` counts the repeats).

`BoundedLoad` (consistent hashing with bounded loads, Mirrokni et al. 2018) places keys one at
a time with no node above ⌈c × its fair share⌉, c > 1: a key whose node is full goes on
clockwise to the next node with room.

Both raise `EmptyRing` (a `LookupError`) when asked to place a key on a ring with no nodes.

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
MAX_POINTS = 1 << 18


class EmptyRing(LookupError):
    """A key was looked up or placed on a ring that has no nodes."""

    def __init__(self) -> None:
        super().__init__("the hash ring has no nodes")


def ring_hash(text: str) -> int:
    """A 64-bit point on the ring; stable across processes (unlike ``hash()``)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class HashRing:
    """Nodes with weights: ``vnodes`` points for the lightest, the others in proportion, scaled
    down together if their total would pass ``max_points``."""

    def __init__(
        self,
        nodes: Mapping[str, float] | Iterable[str] = (),
        vnodes: int = DEFAULT_VNODES,
        max_points: int = MAX_POINTS,
    ) -> None:
        if vnodes < 1 or max_points < 1:
            raise ValueError(f"vnodes and max_points must be at least 1, not {vnodes}, "
                             f"{max_points}")  # fmt: skip
        self.vnodes = vnodes
        self.max_points = max_points
        self.duplicates = 0  # nodes listed more than once when the ring was made
        self._weights: dict[str, float] = {}
        self._points: list[int] = []
        self._owners: list[str] = []
        self._dirty = False
        items = nodes.items() if isinstance(nodes, Mapping) else ((n, 1.0) for n in nodes)
        for node, weight in items:
            self.duplicates += node in self._weights
            self.add(node, weight)

    def add(self, node: str, weight: float = 1.0) -> None:
        """Add ``node`` (or change its weight)."""
        if not 0 < weight < math.inf:
            raise ValueError(f"a node's weight must be a finite positive number, not {weight}")
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

    @property
    def points(self) -> int:
        """How many points the ring holds."""
        if self._dirty:
            self._build()
        return len(self._points)

    def point_counts(self) -> dict[str, int]:
        """Points per node: ``vnodes`` × weight / the lightest weight, or scaled into
        ``max_points``."""
        weights = self._weights
        if not weights:
            return {}
        # Relative to the heaviest (in (0, 1], floored so that 1e-300 / 1e300 stays above 0),
        # so that no ratio or sum overflows whatever the weights are.
        top = max(weights.values())
        relative = {node: max(w / top, 1e-300) for node, w in weights.items()}
        total = sum(relative.values())
        per_unit = self.vnodes / min(relative.values())
        if per_unit * total <= self.max_points:
            return {node: max(1, round(r * per_unit)) for node, r in relative.items()}
        per_unit = self.max_points / total  # rounded down, so the sum stays within the cap
        return {node: max(1, int(r * per_unit)) for node, r in relative.items()}

    def _build(self) -> None:
        # Ties between two nodes' points (a 2**-64 chance) are broken by name, so every
        # process builds the same ring.
        points = sorted(
            (ring_hash(f"{node}#{i}"), node)
            for node, count in self.point_counts().items()
            for i in range(count)
        )
        self._points = [p for p, _ in points]
        self._owners = [n for _, n in points]
        self._dirty = False

    def successors(self, key: str) -> Iterator[str]:
        """The owners of the points from ``key``'s hash clockwise, once round the ring."""
        if self._dirty:
            self._build()
        if not self._points:
            raise EmptyRing()
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
            raise EmptyRing()
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
        if not 1 < c < math.inf:
            raise ValueError(f"the load bound c must be a finite number above 1, not {c}")
        self.ring = ring
        self.c = c
        self._placed: dict[str, str] = {}
        self._load: dict[str, int] = {}

    def _fractions(self) -> dict[str, float]:
        """Each node's share of the total weight (computed so that no sum can overflow)."""
        weights = self.ring.nodes
        if not weights:
            raise EmptyRing()
        top = max(weights.values())
        total = sum(w / top for w in weights.values())
        return {node: w / top / total for node, w in weights.items()}

    def capacity(self, node: str, keys: int | None = None) -> int:
        """How many keys ``node`` may hold when ``keys`` (default: those placed) are placed."""
        fraction = self._fractions()[node]
        total = len(self._placed) if keys is None else keys
        return math.ceil(self.c * total * fraction)

    def place(self, key: str) -> str:
        """Place ``key`` and return its node (its current node if it is placed already).

        Keys stay where they are when nodes change; to follow a change, `release` and
        `place` the keys again (those of a removed node at least)."""
        if key in self._placed:
            return self._placed[key]
        fractions = self._fractions()
        share = self.c * (len(self._placed) + 1)
        for node in self.ring.successors(key):
            if self._load.get(node, 0) < math.ceil(share * fractions[node]):
                self._placed[key] = node
                self._load[node] = self._load.get(node, 0) + 1
                return node
        raise AssertionError("unreachable: the capacities add up to more than the keys")

    def release(self, key: str) -> None:
        """Take ``key`` off its node."""
        node = self._placed.pop(key)
        n = self._load[node] - 1
        if n:
            self._load[node] = n
        else:  # a node may be gone for good: no entry for it
            del self._load[node]

    def load(self, node: str) -> int:
        return self._load.get(node, 0)

    def sizes(self) -> dict[str, int]:
        return {"placed": len(self._placed), "loaded_nodes": len(self._load)}

    @property
    def assignment(self) -> dict[str, str]:
        return dict(self._placed)
