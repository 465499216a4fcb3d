"""The supervisor's side of a hand-over (docs/worker.md, "Hand-over and adoption"), on a fake
clock against workers driven by the real worker state machine: a holder that announces its
hand-over (``handing_over``, from its own connection) lets its next incarnation take the id at
once; that one reports the adopted tasks running under their tokens, and the assignment stays
as it was — nothing moves, nothing restarts. Without an announcement the old protection
against id thieves holds."""

from __future__ import annotations

import msgspec

from corral.common.wire.codec import encode, glance_status
from corral.common.wire.protocol import WorkerState
from corral.supervisor.events import PeerGone, RawReport

from .modelfleet import Harness, ModelWorker, config, rows, start

TASKS = {f"t{i:02d}": 1.0 for i in range(12)}


def feed_kinds(h: Harness, since: int = 0) -> list[str]:
    return [e["kind"] for e in h.core.feed.after(since, 10_000)["events"]]


def settled(h: Harness, *workers: ModelWorker) -> dict[str, dict[str, int]]:
    h.step(1.0)
    h.step(1.0)
    return {w.id: dict(w.running) for w in workers}


def test_an_announced_hand_over_keeps_every_task_where_it_is_under_its_token() -> None:
    h = Harness(config(), dict(TASKS))
    a, b = ModelWorker("a"), ModelWorker("b")
    start(h, a, b)
    before = settled(h, a, b)
    moved, seq = h.core.counters.tasks_moved, h.core.feed.last
    h.deliver(a, a.hand_over(h.now), last=True)
    (row,) = [r for r in rows(h, "workers")["workers"] if r["id"] == "a"]
    assert row["state"] == "handing_over" and row["running"] == len(before["a"])
    h.step(0.5)
    a2 = h.replace(a, a.successor(h.now))
    after = settled(h, a2, b)
    assert after == {"a": before["a"], "b": before["b"]}  # same tasks, same tokens
    assert a2.refused is None and h.core.counters.handovers == 1
    assert h.core.counters.tasks_moved == moved and "move" not in feed_kinds(h, seq)
    handed = h.now - 3.0
    assert [e for e in a2.journal if e[0] >= handed and e[1] in ("start", "stop")] == []
    assert a2.lease_until > h.now  # the reset to it renewed the lease it inherited


def test_a_successor_already_waiting_takes_the_id_when_the_holder_announces() -> None:
    h = Harness(config(), dict(TASKS))
    a, b = ModelWorker("a"), ModelWorker("b")
    start(h, a, b)
    before = settled(h, a, b)
    last = a.hand_over(h.now)  # sent, but the successor's first report arrives first
    a2 = h.add(a.successor(h.now))
    h.report(a2)
    assert h.core.counters.contested_ids == 1 and h.core.counters.handovers == 0
    h.deliver(a, last, last=True)
    h.workers.pop(a.identity)
    after = settled(h, a2, b)
    assert after["a"] == before["a"] and a2.refused is None
    assert h.core.counters.handovers == 1 and h.core.counters.duplicate_ids == 0


def test_only_the_holder_s_own_connection_can_announce_a_hand_over() -> None:
    h = Harness(config(), dict(TASKS))
    a, b = ModelWorker("a"), ModelWorker("b")
    start(h, a, b)
    before = settled(h, a, b)
    # A forged announcement: a's id and incarnation, from another connection.
    st = a.force_report(h.now)
    forged = msgspec.structs.replace(st, seq=st.seq + 100, state=WorkerState.HANDING_OVER)
    frame = encode(forged)
    h.run(h.core.handle(RawReport(b"thief@1", glance_status(frame), frame), h.now))
    assert h.core.counters.impostor_reports == 1
    thief = h.add(ModelWorker("a", incarnation=99, now=h.now))
    for _ in range(6):
        h.step(0.5)
    assert thief.refused and "two live workers" in thief.refused
    assert thief.running == {} and a.running == before["a"]
    assert h.core.counters.handovers == 0


def test_a_hand_over_without_a_successor_moves_the_tasks_after_lease_and_margin() -> None:
    h = Harness(config(lease=4.0, lease_margin=1.0), dict(TASKS))
    a, b = ModelWorker("a"), ModelWorker("b", max_load=20)
    start(h, a, b)
    mine = set(settled(h, a, b)["a"])
    assert mine
    h.deliver(a, a.hand_over(h.now), last=True)
    handed = h.now
    h.workers.pop(a.identity)
    h.run(h.core.handle(PeerGone(a.identity), h.now))  # its connection closed: no matter
    h.until(lambda: mine <= set(b.running), limit=20)
    first = min(t for t, e, task in b.journal if e == "start" and task in mine)
    assert first >= handed + 4.0  # its keeper held them until the lease's end
