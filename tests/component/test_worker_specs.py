"""Specs and fencing tokens reach the tasks: ``exec`` processes (real `corral-worker run`
processes against a fake supervisor) and ``python:`` handlers of every ``start`` shape (the
loop in a thread); and a 5,000-task reset in parts over a real socket."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from corral.common.wire.protocol import Instructions, Status, make_token
from corral.worker.config import WorkerConfig
from corral.worker.handlers import TaskContext, start_arity
from corral.worker.loop import WorkerLoop
from corral.worker.runner import CallRunner

from ..support import WAIT, wait_until
from . import workerprocs as support
from .workerprocs import FakeSupervisor, Workers

supervisor_fixture = support.supervisor_fixture  # the `supervisor` fixture
workers_fixture = support.workers_fixture  # the `workers` fixture

# The task id is a file path: the process writes "<token>|<spec>|<room>" into it, then sleeps.
SHOWS_ENV = ("sh -c 'printf \"%s|%s|%s\" \"$CORRAL_FENCING_TOKEN\" \"$CORRAL_TASK_SPEC\" \"$1\" "
             "> \"$0\"; exec sleep 60' {task} {spec.room.name}")
ROOM_A = json.dumps({"room": {"name": "a b"}}, separators=(",", ":"), sort_keys=True)
ROOM_B = json.dumps({"room": {"name": "b"}}, separators=(",", ":"), sort_keys=True)


def written(path: Path, old: str | None = None) -> str:
    text = wait_until(lambda: path.exists() and path.read_text() != old and path.read_text())
    assert text, f"{path} was never (re)written"
    return str(text)


def test_exec_gets_token_spec_and_placeholders_and_restarts_on_a_spec_change(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    workers.start(supervisor.endpoint, "--handler", "exec", "--exec", SHOWS_ENV,
                  "--stop-grace", "1", "--journal", str(tmp_path / "j"))
    task = str(tmp_path / "t")
    t1, t2 = make_token(7, 1), make_token(7, 2)
    status = supervisor.recv()
    supervisor.answer(status, add=(task,), tokens={task: t1}, specs={task: ROOM_A})
    first = written(Path(task))
    assert first == f"{t1}|{ROOM_A}|a b"  # "a b" stayed one argument
    status = supervisor.wait_for(lambda s: s.running == {task: t1})
    supervisor.answer(status, add=(task,), tokens={task: t2}, specs={task: ROOM_B})
    assert written(Path(task), first) == f"{t2}|{ROOM_B}|b"
    supervisor.wait_for(lambda s: s.running == {task: t2})
    lines = [json.loads(x) for x in (tmp_path / "j").read_text().splitlines()]
    starts = [(d["token"], d["spec"]) for d in lines if d["event"] == "start"]
    assert len(starts) == 2 and starts[0][0] == t1 and starts[1][0] == t2
    assert starts[0][1] != starts[1][1] and len(starts[0][1]) == 12


def test_a_spec_without_the_named_key_fails_the_task_not_the_agent(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    proc = workers.start(supervisor.endpoint, "--handler", "exec", "--exec", SHOWS_ENV)
    task = str(tmp_path / "t")
    status = supervisor.recv()
    supervisor.answer(status, add=(task,), specs={task: '{"room":{"number":5}}'})
    status = supervisor.wait_for(lambda s: s.failures.get(task, 0) >= 2)  # retried
    assert proc.poll() is None and not Path(task).exists()
    assert "the task's spec has no 'room.name'" in proc.output()
    supervisor.answer(status, add=(task,), specs={task: ROOM_B})  # a fixed spec: it runs
    assert written(Path(task)).endswith("|b")
    supervisor.wait_for(lambda s: task in s.running and not s.failures)


# -- python handlers ---------------------------------------------------------------------------


class OneArg:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def start(self, task: str) -> None:
        self.calls.append((task,))

    def stop(self, task: str) -> None:
        pass


class TwoArgs(OneArg):
    def start(self, task: str, spec: dict[str, Any]) -> None:  # type: ignore[override]
        self.calls.append((task, spec))


class ThreeArgs(OneArg):
    def start(self, task: str, spec: dict[str, Any],  # type: ignore[override]
              ctx: TaskContext) -> None:
        self.calls.append((task, spec, ctx.token, ctx.spec_version, ctx.lease_expires()))


def run_loop(endpoint: str, handler: Any) -> tuple[WorkerLoop, threading.Thread]:
    cfg = WorkerConfig(supervisor=endpoint, worker_id="w1", handler="python:x:Y",
                       report_interval=0.1)
    loop = WorkerLoop(cfg, CallRunner(handler))
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    return loop, thread


@pytest.mark.parametrize("cls", [OneArg, TwoArgs, ThreeArgs])
def test_python_handlers_get_what_their_start_takes(
        supervisor: FakeSupervisor, cls: type[OneArg]) -> None:
    handler = cls()
    loop, thread = run_loop(supervisor.endpoint, handler)
    try:
        status = supervisor.recv()
        token = make_token(7, 3)
        supervisor.answer(status, add=("a", "b"), tokens={"a": token, "b": token + 1},
                          specs={"a": ROOM_A}, lease=30.0)
        supervisor.wait_for(lambda s: set(s.running) == {"a", "b"})
    finally:
        for _ in range(2):
            loop.request_stop()
        thread.join(WAIT)
    a = handler.calls[0]
    assert start_arity(handler.start) == {OneArg: 1, TwoArgs: 2, ThreeArgs: 3}[cls]
    if cls is OneArg:
        assert handler.calls == [("a",), ("b",)]
    if cls is TwoArgs:
        assert handler.calls == [("a", {"room": {"name": "a b"}}), ("b", {})]
    if cls is ThreeArgs:
        assert a[:3] == ("a", {"room": {"name": "a b"}}, token) and len(a[3]) == 12
        assert a[4] == pytest.approx(status.sent_at + 30.0)  # the lease deadline it runs under


# -- parts -------------------------------------------------------------------------------------


def test_a_5000_task_reset_in_parts_is_taken_whole(supervisor: FakeSupervisor) -> None:
    handler = OneArg()
    loop, thread = run_loop(supervisor.endpoint, handler)
    try:
        status: Status = supervisor.recv()
        supervisor.answer(status, add=("old",))
        status = supervisor.wait_for(lambda s: s.running.keys() == {"old"})
        tasks = [f"task-{i:05d}" for i in range(5000)]
        tokens = {t: make_token(7, i + 1) for i, t in enumerate(tasks)}
        supervisor.seq += 1
        n = 7
        for part in range(n):  # 5000 over 7 parts, the last the shortest
            chunk = tuple(tasks[part * 715:(part + 1) * 715])
            supervisor.send(_set(supervisor, status, part, n, chunk, tokens))
            if part == 3:  # a duplicate, and a report in between that nothing has changed
                supervisor.send(_set(supervisor, status, part, n, chunk, tokens))
                mid = supervisor.recv()
                assert mid.running.keys() == {"old"} and mid.applied == (7, 1)
        status = supervisor.wait_for(lambda s: len(s.running) == 5000)
        assert status.running == tokens and status.applied == (7, 2)
        counters = loop.counters()
        assert counters["sets_assembled"] == 1 and counters["parts_duplicate"] == 1
    finally:
        for _ in range(2):
            loop.request_stop()
        thread.join(WAIT)
    started = [c[0] for c in handler.calls]
    assert started == ["old", *tasks]  # each once, in order


def _set(sup: FakeSupervisor, status: Status, part: int, parts: int, chunk: tuple[str, ...],
         tokens: dict[str, int]) -> Instructions:
    return Instructions(epoch=sup.epoch, seq=sup.seq, incarnation=status.incarnation,
                        lease=30.0, answers_seq=status.seq, answers_sent_at=status.sent_at,
                        reset=True, add=chunk, tokens={t: tokens[t] for t in chunk},
                        part=part, parts=parts)
