"""Bad input never takes a daemon down: ≥ 100,000 malformed frames at the supervisor's worker and
control endpoints while real workers keep reporting, and ≥ 100,000 at a real worker's socket
from a fake supervisor. Every drop is counted (exactly), no lease renewal is missed, memory stays
bounded. Frames go out in bursts with blocking sends, so none is lost on the way (badframes.py
makes them)."""

from __future__ import annotations

import contextlib
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from corral.common.wire import codec
from corral.common.wire.protocol import (
    ControlRequest,
    Instructions,
    Refusal,
    Status,
    WorkerState,
)

from ..support import Proc, wait_until
from .badframes import (
    BURST,
    FRAMES,
    RSS_GROWTH_LIMIT_KIB,
    dealer,
    glances,
    huge_list,
    journal_events,
    log_events,
    malformed,
    refused,
    rss_kib,
    send_all,
)
from .procs import BIN, Procs, Supervisor

pytestmark = pytest.mark.e2e

LEASE, REPORT = 3.0, 0.5  # the supervisor's lease (procs.Supervisor), the workers' interval


# -- the supervisor ------------------------------------------------------------------------------


@pytest.fixture()
def fleet(procs: Procs, tmp_path: Path) -> Iterator[tuple[Supervisor, list[Proc]]]:
    tasks = tmp_path / "tasks.txt"
    tasks.write_text("".join(f"task-{i:02d}\n" for i in range(12)))
    sup = Supervisor(procs, f"file:{tasks}", expect_workers=3, warmup=5)
    workers = [procs.start(w, [str(BIN / "corral-worker"), "run", "--supervisor", sup.endpoint,
                               "--id", w, "--handler", "log", "--journal",
                               str(tmp_path / f"{w}.journal"), "--report-interval", "0.5",
                               "--drain-timeout", "1"])
               for w in ("w1", "w2", "w3")]
    wait_until(lambda: sup.query("status")["tasks_assigned"] == 12
               and all(w["running"] == 4 for w in sup.query("workers")["workers"]),
               timeout=30, what="every task running")
    yield sup, workers


@pytest.mark.timeout(150)
def test_supervisor_survives_100k_malformed_frames_and_keeps_renewing_leases(
        fleet: tuple[Supervisor, list[Proc]], tmp_path: Path) -> None:
    sup, workers = fleet
    rng = random.Random(7)
    before = sup.query("counters")
    w1 = next(w for w in sup.query("workers")["workers"] if w["id"] == "w1")
    incarnation = int(w1["incarnation"], 16)
    valid = codec.encode(Status("w9", 1, 1, 1.0, 10.0, {"a": 1}, WorkerState.READY))
    # What reaches the worker endpoint, by the counter that must count it.
    decode = refused(malformed(rng, valid, "status", 2_000))
    decode += [codec.encode(m) for m in (  # valid messages of kinds a worker never sends
        Instructions(1, 1, 1, 5.0, 1, 1.0), Refusal(1, 1, "x", "y"), ControlRequest(1, "status"))]
    # A frame whose fields pass the hot path's first read (`glance_status`: the task maps left
    # encoded) is refused when its maps are read, or dropped before that as one more new id
    # from a connection that brought too many (--fresh-ids): counted there, not as decode errors.
    late = [f for f in decode if glances(f)]
    decode = [f for f in decode if not glances(f)]
    multi = [[b"a", b"b"], [valid, valid], [b"", b"", b""]]
    impostor = [codec.encode(Status("w1", incarnation, 2**62 + i, 1.0, 10.0, {},
                                    WorkerState.READY)) for i in range(1_000)]
    control = [codec.encode(ControlRequest(i, f"no-such-verb-{i % 9}")) for i in range(200)]
    control += [codec.encode(ControlRequest(i, v, a)) for i, (v, a) in enumerate(
        [("drain", {}), ("drain", {"worker": "nobody"}), ("status", {"bogus": 1}),
         ("drain", {"worker": 5})] * 50)]
    control += refused(malformed(rng, codec.encode(ControlRequest(1, "status")), "status", 400),
                       accept=(Status,))

    ctx = zmq.Context()
    junk = dealer(ctx, sup.endpoint, b"junk")
    imp = dealer(ctx, sup.endpoint, b"w1@impostor")
    ctl = dealer(ctx, sup.control)
    ctl.setsockopt(zmq.RCVHWM, 0)  # keep every reply: each one is counted
    rss0 = rss_kib(sup.proc.pid)
    peak = rss0
    sent = {"decode": 0, "late": 0, "multi": 0, "impostor": 0, "control": 0}
    replies = 0
    t0 = time.monotonic()
    try:
        while sum(sent.values()) < FRAMES:
            # One burst: mostly undecodable frames, some multipart, impostors, control junk.
            chunk = [decode[(sent["decode"] + i) % len(decode)] for i in range(BURST // 2)]
            send_all(junk, chunk)
            sent["decode"] += len(chunk)
            chunk = [late[(sent["late"] + i) % len(late)] for i in range(BURST // 20)]
            send_all(junk, chunk)
            sent["late"] += len(chunk)
            for i in range(BURST // 10):
                junk.send_multipart(multi[i % len(multi)])
            sent["multi"] += BURST // 10
            start = sent["impostor"] % len(impostor)
            chunk = impostor[start:start + BURST // 10]
            send_all(imp, chunk)
            sent["impostor"] += len(chunk)
            chunk = [control[(sent["control"] + i) % len(control)] for i in range(BURST // 4)]
            send_all(ctl, chunk)
            sent["control"] += len(chunk)
            while ctl.poll(0):
                ctl.recv_multipart()
                replies += 1
            peak = max(peak, rss_kib(sup.proc.pid))
        for f in (huge_list("status"), huge_list("status")):
            junk.send(f)
        sent["decode"] += 2
        flood_s = time.monotonic() - t0

        def counted() -> dict[str, Any] | None:
            c: dict[str, Any] = sup.query("counters")
            return c if c["decode_errors"] - before["decode_errors"] >= sent["decode"] else None

        after = wait_until(counted, timeout=60, what="every frame counted")
        wait_until(lambda: sup.query("counters")["control_errors"]
                   - before["control_errors"] >= sent["control"], timeout=60, what="control")
        while ctl.poll(1000):  # the replies still on their way
            ctl.recv_multipart()
            replies += 1
        after = sup.query("counters")
        # A frame over ZMQ_MAXMSGSIZE is refused by libzmq itself (the connection is dropped
        # before the daemon sees a byte of it); one just under it reaches the codec's check.
        big = dealer(ctx, sup.endpoint, b"big")
        big.send(b"\0" * (codec.MAX_FRAME_BYTES + 4096))
        big.send(b"\0" * (codec.MAX_FRAME_BYTES + 1))
        wait_until(lambda: sup.query("counters")["decode_errors"] > after["decode_errors"],
                   timeout=30, what="the frame just over the codec's limit")
        big.close(0)
        # A report under w1's id with another incarnation: taken for a restart, then refused
        # as a duplicate once the real w1 reports again; w1 must keep its tasks and lease.
        probe = dealer(ctx, sup.endpoint, b"w1@probe")
        probe.send(codec.encode(Status("w1", incarnation + 1, 1, 1.0, 10.0, {},
                                       WorkerState.READY)))
        wait_until(lambda: sup.query("counters")["duplicate_ids"] == 1, timeout=20,
                   what="the duplicate refused")
        # A renewal missed until now would show once the lease it left a worker with has run
        # out: every worker's report sent after that (it arrives a report interval later at
        # the latest) must say it holds its lease.
        horizon = time.monotonic() + LEASE + REPORT
        wait_until(lambda: {"w1", "w2", "w3"} <= (heard := sup.heard_since(horizon)).keys()
                   and all(r["lease_held"] for r in heard.values()), timeout=30,
                   what="every worker's report from after its lease would have lapsed")
        probe.close(0)
        final = sup.query("counters")
        rss1 = rss_kib(sup.proc.pid)
    finally:
        for s in (junk, imp, ctl):
            s.close(0)
        ctx.term()

    delta = {k: final[k] - before[k] for k in ("decode_errors", "bad_frames", "impostor_reports",
                                               "control_errors", "lease_expiries",
                                               "bad_task_maps", "fresh_ids_refused")}
    print(f"\nsupervisor: {sum(sent.values())} frames in {flood_s:.1f} s {sent}; "
          f"counted {delta}; control replies {replies}; "
          f"RSS {rss0} KiB -> peak {peak} -> {rss1} KiB")
    assert sum(sent.values()) >= FRAMES
    assert sup.proc.alive()
    assert after["decode_errors"] - before["decode_errors"] == sent["decode"]
    assert delta["decode_errors"] == sent["decode"] + 1  # + the one just over the limit
    assert delta["bad_frames"] == sent["multi"]
    assert delta["bad_task_maps"] + delta["fresh_ids_refused"] == sent["late"]
    assert delta["impostor_reports"] == sent["impostor"]
    assert delta["control_errors"] == sent["control"]
    # Replies to a client that sends faster than it reads are dropped at the control socket's
    # send queue (64), uncounted: a flooding client cannot make the daemon buffer for it.
    assert 0 < replies <= sent["control"]
    assert delta["lease_expiries"] == 0
    assert rss1 - rss0 < RSS_GROWTH_LIMIT_KIB and peak - rss0 < RSS_GROWTH_LIMIT_KIB
    # The real workers never noticed: leases held throughout, no task ever stopped.
    for w in workers:
        assert w.alive()
        events = [e.get("event") for e in log_events(w.log)]
        assert "lease lost: no renewal from the supervisor" not in events, w.output()
    for name in ("w1", "w2", "w3"):
        assert all(e == "start" for e, _ in journal_events(tmp_path / f"{name}.journal"))
    rows = sup.query("workers")["workers"]
    assert sorted(r["id"] for r in rows) == ["w1", "w2", "w3"]
    assert all(r["active"] and r["lease_held"] and r["running"] == 4 for r in rows), rows
    assert sup.query("status")["tasks_pending"] == 0


# -- the worker ----------------------------------------------------------------------------------


class FakeSupervisor:
    """A ROUTER that answers a real worker's reports with instruction sets it numbers, and
    sends it whatever else a test wants — every frame delivered (ROUTER_MANDATORY, retried)."""

    def __init__(self, ctx: zmq.Context[Any]) -> None:
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.ROUTER_HANDOVER, 1)  # as the real one: reconnects get in
        self.sock.setsockopt(zmq.SNDHWM, 10_000)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.rid = b""
        self.seq = 0
        self.last: Status | None = None
        self.patience = 30.0  # seconds `send` retries a full or departed peer

    def pump(self, timeout_ms: int = 0) -> None:
        """Take the reports waiting; answer the newest one (renewing the lease)."""
        self._take(timeout_ms)
        if self.last is not None:
            self.answer()

    def _take(self, timeout_ms: int) -> None:
        while self.sock.poll(timeout_ms):
            timeout_ms = 0
            self.rid, frame = self.sock.recv_multipart()
            msg = codec.decode(frame)
            assert isinstance(msg, Status)
            self.last = msg

    def answer(self, **fields: Any) -> None:
        assert self.last is not None
        self.seq += 1
        self.send([codec.encode(Instructions(7, self.seq, self.last.incarnation, 5.0,
                                             self.last.seq, self.last.sent_at, **fields))])

    def send(self, frames: list[bytes]) -> None:
        deadline = time.monotonic() + self.patience
        while True:
            try:
                self.sock.send_multipart([self.rid, *frames], zmq.NOBLOCK)
                return
            except zmq.ZMQError as exc:  # queue full (EAGAIN), or reconnecting
                if exc.errno not in (zmq.EAGAIN, zmq.EHOSTUNREACH):
                    raise
                assert time.monotonic() < deadline, "the worker stopped reading"
                self._take(5)


@pytest.mark.timeout(120)
def test_worker_survives_100k_malformed_frames_and_counts_every_drop(
        procs: Procs, tmp_path: Path) -> None:
    ctx = zmq.Context()
    sup = FakeSupervisor(ctx)
    journal = tmp_path / "w1.journal"
    proc = procs.start("w1", [str(BIN / "corral-worker"), "run", "--supervisor", sup.endpoint,
                              "--id", "w1", "--handler", "log", "--journal", str(journal),
                              "--report-interval", "0.2", "--drain-timeout", "1"])
    try:
        wait_until(lambda: (sup.pump(500), sup.last)[1], timeout=60,
                   what="the worker's first report")
        sup.answer(reset=True, add=("a", "b"))
        wait_until(lambda: (sup.pump(50), sup.last and set(sup.last.running) == {"a", "b"})[1],
                   what="the worker runs a and b")
        inc = sup.last.incarnation
        rng = random.Random(11)
        valid = codec.encode(Instructions(7, 1, inc, 5.0, 1, 1.0, add=("x",)))
        decode = refused(malformed(rng, valid, "instructions", 2_000))
        decode.append(huge_list("instructions"))
        multi = [[b"a", b"b"], [valid, valid]]
        foreign = [codec.encode(Instructions(7, 10**6 + i, inc + 1, 5.0, 1, 1.0, add=("x",)))
                   for i in range(50)]
        stale = [codec.encode(Instructions(7, 1, inc, 5.0, 1, 1.0, add=("x",)))]  # seq 1 again
        refusals = [codec.encode(Refusal(7, inc + 1, "duplicate_id", "not you"))]
        unexpected = [codec.encode(m) for m in (
            Status("s", 1, 1, 1.0, 1.0, {}), ControlRequest(1, "status"))]
        categories = {"decode": decode, "multi": multi, "foreign": foreign, "stale": stale,
                      "refusals": refusals, "unexpected": unexpected}
        share = {"decode": 0.6, "multi": 0.1, "foreign": 0.1, "stale": 0.1, "refusals": 0.05,
                 "unexpected": 0.05}
        sent = dict.fromkeys(categories, 0)
        rss0 = peak = rss_kib(proc.pid)
        t0 = time.monotonic()
        while sum(sent.values()) < FRAMES:
            for name, pool in categories.items():
                for i in range(int(BURST * share[name])):
                    item = pool[(sent[name] + i) % len(pool)]
                    sup.send(item if isinstance(item, list) else [item])
                sent[name] += int(BURST * share[name])
            sup.pump()  # renew its lease between bursts, as a real supervisor would
            peak = max(peak, rss_kib(proc.pid))
        flood_s = time.monotonic() - t0
        end = time.monotonic() + 3.0  # keep it leased while it works through its queue
        while time.monotonic() < end:
            sup.pump(100)
        rss1 = rss_kib(proc.pid)
        assert proc.alive()
        assert sup.last is not None and set(sup.last.running) == {"a", "b"}
        assert sup.last.lease_held
        proc.signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        sup.sock.close(0)
        ctx.term()
    logged = log_events(proc.log)
    stopped = next(e for e in logged if e.get("event") == "worker stopped")
    counted = {k: stopped[k] for k in ("decode_errors", "sets_foreign", "sets_stale",
                                       "refusals_foreign", "unexpected_messages")}
    print(f"\nworker: {sum(sent.values())} frames in {flood_s:.1f} s {sent}; counted "
          f"{counted}; RSS {rss0} KiB -> peak {peak} -> {rss1} KiB")
    assert stopped["decode_errors"] == sent["decode"] + sent["multi"]
    assert stopped["sets_foreign"] == sent["foreign"]
    assert stopped["sets_stale"] == sent["stale"]
    assert stopped["refusals_foreign"] == sent["refusals"]
    assert stopped["unexpected_messages"] == sent["unexpected"]
    assert "lease lost: no renewal from the supervisor" not in [e.get("event") for e in logged]
    assert journal_events(journal)[:2] == [("start", "a"), ("start", "b")]
    assert len(journal_events(journal)) == 4  # stopped once, at the SIGTERM's drain timeout
    assert rss1 - rss0 < RSS_GROWTH_LIMIT_KIB and peak - rss0 < RSS_GROWTH_LIMIT_KIB


@pytest.mark.timeout(60)
def test_worker_reconnects_after_an_oversized_frame(procs: Procs, tmp_path: Path) -> None:
    ctx = zmq.Context()
    sup = FakeSupervisor(ctx)
    proc = procs.start("w1", [str(BIN / "corral-worker"), "run", "--supervisor", sup.endpoint,
                              "--id", "w1", "--handler", "log", "--report-interval", "0.2"])
    try:
        sup.pump(15_000)
        sup.answer(reset=True, add=("a",))
        wait_until(lambda: (sup.pump(50), sup.last and "a" in sup.last.running)[1],
                   what="the worker runs a")
        # Over ZMQ_MAXMSGSIZE: the worker's libzmq drops the connection without delivering
        # the frame (nothing to count, nothing buffered), and gives it up for good (a protocol
        # error); the worker opens its socket again and goes on under a renewed lease.
        before = sup.last.seq  # type: ignore[union-attr]
        sup.send([b"\0" * (codec.MAX_FRAME_BYTES + 4096)])
        sup.last, sup.patience = None, 0.2
        end = time.monotonic() + 8.0  # longer than the 5 s lease
        while time.monotonic() < end:
            with contextlib.suppress(AssertionError):
                sup.pump(100)
        assert sup.last is not None and sup.last.lease_held and "a" in sup.last.running
        assert sup.last.seq > before + 5, "no fresh reports: the worker never came back"
        assert proc.alive()
    finally:
        sup.sock.close(0)
        ctx.term()
