"""The state every picker keeps per slot, and the notifications that change it: the base
class of the pickers in `corral.common.balancer.pickers` (which describes them all).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import ClassVar


class Picker:
    """The per-slot state every picker keeps, and the notifications that change it."""

    name: ClassVar[str] = ""

    def __init__(self, n: int, rng: random.Random) -> None:
        self.n = n
        self.eligible = [True] * n
        self.active = [0] * n
        self.errors = [0] * n
        self._draw = rng.random
        self._bits = rng.getrandbits
        # Reasons a pick cannot take its short path: one per ineligible slot, plus whatever a
        # subclass adds (too few slots). Zero is the usual case.
        self._detours = 0

    def pick(self) -> int:
        raise NotImplementedError

    def release(self, i: int) -> None:
        """A request on slot i finished (whatever its outcome)."""
        self.active[i] -= 1

    def add_active(self, i: int, count: int) -> None:
        """Count ``count`` requests already in flight on slot i (after a subset change)."""
        self.active[i] += count

    def add_error(self, i: int) -> None:
        self.errors[i] += 1

    def drop_error(self, i: int) -> None:
        self.errors[i] -= 1

    def set_eligible(self, i: int, ok: bool) -> None:
        if ok != self.eligible[i]:
            self.eligible[i] = ok
            self._detours += -1 if ok else 1

    def set_weights(self, weights: Sequence[float]) -> None:
        """Capability weights (> 0) per slot; only ``wrr`` uses them."""

    def _first_eligible_from(self, i: int) -> int:
        """The first eligible slot at or after i, round the ring; -1 if there is none."""
        eligible, n = self.eligible, self.n
        for step in range(n):
            j = (i + step) % n
            if eligible[j]:
                return j
        return -1

    def _random_eligible(self) -> int:
        """A uniformly random eligible slot, counted as started; -1 if there is none."""
        choices = [j for j in range(self.n) if self.eligible[j]]
        if not choices:
            return -1
        i = choices[int(self._draw() * len(choices))]
        self.active[i] += 1
        return i
