"""Who should lead, by the fleet: the rule that compares how many workers each supervisor hears.

etcd decides *who may* lead (one key, one lease); the workers' reports decide whether leading
does any good. Every supervisor publishes in etcd how many workers it hears (`heard`: active
workers with a report received within the freshness window, supervisor/hearing.py), and:

* a **leader resigns** when some standby hears *clearly more* workers than it does — at least
  `margin` more — and has for `HOLD_SHARE` of the etcd TTL (a third: one keep-alive period);
  at once when it hears nobody and a standby hears someone;
* a **candidate** (the leader key is vacant) does not campaign while another member hears
  clearly more than it does, so a standby that hears fewer than the leader never takes over,
  and a leader that resigned does not take the key straight back.

Hysteresis: a switch needs a gap of ``margin`` in the new leader's favour, and switching back
needs the same gap the other way, so the gap must swing by twice the margin (and hold for a
keep-alive period each time) before leadership moves again: noise in the counts — a report a
little late on one side — never makes it flap. Members that publish no count (an older
version) are left out of the comparison.

    >>> margin(3), margin(10), margin(250)
    (1, 1, 25)
    >>> better(0, {"b": 3}), better(2, {"b": 3}), better(3, {"b": 3})
    (('b', 3), ('b', 3), None)
    >>> better(900, {"b": 950}) is None, better(800, {"b": 950})
    (True, ('b', 950))
"""

from __future__ import annotations

import math
from collections.abc import Mapping

MARGIN_SHARE = 0.1  # clearly more: at least a tenth of the better count (and at least one)
HOLD_SHARE = 1 / 3  # of the TTL: the better count must hold for one keep-alive period


def margin(count: int) -> int:
    """How many more workers than ours count as clearly more, when the best hears ``count``."""
    return max(1, math.ceil(count * MARGIN_SHARE))


def better(mine: int, others: Mapping[str, int | None]) -> tuple[str, int] | None:
    """The member that hears the most workers, if that is clearly more than ``mine``; else
    None. Ties go to the greater name, so every member picks the same one."""
    known = [(count, name) for name, count in others.items() if count is not None]
    if not known:
        return None
    count, name = max(known)
    return (name, count) if count - mine >= margin(count) else None


def resign_now(mine: int, seen_since: float | None, now: float, ttl: float) -> bool:
    """A leader that has seen a better member since ``seen_since`` (None: not now) resigns
    at ``now``: once it has for a keep-alive period, or at once when it hears nobody."""
    if seen_since is None:
        return False
    return mine == 0 or now - seen_since >= ttl * HOLD_SHARE
