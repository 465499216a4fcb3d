"""Weeks without a restart, the dashboard's pure parts: the roster and the event log keep
nothing per worker or task id once the supervisor says it is gone (a listing, a feed event,
its count of hand-offs in flight) — 10,000 fresh workers, 100,000 fresh tasks in hand-off."""

from __future__ import annotations

from corral.dashboard.eventlog import EventLog
from corral.dashboard.roster import Roster, row

KEEP = [row(f"keep-{i}") for i in range(10)]


def test_roster_rows_go_with_a_listing_and_with_the_operators_forget() -> None:
    f = Roster()
    f.replace(KEEP, wall_ms=0.0)
    before = f.sizes()
    for r in range(1_000):  # 10,000 fresh worker ids
        fresh = [f"r{r:03d}-{i}" for i in range(10)]
        for w in fresh:
            f.apply_event({"kind": "join", "worker": w, "max_load": 4, "at_ms": r})
        for w in fresh[:5]:  # silent, then forgotten by an operator: gone at once
            f.apply_event({"kind": "timeout", "worker": w})
            assert f.apply_event({"kind": "forget", "worker": w}).removed == [w]
        if r % 100 == 99:  # the rest: gone at the next listing
            f.replace(KEEP, wall_ms=float(r))
            assert f.sizes() == before
    assert not f.apply_event({"kind": "forget", "worker": "never-seen"})
    assert f.sizes() == before


def move(task: str, source: str, to: str, reason: str = "rebalance") -> dict[str, object]:
    return {"t": 0.0, "kind": "move", "task": task, "source": source, "to": to,
            "reason": reason}


def test_handoffs_never_outnumber_the_supervisors_count_while_churn_goes_on() -> None:
    """Hand-offs whose task left the list (no ``handoff`` event comes) while others are always
    in flight: the count in ``status`` is never 0, so only a bound by it lets them go."""
    log = EventLog(capacity=1_000)
    log.add([move("keep", "a", "b")], now=0.0, wall_ms=0.0)
    log.settle_handoffs(1)
    before = log.sizes()
    for r in range(1_000):  # 100,000 fresh task ids, each in a hand-off that ends unseen
        wall = float(r)
        log.add([move(f"r{r:03d}-{i:03d}", f"w{i % 7}", "b", reason="drain")
                 for i in range(100)], now=0.0, wall_ms=wall)
        log.settle_handoffs(101)  # keep's and this round's
        assert len(log.handoffs) == 101
        log.add([move("keep", "a", "b")], now=0.0, wall_ms=wall)  # moved again: newest
        log.settle_handoffs(1)  # this round's tasks left the list
        assert set(log.handoffs) == {"keep"}
    assert log.sizes()["handoffs"] == before["handoffs"]
    assert log.sizes()["handoff_sources"] == before["handoff_sources"]


def test_a_gone_old_owner_ends_its_handoffs_and_a_handoff_event_ends_one() -> None:
    log = EventLog()
    log.add([move(f"t{i}", "old", "new") for i in range(5)] + [move("u", "other", "new")],
            now=0.0, wall_ms=0.0)
    log.add([{"t": 0.0, "kind": "handoff", "task": "t0", "source": "old", "to": "new"}],
            now=0.0, wall_ms=0.0)
    assert set(log.handoffs) == {"t1", "t2", "t3", "t4", "u"}
    log.add([{"t": 0.0, "kind": "timeout", "worker": "old", "tasks": 4}], now=0.0, wall_ms=0.0)
    assert set(log.handoffs) == {"u"} and log.sizes()["handoff_sources"] == 1
    log.add([{"t": 0.0, "kind": "timeout", "worker": "new", "tasks": 1}], now=0.0, wall_ms=0.0)
    assert set(log.handoffs) == {"u"}  # the new owner gone: the supervisor still hands it off
    log.add([move("v", "other", "new")], now=0.0, wall_ms=0.0)
    log.keep_handoffs({"v", "w"})  # the supervisor's list: u ended unseen
    assert set(log.handoffs) == {"v"}
    log.settle_handoffs(0)
    assert log.sizes()["handoffs"] == log.sizes()["handoff_sources"] == 0


def test_moves_are_kept_an_hour_even_when_nobody_asks_for_the_rate() -> None:
    log = EventLog(capacity=100)
    for i in range(100_000):  # two hours of moves, no sample taken meanwhile
        log.add([move(f"t{i}", "a", "b", reason="worker gone")], now=0.0, wall_ms=i * 72.0)
    assert log.sizes()["moves"] <= 50_001
    assert log.moves_since(100_000 * 72.0 - 60_000.0) == 833  # those of the last minute
