"""Failure domains: zone paths, how spread out a task's replicas are, and when that is degraded
(docs/supervisor.md, "Failure domains and constraints", for operators).

A worker's zone is a path: ``eu-1/rack-7/host-3`` is domain ``eu-1`` at level 1, ``eu-1/rack-7``
at level 2 and ``eu-1/rack-7/host-3`` at level 3. A shorter zone reads as its last part at the
deeper levels (``us-1`` is ``us-1`` at every level), and the empty zone is one domain of its own
that every zone-less worker shares. A domain at one level contains the domains below it, so two
workers in different domains at a level are in different domains at every deeper level.

**Topology.** ``depth`` is the longest path among known workers; ``first`` is the first level at
which they fall into more than one domain (0: all in one domain at every level, zones do not
matter). Levels above ``first`` hold a single domain and never tell two placements apart.

**Spread.** At each level from ``first`` down, a task's replicas fall into domains with some
counts. One placement spreads better than another if, at the first level where they differ,
its counts sorted from largest are lexicographically smaller — more domains, then fewer
replicas in the fullest: (1, 1, 1) beats (2, 1), which beats (3); (2, 2) beats (3, 1).

**Zone key.** For a task whose other owners are O, worker w's zone key is, level by level from
``first``, how many of O share w's domain. One more replica on the worker with the smallest key
(lexicographically) gives the best spread, because adding to a smaller count leaves a more even
split. So moving a replica from a to b keeps the task's spread if key(b) <= key(a) and improves
it if key(b) < key(a), both taken against the task's other owners.

**Degraded.** A task is degraded when, under some node of the domain tree (the root or a
domain), its replicas are split over that node's *live* children — those with an eligible
worker that may take the task — such that one child holds at least two more than another:
a replica could move to the emptier child and spread better. A task with more replicas than
live domains is not degraded when they are split as evenly as possible.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass

Path = tuple[str, ...]
NO_ZONE: Path = ("",)

# Zone spread policies: `PREFER` spreads replicas over zones as far as the live ones allow;
# `REQUIRE` never puts two replicas of a task in one zone — the first part of the zone path,
# ``eu-1`` of ``eu-1/rack-7`` — and leaves the replicas beyond the live zones pending.
PREFER = "prefer"
REQUIRE = "require"
SPREADS = (PREFER, REQUIRE)


def zone_path(zone: str) -> Path:
    """``"eu-1/rack-7"`` -> ``("eu-1", "eu-1/rack-7")``; ``""`` -> the shared no-zone domain."""
    if not isinstance(zone, str):
        raise ValueError(f"a zone is a str, got {zone!r}")
    if not zone:
        return NO_ZONE
    parts = zone.split("/")
    if any(not p.strip() or p != p.strip() for p in parts):
        raise ValueError(f"zone {zone!r}: every '/'-separated part must be non-empty, unpadded")
    return tuple("/".join(parts[: i + 1]) for i in range(len(parts)))


def domain(path: Path, level: int) -> str:
    return path[level - 1] if level <= len(path) else path[-1]


@dataclass(frozen=True)
class Topology:
    """The levels that matter for the known workers (see the module docstring)."""

    first: int = 0
    depth: int = 1

    @property
    def zoned(self) -> bool:
        return self.first > 0

    def top(self, path: Path) -> str:
        """The worker's domain at the first level that has more than one."""
        return domain(path, self.first) if self.first else ""

    def key(self, path: Path, others: Iterable[Path]) -> tuple[int, ...]:
        """How many of ``others`` share ``path``'s domain, level by level from ``first``."""
        if not self.first:
            return ()
        levels = range(self.first, self.depth + 1)
        counts = [0] * len(levels)
        for other in others:
            for i, level in enumerate(levels):
                if domain(other, level) != domain(path, level):
                    break  # apart at this level, so apart at every deeper one
                counts[i] += 1
        return tuple(counts)

    def spread(self, paths: Collection[Path]) -> tuple[tuple[int, ...], ...]:
        """The task's spread, level by level: counts per domain, largest first (smaller is
        better). For checks and views; placement compares zone keys instead."""
        out = []
        for level in range(self.first, self.depth + 1) if self.first else ():
            counts: dict[str, int] = {}
            for p in paths:
                d = domain(p, level)
                counts[d] = counts.get(d, 0) + 1
            out.append(tuple(sorted(counts.values(), reverse=True)))
        return tuple(out)


def topology(paths: Iterable[Path]) -> Topology:
    distinct = set(paths)
    depth = max((len(p) for p in distinct), default=1)
    for level in range(1, depth + 1):
        if len({domain(p, level) for p in distinct}) > 1:
            return Topology(level, depth)
    return Topology(0, depth)


Node = tuple[int, str | None]  # (level, parent domain at level - 1; None at `first`)


@dataclass(frozen=True)
class Uneven:
    """A node under which a task's replicas are split unevenly: ``counts`` per child domain
    at ``level`` (children holding none are absent); ``low`` are the live children holding
    at least two fewer than the fullest child, emptiest first."""

    level: int
    parent: str | None
    counts: dict[str, int]
    low: list[str]


class LiveTree:
    """The domain tree of the workers that may take a task (eligible, some capacity, labels
    met): for each node, its live children."""

    __slots__ = ("children", "topo")

    def __init__(self, topo: Topology, paths: Iterable[Path]) -> None:
        self.topo = topo
        self.children: dict[Node, set[str]] = {}
        if not topo.first:
            return
        for p in set(paths):
            for level in range(topo.first, topo.depth + 1):
                parent = domain(p, level - 1) if level > topo.first else None
                self.children.setdefault((level, parent), set()).add(domain(p, level))

    def uneven(self, paths: Collection[Path]) -> Iterator[Uneven]:
        """The nodes where ``paths`` (a task's owners) are split unevenly, top level first."""
        topo = self.topo
        if not topo.first or len(paths) < 2:
            return
        for level in range(topo.first, topo.depth + 1):
            groups: dict[str | None, dict[str, int]] = {}
            for p in paths:
                parent = domain(p, level - 1) if level > topo.first else None
                counts = groups.setdefault(parent, {})
                d = domain(p, level)
                counts[d] = counts.get(d, 0) + 1
            for parent, counts in groups.items():
                fullest = max(counts.values())
                if fullest < 2:
                    continue
                live = self.children.get((level, parent), ())
                low = sorted((counts.get(c, 0), c) for c in live if counts.get(c, 0) <= fullest - 2)
                if low:
                    yield Uneven(level, parent, counts, [c for _, c in low])

    def degraded(self, paths: Collection[Path]) -> bool:
        return next(self.uneven(paths), None) is not None


@dataclass(frozen=True)
class Goal:
    """What one more replica of a task needs: ``best`` None means any worker whose top domain
    holds none of the task's owners (the best spread there is); else that exact zone key."""

    tops: frozenset[str]
    paths: list[Path]
    best: tuple[int, ...] | None


class Chooser:
    """The zone part of choosing workers for more replicas, during one placing call.

    Built from the workers that had room when the call started — a superset of those that
    have room later — so a `goal` is never worse than what is reachable. A caller that finds
    no worker meeting the goal takes the best it saw (`key`) and calls `refresh` with the
    workers that still have room.
    """

    __slots__ = ("path", "room_paths", "room_tops", "strict", "top_of", "topo")

    def __init__(self, topo: Topology, path: Mapping[str, Path], top_of: Mapping[str, str],
                 room: Iterable[str], strict: bool = False) -> None:
        self.topo = topo
        self.path = path
        self.top_of = top_of  # every worker's top domain (the ledger keeps it)
        self.strict = strict  # REQUIRE (topo.first == 1): only a domain without an owner
        self.room_paths: set[Path] = set()
        self.room_tops: set[str] = set()
        self.refresh(room)

    def top(self, worker: str) -> str:
        return self.top_of[worker]

    def refresh(self, room: Iterable[str]) -> None:
        self.room_paths = {self.path[w] for w in room}
        self.room_tops = {self.topo.top(p) for p in self.room_paths}

    def goal(self, owners: Iterable[str]) -> Goal:
        paths = [self.path[o] for o in owners]
        tops = frozenset(self.top(o) for o in owners)
        if self.strict or not self.room_tops <= tops:
            return Goal(tops, paths, None)
        key = self.topo.key
        return Goal(tops, paths, min((key(p, paths) for p in self.room_paths), default=None))

    def fits(self, worker: str, goal: Goal) -> bool:
        if goal.best is None:
            return self.top(worker) not in goal.tops
        return self.topo.key(self.path[worker], goal.paths) == goal.best

    def key(self, worker: str, goal: Goal) -> tuple[int, ...]:
        return self.topo.key(self.path[worker], goal.paths)
