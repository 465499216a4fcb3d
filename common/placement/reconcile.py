"""Reconciliation: from what workers report to what they should run.

Two pure pieces the supervisor needs:

* `correction` — the instruction set that converges a worker's reported running set to the
  desired one: incremental ``add``/``remove``, or a ``reset`` carrying the whole desired set
  (the worker keeps tasks in both, stops the rest, starts the missing).
* `resolve_claims` — after a supervisor restart, workers report the tasks they already run;
  a task claimed by more workers than ``replicas`` keeps the claims with the highest
  assignment epoch, then the lowest worker id. The rest are surplus, to be stopped.

    >>> correction(running={"a", "b"}, desired=["b", "c"])
    Correction(reset=False, add=('c',), remove=('a',))
    >>> kept, surplus = resolve_claims({"t": [("w2", 3), ("w1", 3), ("w3", 5)]}, replicas=2)
    >>> kept, surplus
    ({'t': ['w3', 'w1']}, {'t': ['w2']})
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Correction:
    """What to send a worker so that it runs exactly the desired set."""

    reset: bool
    add: tuple[str, ...]
    remove: tuple[str, ...]

    def __bool__(self) -> bool:
        return self.reset or bool(self.add) or bool(self.remove)


def correction(
    running: Iterable[str], desired: Iterable[str], *, reset: bool = False
) -> Correction:
    """The instruction set converging ``running`` to ``desired`` (sorted, so deterministic).

    With ``reset`` the worker is sent the full desired set and diffs it itself: the right thing
    after a supervisor restart, when the supervisor's idea of ``running`` may be incomplete.
    """
    want = set(desired)
    if reset:
        return Correction(True, tuple(sorted(want)), ())
    have = set(running)
    return Correction(False, tuple(sorted(want - have)), tuple(sorted(have - want)))


def resolve_claims(
    claims: Mapping[str, Iterable[tuple[str, int]]], replicas: int | Callable[[str], int]
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Per task, the workers that keep it (at most ``replicas`` — a number, or the task's own
    from a function: the newest assignment first, i.e. the highest fencing token, then the
    lowest worker id) and the surplus claimants that must stop it."""
    kept: dict[str, list[str]] = {}
    surplus: dict[str, list[str]] = {}
    for task, claimants in claims.items():
        n = replicas(task) if callable(replicas) else replicas
        ranked = sorted(claimants, key=lambda c: (-c[1], c[0]))
        kept[task] = [w for w, _ in ranked[:n]]
        if len(ranked) > n:
            surplus[task] = [w for w, _ in ranked[n:]]
    return kept, surplus
