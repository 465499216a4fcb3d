"""What resizes cost each subsetting algorithm: one backend at a time from B to B2, and any
single backend coming or going.

`simulate_resizes` subsets clients 0..C-1 over backends ``b0000``.. in index order, then
steps one backend at a time to B2 (a scale-up appends the next name, a scale-down drops the
last) and reports: the spread of connections per backend before the first step, the
cumulative churn of the steps next to its minimum (the sum of the per-step ideals,
`corral.common.balancer.subsetting.ideal_churn`), the most connections one client lost in any
step, and — at the start — the most one client loses when any one backend leaves (each in
turn) or one joins. A backend leaving is what each algorithm is given for it: the list
without the name, or, for ``steady`` (which reads indexes from the order), the list with its
place empty. `compare_resizes` runs every algorithm, and ``steady`` twice: with the clients
counted (the number of clients known, as a service knows its own size) and without.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.common.balancer.subsetting import (
    ALGORITHMS,
    DEFAULT_LOT_SIZE,
    STEADY,
    assign,
    churn,
    connection_counts,
    ideal_churn,
    max_loss,
)

UNCOUNTED = f"{STEADY}, clients uncounted"
# (label, algorithm, whether the number of clients is given): every algorithm, and steady
# also without its client count.
VARIANTS: tuple[tuple[str, str, bool], ...] = (
    *((a, a, a == STEADY) for a in ALGORITHMS),
    (UNCOUNTED, STEADY, False),
)


def backend_names(count: int) -> list[str]:
    return [f"b{i:04d}" for i in range(count)]


@dataclass(frozen=True)
class ResizeReport:
    """One variant through ``steps`` single resizes, and its worst single-backend change."""

    label: str
    min: int  # connections per backend before the first step
    max: int
    mean: float
    churn: float  # the sum of every step's churn
    minimum: float  # the sum of every step's ideal churn
    step_loss: int  # the most connections one client lost in one step
    single_loss: int  # ... when any one backend left, or one joined, at the start

    @property
    def spread(self) -> int:
        return self.max - self.min

    def to_json(self) -> dict[str, float | str]:
        return {
            "variant": self.label,
            "min": self.min,
            "max": self.max,
            "spread": self.spread,
            "min_over_mean": self.min / self.mean if self.mean else 0.0,
            "max_over_mean": self.max / self.mean if self.mean else 0.0,
            "churn": self.churn,
            "minimum": self.minimum,
            "churn_over_minimum": self.churn / self.minimum if self.minimum else 0.0,
            "worst_step_loss": self.step_loss,
            "worst_single_loss": self.single_loss,
        }


def single_change_loss(algorithm: str, backends: list[str], clients: int, subset_size: int,
                       seed: int = 0, lot_size: int = DEFAULT_LOT_SIZE,
                       counted: bool = False) -> int:
    """The most connections one client loses when any one backend leaves, or one joins."""
    population = clients if counted else None

    def subsets(listed: list[str | None]) -> dict[int, list[str]]:
        return assign(algorithm, listed, range(clients), subset_size, seed, lot_size, population)

    before = subsets(list(backends))
    worst = max_loss(before, subsets([*backends, "joiner"]))
    for i in range(len(backends)):
        left: list[str | None] = list(backends)
        if algorithm == STEADY:
            left[i] = None  # its index stays, empty
        else:
            del left[i]
        worst = max(worst, max_loss(before, subsets(left)))
    return worst


def simulate_resizes(label: str, algorithm: str, counted: bool, clients: int, backends: int,
                     resize_to: int, subset_size: int, seed: int = 0,
                     lot_size: int = DEFAULT_LOT_SIZE) -> ResizeReport:
    """One variant from ``backends`` to ``resize_to``, one backend at a time."""
    population = clients if counted else None

    def subsets(size: int) -> dict[int, list[str]]:
        return assign(algorithm, backend_names(size), range(clients), subset_size, seed,
                      lot_size, population)

    before = subsets(backends)
    counts = connection_counts(before, backend_names(backends)).values()
    mean = sum(counts) / len(counts) if counts else 0.0
    total = minimum = 0.0
    step_loss, step = 0, 1 if resize_to >= backends else -1
    for size in range(backends + step, resize_to + step, step):
        after = subsets(size)
        total += churn(before, after)
        minimum += ideal_churn(size - step, size)
        step_loss = max(step_loss, max_loss(before, after))
        before = after
    single = single_change_loss(algorithm, backend_names(backends), clients, subset_size, seed,
                                lot_size, counted)
    return ResizeReport(label, min(counts, default=0), max(counts, default=0), mean, total,
                        minimum, step_loss, single)


def compare_resizes(clients: int, backends: int, resize_to: int, subset_size: int,
                    seed: int = 0, lot_size: int = DEFAULT_LOT_SIZE) -> list[ResizeReport]:
    """Every variant of `VARIANTS` through the same resizes."""
    return [simulate_resizes(label, algorithm, counted, clients, backends, resize_to,
                             subset_size, seed, lot_size)
            for label, algorithm, counted in VARIANTS]
