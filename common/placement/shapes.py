"""Task shapes and worker labels: what a task needs, what a worker offers.

A worker carries *labels*, exact ``key=value`` pairs (``gpu=true``, ``disk=ssd``), fixed for its
incarnation. A task carries a *shape*: its cost (the load it puts on a worker, against the
worker's ``max_load``), how many replicas it wants (``None``: the placement's default) and the
labels a worker must have to run it (``require``: every pair must match exactly; a worker may
have more). ``require`` is a hard constraint: placement never puts a task on a worker that
lacks one of its pairs, whatever that costs in balance; such a task waits as pending.

Labels are kept as frozensets of pairs and interned by `Placement`, so a million tasks that
require the same labels share one object.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

Labels = frozenset[tuple[str, str]]
NO_LABELS: Labels = frozenset()


def labels(pairs: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> Labels:
    """Labels from a mapping or pairs; refuses what is not a non-empty str key with a str value
    (an operator typo should fail loudly rather than make a task unplaceable)."""
    if not pairs:
        return NO_LABELS
    items = pairs.items() if isinstance(pairs, Mapping) else pairs
    out = []
    for key, value in items:
        if not isinstance(key, str) or not key or not isinstance(value, str):
            raise ValueError(
                f"a label is a non-empty str key with a str value, got {key!r}={value!r}"
            )
        out.append((key, value))
    return frozenset(out)


def describe(pairs: Labels) -> str:
    """``gpu=true,zone-local=yes`` — sorted, for messages and views."""
    return ",".join(f"{k}={v}" for k, v in sorted(pairs))


@dataclass(frozen=True)
class TaskShape:
    """What placement needs to know about one task.

    ``TaskShape(cost=2.0, replicas=3, require={"gpu": "true"})``. ``require`` is stored as a
    read-only mapping; `needs` gives it as `Labels`.
    """

    cost: float = 1.0
    replicas: int | None = None
    require: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        cost = self.cost
        if isinstance(cost, bool) or not isinstance(cost, int | float):
            raise ValueError(f"cost must be a number, got {cost!r}")
        if not cost > 0 or math.isinf(cost):
            raise ValueError(f"cost must be a finite number > 0, got {cost!r}")
        reps = self.replicas
        if reps is not None and (isinstance(reps, bool) or not isinstance(reps, int) or reps < 1):
            raise ValueError(f"replicas must be an int >= 1 or None, got {reps!r}")
        need = labels(self.require)  # validates
        object.__setattr__(self, "cost", float(cost))
        object.__setattr__(self, "require", MappingProxyType(dict(sorted(need))))

    def __hash__(self) -> int:
        return hash((self.cost, self.replicas, tuple(self.require.items())))

    @property
    def needs(self) -> Labels:
        return frozenset(self.require.items())
