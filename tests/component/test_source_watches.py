"""Sources that tell: a watched file (rename-replace, in-place writes, a broken file in
between) and an etcd prefix on a real etcd (put, delete, a bad value, etcd stopped and
restarted). Waits are on conditions, bounded; nothing asserts speed."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.common.wire.tasklist import TaskEntry
from corral.supervisor.sources import TaskSource

from ..etcd_server import Etcd
from ..support import wait_until
from . import sourceloop
from .sourceloop import Loop, Loops

loops_fixture = sourceloop.loops_fixture  # the `loops` fixture

WITHIN = 10.0  # generous bound for "applied within a second" on a loaded 2-core machine


def replace(path: Path, text: str) -> None:
    """Write a new version the safe way: a temporary file renamed over the old one."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def shows(loop: Loop, tasks: dict[str, Any]) -> None:
    wait_until(lambda: loop.lists()[-1:] == [tasks], timeout=WITHIN, what=f"the list {tasks}")


def test_file_changes_are_applied_whichever_way_they_are_written(
    loops: Loops, tmp_path: Path
) -> None:
    path = tmp_path / "tasks.json"
    path.write_text('["a"]')
    loop = loops.asked(f"file:{path}")
    shows(loop, {"a": TaskEntry()})
    replace(path, '[{"id": "b", "spec": {"v": 1}}]')  # a new inode
    shows(loop, {"b": TaskEntry(spec='{"v":1}')})
    path.write_text('[{"id": "b", "spec": {"v": 2}}]')  # in place, same size
    shows(loop, {"b": TaskEntry(spec='{"v":2}')})
    path.write_text('[{"id": "b", "spec": {"v": 3}}]')  # again, at once: the same tick maybe
    shows(loop, {"b": TaskEntry(spec='{"v":3}')})
    assert all(r.error is None for r in loop.seen)
    assert [r.reset for r in loop.seen] == [True, False, False, False]
    assert loop.fetcher.counters.watch_events >= 3


def test_a_broken_file_keeps_the_last_good_list(loops: Loops, tmp_path: Path) -> None:
    path = tmp_path / "tasks.toml"
    path.write_text('tasks = ["a", "b"]')
    loop = loops.asked(f"file:{path}")
    shows(loop, {"a": TaskEntry(), "b": TaskEntry()})
    replace(path, 'tasks = ["a", ')  # half a list: refused, reported once
    wait_until(lambda: loop.seen[-1].error is not None, timeout=WITHIN, what="the error")
    assert "not valid TOML" in str(loop.seen[-1].error) and loop.seen[-1].tasks is None
    replace(path, 'tasks = ["a", "c"]')
    shows(loop, {"a": TaskEntry(), "c": TaskEntry()})
    assert [r.tasks is None for r in loop.seen] == [False, True, False]
    path.unlink()  # gone: one error, the list stays
    wait_until(lambda: loop.seen[-1].error is not None, timeout=WITHIN, what="the error")
    assert "cannot read" in str(loop.seen[-1].error)
    replace(path, 'tasks = ["d"]')
    shows(loop, {"d": TaskEntry()})
    assert loop.fetcher.counters.failures == 2


def test_the_same_content_again_is_no_event(loops: Loops, tmp_path: Path) -> None:
    path = tmp_path / "tasks.txt"
    path.write_text("a\n")
    loop = loops.asked(f"file:{path}")
    shows(loop, {"a": TaskEntry()})
    replace(path, "# the same tasks\na\n")
    wait_until(lambda: loop.fetcher.counters.unchanged >= 1, timeout=WITHIN, what="unchanged")
    replace(path, "a\nb\n")
    shows(loop, {"a": TaskEntry(), "b": TaskEntry()})
    assert len(loop.seen) == 2


# -- etcd --------------------------------------------------------------------------------------

PREFIX = "/corral/tasks/"


class Store:
    """Writes to the real etcd the way an operator would."""

    def __init__(self, etcd: Etcd) -> None:
        import etcd3gw

        self.client = etcd3gw.client(host="127.0.0.1", port=etcd.port, timeout=5)

    def put(self, task: str, value: Any) -> None:
        self.client.put(PREFIX + task, value if isinstance(value, str) else json.dumps(value))

    def delete(self, task: str) -> None:
        self.client.delete(PREFIX + task)

    def close(self) -> None:
        self.client.session.close()


@pytest.fixture()
def store(etcd: Etcd) -> Iterator[Store]:
    s = Store(etcd)
    try:
        yield s
    finally:
        s.close()


def test_etcd_puts_and_deletes_reach_the_list(
    etcd: Etcd, store: Store, loops: Loops
) -> None:
    store.put("cam-1", {"cost": 2, "spec": {"url": "rtsp://1"}, "require": {"gpu": "true"}})
    store.put("cam-2", "")
    target = f"{etcd.endpoint}/corral/tasks"
    assert TaskSource.parse(target).fetch(5) == {
        "cam-1": TaskEntry(2.0, '{"url":"rtsp://1"}', {"gpu": "true"}), "cam-2": TaskEntry()}
    loop = loops.asked(target)
    shows(loop, {"cam-1": TaskEntry(2.0, '{"url":"rtsp://1"}', {"gpu": "true"}),
                 "cam-2": TaskEntry()})
    store.put("cam-3", {"replicas": 3})
    shows(loop, {"cam-1": TaskEntry(2.0, '{"url":"rtsp://1"}', {"gpu": "true"}),
                 "cam-2": TaskEntry(), "cam-3": TaskEntry(replicas=3)})
    store.delete("cam-1")
    shows(loop, {"cam-2": TaskEntry(), "cam-3": TaskEntry(replicas=3)})
    store.put("cam-2", {"spec": ["not", "an", "object"]})  # refused; the list stays
    wait_until(lambda: loop.seen[-1].error is not None, timeout=WITHIN, what="the error")
    assert "(cam-2): spec must be a JSON object, got list" in str(loop.seen[-1].error)
    store.put("cam-2", "{}")  # mended: the last good list again, told once (the error is over)
    wait_until(lambda: loop.fetcher.counters.unchanged == 1, timeout=WITHIN, what="unchanged")
    store.put("cam-2", "2")
    shows(loop, {"cam-2": TaskEntry(2.0), "cam-3": TaskEntry(replicas=3)})
    assert loop.fetcher.counters.watch_events == 5
    assert [r.reset for r in loop.seen if r.tasks is not None] == [True] + [False] * 4


def test_etcd_down_keeps_the_list_and_reconnects(
    etcd: Etcd, store: Store, loops: Loops
) -> None:
    store.put("a", 1)
    loop = loops.asked(f"{etcd.endpoint}/corral/tasks")
    f = loop.fetcher
    shows(loop, {"a": TaskEntry()})
    etcd.stop()
    wait_until(lambda: loop.seen[-1].error is not None, timeout=WITHIN, what="the loss")
    assert "reconnecting" in str(loop.seen[-1].error)
    # Attempts go on, counted; the supervisor is told once.
    wait_until(lambda: f.counters.failures >= 3, timeout=WITHIN, what="reconnect attempts")
    f.request(reset=False)  # corralctl query while etcd is down: one more error
    wait_until(lambda: len(loop.seen) == 3, timeout=WITHIN, what="the query's error")
    assert [r.tasks is None for r in loop.seen] == [False, True, True]
    etcd.start()
    wait_until(lambda: f.counters.reconnects >= 1, timeout=WITHIN * 2, what="a reconnect")
    store.put("b", {"cost": 3})
    shows(loop, {"a": TaskEntry(), "b": TaskEntry(3.0)})


def test_a_quiet_watch_is_reopened_from_the_next_revision(
    etcd: Etcd, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from corral.supervisor import etcdwatch

    monkeypatch.setattr(etcdwatch, "IDLE_S", 0.3)
    rows, revision = etcdwatch.read_range(store.client, PREFIX.encode())
    assert rows == []
    nudged = threading.Event()
    stream = etcdwatch.WatchStream(store.client, PREFIX.encode(), revision + 1, nudged.set)
    try:
        wait_until(lambda: stream.opened >= 3, timeout=WITHIN, what="two quiet re-opens")
        store.put("late", 2)
        wait_until(nudged.is_set, timeout=WITHIN, what="the event")
        kind, events = stream.inbox.popleft()
        assert kind == "events" and [e["kv"]["key"] for e in events] == [
            etcdwatch.b64(f"{PREFIX}late".encode())]
        assert not stream.inbox  # nothing lost, nothing else
    finally:
        stream.stop()


def test_a_compacted_revision_asks_for_a_full_read(etcd: Etcd, store: Store) -> None:
    from corral.supervisor import etcdwatch

    for value in range(1, 4):
        store.put("a", value)
    _, revision = etcdwatch.read_range(store.client, PREFIX.encode())
    store.client.post(store.client.get_url("/kv/compaction"), json={"revision": revision})
    nudged = threading.Event()
    stream = etcdwatch.WatchStream(store.client, PREFIX.encode(), 1, nudged.set)
    try:
        wait_until(nudged.is_set, timeout=WITHIN, what="the cancelled watch")
        assert stream.inbox.popleft()[0] == "resync"
    finally:
        stream.stop()


def test_endpoints_are_tried_in_turn(etcd: Etcd, store: Store, loops: Loops) -> None:
    from ..support import free_port

    store.put("a", 1)
    target = f"etcd://127.0.0.1:{free_port()},127.0.0.1:{etcd.port}/corral/tasks"
    assert TaskSource.parse(target).fetch(5) == {"a": TaskEntry()}
    loop = loops.asked(target)  # the first endpoint refuses: an error, then the next
    shows(loop, {"a": TaskEntry()})
    first, second = loop.seen
    assert first.error is not None and "the last good list stays" in first.error
    assert second.reset  # the reset that failed is owed to the first list handed over
    assert loop.fetcher.counters.reconnects == 1
