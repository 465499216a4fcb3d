"""Weeks without a restart: every per-task and per-worker table of the supervisor has a way
out. 100,000 fresh task ids come and go, and 10,000 fresh worker ids join and are forgotten;
every table is back to its size with the same live tasks and workers, and a task that comes
back gets tokens above every one it was given before."""

from __future__ import annotations

from typing import Any

from corral.common.wire.codec import encode, glance_status
from corral.common.wire.protocol import Instructions, Status, WorkerState
from corral.supervisor import views
from corral.supervisor.events import RawReport

from .modelfleet import Harness, ModelWorker, config

KEEP = {f"keep-{i}": 1.0 for i in range(20)}
ROUNDS, PER_ROUND = 100, 1_000  # 100,000 fresh task ids
GHOSTS = 10_000


def tables(h: Harness) -> dict[str, Any]:
    return views.status(h.core.queries, h.now)["tables"]


def tokens_sent(h: Harness) -> dict[str, int]:
    """The highest token each task was given so far."""
    best: dict[str, int] = {}
    for _, msg in h.sent:
        if isinstance(msg, Instructions):
            for task, token in msg.tokens.items():
                best[task] = max(best.get(task, 0), token)
    return best


def ghost(h: Harness, i: int) -> None:
    """A worker id that reports once (starting: it takes no task) and never again."""
    st = Status(f"ghost-{i:05d}", 1, 1, h.now, 10.0, {}, state=WorkerState.STARTING)
    frame = encode(st)
    h.run(h.core.handle(RawReport(f"conn-{i}".encode(), glance_status(frame), frame), h.now))


def test_tables_come_back_to_their_size_after_fresh_tasks_and_workers_come_and_go() -> None:
    h = Harness(config(forget_after=30.0, fresh_ids=64), dict(KEEP))
    for name in ("a", "b", "c"):
        h.add(ModelWorker(name, max_load=2_000))
    h.until(h.running)
    h.until(lambda: views.status(h.core.queries, h.now)["tasks_running"] == len(KEEP))
    h.step(2.0)
    before = tables(h)
    first_tokens: dict[str, int] = {}
    for r in range(ROUNDS):
        fresh = {f"r{r:03d}-{i:04d}": 1.0 for i in range(PER_ROUND)}
        h.source = {**KEEP, **fresh}
        h.run(h.core.handle(_query(), h.now))
        h.step(1.0)
        if r == 0:
            h.until(lambda: views.status(h.core.queries, h.now)["tasks_running"]
                    == len(KEEP) + PER_ROUND)
            first_tokens = {t: v for t, v in tokens_sent(h).items() if t.startswith("r000-")}
        for i in range(GHOSTS // ROUNDS):
            ghost(h, r * (GHOSTS // ROUNDS) + i)
    h.source = dict(KEEP)
    h.run(h.core.handle(_query(), h.now))
    h.until(lambda: len(h.core.registry) == 3, limit=120)  # the ghosts are forgotten
    h.step(5.0)
    h.until(lambda: views.status(h.core.queries, h.now)["tasks_running"] == len(KEEP))
    after = tables(h)
    moving = {"timers", "feed", "silence_timers", "fresh_id_buckets"}
    grown = {k: (before[k], after[k]) for k in before
             if k not in moving and after[k] != before[k]}
    assert grown == {}
    assert after["fresh_id_buckets"] <= 64 and after["silence_timers"] <= 2 * 3 + 2
    assert after["timers"] <= before["timers"] + 2
    assert sorted(h.core.queries.owners(t)[0] for t in KEEP) and \
        set(h.core.queries.task_ids()) == set(KEEP)
    # A task that comes back counts on from above every grant this epoch dropped.
    back = sorted(first_tokens)[:50]
    h.source = {**KEEP, **dict.fromkeys(back, 1.0)}
    h.run(h.core.handle(_query(), h.now))
    h.until(lambda: views.status(h.core.queries, h.now)["tasks_running"] == len(KEEP) + 50)
    newest = tokens_sent(h)
    assert all(newest[t] > first_tokens[t] for t in back)


def _query() -> Any:
    from corral.supervisor.events import Command

    return Command("query", {})
