"""The worker's I/O loop over real ZeroMQ sockets on loopback, against a fake supervisor.

The loop runs in a thread of the test process (no signals there: `request_stop` stands in
for SIGTERM) with a recording python handler; the real-process paths are in test_worker_cli.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import zmq

from corral.common.wire.protocol import WorkerState, make_token
from corral.worker.channel import UNACKED_TIMEOUT_MS, Channel, routing_id
from corral.worker.config import WorkerConfig
from corral.worker.loop import WorkerLoop
from corral.worker.runner import CallRunner

from ..support import WAIT, free_port, wait_until
from . import workerprocs as support
from .workerprocs import FakeSupervisor

E7 = make_token(7, 0)  # the token of a task given by a set of epoch 7 that names none

supervisor_fixture = support.supervisor_fixture  # the `supervisor` fixture


@dataclass
class Recorder:
    """A python handler that records calls; ``fail`` makes start raise for those tasks."""

    fail: set[str] = field(default_factory=set)
    running: set[str] = field(default_factory=set)
    calls: list[tuple[str, str]] = field(default_factory=list)

    def start(self, task: str) -> None:
        self.calls.append(("start", task))
        if task in self.fail:
            raise RuntimeError(f"cannot start {task}")
        self.running.add(task)

    def stop(self, task: str) -> None:
        self.calls.append(("stop", task))
        self.running.discard(task)


@dataclass
class Prewarming(Recorder):
    is_ready: bool = False

    def ready(self) -> bool:
        return self.is_ready


class Running:
    """A WorkerLoop in a thread; `result` is its exit status once it ends."""

    def __init__(self, endpoint: str, handler: Recorder, **cfg: object) -> None:
        config = WorkerConfig(supervisor=endpoint, worker_id="w1", handler="python:x:Y",
                              report_interval=0.1, **cfg)  # type: ignore[arg-type]
        self.loop = WorkerLoop(config, CallRunner(handler))
        self.result: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.result = self.loop.run()

    def stop(self) -> None:
        for _ in range(2):  # the first drains, the second stops at once
            self.loop.request_stop()
        self.thread.join(WAIT)
        assert not self.thread.is_alive(), "the loop did not stop"


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def worker(supervisor: FakeSupervisor, recorder: Recorder) -> Iterator[Running]:
    running = Running(supervisor.endpoint, recorder)
    try:
        yield running
    finally:
        running.stop()


def test_reports_come_from_the_routing_id_every_interval(
        supervisor: FakeSupervisor, worker: Running) -> None:
    first = supervisor.recv()
    reports = [supervisor.recv() for _ in range(3)]
    assert [r.seq for r in reports] == list(range(first.seq + 1, first.seq + 4))
    assert supervisor.routing_ids[-1] == routing_id("w1", worker.loop.incarnation)
    assert first.worker == "w1" and first.incarnation == worker.loop.incarnation
    assert first.state == WorkerState.READY and not first.lease_held


def test_reports_are_dropped_not_queued_while_no_supervisor_listens(recorder: Recorder) -> None:
    port = free_port()
    running = Running(f"tcp://127.0.0.1:{port}", recorder)
    try:
        wait_until(lambda: running.loop.counters()["reports_dropped"] >= 3,
                   what="3 reports dropped")
        bound_at = time.monotonic()
        with FakeSupervisor(port) as sup:
            first, second = sup.recv(), sup.recv()
            # Queued reports would arrive in a row, all older than the supervisor. Only the
            # latest undelivered one is retried (so a new worker is seen without waiting a
            # report interval); every report before it was dropped for good.
            assert first.seq > 3 - 1 and second.seq == first.seq + 1
            assert second.sent_at >= bound_at
    finally:
        running.stop()


def test_instruction_sets_drive_the_handler_and_stale_ones_are_dropped(
        supervisor: FakeSupervisor, worker: Running, recorder: Recorder) -> None:
    status = supervisor.recv()
    supervisor.answer(status, reset=True, add=("a", "b"))
    status = supervisor.wait_for(lambda s: s.running == {"a": E7, "b": E7})
    assert status.lease_held and status.applied == (7, 1)
    assert recorder.running == {"a", "b"}

    supervisor.seq = 0  # a replay of seq 1: not newer, so dropped
    supervisor.answer(status, remove=("a",))
    supervisor.send_raw(b"\x93\x01garbage")  # and a frame that does not decode
    supervisor.seq = 1
    supervisor.answer(status, add=("c",), remove=("b",))
    status = supervisor.wait_for(lambda s: s.applied == (7, 2))
    assert status.running == {"a": E7, "c": E7} and recorder.running == {"a", "c"}
    counters = worker.loop.counters()
    assert counters["sets_stale"] == 1 and counters["decode_errors"] == 1


def test_a_handler_that_raises_is_reported_as_failing_not_fatal(
        supervisor: FakeSupervisor, worker: Running, recorder: Recorder) -> None:
    recorder.fail.add("bad")
    status = supervisor.recv()
    supervisor.answer(status, add=("bad", "good"))
    status = supervisor.wait_for(lambda s: s.failures.get("bad", 0) >= 2)  # retried
    assert set(status.running) == {"bad", "good"} and recorder.running == {"good"}
    assert worker.loop.counters()["handler_errors"] >= 2
    assert worker.thread.is_alive()


def test_lease_lapse_stops_the_tasks_and_is_reported(
        supervisor: FakeSupervisor, worker: Running, recorder: Recorder) -> None:
    status = supervisor.recv()
    supervisor.answer(status, add=("a",), lease=0.5)  # and never again
    supervisor.wait_for(lambda s: s.running == {"a": E7} and s.lease_held)
    status = supervisor.wait_for(lambda s: not s.lease_held)
    status = supervisor.wait_for(lambda s: s.running == {})
    assert recorder.calls == [("start", "a"), ("stop", "a")]
    assert worker.thread.is_alive()  # it goes on reporting, waiting for a supervisor
    # The lapse, unanswered for half a lease, opened the connection again, once, and reports
    # go on arriving over the new one.
    wait_until(lambda: worker.loop.counters()["reopened"] == 1)
    before = supervisor.recv().seq
    assert supervisor.recv().seq > before
    assert worker.loop.counters()["reopened"] == 1


def test_the_connection_has_no_zmtp_heartbeat_but_kernel_timeouts() -> None:
    """A ZMTP PING a second per worker cost the supervisor more than the reports; the kernel
    watches the connection instead (TCP_USER_TIMEOUT, keepalive)."""
    ctx = zmq.Context()
    try:
        ch = Channel(ctx, f"tcp://127.0.0.1:{free_port()}", "w1", 1)
        (sock,) = ch.sockets
        assert sock.get(zmq.HEARTBEAT_IVL) == 0
        assert sock.get(zmq.TCP_MAXRT) == UNACKED_TIMEOUT_MS
        assert sock.get(zmq.TCP_KEEPALIVE) == 1
        (old, new), = ch.reopen_all()
        assert old.closed and ch.sockets == [new] and new.get(zmq.TCP_MAXRT) == UNACKED_TIMEOUT_MS
        new.close(linger=0)
    finally:
        ctx.term()


def test_refusal_stops_the_tasks_and_exits_3(
        supervisor: FakeSupervisor, worker: Running, recorder: Recorder) -> None:
    status = supervisor.recv()
    supervisor.answer(status, add=("a",))
    status = supervisor.wait_for(lambda s: bool(s.running))
    supervisor.refuse(status, "w1 is already in use")
    worker.thread.join(WAIT)
    assert worker.result == 3 and recorder.running == set()


def test_prewarm_reports_starting_until_ready(supervisor: FakeSupervisor) -> None:
    handler = Prewarming()
    running = Running(supervisor.endpoint, handler)
    try:
        status = supervisor.recv()
        assert status.state == WorkerState.STARTING
        supervisor.answer(status, add=("a",))
        supervisor.wait_for(lambda s: s.applied == (7, 1))
        assert handler.calls == []  # takes nothing while starting
        handler.is_ready = True
        status = supervisor.wait_for(lambda s: s.state == WorkerState.READY)
        supervisor.answer(status, add=("a",))
        supervisor.wait_for(lambda s: s.running == {"a": E7})
    finally:
        running.stop()
    assert running.result == 0 and handler.running == set()
