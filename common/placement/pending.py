"""Why a task is pending: one sentence per task, for `corralctl tasks` and the logs.

A replica stays pending only when no worker may take it right now; the first of these that
applies is the reason given, so an operator sees what to change:

* ``no live worker has gpu=true`` — no open worker (eligible, max_load > 0) has the labels;
* ``needs 3 replicas, only 2 live workers (with gpu=true)`` — fewer candidates than replicas;
* ``excluded from 4 of the 5 live workers (...)`` — exclusions (after repeated failures) leave
  too few;
* ``needs 3 replicas in distinct zones, only 2 live zones (with gpu=true)`` — zone spread is
  required and there are too few zones;
* ``no room for cost 2 on the 3 live workers (with gpu=true) that could take it`` — capacity
  (with zone spread required: on those in a zone without one of its replicas).

Workers on hold (starting, draining, lame duck) are not live here: they take nothing new.
"""

from __future__ import annotations

from .ledger import Ledger
from .shapes import NO_LABELS, Labels, describe
from .strategies import EPS


def reasons(book: Ledger) -> dict[str, str]:
    """Every pending task -> why."""
    # Workers with room per (label need, cost): computed once for the many pending tasks that
    # share a shape.
    room: dict[tuple[Labels, float], list[str]] = {}
    return {task: _reason(book, task, room) for task in book.pending}


def reason(book: Ledger, task: str) -> str | None:
    """Why ``task`` is pending (None when it is not): one task, for a look-up."""
    return _reason(book, task, {}) if task in book.pending else None


def _reason(book: Ledger, task: str, room: dict[tuple[Labels, float], list[str]]) -> str:
    cap, load = book.cap, book.load
    need = book.need.get(task, NO_LABELS)
    cost, owners = book.cost[task], book.owners[task]
    live = book.opens.for_need(need)
    with_labels = f" with {describe(need)}" if need else ""
    if not live:
        return (f"no live worker has {describe(need)}" if need
                else "no live worker (none is eligible with max_load > 0)")
    want = book.want_of(task)
    if len(live) < want:
        return f"needs {want} replicas, only {len(live)} live workers{with_labels}"
    ex = book.excluded.get(task, {})
    candidates = [w for w in live if w not in ex and w not in owners] if ex else None
    if candidates is not None and len(candidates) + len(owners) < want:
        banned = sum(1 for w in live if w in ex)
        return f"excluded from {banned} of the {len(live)} live workers{with_labels}"
    if book.strict:
        zones = {book.path[w][0] for w in live}
        if len(zones) < want:
            return f"needs {want} replicas in distinct zones, only {len(zones)} live zones" \
                   f"{with_labels}"
    fits = room.get((need, cost))
    if fits is None:
        fits = room[(need, cost)] = [w for w in live if load[w] + cost <= cap[w] + EPS]
    n = len(candidates) if candidates is not None else len(live) - len(owners)
    if book.strict:
        pool = live if candidates is None else candidates
        n = len([w for w in pool if w not in owners and not book.clash(task, w)])
    if any(w not in owners and w not in ex and not book.clash(task, w) for w in fits):
        return "fits now: waiting for the next placement"
    return f"no room for cost {cost:g} on the {n} live workers{with_labels} that could take it"


def placeable(book: Ledger) -> bool:
    """Would `place` change anything: does some pending replica fit on a worker that may take
    it, or may a task without any owner take the place of a redundant replica (coverage
    before redundancy)? Cheap when nothing is pending."""
    cap, load, owners_of, for_need = book.cap, book.load, book.owners, book.opens.for_need
    room: dict[tuple[Labels, float], list[str]] = {}
    most = max(book.replicas, max(book.want.values(), default=0))
    for task in book.pending:
        need, cost = book.need.get(task, NO_LABELS), book.cost[task]
        fits = room.get((need, cost))
        if fits is None:
            fits = room[(need, cost)] = [w for w in for_need(need)
                                         if load[w] + cost <= cap[w] + EPS]
        owners, ex = owners_of[task], book.excluded.get(task, {})
        if any(w not in owners and w not in ex and not book.clash(task, w) for w in fits):
            return True
        if not owners and most >= 2 and any(
            w not in ex and any(
                len(owners_of[u]) >= 2 and load[w] - book.cost[u] + cost <= cap[w] + EPS
                for u in book.tasks_of[w])
            for w in for_need(need) if cap[w] >= cost - EPS
        ):
            return True
    return False
