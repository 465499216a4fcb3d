"""Epochs the workers say they have seen, and how much of that the fleet backs.

A supervisor whose state file was lost starts at a low epoch, and workers drop every set of an
epoch below what they applied: before it says anything of substance it raises its epoch above
what the fleet has seen (`Lifecycle.raise_epoch`). But one peer's word is not evidence — a
single forged report claiming epoch 2^41 once poisoned every token. An epoch is *backed* when

* a task the worker reports running carries a fencing token of that epoch (it runs what that
  epoch granted), or
* two connections (two distinct workers) report having applied it or a later one, or
* it is within `SLACK` of our own epoch: one worker's word moves the epoch a little (a lone
  worker after a lost state file), never far;

and a raise never goes past `MAX_STATE_EPOCH` (state-file epochs stay below HA's, with room
for restarts). Only the two highest claims are kept: O(1) per report, whatever the fleet.

    >>> c = EpochClaims()
    >>> c.backed(b"w1", applied=5000, token=0, ours=1)  # one worker's word, far: nothing
    0
    >>> c.backed(b"w2", applied=4000, token=0, ours=1)  # a second worker backs up to 4000
    4000
    >>> c.backed(b"w3", applied=0, token=4500, ours=1)  # its own task backs 4500
    4500
    >>> EpochClaims().backed(b"w1", applied=300, token=0, ours=1)  # near ours: believed
    300
"""

from __future__ import annotations

SLACK = 1024  # how far one worker's word alone may move the epoch


class EpochClaims:
    __slots__ = ("_top",)

    def __init__(self) -> None:
        self._top: list[tuple[int, bytes]] = []  # the two highest (applied epoch, connection)

    def backed(self, identity: bytes, applied: int, token: int, ours: int) -> int:
        """Note that connection ``identity`` applied epoch ``applied`` and runs a task under a
        token of epoch ``token``; the highest epoch backed so far (``ours``: our epoch)."""
        if applied > 0:
            top = [c for c in self._top if c[1] != identity]
            mine = max((c[0] for c in self._top if c[1] == identity), default=0)
            top.append((max(applied, mine), identity))
            top.sort(reverse=True)
            self._top = top[:2]
        second = self._top[1][0] if len(self._top) == 2 else 0
        near = applied if applied <= ours + SLACK else 0
        return max(token, second, near)

    def clear(self) -> None:
        self._top = []
