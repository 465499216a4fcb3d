"""Steady subsetting: connections balanced within two and resizes that move little more than
they must, for backends with stable indexes (docs/balancer.md, "Subsetting", has the
measurements and the trade-off behind it).

A backend's *index* is its place in the list the caller gives — as a Borg task's index: a
resize appends or drops the last ones, and a backend that leaves leaves its place empty
(``None``) until one comes back into it. Names alone cannot do both: balance needs each client's
start measured against the whole fleet (ranks), and a rank shifts with every backend inserted
before it, so about a third of the clients slide on each resize (``low-churn``). Indexes give
positions that no resize moves:

* backend i sits at ``vdc(i) ⊕ mask`` on a 64-bit circle (the van der Corput sequence, bits
  reversed, with a per-seed digital shift): the first n indexes are spread so evenly that every
  aligned block of 2^-q of the circle holds ⌊n/2^q⌋ or ⌈n/2^q⌉ of them, and index n lands in
  the middle of a widest gap without moving any other;
* the circle is cut into 2^q such blocks of `BLOCK` to 2·`BLOCK` indexes; each block gets the
  same share of the clients, and within a block a client starts at the index of its
  rank-quantile (or the next backend, if that index is empty), so starts are spread evenly
  by rank where it matters (over a window of K) while a resize re-spaces the starts of one
  block only;
* a client's subset is the K backends from its start, round the circle; K does not enter the
  start, so a larger K only adds backends and a smaller one only drops them.

Clients are placed on the circle evenly by their index when their number is known
(``clients``: indexes 0..clients−1), else by the van der Corput sequence (adding a client then
moves no one else, and balance is within about four instead of two). Balance within two needs
a block to hold about K·clients/backends backends: it holds while that is at most `BLOCK`, or
the fleet is one block (fewer than 2·`BLOCK` indexes).

    >>> ring = SteadyRing(["a", "b", "c", "d"], seed=0, clients=4)
    >>> sorted(ring.subset(0, 2) + ring.subset(2, 2))
    ['a', 'b', 'c', 'd']
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Iterable
from collections.abc import Set as AbstractSet

BITS = 64
CIRCLE = 1 << BITS
BLOCK = 32  # indexes per block, at least: balance needs ≳ K·clients/backends, churn ≲ 3K


def vdc64(i: int) -> int:
    """``i`` with its 64 bits reversed: where index i sits on the circle."""
    return int(f"{i:064b}"[::-1], 2)


def _mask(seed: int) -> int:
    """A digital shift per seed: services with other seeds get other neighbours."""
    digest = hashlib.blake2b(f"steady\x1f{seed}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class SteadyRing:
    """The backends' places on the circle and their blocks for one list; `subset` answers
    per client.

    ``backends`` in index order; ``None`` (or a repeat of a name already listed) is an empty
    index; a set has no order, so its names are sorted. ``clients``: their number, if known.

    Blocks and ranks count *indexes*, empty ones included: a backend that leaves only sends
    the clients that started at it to the next one (no other start moves), and the blocks
    regroup only when the index count passes BLOCK × a power of two, where they split exactly
    in halves."""

    def __init__(self, backends: Iterable[str | None], seed: int = 0,
                 clients: int | None = None) -> None:
        if isinstance(backends, AbstractSet):  # no order to read indexes from: by name
            backends = sorted(b for b in backends if b is not None)
        mask = _mask(seed)
        seen: set[str] = set()
        slots: list[tuple[int, str | None]] = []
        for i, name in enumerate(backends):
            if name is not None and name not in seen:
                seen.add(name)
            else:
                name = None
            slots.append((vdc64(i) ^ mask, name))
        slots.sort()
        self._keys = [p for p, _ in slots]
        self._slots = [b for _, b in slots]  # by place on the circle; None: empty
        self.names = [b for b in self._slots if b is not None]
        # Where each slot's present backend, or the next one round the circle, is in `names`.
        self._next: list[int] = []
        count = 0
        for name in self._slots:
            self._next.append(count)
            count += name is not None
        self.clients = clients
        q = 0
        while (len(slots) >> (q + 1)) >= BLOCK:
            q += 1
        self._shift = BITS - q

    def start(self, client: int) -> int:
        """Where ``client``'s subset begins: a place in `names`."""
        if client < 0:
            raise ValueError(f"client index must be non-negative, not {client}")
        if self.clients:
            if client >= self.clients:
                raise ValueError(f"client index {client} is not below clients={self.clients}")
            v = client * CIRCLE // self.clients
        else:
            v = vdc64(client)
        shift = self._shift
        first = v >> shift << shift
        lo = bisect_left(self._keys, first)
        hi = bisect_left(self._keys, first + (1 << shift))
        at = lo + ((v - first) * (hi - lo) >> shift) if hi > lo else hi
        return self._next[at] % len(self.names) if at < len(self._next) else 0

    def subset(self, client: int, subset_size: int) -> list[str]:
        """``client``'s min(K, B) backends: K round the circle from its start."""
        if subset_size < 1:
            raise ValueError(f"subset_size must be at least 1, not {subset_size}")
        n = len(self.names)
        if n == 0:
            return []
        s = self.start(client)
        k = min(subset_size, n)
        run = self.names[s: s + k]
        return run + self.names[: k - len(run)]
