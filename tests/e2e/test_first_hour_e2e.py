"""A new user's first hour (issue 32): what the README has them run, run for real, and each
rough edge they met — a start that fails leaves no trace, errors come at start and not at
first use."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import zmq

from corral.common.wire import codec
from corral.common.wire.protocol import Status
from corral.worker.events import StartTask, TaskFailed
from corral.worker.handlers import StartError, TaskContext
from corral.worker.process import ExecRunner
from corral.worker.runner import TaskExecutor

from ..support import free_port, wait_until
from .procs import BIN, Procs, Supervisor, write_json

pytestmark = pytest.mark.e2e

SUP = str(BIN / "corral-supervisor")


def run_sup(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SUP, "run", "--state-file", str(tmp / "epoch"),
                           *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def test_a_start_that_fails_consumes_no_epoch(tmp_path: Path) -> None:
    """A port in use (exit 1) or a missing task file (exit 2) leaves the state file as it
    was: every failed attempt used to take an epoch."""
    (tmp_path / "epoch").write_text("41\n")
    (tmp_path / "tasks.txt").write_text("a\n")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        port = busy.getsockname()[1]
        out = run_sup(tmp_path, "--tasks", f"file:{tmp_path / 'tasks.txt'}",
                      "--bind", f"tcp://127.0.0.1:{port}",
                      "--control", f"tcp://127.0.0.1:{free_port()}")
    finally:
        busy.close()
    assert out.returncode == 1 and "cannot bind" in out.stderr, out.stderr
    missing = run_sup(tmp_path, "--tasks", f"file:{tmp_path / 'typo.txt'}")
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"corral-supervisor: configuration error: tasks: {tmp_path / 'typo.txt'}: no such file "
        "(create it, or give --allow-empty to start with no tasks)"]
    assert (tmp_path / "epoch").read_text() == "41\n"


def test_an_exec_start_that_fails_names_the_program() -> None:
    """Not `FileNotFoundError(2, …)`: which program could not be run, and why."""
    runner = ExecRunner("/nonexistent/rec --room {task}", 1.0, "w1")
    with pytest.raises(StartError, match=r"^cannot run '/nonexistent/rec': No such file"):
        runner.start(TaskContext("t1"))
    failed = TaskExecutor(runner, None, log=None).start(StartTask("t1"))
    assert failed == TaskFailed("t1", "cannot run '/nonexistent/rec': No such file or directory")


def ctl(sup: Supervisor, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "corralctl"), "--control", sup.control, *args],
                          capture_output=True, text=True, timeout=60)


def test_during_the_warm_up_corralctl_says_why_it_has_nothing(procs: Procs) -> None:
    """Not `version 0` and an empty table: the warm-up, who reported, when it ends."""
    (procs.tmp / "tasks.txt").write_text("a\n")
    sup = Supervisor(procs, f"file:{procs.tmp / 'tasks.txt'}", warmup=60, expect_workers=3)
    out = wait_until(lambda: (r := ctl(sup, "assignments")).returncode == 0 and r)
    first = out.stdout.splitlines()[0]
    assert first.startswith("warming up: 0 of 3 expected workers reported, ends in "), first
    assert first.endswith(" s (nothing is assigned before)")
    for verb in ("tasks", "workers"):
        assert ctl(sup, verb).stdout.startswith("warming up: 0 of 3 expected workers")
    status = json.loads(ctl(sup, "-o", "json", "status").stdout)
    assert status["warmup"]["expected"] == 3 and 0 < status["warmup"]["ends_in_s"] <= 60


def test_why_a_task_fails_is_where_people_look(procs: Procs) -> None:
    """A task that keeps failing: `corralctl tasks` gives its last error, the worker and when
    (it used to be only in the worker's log); a broken task file shows in `corralctl status`
    (it used to be only in the supervisor's log and counters)."""
    tasks = procs.tmp / "tasks.json"
    write_json(tasks, [{"id": "broken"}])
    sup = Supervisor(procs, f"file:{tasks}", max_failures=2)
    procs.start("w1", [str(BIN / "corral-worker"), "run", "--supervisor", sup.endpoint,
                       "--id", "w1", "--handler", "exec", "--exec", "sh -c 'exit 3' {task}",
                       "--report-interval", "0.3"])

    def last_error() -> Any:
        rows = json.loads(ctl(sup, "-o", "json", "tasks").stdout)["tasks"]
        return rows and rows[0]["last_error"]

    err = wait_until(last_error, timeout=30, what="the task's last error")
    assert err["worker"] == "w1" and err["error"] == "exited with status 3"
    table = ctl(sup, "tasks").stdout.splitlines()
    assert "LAST ERROR" in table[0]
    assert re.search(r"broken .*w1 \d+s ago: exited with status 3$", table[1]), table
    tasks.write_text('[{"id": "broken"')  # a task file cut short
    gone = wait_until(lambda: json.loads(ctl(sup, "-o", "json", "status").stdout
                                         )["source_error"], what="the refused list")
    assert str(tasks) in gone["error"] and gone["since_s"] >= 0
    assert re.search(r"^source_error +\{\"error\":", ctl(sup, "status").stdout, re.M)
    write_json(tasks, [{"id": "broken"}])  # mended: the error goes
    wait_until(lambda: json.loads(ctl(sup, "-o", "json", "status").stdout
                                  )["source_error"] is None, what="the mended list")


def test_corralctl_writes_for_people_and_scripts(procs: Procs) -> None:
    """Tables aligned in terminal cells, values never a Python repr, nothing a terminal would
    obey, JSON objects as objects, and a failure in the exit status (issues 32 and 28)."""
    tasks = procs.tmp / "tasks.json"
    write_json(tasks, [{"id": "工人-任务", "spec": {"url": "rtsp://cam-1"}}, {"id": "room-1"}])
    sup = Supervisor(procs, f"file:{tasks}")
    procs.start("w1", [str(BIN / "corral-worker"), "run", "--supervisor", sup.endpoint,
                       "--id", "w1", "--handler", "log", "--report-interval", "0.3"])
    wait_until(lambda: sup.ctl("status")["tasks_assigned"] == 2, what="both tasks placed")
    rows = {t["task"]: t for t in json.loads(ctl(sup, "-o", "json", "tasks").stdout)["tasks"]}
    assert rows["工人-任务"]["spec"] == {"url": "rtsp://cam-1"} and rows["room-1"]["spec"] is None
    lines = ctl(sup, "assignments").stdout.splitlines()[1:]
    columns = {display_col(line, "w1") for line in lines[1:]}
    assert len(columns) == 1 and display_col(lines[0], "WORKERS") in columns, lines
    counters = ctl(sup, "counters").stdout
    assert re.search(r"^impostor_reports +0$", counters, re.M), counters
    events = ctl(sup, "events").stdout
    assert "{'" not in events and "join" in events and events.splitlines()[-1].startswith(
        "cursor ")
    route = ctl(sup, "route", "room-1")  # w1 serves no requests: a request would fail
    assert route.returncode == 1 and route.stdout.splitlines()[-1].startswith("fails: ")
    # A peer picks its own connection's routing id, which `workers` shows as its ADDRESS: a
    # captured ESC[2J must show as text, not clear the screen.
    ctx = zmq.Context()
    peer = ctx.socket(zmq.DEALER)
    try:
        peer.setsockopt(zmq.IDENTITY, b"\x1b[2Jx\xe2\x80\xae@1")
        peer.linger = 0
        peer.connect(sup.endpoint)
        peer.send(codec.encode(Status("sneaky", 1, 1, time.monotonic(), 10, {})))
        out = wait_until(lambda: "sneaky" in (r := ctl(sup, "workers")).stdout and r.stdout)
    finally:
        peer.close(0)
        ctx.term()
    assert "\x1b" not in out and "\u202e" not in out and "\\x1b[2Jx\\u202e@1" in out, out
    bad = ctl(sup, "--timeout", "-1", "status")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "--timeout" in bad.stderr


def display_col(line: str, word: str) -> int:
    """The terminal column at which ``word`` starts in ``line``."""
    from wcwidth import wcswidth

    return int(wcswidth(line[:line.index(word)]))
