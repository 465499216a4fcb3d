"""How evenly a subsetting algorithm spreads connections, and how many move on a resize.

`simulate_subsetting` subsets clients 0..C-1 over backends ``b0000``..``b{B-1}`` and counts
connections per backend — the chapter's figures 20-3 to 20-5. With ``resize_to`` it subsets
again over B2 backends (added ones take the next names; removed ones are the last) and reports
the churn: the fraction of client→backend connections that changed, next to the least any
balanced algorithm must move (`corral.common.balancer.subsetting.ideal_churn`).

`simulate_tradeoff` measures what low churn costs in balance: for each algorithm (and stable
subsetting with several numbers of arcs), the spread of connections per backend, and the
cumulative churn of many one-backend scale-ups next to its minimum (the sum of the ideals).
(`corral.sim.resize_sim` adds what one client loses, per algorithm.) ``steady`` is given the
number of clients, as a service knows its own size.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.common.balancer.subsetting import (
    DEFAULT_LOT_SIZE,
    DETERMINISTIC,
    LOW_CHURN,
    RANDOM,
    STABLE,
    STABLE_ARCS,
    STEADY,
    LowChurnLots,
    assign,
    churn,
    connection_counts,
    ideal_churn,
)


def backend_names(count: int) -> list[str]:
    return [f"b{i:04d}" for i in range(count)]


@dataclass(frozen=True)
class SubsettingResult:
    """Connections per backend under one algorithm, and the churn of an optional resize."""

    algorithm: str
    clients: int
    backends: int
    subset_size: int
    counts: tuple[int, ...]  # connections per backend, in backend order
    resize_to: int | None = None
    churn: float | None = None
    ideal_churn: float | None = None

    @property
    def min(self) -> int:
        return min(self.counts, default=0)

    @property
    def max(self) -> int:
        return max(self.counts, default=0)

    @property
    def mean(self) -> float:
        return sum(self.counts) / len(self.counts) if self.counts else 0.0

    def to_json(self) -> dict[str, float]:
        """The keys of ``corral-sim subsetting -o json``."""
        mean = self.mean
        out: dict[str, float] = {
            "min": self.min,
            "mean": mean,
            "max": self.max,
            "min_over_mean": self.min / mean if mean else 0.0,
            "max_over_mean": self.max / mean if mean else 0.0,
        }
        if self.churn is not None:
            out["churn"] = self.churn
        return out


def simulate_subsetting(
    algorithm: str,
    clients: int,
    backends: int,
    subset_size: int,
    seed: int = 0,
    resize_to: int | None = None,
    lot_size: int = DEFAULT_LOT_SIZE,
) -> SubsettingResult:
    """Subset ``clients`` clients over ``backends`` backends (and again over ``resize_to``)."""
    names = backend_names(backends)
    population = clients if algorithm == STEADY else None
    before = assign(algorithm, names, range(clients), subset_size, seed, lot_size, population)
    counts = connection_counts(before, names)
    result = SubsettingResult(
        algorithm, clients, backends, subset_size, tuple(counts[n] for n in names)
    )
    if resize_to is None:
        return result
    after = assign(algorithm, backend_names(resize_to), range(clients), subset_size, seed,
                   lot_size, population)
    return SubsettingResult(
        algorithm,
        clients,
        backends,
        subset_size,
        result.counts,
        resize_to,
        churn(before, after),
        ideal_churn(backends, resize_to),
    )


# -- churn against balance over repeated small resizes ------------------------------------------

# The variants the trade-off compares: (label, algorithm, arcs); arcs only for the lot-based
# ones (low-churn is stable with one arc).
VARIANTS: tuple[tuple[str, str, int | None], ...] = (
    (RANDOM, RANDOM, None),
    (DETERMINISTIC, DETERMINISTIC, None),
    (LOW_CHURN, LOW_CHURN, 1),
    *((f"{STABLE}, {a} arcs" + (" (= stable)" if a == STABLE_ARCS else ""), STABLE, a)
      for a in (2, 3, 4, 6, 8)),
    (f"{STEADY} (the default)", STEADY, None),
)


@dataclass(frozen=True)
class RepeatedResize:
    """One variant's balance before, and churn over, ``steps`` one-backend scale-ups."""

    label: str
    min_over_mean: float  # connections per backend before the first resize
    max_over_mean: float
    churn: float  # the sum of every step's churn
    minimum: float  # the sum of every step's ideal churn

    def to_json(self) -> dict[str, float | str]:
        return {
            "variant": self.label,
            "min_over_mean": self.min_over_mean,
            "max_over_mean": self.max_over_mean,
            "churn": self.churn,
            "minimum": self.minimum,
            "churn_over_minimum": self.churn / self.minimum,
        }


def _subsets(
    algorithm: str, arcs: int | None, backends: int, clients: int, k: int, seed: int, lot: int
) -> dict[int, list[str]]:
    if arcs is None:
        population = clients if algorithm == STEADY else None
        return assign(algorithm, backend_names(backends), range(clients), k, seed, lot, population)
    lots = LowChurnLots(backend_names(backends), k, seed, lot, arcs)
    return {c: lots.subset(c) for c in range(clients)}


def simulate_repeated_resize(
    label: str,
    algorithm: str,
    arcs: int | None,
    clients: int,
    backends: int,
    subset_size: int,
    steps: int,
    seed: int = 0,
    lot_size: int = DEFAULT_LOT_SIZE,
) -> RepeatedResize:
    """``steps`` scale-ups by one backend from ``backends`` (each new backend the next name)."""
    before = _subsets(algorithm, arcs, backends, clients, subset_size, seed, lot_size)
    counts = connection_counts(before, backend_names(backends)).values()
    mean = sum(counts) / len(counts)
    total = minimum = 0.0
    for size in range(backends + 1, backends + steps + 1):
        after = _subsets(algorithm, arcs, size, clients, subset_size, seed, lot_size)
        total += churn(before, after)
        minimum += ideal_churn(size - 1, size)
        before = after
    return RepeatedResize(label, min(counts) / mean, max(counts) / mean, total, minimum)


def simulate_tradeoff(
    clients: int, backends: int, subset_size: int, steps: int, seed: int = 0,
    lot_size: int = DEFAULT_LOT_SIZE,
) -> list[RepeatedResize]:  # fmt: skip
    """Every variant of `VARIANTS` under the same repeated scale-ups."""
    return [
        simulate_repeated_resize(
            label, algorithm, arcs, clients, backends, subset_size, steps, seed, lot_size
        )
        for label, algorithm, arcs in VARIANTS
    ]
