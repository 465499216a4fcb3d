"""Subsetting: which backends each client keeps connections to (SRE book, chapter 20).

A client connects to ``subset_size`` (K) of the B backends, not to all of them. Three
algorithms, all pure functions of (backends, client index, K, seed):

``random``
    Each client shuffles the backends once and takes the first K healthy ones. The shuffle is
    kept as a per-client random key per backend (rendezvous hashing), so a resize only inserts
    or removes the changed backends in each client's order instead of reshuffling it. Cheap and
    low-churn, but the connections per backend spread widely (binomially).

``deterministic``
    The chapter's ``Subset()``: clients are grouped into rounds of ``B / K`` consecutive
    indexes; every round shuffles the backends with the round as the seed and hands each client
    of the round its own K-slice, so within a round every backend is used exactly once. We read
    the rounds as one stream of shuffles, client i taking stream positions [iK, iK + K): when K
    divides B this is exactly the chapter's algorithm, and when it does not, a client whose
    slice straddles two shuffles still gets K *distinct* backends (the next shuffle is repaired
    so that its head avoids the tail of the previous one) and every backend still appears once
    per shuffle — so connections per backend differ by at most one. Its weakness: changing B
    changes every shuffle, so nearly every connection moves.

``low-churn``
    After "Reinventing Backend Subsetting at Google" (ACM Queue 2022: lots, Ringsteady).
    Clients form *lots* of ``lot_size`` (a power of two) consecutive indexes. Each lot orders
    the backends by a per-lot rendezvous hash — a random order per lot (diversity: a failed
    backend's load spreads over different neighbours in each lot) that a resize changes only by
    inserting or deleting the changed backends. Client j of a lot starts at position
    ``vdc(j) × B`` of that order, where vdc is the binary van der Corput sequence (bit-reversed
    j), and takes the next K backends round the ring. The starts of a full lot are evenly
    spaced, so within a lot every backend is covered ⌊lot_size·K/B⌋ or ⌈lot_size·K/B⌉ times,
    and any prefix of a lot (a partial last lot, or gaps in the client indexes) is spread
    evenly too. Client indexes need not be contiguous; they need only be distinct.

    Its churn on a resize is the ideal plus about 1/(3K): a start measured in ranks moves when
    B does, and ranks shift after an inserted or removed backend, so about a third of the
    clients slide their window by one backend although they did not need to. Over many small
    resizes that adds up (30 one-backend scale-ups of 300 backends, K = 30: about 4× the
    minimum).

``stable``
    Low-churn with its starts measured in ranks *within arcs*: each lot's hash circle is cut
    into `STABLE_ARCS` equal arcs; client j falls in arc ⌊vdc(j) × arcs⌋ and starts at the same
    fraction of that arc's backends (in rank order) as its van der Corput point is of the arc,
    then takes K backends round the lot's ring as before. A resize moves the starts of the
    clients in the changed backend's arc only, so the needless slides drop by the number of
    arcs (low-churn is the one-arc case). The price is balance: the arcs hold random numbers of
    backends, so the clients per backend vary from arc to arc (docs/balancer.md measures the
    trade-off). Removing one backend costs each client at most that backend, as long as K ≤ B
    minus the backends of the largest arc (low-churn can cost a client whose window wraps past
    the ring's origin a second connection).

Example (12 backends, K = 3, as in the chapter — every backend gets 2 or 3 of 10 clients)::

    >>> backends = [f"b{i:02d}" for i in range(12)]
    >>> subsets = assign("deterministic", backends, range(10), 3)
    >>> sorted(set(connection_counts(subsets, backends).values()))
    [2, 3]

Backend order never depends on the order the caller lists them in (they are sorted or hashed),
so clients that learnt the backends in different orders agree; a backend listed twice counts
once.
"""

from __future__ import annotations

import hashlib
import random
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence

RANDOM = "random"
DETERMINISTIC = "deterministic"
LOW_CHURN = "low-churn"
STABLE = "stable"
ALGORITHMS = (RANDOM, DETERMINISTIC, LOW_CHURN, STABLE)

DEFAULT_LOT_SIZE = 64
STABLE_ARCS = 3  # arcs per lot for `stable`: the fewest that keep 30 one-backend scale-ups of
# 300 backends (K = 30) within 2× the least churn; docs/balancer.md has the trade-off
_RING = 1 << 64  # the hash circle of `_key`


def _key(*parts: object) -> int:
    """A stable 64-bit hash (``hash()`` of a str changes per process; this does not)."""
    data = "\x1f".join(map(str, parts)).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def _check(subset_size: int) -> None:
    if subset_size < 1:
        raise ValueError(f"subset_size must be at least 1, not {subset_size}")


def rendezvous_order(backends: Iterable[str], *salt: object) -> list[str]:
    """The backends in a random order fixed by ``salt``; adding or removing one backend leaves
    the relative order of all the others unchanged (that is what keeps churn low)."""
    return sorted(backends, key=lambda b: (_key(*salt, b), b))


def random_subset(
    backends: Iterable[str],
    client: int,
    subset_size: int,
    seed: int = 0,
    healthy: Callable[[str], bool] | None = None,
) -> list[str]:
    """The first ``subset_size`` (healthy) backends of the client's own shuffled order."""
    _check(subset_size)
    order = rendezvous_order(set(backends), "random", seed, client)
    if healthy is not None:
        order = [b for b in order if healthy(b)]
    return order[:subset_size]


class DeterministicRounds:
    """The repaired per-round shuffles of deterministic subsetting, built lazily and cached, so
    subsetting many clients costs one shuffle per round rather than one per client."""

    def __init__(self, backends: Iterable[str], subset_size: int, seed: int = 0) -> None:
        _check(subset_size)
        # Sorted first: the shuffle must not depend on the order the caller listed them in.
        self._order = sorted(set(backends))
        self._n = len(self._order)
        self._k = min(subset_size, self._n)
        self._seed = seed
        self._rounds: list[list[str]] = []

    def _round(self, r: int) -> list[str]:
        while len(self._rounds) <= r:
            self._rounds.append(self._next_round(len(self._rounds)))
        return self._rounds[r]

    def _next_round(self, r: int) -> list[str]:
        shuffled = list(self._order)
        random.Random(f"corral-subset:{self._seed}:{r}").shuffle(shuffled)
        boundary = r * self._n
        if r == 0 or boundary % self._k == 0:
            return shuffled
        # One client's slice straddles rounds r-1 and r: it has `tail` from round r-1 and takes
        # `head` more from round r. Move any of those out of round r's head (swapping in the
        # next backends that are not in the tail) so the slice has K distinct backends. Round r
        # stays a permutation, so every backend is still used once per round.
        first = boundary // self._k * self._k
        tail = set(self._rounds[r - 1][first - (r - 1) * self._n :])
        head = first + self._k - boundary
        spare = head
        for i in range(head):
            if shuffled[i] in tail:
                while shuffled[spare] in tail:
                    spare += 1
                shuffled[i], shuffled[spare] = shuffled[spare], shuffled[i]
                spare += 1
        return shuffled

    def subset(self, client: int) -> list[str]:
        """Client ``client``'s K backends: stream positions [client·K, client·K + K)."""
        if client < 0:
            raise ValueError(f"client index must be non-negative, not {client}")
        if self._n == 0:
            return []
        start = client * self._k
        r, offset = divmod(start, self._n)
        part = self._round(r)[offset : offset + self._k]
        if len(part) < self._k:
            part += self._round(r + 1)[: self._k - len(part)]
        return part


def deterministic_subset(
    backends: Iterable[str], client: int, subset_size: int, seed: int = 0
) -> list[str]:
    """One client's deterministic subset (see `DeterministicRounds` to subset many clients)."""
    return DeterministicRounds(backends, subset_size, seed).subset(client)


def van_der_corput(j: int, bits: int) -> int:
    """``j`` with its lowest ``bits`` bits reversed: 0, 4, 2, 6, 1, 5, 3, 7 for bits = 3.
    Any prefix of this sequence is spread almost evenly over [0, 2**bits)."""
    out = 0
    for _ in range(bits):
        out = (out << 1) | (j & 1)
        j >>= 1
    return out


class LowChurnLots:
    """The per-lot backend orders of low-churn subsetting (``arcs`` = 1) and of stable
    subsetting (``arcs`` > 1), cached per lot."""

    def __init__(
        self,
        backends: Iterable[str],
        subset_size: int,
        seed: int = 0,
        lot_size: int = DEFAULT_LOT_SIZE,
        arcs: int = 1,
    ) -> None:
        _check(subset_size)
        if lot_size < 1 or lot_size & (lot_size - 1):
            raise ValueError(f"lot_size must be a power of two, not {lot_size}")
        if arcs < 1:
            raise ValueError(f"arcs must be at least 1, not {arcs}")
        self._backends = sorted(set(backends))
        self._k = min(subset_size, len(self._backends))
        self._seed = seed
        self._lot_size = lot_size
        self._arcs = arcs
        self._bits = lot_size.bit_length() - 1
        # Per lot: the backends in ring order, and where each arc's backends begin in it.
        self._lots: dict[int, tuple[list[str], list[int]]] = {}

    def _lot(self, lot: int) -> tuple[list[str], list[int]]:
        found = self._lots.get(lot)
        if found is None:
            # The same ring as `rendezvous_order(backends, "lot", seed, lot)`, keeping the keys.
            keyed = sorted((_key("lot", self._seed, lot, b), b) for b in self._backends)
            keys = [k for k, _ in keyed]
            arcs = self._arcs
            bounds = [bisect_left(keys, m * _RING // arcs) for m in range(arcs)] + [len(keys)]
            found = self._lots[lot] = ([b for _, b in keyed], bounds)
        return found

    def subset(self, client: int) -> list[str]:
        """Client ``client``'s K backends: a run of its lot's ring from its van der Corput start
        (measured in ranks over the whole ring, or within its arc)."""
        if client < 0:
            raise ValueError(f"client index must be non-negative, not {client}")
        n = len(self._backends)
        if n == 0:
            return []
        lot, j = divmod(client, self._lot_size)
        order, bounds = self._lot(lot)
        # The client's point vdc(j) / L falls in arc m, at fraction (vdc·arcs − m·L) / L of it;
        # it starts at that fraction of the arc's backends. With one arc: vdc(j) × B // L.
        lots, arcs = self._lot_size, self._arcs
        point = van_der_corput(j, self._bits) * arcs
        m = point // lots
        first, count = bounds[m], bounds[m + 1] - bounds[m]
        start = (first + (point - m * lots) * count // lots) % n  # an empty arc: the next one
        run = order[start : start + self._k]
        return run + order[: self._k - len(run)]


def assign(
    algorithm: str,
    backends: Iterable[str],
    clients: Iterable[int],
    subset_size: int,
    seed: int = 0,
    lot_size: int = DEFAULT_LOT_SIZE,
) -> dict[int, list[str]]:
    """Every client's subset under ``algorithm`` (one of `ALGORITHMS`), sharing the work."""
    names = sorted(set(backends))
    if algorithm == RANDOM:
        _check(subset_size)
        return {client: random_subset(names, client, subset_size, seed) for client in clients}
    pick: Callable[[int], list[str]]
    if algorithm == DETERMINISTIC:
        pick = DeterministicRounds(names, subset_size, seed).subset
    elif algorithm == LOW_CHURN:
        pick = LowChurnLots(names, subset_size, seed, lot_size).subset
    elif algorithm == STABLE:
        pick = LowChurnLots(names, subset_size, seed, lot_size, STABLE_ARCS).subset
    else:
        raise ValueError(f"unknown subsetting algorithm {algorithm!r}; use one of {ALGORITHMS}")
    return {client: pick(client) for client in clients}


def subset(
    algorithm: str,
    backends: Iterable[str],
    client: int,
    subset_size: int,
    seed: int = 0,
    lot_size: int = DEFAULT_LOT_SIZE,
) -> list[str]:
    """One client's subset under ``algorithm``."""
    return assign(algorithm, backends, [client], subset_size, seed, lot_size)[client]


def connection_counts(
    subsets: Mapping[int, Sequence[str]], backends: Iterable[str]
) -> dict[str, int]:
    """Connections per backend (every backend listed, zero if no client chose it)."""
    counts = dict.fromkeys(sorted(backends), 0)
    for chosen in subsets.values():
        for b in chosen:
            counts[b] += 1
    return counts


def churn(before: Mapping[int, Sequence[str]], after: Mapping[int, Sequence[str]]) -> float:
    """The fraction of the client→backend connections in ``before`` that ``after`` no longer
    has (clients missing from ``after`` lose all of theirs)."""
    total = sum(len(s) for s in before.values())
    if total == 0:
        return 0.0
    lost = sum(len(set(s) - set(after.get(c, ()))) for c, s in before.items())
    return lost / total


def ideal_churn(backends_before: int, backends_after: int) -> float:
    """The least churn a balanced algorithm can have when B changes: removed backends' share of
    the connections must move, and added backends must take their share."""
    bigger = max(backends_before, backends_after)
    return abs(backends_after - backends_before) / bigger if bigger else 0.0
