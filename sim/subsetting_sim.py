"""How evenly a subsetting algorithm spreads connections, and how many move on a resize.

`simulate_subsetting` subsets clients 0..C-1 over backends ``b0000``..``b{B-1}`` and counts
connections per backend — the chapter's figures 20-3 to 20-5. With ``resize_to`` it subsets
again over B2 backends (added ones take the next names; removed ones are the last) and reports
the churn: the fraction of client→backend connections that changed, next to the least any
balanced algorithm must move (`corral.common.subsetting.ideal_churn`).
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.common.subsetting import (
    DEFAULT_LOT_SIZE,
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
    before = assign(algorithm, names, range(clients), subset_size, seed, lot_size)
    counts = connection_counts(before, names)
    result = SubsettingResult(
        algorithm, clients, backends, subset_size, tuple(counts[n] for n in names)
    )
    if resize_to is None:
        return result
    after = assign(algorithm, backend_names(resize_to), range(clients), subset_size, seed, lot_size)
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
