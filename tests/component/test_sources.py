"""Task sources against real files, commands, an HTTP server on loopback, and Python."""

from __future__ import annotations

import http.server
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.common.errors import TaskSourceError
from corral.common.tasklist import TaskEntry
from corral.supervisor.sources import Fetcher, TaskSource


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


def test_cmd_sources() -> None:
    assert fetch("cmd:printf 'a\\nb\\n'") == {"a": 1.0, "b": 1.0}
    assert fetch("cmd:echo '[\"j\"]'") == {"j": 1.0}
    with pytest.raises(TaskSourceError, match="exit status 3: boom"):
        fetch("cmd:echo boom >&2; exit 3")
    with pytest.raises(TaskSourceError, match=r"no answer within 0\.3 s"):
        fetch("cmd:sleep 5", timeout=0.3)


@pytest.fixture()
def http_server() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = {"/ok": b'["h1", "h2"]', "/bad": b"not json"}.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_http_sources(http_server: str) -> None:
    assert fetch(f"{http_server}/ok") == {"h1": 1.0, "h2": 1.0}
    with pytest.raises(TaskSourceError, match="HTTP 404"):
        fetch(f"{http_server}/missing")
    with pytest.raises(TaskSourceError, match="not valid JSON"):
        fetch(f"{http_server}/bad")
    with pytest.raises(TaskSourceError, match="unreachable"):
        fetch("http://127.0.0.1:9/none", timeout=2)


def test_python_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mytasks.py").write_text(
        "def ok():\n    return {'p1': 2, 'p2': 1}\n"
        "def boom():\n    raise RuntimeError('db down')\n"
        "def wrong():\n    return 42\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert fetch("python:mytasks:ok") == {"p1": 2.0, "p2": 1.0}
    with pytest.raises(TaskSourceError, match="RuntimeError: db down"):
        fetch("python:mytasks:boom")
    with pytest.raises(TaskSourceError, match="expected a list of tasks"):
        fetch("python:mytasks:wrong")
    with pytest.raises(TaskSourceError, match="ModuleNotFoundError"):
        fetch("python:no_such_module_xyz:f")
    sys.modules.pop("mytasks", None)


def test_fetcher_runs_off_thread_and_queues_one_more() -> None:
    woken = threading.Event()
    f = Fetcher(TaskSource.parse("cmd:sleep 0.2; echo a"), 5.0, woken.set)
    f.request(reset=True)
    f.request(reset=False)  # queued behind the first
    f.request(reset=False)  # merged into the queued one
    deadline = time.monotonic() + 10
    while len(f.results) < 2 and time.monotonic() < deadline:
        woken.wait(0.1)
    assert [r.reset for r in f.results] == [True, False]
    assert all(r.tasks == {"a": TaskEntry()} for r in f.results)
    assert not f.busy()
