"""Weeks without a restart, the dashboard: its `Follower` follows a real supervisor core (the
model fleet of test_bounded_state, answered through the supervisor's own verb table and the
wire's codec) while 100,000 fresh task ids come and go, drains hand tasks off, and 10,000 fresh
worker ids join and are forgotten. The roster and the event log never show more than the
supervisor holds, and every table is back to its size with the same live tasks and workers."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from corral.common.wire.codec import decode, encode
from corral.common.wire.protocol import ControlReply
from corral.dashboard.follower import Follower
from corral.dashboard.stream import Hub
from corral.supervisor import verbs, views
from corral.supervisor.events import Command

from .modelfleet import Harness, ModelWorker, config
from .test_bounded_state import ghost

KEEP = {f"keep-{i}": 1.0 for i in range(20)}
ROUNDS, PER_ROUND = 100, 1_000  # 100,000 fresh task ids
GHOSTS = 10_000


class CoreClient:
    """What the dashboard's control client does, answered by the harness's supervisor core:
    its verb table, then the codec both ways (as the daemon's control endpoint answers)."""

    endpoint = "tcp://harness:7761"
    endpoints = (endpoint,)

    def __init__(self, h: Harness) -> None:
        self.h = h

    def call(self, verb: str, args: dict[str, Any] | None = None,
             timeout: float | None = None) -> Any:
        result, error, actions = verbs.call(self.h.core, verb, dict(args or {}), self.h.now)
        assert error is None, error
        self.h.run(actions)
        reply = decode(encode(ControlReply(1, result)))
        assert isinstance(reply, ControlReply)
        return reply.result

    def close(self) -> None:
        pass


def test_dashboard_tables_come_back_to_their_size_after_fresh_tasks_and_workers_come_and_go(
        ) -> None:
    h = Harness(config(forget_after=30.0, fresh_ids=64), dict(KEEP))
    for name in ("a", "b", "c"):
        h.add(ModelWorker(name, max_load=2_000))
    h.until(h.running)
    h.until(lambda: views.status(h.core.queries, h.now)["tasks_running"] == len(KEEP))
    h.step(2.0)
    f = Follower(CoreClient(h), Hub(), wall=lambda: 1.7e9 + h.now)
    loop = asyncio.new_event_loop()

    def run(c: Coroutine[Any, Any, None]) -> None:
        loop.run_until_complete(c)

    def follow(listing: bool = False) -> None:
        """Catch up with the feed, then status (and the complete listing when asked)."""
        run(f.poll_events())
        while f.cursor != h.core.feed.last:
            run(f.poll_events())
        run(f.poll_status())
        assert f.status is not None
        assert len(f.log.handoffs) <= f.status["handoffs"]  # never more than it holds
        assert set(f.log.handoffs) <= set(h.core.queries.handoff_tasks(None))  # nor others
        if listing:
            run(f.poll_workers())
            assert set(f.fleet.rows) == {r["id"] for r in views.workers(h.core.queries,
                                                                        h.now)["workers"]}

    try:
        follow(listing=True)
        before = f.table_sizes()
        drained = 0
        for r in range(ROUNDS):
            h.source = {**KEEP, **{f"r{r:03d}-{i:04d}": 1.0 for i in range(PER_ROUND)}}
            h.run(h.core.handle(Command("query", {}), h.now))
            follow()  # last round's tasks left the list mid-hand-off; others still in flight
            h.step(1.0)
            for i in range(GHOSTS // ROUNDS):
                ghost(h, r * (GHOSTS // ROUNDS) + i)
            f.client.call("undrain", {"worker": "abc"[drained]})
            drained = (drained + 1) % 3
            f.client.call("drain", {"worker": "abc"[drained]})  # hand-offs start
            follow(listing=r % 10 == 9)
        f.client.call("undrain", {"worker": "abc"[drained]})
        h.source = dict(KEEP)
        h.run(h.core.handle(Command("query", {}), h.now))
        h.until(lambda: len(h.core.registry) == 3, limit=120)  # the ghosts are forgotten
        h.step(5.0)
        h.until(lambda: views.status(h.core.queries, h.now)["tasks_running"] == len(KEEP)
                and not views.status(h.core.queries, h.now)["handoffs"])
        follow(listing=True)
        after = f.table_sizes()
    finally:
        loop.run_until_complete(f.stop())
        loop.close()
    ring = {"events", "moves"}  # bounded by the ring's capacity and by an hour
    assert {k: v for k, v in after.items() if k not in ring} == \
        {k: v for k, v in before.items() if k not in ring}
    assert after["events"] <= f.log.events.maxlen  # type: ignore[operator]
