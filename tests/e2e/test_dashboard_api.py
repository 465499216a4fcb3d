"""corral-dashboard as a process against a real supervisor (cheap fake workers over real
sockets): its API, its stream, its command line, and how it rides out a supervisor restart."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from ..support import wait_until
from .dealers import FakeWorker, Fleet
from .procs import BIN, Procs, Supervisor
from .test_dashboard_support import TOKEN, Dashboard

pytestmark = pytest.mark.e2e


@pytest.fixture()
def sup(procs: Procs) -> Supervisor:
    tasks = procs.tmp / "tasks.txt"
    tasks.write_text("".join(f"job-{i:03d}\n" for i in range(60)))
    return Supervisor(procs, f"file:{tasks}", expect_workers=12)


@pytest.fixture()
def fleet(sup: Supervisor) -> Iterator[Fleet]:
    f = Fleet(sup.endpoint, interval=0.25)
    try:
        for i in range(12):
            f.add(FakeWorker(f"fw-{i:02d}", max_load=10 + i))
        wait_until(lambda: len(f.owners()) == 60, timeout=30, what="every task running")
        yield f
    finally:
        f.close()


def _status(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _stream(url: str) -> Iterator[tuple[str, Any]]:
    """(event, data) from the dashboard's Server-Sent Events, as they come."""
    with urllib.request.urlopen(url + "/api/stream", timeout=20) as r:  # > keep-alive
        kind = None
        for raw in r:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and kind:
                yield kind, json.loads(line[6:])
                kind = None


def test_api_pages_filters_drills_down_and_refuses_bad_input(
    procs: Procs, sup: Supervisor, fleet: Fleet,
) -> None:
    dash = Dashboard(procs, sup.control)
    wait_until(lambda: dash.get("/api/workers")["total"] == 12, what="the fleet listed")
    page = dash.get("/api/workers?sort=max_load&desc=1&limit=5&offset=1")
    assert [r["id"] for r in page["rows"]] == ["fw-10", "fw-09", "fw-08", "fw-07", "fw-06"]
    assert dash.get("/api/workers?q=fw-1")["total"] == 2  # fw-10, fw-11
    drill = dash.get("/api/workers/fw-03")
    assert drill["worker"]["id"] == "fw-03" and drill["tasks"]
    assert all(t["owners"] == ["fw-03"] and t["tokens"]["fw-03"] > 0 for t in drill["tasks"])
    tasks = dash.get("/api/tasks?task=job-00&limit=20")
    assert [t["task"] for t in tasks["tasks"]] == [f"job-00{i}" for i in range(10)]
    # Assigned is not running: each owner's state, and the count of tasks that run.
    assert all(set(t["states"].values()) <= {"running", "starting", "failing"}
               for t in tasks["tasks"])
    wait_until(lambda: (s := dash.get("/api/state")["status"] or {}).get("tasks_running")
               == s.get("tasks_assigned"), what="every assigned task reported running")
    assert dash.get("/api/events?kind=join&limit=500")["events"][0]["kind"] == "join"
    for bad in ("/api/workers?limit=x", "/api/workers?offset=-1", "/api/events?before=zz",
                "/api/workers?limit=100000"):
        code, body = _status(dash.url + bad)
        assert code == 400 and body["error"], bad
    assert _status(dash.url + "/api/workers/nobody")[0] == 404
    assert dash.post("/api/actions/reboot", {}, {"X-Corral-Token": "test-token-0123456789"}
                     )[0] == 404
    code, body = dash.post("/api/actions/drain", {"nope": 1},
                           {"X-Corral-Token": "test-token-0123456789"})
    assert code == 400 and "worker" in body["error"]
    assert dash.proc.alive()


def test_stream_starts_with_a_snapshot_and_brings_a_timeout_live(
    procs: Procs, sup: Supervisor, fleet: Fleet,
) -> None:
    dash = Dashboard(procs, sup.control, False)
    wait_until(lambda: dash.get("/api/workers")["total"] == 12, what="the fleet listed")
    events = _stream(dash.url)
    kind, snap = next(events)
    assert kind == "snapshot" and snap["actions"] is False and snap["conn"]["ok"]
    fleet.workers[5].silent = True
    deadline = time.monotonic() + 30
    seen: list[str] = []
    inactive = False
    for kind, data in events:  # a message at least every 15 s (keep-alive comments aside)
        if kind == "events":
            seen += [e["kind"] for e in data if e.get("worker") == "fw-05"
                     or e.get("source") == "fw-05"]
        # the row may turn inactive through the timeout event or through a listing: either
        inactive = inactive or (kind == "fleet" and any(
            r["id"] == "fw-05" and r["state"] == "inactive" for r in data["changed"]))
        if inactive and "timeout" in seen and "move" in seen:
            break
        assert time.monotonic() < deadline, f"within 30 s: inactive={inactive}, saw {seen}"


def test_a_restarted_supervisor_is_found_again_and_the_feed_resynchronised(
    procs: Procs, sup: Supervisor, fleet: Fleet,
) -> None:
    dash = Dashboard(procs, sup.control, False)
    # connected (the feed answered) comes a moment before the first status: wait for both
    wait_until(lambda: (s := dash.get("/api/state"))["conn"]["ok"] and s["status"],
               what="following")
    epoch = dash.get("/api/state")["status"]["epoch"]
    sup.proc.stop()
    wait_until(lambda: not dash.get("/api/state")["conn"]["ok"], timeout=10,
               what="the dashboard sees the supervisor gone")
    assert dash.get("/api/workers")["total"] == 12  # the page still shows what it knew
    sup.start("supervisor-2")
    wait_until(lambda: (dash.get("/api/state")["status"] or {}).get("epoch") == epoch + 1,
               timeout=20, what="the new epoch")
    for kind in ("unreachable", "connected"):
        assert dash.get(f"/api/events?kind={kind}")["events"], kind
    wait_until(lambda: any(e["kind"] == "resync" for e in
                           dash.get("/api/events?kind=resync")["events"]), what="a resync")


def test_usage_errors_are_one_line_and_a_taken_port_is_exit_1(procs: Procs) -> None:
    exe = str(BIN / "corral-dashboard")
    out = subprocess.run([exe, "--listen", "nowhere"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("corral-dashboard: ")
    out = subprocess.run([exe, "--no-such-flag"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    taken = Dashboard(procs, "tcp://127.0.0.1:1", False)
    out = subprocess.run([exe, "--listen", f"127.0.0.1:{taken.port}"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1 and "cannot listen" in out.stderr, out.stderr
    # A supervisor that never answers: the dashboard serves, and says so.
    state = taken.get("/api/state")
    assert state["conn"]["ok"] is False


def _raw(port: int, request: bytes) -> tuple[int, bytes]:
    """Send ``request`` as it is (a forged Host, an oversized line); the status and body."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def _req(method: str, path: str, host: str, *headers: str, body: bytes = b"") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: close",
             f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def test_the_dashboard_refuses_what_a_hostile_page_or_client_sends(procs: Procs) -> None:
    """Issue 28: an unknown static name is a 404 (not a 500 and a traceback); aiohttp's own
    errors are one JSON line; a Host that is not allowed (DNS rebinding) reads nothing, and a
    forged Host with a matching Origin and the token acts on nothing; wrong tokens are logged
    and slowed to one a second per client."""
    dash = Dashboard(procs, "tcp://127.0.0.1:1")
    port, tok = dash.port, f"X-Corral-Token: {TOKEN}"
    assert _raw(port, _req("GET", "/static/" + "a" * 256, "127.0.0.1"))[0] == 404
    assert _raw(port, _req("GET", "/static/..%2Fweb.py", "127.0.0.1"))[0] == 404
    assert _raw(port, _req("GET", "/static/app.js", "127.0.0.1"))[0] == 200
    assert _raw(port, _req("GET", "/api/state", "localhost:1234"))[0] == 200
    code, body = _raw(port, _req("GET", "/api/state", f"rebound.example:{port}"))
    assert code == 421 and b"--allow-host" in body
    evil = f"evil.example:{port}"
    assert _raw(port, _req("POST", "/api/actions/query", evil, tok,
                           f"Origin: http://{evil}"))[0] == 421
    assert _raw(port, _req("POST", "/api/actions/query", "127.0.0.1", tok,
                           f"Origin: http://{evil}"))[0] == 403
    assert _raw(port, _req("POST", "/api/auth", "127.0.0.1", "X-Corral-Token: guess-1"))[0] == 403
    code, body = _raw(port, _req("POST", "/api/auth", "127.0.0.1", "X-Corral-Token: guess-2"))
    assert code == 429 and b"try again" in body  # the next guess waits a second
    assert _raw(port, _req("GET", "/" + "x" * 9000, "127.0.0.1"))[0] in (400, 414)
    assert dash.proc.alive()
    wait_until(lambda: "LineTooLong" in dash.proc.output(), what="the long line logged")
    out = dash.proc.output()
    assert "Traceback" not in out
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(lines) == len(out.strip().splitlines()), out  # every line is one JSON object
    refused = [e for e in lines if e["event"] == "refused"]
    assert [e["reason"] for e in refused] == [
        f"cross-origin request from http://{evil}", "wrong token"]
    assert all(e["peer"] == "127.0.0.1" for e in refused)
