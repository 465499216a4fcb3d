"""Subsetting: which ``subset_size`` (K) of the B backends each client connects to (SRE book,
chapter 20). docs/balancer.md ("Subsetting") explains the algorithms and measures their spread
and churn.

`ALGORITHMS`, each a pure function of (backends, client index, K, seed):

* ``random`` — the first K (healthy) backends of a per-client rendezvous order: least churn,
  a binomial spread;
* ``deterministic`` — the chapter's ``Subset()``: connections per backend differ by at most
  one, but any change of B moves nearly every connection;
* ``low-churn`` — lots of ``lot_size`` clients (a power of two), each lot on its own
  rendezvous ring, client j starting at its van der Corput point: a near-even spread, churn
  the ideal plus about 1/(3K) per resize;
* ``stable`` — low-churn with its starts placed within `STABLE_ARCS` arcs of the ring: less
  churn over repeated resizes, a looser spread;
* ``steady`` (the default) — for backends with stable indexes (`corral.common.balancer.steady`):
  connections within two of each other when the number of clients is known, resizes that move
  little more than the least, at most one connection lost per client for a backend that comes
  or goes (in fleets of two blocks or more).

Every client gets min(K, B) distinct backends. Client indexes are non-negative and distinct,
not necessarily contiguous. For all but ``steady`` the backends' order as the caller lists them
never matters (they are sorted or hashed), so clients that learnt them in different orders
agree; for ``steady`` the order is the backends' indexes (``None``: an empty index). A backend
listed twice counts once. `assign` subsets many clients sharing the work, `subset` one;
`connection_counts`, `churn`, `ideal_churn` and `max_loss` measure the result.

Example (12 backends, K = 3, as in the chapter — every backend gets 2 or 3 of 10 clients)::

    >>> backends = [f"b{i:02d}" for i in range(12)]
    >>> subsets = assign("deterministic", backends, range(10), 3)
    >>> sorted(set(connection_counts(subsets, backends).values()))
    [2, 3]
"""

from __future__ import annotations

import hashlib
import random
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence

from .steady import SteadyRing

RANDOM = "random"
DETERMINISTIC = "deterministic"
LOW_CHURN = "low-churn"
STABLE = "stable"
STEADY = "steady"
ALGORITHMS = (RANDOM, DETERMINISTIC, LOW_CHURN, STABLE, STEADY)

DEFAULT_LOT_SIZE = 64
STABLE_ARCS = 3  # arcs per lot for `stable`: the fewest that keep repeated one-backend resizes
# within 2× the least churn (docs/balancer.md has the trade-off)
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
    # `_key(*salt, b)` for each b, the salt hashed once: the same digests, a third of the time.
    base = hashlib.blake2b(("\x1f".join(map(str, salt)) + "\x1f").encode(), digest_size=8)

    def key(b: str) -> tuple[int, str]:
        h = base.copy()
        h.update(b.encode())
        return int.from_bytes(h.digest(), "big"), b

    return sorted(backends, key=key)


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
    backends: Iterable[str | None],
    clients: Iterable[int],
    subset_size: int,
    seed: int = 0,
    lot_size: int = DEFAULT_LOT_SIZE,
    population: int | None = None,
) -> dict[int, list[str]]:
    """Every client's subset under ``algorithm`` (one of `ALGORITHMS`), sharing the work.
    ``population``: for ``steady``, the number of clients (indexes 0..population−1), which
    spreads them exactly evenly; the others ignore it."""
    if algorithm == STEADY:
        _check(subset_size)
        ring = SteadyRing(backends, seed, population)
        return {client: ring.subset(client, subset_size) for client in clients}
    names = sorted({b for b in backends if b is not None})
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
    backends: Iterable[str | None],
    client: int,
    subset_size: int,
    seed: int = 0,
    lot_size: int = DEFAULT_LOT_SIZE,
    population: int | None = None,
) -> list[str]:
    """One client's subset under ``algorithm``."""
    return assign(algorithm, backends, [client], subset_size, seed, lot_size, population)[client]


def connection_counts(
    subsets: Mapping[int, Sequence[str]], backends: Iterable[str | None]
) -> dict[str, int]:
    """Connections per backend (every backend listed, zero if no client chose it)."""
    counts = dict.fromkeys(sorted(b for b in backends if b is not None), 0)
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


def max_loss(before: Mapping[int, Sequence[str]], after: Mapping[int, Sequence[str]]) -> int:
    """The most connections any one client of ``before`` no longer has in ``after``."""
    return max((len(set(s) - set(after.get(c, ()))) for c, s in before.items()), default=0)


def ideal_churn(backends_before: int, backends_after: int) -> float:
    """The least churn a balanced algorithm can have when B changes: removed backends' share of
    the connections must move, and added backends must take their share."""
    bigger = max(backends_before, backends_after)
    return abs(backends_after - backends_before) / bigger if bigger else 0.0
