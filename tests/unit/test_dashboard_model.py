"""The dashboard's pure parts: the fleet and its deltas, the event log, the balance history,
the browsers' bounded queues, the token check and the command line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from corral.common.errors import ConfigError
from corral.dashboard import auth, cli
from corral.dashboard.eventlog import EventLog
from corral.dashboard.history import History, sample
from corral.dashboard.roster import BINS, Roster, row
from corral.dashboard.stream import Hub


def test_a_listing_is_a_delta_of_what_changed_and_what_left() -> None:
    f = Roster()
    f.replace([row("a", 1), row("b", 2), row("c", 3)], wall_ms=10_000)
    d = f.replace([row("a", 1, age=0.7), row("b", 5)], wall_ms=12_000)
    assert [r["id"] for r in d.changed] == ["b"]  # a's report age alone is not a change
    assert d.removed == ["c"]
    assert f.rows["a"]["report_ms"] == 12_000 - 700


def test_feed_events_patch_rows_before_the_next_listing() -> None:
    f = Roster()
    f.replace([row("a", 4), row("b", 4)], wall_ms=0)
    assert f.apply_event({"kind": "timeout", "worker": "a"}).changed[0]["state"] == "inactive"
    assert f.rows["a"]["running"] == 0 and not f.rows["a"]["active"]
    assert f.apply_event({"kind": "drain", "worker": "b"}).changed[0]["state"] == "drained"
    assert f.apply_event({"kind": "undrain", "worker": "b"}).changed[0]["state"] == "ready"
    joined = f.apply_event({"kind": "join", "worker": "n", "max_load": 8, "zone": "eu/1"})
    assert joined.changed[0]["zone"] == "eu/1" and f.rows["n"]["max_load"] == 8
    assert not f.apply_event({"kind": "drain", "worker": "ghost"})
    assert not f.apply_event({"kind": "move", "task": "t"})  # no worker field: nothing
    assert not f.apply_event({"kind": "timeout", "worker": 7})  # bad input: nothing


def test_summary_spread_and_histogram_count_only_workers_that_take_tasks() -> None:
    f = Roster()
    drained = {**row("d", 0), "drained": True}
    f.replace([row("a", 2), row("b", 6), row("x", 9, state="inactive"), drained], wall_ms=0)
    s = f.summary()
    assert (s["total"], s["alive"], s["balanced_over"]) == (4, 3, 2)
    assert s["mean"] == 0.4 and s["spread_ratio"] == 1.5 and s["spread_diff"] == 0.4
    assert sum(s["histogram"]) == 2 and len(s["histogram"]) == BINS
    assert s["by_state"]["inactive"] == 1 and s["by_state"]["drained"] == 1
    assert Roster().summary()["spread_ratio"] == 1.0  # an empty fleet is not a division by 0


def test_pages_are_filtered_sorted_and_cut_on_the_server() -> None:
    f = Roster()
    f.replace([row(f"w{i:05d}", i % 10, zone=f"eu-{i % 3}/rack-{i % 7}")
               for i in range(10_000)], wall_ms=0)
    p = f.page(sort="utilization", desc=True, zone="eu-1", offset=100, limit=50)
    assert p["total"] == 3333 and len(p["rows"]) == 50
    assert all(r["zone"].startswith("eu-1/") for r in p["rows"])
    utils = [r["utilization"] for r in p["rows"]]
    assert utils == sorted(utils, reverse=True)
    assert f.page(q="W0001", limit=5)["total"] == 10  # w00010 … w00019
    assert f.page(state="inactive")["total"] == 0


def test_live_workers_come_first_in_every_order() -> None:
    """A flood of made-up ids that went silent, or a dead rack, never pushes the live fleet off
    the first page."""
    f = Roster()
    f.replace([row(f"ghost-{i:04d}", state="inactive") for i in range(500)]
              + [row(f"w{i}", running=i) for i in range(5)], wall_ms=0)
    for sort in ("id", "utilization", "state", "zone", "age"):
        for desc in (False, True):
            first = [r["id"] for r in f.page(sort=sort, desc=desc, limit=5)["rows"]]
            assert sorted(first) == [f"w{i}" for i in range(5)], (sort, desc, first)


def test_event_log_numbers_times_filters_and_pages_backwards() -> None:
    log = EventLog(capacity=5)
    log.add([{"seq": i, "t": float(i), "kind": "join", "worker": f"w{i}"} for i in range(1, 8)],
            now=10.0, wall_ms=100_000.0)
    assert [e["n"] for e in log.recent(10)] == [3, 4, 5, 6, 7]  # the ring keeps the newest
    assert log.recent(1)[0]["at_ms"] == 100_000.0 - 3_000.0
    assert [e["n"] for e in log.query(before=6, limit=2)] == [5, 4]
    assert [e["worker"] for e in log.query(q="W7")] == ["w7"]
    assert log.query(kind="timeout") == []
    assert log.note("unreachable", 1.0, reason="x")["dashboard"] is True


def test_hand_offs_in_progress_come_from_moves_and_end_with_their_event() -> None:
    log = EventLog()
    log.add([{"t": 1.0, "kind": "move", "task": "t1", "to": "b", "source": "a",
              "reason": "drain"},
             {"t": 1.0, "kind": "move", "task": "t2", "to": "b", "source": "a",
              "reason": "rebalance"},
             {"t": 1.0, "kind": "move", "task": "t3", "to": "c", "source": "a",
              "reason": "worker gone"}], now=2.0, wall_ms=0.0)
    assert set(log.handoffs) == {"t1", "t2"}  # a worker gone is no hand-off
    log.add([{"t": 2.0, "kind": "handoff", "task": "t1", "source": "a", "to": "b"}], 2.0, 0.0)
    assert set(log.handoffs) == {"t2"}
    log.settle_handoffs(0)
    assert log.handoffs == {}
    assert log.moves_since(-1_500.0) == 3 and log.moves_since(0.0) == 0


def test_history_keeps_a_bounded_hour_of_samples() -> None:
    h = History(points=900)
    for i in range(1000):
        h.add(sample({"spread_ratio": 1.1, "spread_diff": 0.1, "alive": 3},
                     {"tasks_pending": 2, "workers_active": 3}, moves_last_minute=i,
                     wall_ms=i * 5000.0))
    pts = h.points()
    assert len(pts) == 900 and pts[-1]["moves_per_min"] == 999
    assert (pts[-1]["at_ms"] - pts[0]["at_ms"]) / 60_000 > 60  # more than an hour
    assert sample({}, None, 0, 0.0)["pending"] is None  # no status yet: no number


def test_a_browser_that_falls_behind_is_dropped_not_buffered() -> None:
    async def scenario() -> tuple[bool, bool, int, int]:
        hub = Hub(queue_size=4)
        slow, quick = hub.subscribe(), hub.subscribe()
        slow.task = asyncio.create_task(asyncio.sleep(3600))
        for i in range(10):
            hub.publish("events", [i])
            while not quick.queue.empty():
                quick.queue.get_nowait()  # this one keeps up
        await asyncio.sleep(0)
        cancelled = slow.task.cancelled() or slow.task.cancelling() > 0
        return slow.dropped, quick.dropped, len(hub), int(cancelled)

    slow_dropped, quick_dropped, left, cancelled = asyncio.run(scenario())
    assert slow_dropped and not quick_dropped and left == 1 and cancelled


def test_token_file_must_be_readable_and_long_enough(tmp_path: Path) -> None:
    good = tmp_path / "token"
    good.write_text("correct-horse\nsecond line ignored\n")
    assert auth.load_token(str(good)) == "correct-horse"
    short = tmp_path / "short"
    short.write_text("abc\n")
    with pytest.raises(ConfigError, match="at least 8"):
        auth.load_token(str(short))
    with pytest.raises(ConfigError, match="cannot read"):
        auth.load_token(str(tmp_path / "missing"))
    hosts = auth.Hosts.of("h", ())
    assert auth.check({"Authorization": "Bearer correct-horse"}, "correct-horse", hosts) is None
    assert auth.check({"Cookie": "token=correct-horse"}, "correct-horse", hosts) is not None


@pytest.mark.parametrize(("argv", "message"), [
    (["--listen", "127.0.0.1"], "is not HOST:PORT"),
    (["--listen", "127.0.0.1:70000"], "is not HOST:PORT"),
    (["--control", "localhost:7761"], "is not a ZeroMQ endpoint"),
    (["--timeout", "0"], "--timeout must be above 0"),
    (["--listing-budget", "2"], "--listing-budget"),
    (["--curve-server-key", "x.key"], "go together"),
    (["--token-file", "/nonexistent/token"], "cannot read"),
])
def test_bad_configuration_is_one_sentence(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        cli.load(argv)


def test_defaults_listen_on_loopback_and_follow_the_default_control_endpoint() -> None:
    cfg = cli.load([])
    assert (cfg.host, cfg.port) == ("127.0.0.1", 7780)
    assert cfg.control == ("tcp://127.0.0.1:7761",) and cfg.token is None
    assert cli.load(["--control", "tcp://a:1,tcp://b:2"]).control == ("tcp://a:1", "tcp://b:2")
