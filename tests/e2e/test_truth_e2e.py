"""Truth over trust, end to end: a real supervisor and real workers on loopback, and plain
pyzmq peers that lie — a forged epoch, a peer that takes tasks and never runs them, a flood of
made-up ids, control requests that would have the supervisor echo megabytes back."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from corral.common.wire import codec
from corral.common.wire.protocol import (
    MAX_LOAD,
    MAX_STATE_EPOCH,
    ControlReply,
    ControlRequest,
    Status,
)

from ..support import Proc, wait_until
from .procs import BIN, Procs, Supervisor

pytestmark = pytest.mark.e2e


class Peer:
    """A plain DEALER that says whatever a test makes it say."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str, identity: bytes) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTING_ID, identity)
        self.sock.connect(endpoint)
        self.seq = 0

    def report(self, worker: str, **fields: Any) -> None:
        self.seq += 1
        body = {"max_load": 10.0, "running": {}, **fields}
        st = Status(worker, 99, self.seq, time.monotonic(), body.pop("max_load"),
                    body.pop("running"), **body)
        self.sock.send(codec.encode(st))

    def send(self, frame: bytes) -> None:
        self.sock.send(frame)

    def drain(self) -> None:
        while self.sock.poll(0):
            self.sock.recv()


class Peers:
    """The test's sockets, each closed at its end."""

    def __init__(self) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.all: list[Any] = []

    def peer(self, endpoint: str, identity: bytes) -> Peer:
        p = Peer(self.ctx, endpoint, identity)
        self.all.append(p.sock)
        return p

    def dealer(self, endpoint: str) -> Any:
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        self.all.append(s)
        return s

    def close(self) -> None:
        for s in self.all:
            s.close(0)
        self.ctx.term()


@pytest.fixture()
def peers() -> Iterator[Peers]:
    p = Peers()
    try:
        yield p
    finally:
        p.close()


def answers(sup: Supervisor, verb: str, **args: Any) -> Any:
    """The supervisor's answer, or None while it does not answer (starting, or busy)."""
    from corral.client.errors import Unreachable

    try:
        return sup.query(verb, **args)
    except Unreachable:
        return None


def worker(procs: Procs, sup: Supervisor, name: str, tmp: Path, *extra: str) -> Proc:
    return procs.start(name, [str(BIN / "corral-worker"), "run", "--supervisor", sup.endpoint,
                              "--id", name, "--handler", "log", "--journal",
                              str(tmp / f"{name}.journal"), "--report-interval", "0.5", *extra])


def journal(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    return [(d["event"], d["task"]) for d in map(json.loads, path.read_text().splitlines())]


def tasks_file(tmp: Path, n: int) -> str:
    path = tmp / "tasks.txt"
    path.write_text("".join(f"task-{i:02d}\n" for i in range(n)))
    return f"file:{path}"


def test_a_forged_epoch_claim_poisons_nothing_and_tasks_run_across_a_restart(
        procs: Procs, peers: Peers, tmp_path: Path) -> None:
    sup = Supervisor(procs, tasks_file(tmp_path, 6), warmup=3, lease=10, lease_margin=2,
                     expect_workers=3)
    wait_until(lambda: answers(sup, "status"), timeout=30, what="the supervisor answers")
    liar = peers.peer(sup.endpoint, b"forger")
    liar.report("never-seen", applied=(MAX_STATE_EPOCH + 1, 1))  # in the wire's range
    liar.report("never-seen-2", applied=(2**41, 1))  # out of it: refused where decoded
    wait_until(lambda: (c := answers(sup, "counters")) and c["epoch_claims_refused"] >= 1
               and c["decode_errors"] >= 1, what="both refused")
    for name in ("w1", "w2"):
        worker(procs, sup, name, tmp_path)
    wait_until(lambda: (s := answers(sup, "status")) and s["tasks_running"] == 6, timeout=30,
               what="every task running")
    assert int(sup.state.read_text()) == 1, "the forged epoch was not persisted"
    events = [json.loads(line) for line in sup.proc.output().splitlines()
              if line.startswith("{")]
    refused = [e for e in events if e.get("event", "").startswith("refused to raise the epoch")]
    assert refused and refused[0]["level"] == "warning" and refused[0]["worker"] == "never-seen"
    assert refused[0]["connection"] == b"forger".hex()
    # A restart: the new incarnation takes epoch 2, hears the workers and moves nothing.
    sup.proc.stop()
    sup.start("supervisor-2")
    wait_until(lambda: (s := answers(sup, "status")) and s["phase"] == "running"
               and s["tasks_running"] == 6, timeout=30,
               what="running again after the restart")
    assert int(sup.state.read_text()) == 2
    for name in ("w1", "w2"):
        assert all(e == "start" for e, _ in journal(tmp_path / f"{name}.journal")), \
            "a task was stopped across the restart"


def test_a_peer_that_never_runs_its_tasks_loses_them_within_the_start_timeout(
        procs: Procs, peers: Peers, tmp_path: Path) -> None:
    sup = Supervisor(procs, tasks_file(tmp_path, 8), warmup=2, start_timeout=3)
    liar = peers.peer(sup.endpoint, b"greedy")

    def lie() -> None:
        liar.report("greedy", max_load=MAX_LOAD)
        liar.drain()

    wait_until(lambda: (lie(), (s := answers(sup, "status")) and s["phase"] == "running")[1],
               timeout=30,
               what="the supervisor running, the liar known")
    w1 = worker(procs, sup, "w1", tmp_path, "--max-load", "10")
    liar_had: set[str] = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        lie()
        status = sup.query("status")
        mine = {t["task"] for t in sup.query("tasks", worker="greedy")["tasks"]}
        liar_had |= mine
        started = {t for e, t in journal(tmp_path / "w1.journal") if e == "start"}
        # Covered means running: never more running than what w1 really started.
        assert status["tasks_running"] <= len(started), (status, started)
        if not mine and status["tasks_running"] == 8:
            break
        time.sleep(0.2)
    assert liar_had, "the peer with the most room was given tasks"
    assert not {t["task"] for t in sup.query("tasks", worker="greedy")["tasks"]}
    assert sup.query("status")["tasks_running"] == 8 and w1.alive()
    counters = sup.query("counters")
    assert counters["start_timeouts"] >= len(liar_had)
    row = sup.ctl("tasks", "--task", sorted(liar_had)[0])["tasks"][0]
    assert row["excluded"]["greedy"] == "not started within 3 s"


def test_a_flood_of_made_up_ids_leaves_the_supervisor_answering_and_goes_away(
        procs: Procs, peers: Peers, tmp_path: Path) -> None:
    sup = Supervisor(procs, tasks_file(tmp_path, 4), warmup=1, forget_after=3600)
    worker(procs, sup, "w1", tmp_path)
    wait_until(lambda: (s := answers(sup, "status")) and s["tasks_running"] == 4, timeout=30,
               what="running")
    flood = peers.peer(sup.endpoint, b"flood")
    latencies = []
    for i in range(10_000):
        flood.report(f"ghost-{i:05d}")
        if i % 1000 == 999:
            t0 = time.monotonic()
            assert sup.query("status")["workers_total"] >= 1
            latencies.append(time.monotonic() - t0)
    counters = wait_until(lambda: (lambda c: c if c["fresh_ids_refused"] + c["joins"] >= 10_001
                                   else None)(sup.query("counters")),
                          what="every fresh id seen")
    status = sup.query("status")
    assert status["workers_total"] <= 1 + 64, status
    assert counters["fresh_ids_refused"] >= 10_000 - 64
    print(f"\nstatus during the flood answered in {max(latencies) * 1000:.0f} ms at most")
    # The ghosts never held a task: gone one lease + margin after they went silent.
    wait_until(lambda: (s := answers(sup, "status")) and s["workers_total"] == 1, timeout=30,
               what="the ghosts forgotten")
    kinds = [e["kind"] for e in sup.query("events", limit=5000)["events"]]
    assert "timeout" not in kinds
    logged = [json.loads(line) for line in sup.proc.output().splitlines()
              if line.startswith("{")]
    assert not [e for e in logged if "ghost" in json.dumps(e) and e["level"] != "debug"]


def test_control_replies_are_bounded_and_corralctl_never_chokes_on_them(
        procs: Procs, peers: Peers, tmp_path: Path) -> None:
    sup = Supervisor(procs, tasks_file(tmp_path, 2), warmup=1)
    wait_until(lambda: answers(sup, "status"), timeout=30, what="the supervisor answers")
    sock = peers.dealer(sup.control)
    huge = "x" * (15 * 1024 * 1024)
    for i, req in enumerate([ControlRequest(1, "drain", {"worker": huge}),
                             ControlRequest(2, "drain", {"worker": "y" * 5000}),
                             ControlRequest(3, "drain", {"worker": "z" * 300})]):
        frame = codec.encode(req) if i else codec.encode(req)[:15 * 1024 * 1024]
        sock.send_multipart([b"", frame])
        assert sock.poll(10_000), "a reply"
        reply_frame = sock.recv_multipart()[-1]
        assert len(reply_frame) < 2048, len(reply_frame)
        reply = codec.decode_as(reply_frame, ControlReply)
        assert reply.error is not None and reply.error.code == "bad_request", reply
    for name in ("w" * 5000, "v" * 300):
        out = subprocess.run([str(BIN / "corralctl"), "--control", sup.control, "drain", name],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 1 and "bad_request" in out.stderr, out.stderr
        assert "bad reply" not in out.stderr and len(out.stderr) < 500
