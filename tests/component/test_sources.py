"""Task sources against real files, commands, an HTTP server on loopback, and Python; the
`Fetcher` that runs them off the loop's thread; HTTP's conditional requests (ETag, 304)."""

from __future__ import annotations

import http.server
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.common.errors import ConfigError, TaskSourceError
from corral.common.wire.tasklist import TaskEntry
from corral.supervisor.events import TasksFetched
from corral.supervisor.sources import TaskSource

from ..support import wait_until
from . import sourceloop
from .sourceloop import Loops

loops_fixture = sourceloop.loops_fixture  # the `loops` fixture


def fetch(spec: str, timeout: float = 5.0) -> dict[str, float]:
    return {k: v.cost for k, v in TaskSource.parse(spec).fetch(timeout).items()}


def test_file_sources(tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_text("a\nb\n")
    (tmp_path / "t.json").write_text('{"a": 2}')
    (tmp_path / "t.toml").write_text('tasks = ["z"]')
    assert fetch(f"file:{tmp_path / 't.txt'}") == {"a": 1.0, "b": 1.0}
    assert fetch(f"file:{tmp_path / 't.json'}") == {"a": 2.0}
    assert fetch(f"file:{tmp_path / 't.toml'}") == {"z": 1.0}
    with pytest.raises(TaskSourceError, match="cannot read"):
        fetch(f"file:{tmp_path / 'missing'}")
    (tmp_path / "bin").write_bytes(b"\xff\xfe")
    with pytest.raises(TaskSourceError, match="not UTF-8"):
        fetch(f"file:{tmp_path / 'bin'}")


def test_full_entries_from_a_toml_file(tmp_path: Path) -> None:
    (tmp_path / "fleet.toml").write_text(
        '[tasks.cam-1]\ncost = 2\nreplicas = 3\nrequire = {gpu = "true"}\n'
        'spec = {url = "rtsp://cam-1", fps = 25}\n\n[tasks.cam-2]\n')
    tasks = TaskSource.parse(f"file:{tmp_path / 'fleet.toml'}").fetch(5)
    assert tasks == {"cam-1": TaskEntry(2.0, '{"fps":25,"url":"rtsp://cam-1"}',
                                        {"gpu": "true"}, 3),
                     "cam-2": TaskEntry()}


def test_cmd_sources() -> None:
    assert fetch("cmd:printf 'a\\nb\\n'") == {"a": 1.0, "b": 1.0}
    assert fetch("cmd:echo '[\"j\"]'") == {"j": 1.0}
    assert TaskSource.parse("""cmd:echo '{"j": {"spec": {"k": 1}}}'""").fetch(5) == {
        "j": TaskEntry(spec='{"k":1}')}
    with pytest.raises(TaskSourceError, match="exit status 3: boom"):
        fetch("cmd:echo boom >&2; exit 3")
    with pytest.raises(TaskSourceError, match=r"no answer within 0\.3 s"):
        fetch("cmd:sleep 5", timeout=0.3)


def test_source_specs() -> None:
    assert str(TaskSource.parse("etcd://127.0.0.1:2379/corral/tasks")) == \
        "etcd://127.0.0.1:2379/corral/tasks"
    for bad in ("ftp://x", "file:", "python:mod", "etcd://h:1", "etcd://h:1/", "etcd://h/x"):
        with pytest.raises(ConfigError, match="tasks"):
            TaskSource.parse(bad)


class Site:
    """A real HTTP server on loopback serving one task list, with an ETag or only a
    Last-Modified, answering conditional requests with 304, and counting what it answered."""

    def __init__(self) -> None:
        self.body = b'["h1", "h2"]'
        self.version = 1
        self.validator = "etag"  # or "last-modified"
        self.answers: list[int] = []
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/bad":
                    site.reply(self, 200, b"not json")
                elif self.path != "/tasks":
                    site.reply(self, 404)
                elif site.validator == "etag":
                    tag = f'"v{site.version}"'
                    same = self.headers.get("If-None-Match") == tag
                    site.reply(self, 304 if same else 200, site.body, ETag=tag)
                else:
                    stamp = f"Mon, 0{site.version} Jan 2024 00:00:00 GMT"
                    same = self.headers.get("If-Modified-Since") == stamp
                    site.reply(self, 304 if same else 200, site.body, **{"Last-Modified": stamp})

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def reply(self, h: Any, code: int, body: bytes = b"", **headers: str) -> None:
        self.answers.append(code)
        if code == 404:
            h.send_error(404)
            return
        h.send_response(code)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body) if code == 200 else 0))
        h.end_headers()
        if code == 200:
            h.wfile.write(body)

    def change(self, body: bytes) -> None:
        self.body, self.version = body, self.version + 1

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture()
def site() -> Iterator[Site]:
    s = Site()
    try:
        yield s
    finally:
        s.stop()


def test_http_sources(site: Site) -> None:
    assert fetch(f"{site.url}/tasks") == {"h1": 1.0, "h2": 1.0}
    with pytest.raises(TaskSourceError, match="HTTP 404"):
        fetch(f"{site.url}/missing")
    with pytest.raises(TaskSourceError, match="not valid JSON"):
        fetch(f"{site.url}/bad")
    with pytest.raises(TaskSourceError, match="unreachable"):
        fetch("http://127.0.0.1:9/none", timeout=2)


def test_python_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mytasks.py").write_text(
        "def ok():\n    return {'p1': 2, 'p2': 1}\n"
        "def full():\n    return [{'id': 'p3', 'require': {'zone': 'eu'}}, 'p4']\n"
        "def boom():\n    raise RuntimeError('db down')\n"
        "def wrong():\n    return 42\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert fetch("python:mytasks:ok") == {"p1": 2.0, "p2": 1.0}
    assert TaskSource.parse("python:mytasks:full").fetch(5) == {
        "p3": TaskEntry(require={"zone": "eu"}), "p4": TaskEntry()}
    with pytest.raises(TaskSourceError, match="RuntimeError: db down"):
        fetch("python:mytasks:boom")
    with pytest.raises(TaskSourceError, match="expected a list of tasks"):
        fetch("python:mytasks:wrong")
    with pytest.raises(TaskSourceError, match="ModuleNotFoundError"):
        fetch("python:no_such_module_xyz:f")
    sys.modules.pop("mytasks", None)


# -- the Fetcher ------------------------------------------------------------------------------


def test_fetcher_runs_off_thread_and_queues_one_more(loops: Loops, tmp_path: Path) -> None:
    started = tmp_path / "started"
    loop = loops.asked(f"cmd:touch {started}; sleep 0.5; echo a")
    wait_until(started.exists, timeout=10, what="the first query running")
    assert loop.fetcher.busy()
    loop.fetcher.request(reset=False)  # queued behind the first
    loop.fetcher.request(reset=False)  # merged into the queued one
    wait_until(lambda: loop.fetcher.counters.queries == 2, timeout=10, what="two queries")
    # The second found the same list: asked without reset, it is not handed over again.
    assert [(r.tasks, r.reset) for r in loop.got(1)] == [({"a": TaskEntry()}, True)]
    assert loop.fetcher.counters.unchanged == 1
    assert not loop.fetcher.busy()


def test_a_failed_reset_is_owed_to_the_next_list(loops: Loops, tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    loop = loops.asked(f"cmd:cat {path}")
    first = loop.got(1)[0]
    assert first.tasks is None and first.error and "exit status 1" in first.error
    path.write_text("a\n")
    loop.fetcher.request(reset=False)
    assert loop.got(2)[1] == TasksFetched({"a": TaskEntry()}, None, True)
    assert loop.fetcher.counters.failures == 1


def test_http_unchanged_costs_one_304_and_no_event(loops: Loops, site: Site) -> None:
    loop = loops.asked(f"{site.url}/tasks")
    f = loop.fetcher
    assert loop.got(1)[0].tasks == {"h1": TaskEntry(), "h2": TaskEntry()}
    f.request(reset=False)  # conditional: the server says 304
    wait_until(lambda: f.counters.unchanged == 1, timeout=10, what="a 304")
    assert site.answers == [200, 304] and len(loop.seen) == 1
    site.change(b'[{"id": "h3", "cost": 2}]')
    f.request(reset=False)
    assert loop.got(2)[1] == TasksFetched({"h3": TaskEntry(2.0)}, None, False)
    f.request(reset=True)  # a reset is never conditional: the whole list comes again
    assert loop.got(3)[2] == TasksFetched({"h3": TaskEntry(2.0)}, None, True)
    assert site.answers == [200, 304, 200, 200]
    assert f.counters.queries == 4 and f.counters.updates == 3


def test_http_last_modified_when_there_is_no_etag(loops: Loops, site: Site) -> None:
    site.validator = "last-modified"
    loop = loops.asked(f"{site.url}/tasks")
    loop.got(1)
    loop.fetcher.request(reset=False)
    wait_until(lambda: loop.fetcher.counters.unchanged == 1, timeout=10, what="a 304")
    assert site.answers == [200, 304]


def test_a_broken_answer_keeps_the_validators_of_the_last_good_list(
    loops: Loops, site: Site
) -> None:
    loop = loops.asked(f"{site.url}/tasks")
    loop.got(1)
    site.change(b"[broken")
    loop.fetcher.request(reset=False)
    assert loop.got(2)[1].error is not None and "not valid JSON" in str(loop.seen[1].error)
    site.change(json.dumps(["h1", "h2"]).encode())
    loop.fetcher.request(reset=False)  # new ETag: asked in full, found equal: unchanged
    wait_until(lambda: loop.fetcher.counters.unchanged == 1, timeout=10, what="unchanged")
    # ... and handed over once all the same: the source is good again (the core clears the
    # error `corralctl status` shows)
    assert site.answers == [200, 200, 200] and loop.got(3)[2].tasks == loop.seen[0].tasks
