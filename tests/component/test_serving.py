"""Request serving over real sockets: the worker's loop in a thread against a fake supervisor,
and a DEALER client speaking `Request` / `Reply` to its ``--serve`` socket."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import zmq

from corral.common.errors import ConfigError
from corral.common.wire.codec import decode, encode
from corral.common.wire.protocol import Reply, Request, Status
from corral.worker import config as worker_config
from corral.worker.config import WorkerConfig
from corral.worker.loop import WorkerLoop
from corral.worker.runner import CallRunner
from corral.worker.serving import Server, Service
from corral.worker.state import Phase

from ..support import WAIT, free_port, wait_until
from . import workerprocs as support
from .workerprocs import FakeSupervisor

supervisor_fixture = support.supervisor_fixture
workers_fixture = support.workers_fixture


@dataclass
class Echo:
    """Serves by echoing; ``fail`` raises, ``hold`` waits until the given monotonic time."""

    running: set[str] = field(default_factory=set)
    served: list[tuple[str | None, Any]] = field(default_factory=list)
    abandoned: list[tuple[str, Any, Any]] = field(default_factory=list)
    hold_until: float = 0.0

    def start(self, task: str) -> None:
        self.running.add(task)

    def stop(self, task: str) -> None:
        self.running.discard(task)

    def serve(self, task: str | None, request: Any) -> Any:
        self.served.append((task, request))
        if request == "fail":
            raise ValueError("cannot serve that")
        while time.monotonic() < self.hold_until:
            time.sleep(0.01)
        if request == "unencodable":
            return object()
        return {"task": task, "echo": request}

    def abandon(self, task: str, request: Any, reply: Any) -> None:
        self.abandoned.append((task, request, reply))


class Serving:
    """A serving WorkerLoop in a thread, and a client DEALER connected to it."""

    def __init__(self, endpoint: str, handler: Echo) -> None:
        self.address = f"tcp://127.0.0.1:{free_port()}"
        config = WorkerConfig(supervisor=endpoint, worker_id="w1", handler="python:x:Y",
                              report_interval=0.1, serve=self.address, advertise=self.address)
        self.loop = WorkerLoop(config, CallRunner(handler), service=Service.of(handler))
        self.result: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.ctx = zmq.Context()
        self.client = self.ctx.socket(zmq.DEALER)
        self.client.setsockopt(zmq.LINGER, 0)
        self.client.connect(self.address)
        self._ids = iter(range(1, 10**6))

    def _run(self) -> None:
        self.result = self.loop.run()

    def ask(self, task: str | None, body: Any) -> Reply:
        rid = next(self._ids)
        self.client.send(encode(Request(rid, task, body)))
        return self.reply(rid)

    def reply(self, rid: int) -> Reply:
        assert self.client.poll(int(WAIT * 1000)), "no reply"
        reply = decode(self.client.recv())
        assert isinstance(reply, Reply) and reply.id == rid
        return reply

    def stop(self) -> None:
        for _ in range(2):
            self.loop.request_stop()
        self.thread.join(WAIT)
        self.client.close()
        self.ctx.term()
        assert not self.thread.is_alive()


@pytest.fixture
def echo() -> Echo:
    return Echo()


@pytest.fixture
def serving(supervisor: FakeSupervisor, echo: Echo) -> Iterator[Serving]:
    s = Serving(supervisor.endpoint, echo)
    try:
        yield s
    finally:
        s.stop()


def own(supervisor: FakeSupervisor, *tasks: str, lease: float = 30.0) -> Status:
    status = supervisor.recv()
    supervisor.answer(status, add=tasks, lease=lease)
    return supervisor.wait_for(lambda s: set(s.running) == set(tasks) and s.lease_held)


def test_requests_for_owned_tasks_are_served_others_get_not_owner(
        supervisor: FakeSupervisor, serving: Serving, echo: Echo) -> None:
    own(supervisor, "a")
    ok = serving.ask("a", [1, "x"])
    assert ok.code == "ok" and ok.body == {"task": "a", "echo": [1, "x"]}
    assert ok.version == (7, 1) and not ok.lame_duck
    other = serving.ask("b", 1)
    assert other.code == "not_owner" and other.version == (7, 1) and "'b'" in (other.error or "")
    anyone = serving.ask(None, "hi")  # call_any: no task, no ownership to check
    assert anyone.code == "ok" and anyone.body == {"task": None, "echo": "hi"}
    assert echo.served == [("a", [1, "x"]), (None, "hi")]  # not run for the task it lacks


def test_handler_errors_and_bad_frames_are_answered_or_counted_never_fatal(
        supervisor: FakeSupervisor, serving: Serving) -> None:
    own(supervisor, "a")
    failed = serving.ask("a", "fail")
    assert failed.code == "error" and failed.error == "ValueError: cannot serve that"
    unencodable = serving.ask("a", "unencodable")
    assert unencodable.code == "error" and "cannot encode" in (unencodable.error or "")
    serving.client.send(b"\x93\x01garbage")
    serving.client.send_multipart([b"two", b"frames"])
    serving.client.send(encode(Status("x", 1, 1, 1.0, 1.0, {})))  # not a request
    assert serving.ask("a", 2).code == "ok"
    counters = serving.loop.counters()
    assert counters["bad_requests"] == 3 and counters["serve_errors"] == 2
    assert serving.thread.is_alive()


def test_losing_the_task_while_serving_withholds_the_reply(
        supervisor: FakeSupervisor, serving: Serving, echo: Echo) -> None:
    status = own(supervisor, "a", lease=0.8)  # and no renewal: the lease ends while it serves
    echo.hold_until = status.sent_at + 0.8 + 0.05  # both monotonic, one machine
    lost = serving.ask("a", "slow")
    assert lost.code == "not_owner" and "while serving" in (lost.error or "")
    assert echo.abandoned == [("a", "slow", {"task": "a", "echo": "slow"})]
    assert serving.loop.counters()["abandoned"] == 1


def test_reports_carry_the_serve_address_and_replies_the_load(
        supervisor: FakeSupervisor, serving: Serving) -> None:
    status = own(supervisor, "a")
    assert status.serve == serving.address
    for i in range(20):
        assert serving.ask("a", i).code == "ok"
    reply = wait_until(lambda: (r := serving.ask("a", 0)).qps > 0 and r)  # a bucket completed
    assert reply.qps > 0 and 0 <= reply.utilization <= 1 and reply.errors == 0
    status = supervisor.wait_for(lambda s: s.qps > 0)
    assert status.serve == serving.address and status.utilization >= 0


def test_a_lame_duck_still_serves_its_tasks_and_says_so(
        supervisor: FakeSupervisor, serving: Serving) -> None:
    own(supervisor, "a")
    serving.loop.request_stop()  # the first stop drains: lame duck
    supervisor.wait_for(lambda s: s.state == "lame_duck")
    reply = serving.ask("a", 1)
    assert reply.code == "ok" and reply.lame_duck


class Owner:
    """The machine's side of serving, fixed: owns everything, ready."""

    applied = (7, 3)
    phase = Phase.READY

    def owns(self, task: str, now: float) -> bool:
        return True


def test_on_the_way_out_what_arrives_is_answered_not_owner(echo: Echo) -> None:
    ctx = zmq.Context()
    address = f"tcp://127.0.0.1:{free_port()}"
    machine: Any = Owner()
    server = Server(ctx, address, None, Service.of(echo), machine, time.monotonic)
    client = ctx.socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    client.connect(address)
    try:
        client.send(encode(Request(1, "a", "x")))
        assert server.socket.poll(int(WAIT * 1000)) and server.drain() == 1
        assert decode(client.recv()) == Reply(1, "ok", {"task": "a", "echo": "x"}, None, (7, 3))
        client.send(encode(Request(2, "a", "late")))
        assert server.socket.poll(int(WAIT * 1000))
        server.close()  # the agent is exiting: not_owner, lame duck, then closed
        assert client.poll(int(WAIT * 1000))
        late = decode(client.recv())
        assert isinstance(late, Reply) and late.code == "not_owner" and late.lame_duck
        assert echo.served == [("a", "x")]
    finally:
        client.close()
        ctx.term()


def test_serve_configuration() -> None:
    base = {"supervisor": "tcp://127.0.0.1:1", "id": "w1"}
    cfg = worker_config.load({**base, "handler": "log", "serve": "tcp://0.0.0.0:7770"}, {})
    assert cfg.serve == "tcp://0.0.0.0:7770" and cfg.advertise is not None
    assert not cfg.advertise.startswith("tcp://0.0.0.0")
    cfg = worker_config.load({**base, "handler": "log", "serve": "tcp://0.0.0.0:7770",
                              "advertise": "tcp://10.1.2.3:7770"}, {})
    assert cfg.advertise == "tcp://10.1.2.3:7770"
    with pytest.raises(ConfigError, match=r"^serve: .*not exec"):
        worker_config.load({**base, "handler": "exec", "exec": "true",
                            "serve": "tcp://127.0.0.1:7770"}, {})
    with pytest.raises(ConfigError, match=r"^advertise: "):
        worker_config.load({**base, "handler": "log", "advertise": "tcp://h:1"}, {})
    with pytest.raises(ConfigError, match=r"^serve: .*no serve"):
        Service.of(object())


def test_the_cli_refuses_a_handler_without_serve_and_a_taken_port(
        tmp_path: Path, workers: support.Workers) -> None:
    (tmp_path / "noserve.py").write_text(
        "class H:\n    def start(self, t): pass\n    def stop(self, t): pass\n")
    busy = zmq.Context.instance().socket(zmq.ROUTER)
    port = busy.bind_to_random_port("tcp://127.0.0.1")
    try:
        proc = workers.start("tcp://127.0.0.1:1", "--handler", "python:noserve:H", "--serve",
                             "tcp://127.0.0.1:1", env={"PYTHONPATH": str(tmp_path)})
        assert proc.wait(WAIT) == 2 and "no serve(task, request)" in proc.output()
        proc = workers.start("tcp://127.0.0.1:1", "--handler", "log", "--serve",
                             f"tcp://127.0.0.1:{port}")
        assert proc.wait(WAIT) == 2 and "cannot bind" in proc.output()
    finally:
        busy.close(0)
