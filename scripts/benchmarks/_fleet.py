"""Emulated workers that behave like workers, cheaply: for scripts/bench scale.

A few processes each emulate thousands of workers, `PER_SOCKET` of them behind each DEALER by
default (distinct worker ids and incarnations, like the ingest benchmark's senders; not one
for thousands, whose bursts would overflow the supervisor's per-peer send queue, which is sized
for one worker). ``per_socket=1`` gives each its own connection, as a real fleet has: each
costs the supervisor ~27 KB of ZeroMQ buffers and some CPU (docs/operations.md "Sizing"). The
sockets carry a real worker's transport options (`corral.worker.channel.transport_options`),
so they cost the supervisor what a worker's connection does. Unlike those,
each emulated worker applies the instruction sets it is sent — resets, adds, removes, sets in
parts — and reports what it runs with the fencing tokens it was given, so the supervisor sees a
settled fleet and takes its fast path. Reports go out every ``interval`` seconds per worker,
spread evenly, and at once after a change; an unchanged report is its last encoding with the
seq patched in place.

Commands from the parent (a pipe per process): ``kill WORKER`` (it falls silent right after
its next report), ``watch TASKS`` (note when each is first added to some worker), ``traffic``
(bytes in and out, reports, and sets with content applied so far), ``stop``.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import select
import struct
import time
from multiprocessing.connection import Connection
from typing import Any

import zmq

SEQ_MARK = (1 << 24) + 0x5A5A5A  # an encoded seq is always a msgpack uint32: patched in place
# ``applied`` is patched in place too (a renewal changes nothing else in the report): its epoch
# always as a msgpack uint64, its seq as a uint32 (msgpack allows the wider forms).
EPOCH_MARK = (1 << 62) + 0x3C3C3C3C3C3C3C
APPLIED_MARK = (1 << 24) + 0x3C3C3C
PER_SOCKET = 25
LOOP_S = 0.005  # reports go out, and sets are read, in turns this long (a few each)
SWEEP_S = 0.5
NICE = 10


class _Worker:
    __slots__ = ("applied_off", "buf", "id", "inc", "off", "seq", "sets", "sock")

    def __init__(self, wid: str, inc: int) -> None:
        from corral.worker.sets import SetApplier

        self.id, self.inc = wid, inc
        self.sets = SetApplier(inc)  # the real worker's reading of its sets
        self.seq = SEQ_MARK
        self.buf = bytearray()
        self.off = 0
        self.applied_off = 0


def _encode(w: _Worker) -> None:
    from corral.common.wire import codec
    from corral.common.wire.protocol import Status

    st = Status(w.id, w.inc, SEQ_MARK, 1.0, 20.0, w.sets.tokens(),
                applied=(EPOCH_MARK, APPLIED_MARK), lease_held=True)
    raw = codec.encode(st)
    w.buf = bytearray(raw)
    w.off = raw.index(struct.pack(">BI", 0xCE, SEQ_MARK)) + 1
    w.applied_off = raw.index(struct.pack(">BQBI", 0xCF, EPOCH_MARK, 0xCE, APPLIED_MARK)) + 1
    _patch_applied(w)


def _patch_applied(w: _Worker) -> None:
    epoch, seq = w.sets.applied
    struct.pack_into(">QBI", w.buf, w.applied_off, epoch, 0xCE, seq)


def _apply(w: _Worker, msg: Any) -> bool:
    """Apply one set (or part) as a worker does (corral.worker.sets); True when a set with
    content was applied (a worker reports that at once)."""
    out = w.sets.offer(msg)
    if out.whole is None:
        return False
    if not out.changed:
        _patch_applied(w)  # the next periodic report says it applied this renewal
        return False
    return True


def run(endpoint: str, index: int, first: int, count: int, interval: float,
        ctl: Connection, per_socket: int = PER_SOCKET) -> None:
    # The emulated workers stand for other machines: on this small box they run below the
    # supervisor's priority, so they do not take its core (they still get all the CPU it
    # leaves; their own timing is paced, not measured).
    os.nice(NICE)
    from corral.worker.channel import transport_options

    n_socks = (count + per_socket - 1) // per_socket
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, n_socks + 64)
    # One source address per process: loopback has ~28,000 ephemeral ports per address pair.
    here = f"tcp://127.1.{index % 250}.1:0;" if per_socket < PER_SOCKET else "tcp://"
    there = endpoint.removeprefix("tcp://")
    # epoll on the sockets' ZMQ_FDs, not zmq_poll: zmq_poll asks every socket, a thousand of
    # them per process at 100,000 workers, every turn (most of what this process cost).
    ep = select.epoll()
    by_fd: dict[int, Any] = {}
    socks = []
    for k in range(n_socks):
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.IDENTITY, f"fleet-{index}-{k}".encode())
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, 10_000)
        s.setsockopt(zmq.RCVHWM, 10_000)
        transport_options(s)
        s.connect(here + there)
        fd = s.getsockopt(zmq.FD)
        ep.register(fd, select.EPOLLIN)
        by_fd[fd] = s
        socks.append(s)
    from corral.common.errors import ProtocolError
    from corral.common.wire import codec
    from corral.common.wire.protocol import Instructions

    workers = [_Worker(worker_id(first + i), 1000 + first + i) for i in range(count)]
    for i, w in enumerate(workers):
        w.sock = socks[i // per_socket]
    by_inc = {w.inc: w for w in workers}
    for w in workers:
        _encode(w)
    dirty: list[_Worker] = []
    dead: set[str] = set()
    dying: set[str] = set()
    last_report: dict[str, float] = {}
    watched: dict[str, float | None] = {}
    bytes_out = bytes_in = reports = applied = 0
    pack_into, decode_as = struct.pack_into, codec.decode_as
    time.sleep(0.3)
    start = time.monotonic()
    sent = 0
    touched: set[Any] = set()
    # Every socket is read once a sweep (below): with thousands, less often.
    sweep_s = SWEEP_S * max(1.0, len(socks) / 2000)
    next_sweep = start + sweep_s
    while True:
        if ctl.poll():
            cmd, arg = ctl.recv()
            if cmd == "stop":
                break
            if cmd == "kill":
                dying.add(arg)
            elif cmd == "watch":
                watched = dict.fromkeys(arg)
            elif cmd == "traffic":
                ctl.send((bytes_in, bytes_out, reports, applied))
            elif cmd == "result":
                ctl.send((dict(watched), dict(last_report)))
        now = time.monotonic()
        due = int((now - start) / interval * count) - sent
        for _ in range(max(0, due)):
            w = workers[sent % count]
            sent += 1
            if w.id in dead:
                continue
            w.seq += 1
            pack_into(">I", w.buf, w.off, w.seq)
            w.sock.send(w.buf)
            touched.add(w.sock)
            bytes_in += len(w.buf)
            reports += 1
            if w.id in dying:
                dying.discard(w.id)
                dead.add(w.id)
                last_report[w.id] = now
        for w in dirty:  # a change is reported at once, as a worker does
            if w.id in dead:
                continue
            _encode(w)
            w.seq += 1
            pack_into(">I", w.buf, w.off, w.seq)
            w.sock.send(w.buf)
            touched.add(w.sock)
            bytes_in += len(w.buf)
            reports += 1
        dirty = []
        # The FD only signals an edge, and a send may take it (zmq handles its commands then):
        # a socket just sent on is read too, and every socket once a SWEEP_S.
        ready = {by_fd[fd] for fd, _ in ep.poll(0)}
        ready |= touched
        touched = set()
        if now >= next_sweep:
            ready.update(socks)
            next_sweep = now + sweep_s
        for sock in ready:
            try:
                while True:
                    frame = sock.recv(zmq.NOBLOCK)
                    bytes_out += len(frame)
                    try:  # the one-pass decode: sets are all but every frame sent here
                        msg = decode_as(frame, Instructions)
                    except ProtocolError:
                        continue
                    w2 = by_inc.get(msg.incarnation)
                    if w2 is None or w2.id in dead:
                        continue
                    if watched and msg.add and w2.id not in dying:  # sent elsewhere
                        for t in msg.add:
                            if t in watched and watched[t] is None:
                                watched[t] = time.monotonic()
                    if _apply(w2, msg):
                        dirty.append(w2)
                        applied += 1
            except zmq.Again:
                pass
        if not dirty:  # a turn every LOOP_S at most: a few reports and sets each
            pause = LOOP_S - (time.monotonic() - now)
            if pause > 0:
                time.sleep(pause)
    ep.close()
    for s in socks:
        s.close(0)
    ctx.term()


def worker_id(i: int) -> str:
    return f"worker-{i:06d}"


class FleetProcs:
    """The emulating processes, and the parent's side of their pipes."""

    def __init__(self, workers: int, procs: int, interval: float,
                 per_socket: int = PER_SOCKET) -> None:
        self.workers, self.procs, self.interval = workers, procs, interval
        self.per_socket = per_socket
        self._ps: list[Any] = []
        self._pipes: list[Connection] = []
        self._per = workers // procs

    def start(self, endpoint: str) -> None:
        ctx = mp.get_context("spawn")
        for k in range(self.procs):
            first = k * self._per
            count = self._per if k < self.procs - 1 else self.workers - first
            parent, child = ctx.Pipe()
            p = ctx.Process(target=run, args=(endpoint, k, first, count, self.interval, child,
                                              self.per_socket), daemon=True)
            p.start()
            self._ps.append(p)
            self._pipes.append(parent)

    def worker_id(self, i: int) -> str:
        return worker_id(i)

    def _ask(self, cmd: str, arg: Any = None) -> list[Any]:
        for c in self._pipes:
            c.send((cmd, arg))
        return [c.recv() for c in self._pipes] if cmd in ("traffic", "result") else []

    def traffic(self) -> tuple[int, int, int, int]:
        """Bytes in and out, reports, sets with content applied: all so far."""
        got = self._ask("traffic")
        return (sum(g[0] for g in got), sum(g[1] for g in got), sum(g[2] for g in got),
                sum(g[3] for g in got))

    def kill_and_wait(self, victim: str, tasks: list[str], timeout: float) -> float:
        """``victim`` falls silent after its next report; seconds from that report until its
        last task was sent to another worker."""
        self._ask("watch", tasks)
        idx = int(victim.rsplit("-", 1)[1]) // self._per
        self._pipes[min(idx, self.procs - 1)].send(("kill", victim))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(0.25)
            results = self._ask("result")
            last = max((r[1].get(victim, 0.0) for r in results), default=0.0)
            seen: dict[str, float] = {}
            for watched, _ in results:
                for t, at in watched.items():
                    if at is not None:
                        seen[t] = min(at, seen.get(t, at))
            if last and len(seen) == len(tasks):
                return max(seen.values()) - last
        raise RuntimeError(f"{victim}'s tasks were not all re-sent within {timeout:g} s")

    def stop(self) -> None:
        for c in self._pipes:
            with contextlib.suppress(BrokenPipeError, OSError):
                c.send(("stop", None))
        for p in self._ps:
            p.join(10)
            if p.is_alive():
                p.kill()
