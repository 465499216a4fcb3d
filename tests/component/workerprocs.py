"""Helpers for the worker's component tests: a fake supervisor (a real ROUTER on loopback that
speaks the codec) and real `corral-worker` processes (`tests.support.Proc`) that are always
stopped by pid. The tests at the bottom check the helpers themselves.

The fixtures are registered under short names (``supervisor``, ``workers``); a test module
picks them up with ``supervisor_fixture = support.supervisor_fixture`` (a conftest.py would
push them on every other component test too)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from corral.common.wire.codec import decode, encode
from corral.common.wire.protocol import Instructions, Refusal, Status

from ..support import WAIT, Proc

WORKER = str(Path(sys.executable).parent / "corral-worker")


class FakeSupervisor:
    """A ROUTER that decodes reports and answers them with instruction sets it numbers."""

    def __init__(self, port: int | None = None, epoch: int = 7) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        if port is None:
            port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        else:
            self.sock.bind(f"tcp://127.0.0.1:{port}")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.epoch = epoch
        self.seq = 0
        self.routing_ids: list[bytes] = []
        self.last: Status | None = None

    def recv(self, timeout: float = WAIT) -> Status:
        if not self.sock.poll(int(timeout * 1000)):
            raise TimeoutError("no report from the worker")
        rid, frame = self.sock.recv_multipart()
        msg = decode(frame)
        assert isinstance(msg, Status)
        self.routing_ids.append(rid)
        self.last = msg
        return msg

    def wait_for(self, predicate: Callable[[Status], bool], timeout: float = WAIT) -> Status:
        """The first report (from now on) that satisfies ``predicate``."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.recv(max(0.0, deadline - time.monotonic()))
            if predicate(status):
                return status
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no matching report; last: {status}")

    def answer(self, status: Status, *, lease: float = 30.0, **fields: Any) -> Instructions:
        """Send the next instruction set, answering ``status``."""
        self.seq += 1
        msg = Instructions(epoch=self.epoch, seq=self.seq, incarnation=status.incarnation,
                           lease=lease, answers_seq=status.seq, answers_sent_at=status.sent_at,
                           **fields)
        self.send(msg)
        return msg

    def send(self, msg: Instructions | Refusal) -> None:
        self.send_raw(encode(msg))

    def send_raw(self, frame: bytes) -> None:
        self.sock.send_multipart([self.routing_ids[-1], frame])

    def refuse(self, status: Status, reason: str) -> None:
        self.send(Refusal(epoch=self.epoch, incarnation=status.incarnation,
                          code="duplicate_id", reason=reason))

    def __enter__(self) -> FakeSupervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()
        self.ctx.term()


class Workers:
    """Starts real `corral-worker run` processes; leaving the `with` kills each by pid (as a
    crash would: what its keeper then does is its own business)."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.procs: list[Proc] = []

    def start(self, endpoint: str, *args: str, worker_id: str = "w1",
              env: dict[str, str] | None = None) -> Proc:
        cmd = [WORKER, "run", "--supervisor", endpoint, "--id", worker_id,
               "--report-interval", "0.1", *args]
        proc = Proc(cmd, self.tmp / f"{worker_id}-{len(self.procs)}.log", env)
        self.procs.append(proc)
        return proc

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.kill()


@pytest.fixture(name="supervisor")
def supervisor_fixture() -> Iterator[FakeSupervisor]:
    with FakeSupervisor() as sup:
        yield sup


@pytest.fixture(name="workers")
def workers_fixture(tmp_path: Path) -> Iterator[Workers]:
    with Workers(tmp_path) as w:
        yield w


def journal(path: Path) -> list[tuple[str, str]]:
    """(event, task) for each line of a worker journal, in order."""
    if not path.exists():
        return []
    return [(d["event"], d["task"]) for d in map(json.loads, path.read_text().splitlines())]
