"""DEALER sockets playing workers against a real supervisor, following docs/protocol.md.

One background thread owns every socket (ZeroMQ sockets are not thread-safe); tests change a
fake worker's behaviour through plain attributes (``silent``, ``state``, ``max_load``). A fake
worker applies its sets as the real one does: `corral.worker.sets.SetApplier`, the worker's own
reading of a set (parts, stale sets, remove over add, tokens).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import zmq

from corral.common.wire import codec
from corral.common.wire.protocol import Instructions, Refusal, Status, WorkerState
from corral.worker.sets import SetApplier, unwanted


@dataclass
class FakeWorker:
    id: str
    max_load: float = 10
    incarnation: int = 1
    state: WorkerState = WorkerState.READY
    silent: bool = False
    lease_until: float = 0.0
    refused: str | None = None
    seq: int = 0
    received: int = 0
    socks: list[Any] = field(default_factory=list)
    next_report: float = 0.0
    applied_from: list[tuple[float, str, int]] = field(default_factory=list)  # (t, endpoint, epoch)
    lapses: int = 0
    changes: int = 0  # tasks started or stopped after the first placement
    sets: SetApplier = field(init=False)
    reset_seq: dict[int, int] = field(default_factory=dict)  # epoch -> our seq at its reset
    answered: tuple[int, int] = (0, 0)  # (epoch, our report's seq) the last set answered
    starts: list[tuple[float, str, int]] = field(default_factory=list)  # (t, task, token)

    def __post_init__(self) -> None:
        self.sets = SetApplier(self.incarnation)

    @property
    def running(self) -> dict[str, int]:
        """task -> the token it runs under."""
        return self.sets.tokens()

    @property
    def applied(self) -> tuple[int, int]:
        return self.sets.applied

    def lose_lease(self) -> None:
        """Its lease lapsed (--on-lease-loss stop): it stops every task."""
        self.sets.held.clear()
        self.lapses += 1

    @property
    def identity(self) -> bytes:
        return f"{self.id}@{self.incarnation:x}".encode()

    def status(self, now: float) -> bytes:
        self.seq += 1
        return codec.encode(Status(self.id, self.incarnation, self.seq, now, self.max_load,
                                   dict(self.running), self.state, applied=self.applied,
                                   lease_held=now < self.lease_until))

    def apply(self, msg: Instructions | Refusal) -> bool:
        """Take one frame; True when it changed something (reported at once)."""
        self.received += 1
        if isinstance(msg, Refusal):
            self.refused = msg.reason
            return True
        had = bool(self.sets.held)
        out = self.sets.offer(msg)
        if out.taken:  # a set or a part: it answers one of our reports
            self.lease_until = max(self.lease_until, msg.answers_sent_at + msg.lease)
        if out.whole is not None:
            self.answered = (out.whole.epoch, out.whole.answers_seq)
            if out.whole.reset:
                self.reset_seq.setdefault(out.whole.epoch, self.seq)
        if had:
            self.changes += len(out.started) + len(out.stopped)
        now, tokens = time.monotonic(), self.running
        self.starts += [(now, t, tokens[t]) for t in out.started]
        return out.changed

    def settled(self, epoch: int) -> bool:
        """The supervisor of ``epoch`` has answered a report of ours that showed its reset
        applied (and we applied the answer): whatever it makes of what we run, it has said."""
        return epoch in self.reset_seq and self.answered[0] == epoch \
            and self.answered[1] > self.reset_seq[epoch]


class Fleet:
    """Fake workers reporting to one supervisor, or to several (HA: one DEALER each); from
    inside a network namespace when given one (its thread enters it before making a socket).
    Every frame a worker receives is recorded with what became of it (`outcomes`)."""

    def __init__(self, endpoint: str | list[str], interval: float = 0.5,
                 netns: str | None = None) -> None:
        self.endpoints = [endpoint] if isinstance(endpoint, str) else list(endpoint)
        self.interval = interval
        self.netns = netns
        self._outcomes: list[tuple[float, str, str]] = []  # (t, endpoint, applied | why not)
        self.workers: list[FakeWorker] = []
        self._pending: list[FakeWorker] = []
        self._received: dict[str, int] = dict.fromkeys(self.endpoints, 0)  # frames, per endpoint
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def add(self, w: FakeWorker) -> FakeWorker:
        with self._lock:
            self._pending.append(w)
        return w

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def every(self, pred: Callable[[FakeWorker], bool]) -> bool:
        """Whether ``pred`` holds for every worker now."""
        with self._lock:
            return all(pred(w) for w in self.workers)

    def received_from(self, endpoint: str) -> int:
        """Frames received from ``endpoint`` so far (by every worker)."""
        with self._lock:
            return self._received[endpoint]

    def outcomes(self, endpoint: str, since: float) -> list[str]:
        """What became of each frame from ``endpoint`` received at ``since`` or later:
        "applied", "refusal", or why it was dropped ("sets_stale", "sets_foreign")."""
        with self._lock:
            return [o for t, ep, o in self._outcomes if ep == endpoint and t >= since]

    def owners(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        with self._lock:
            for w in self.workers:
                if w.refused is None:
                    for t in list(w.running):
                        out.setdefault(t, []).append(w.id)
        return out

    def _run(self) -> None:
        if self.netns is not None:
            from chaostools.netns import enter

            enter(self.netns)  # this thread, and the context's I/O threads it starts
        ctx = zmq.Context()
        poller = zmq.Poller()
        owner: dict[Any, tuple[FakeWorker, str]] = {}
        try:
            while not self._stop.is_set():
                with self._lock:
                    for w in self._pending:
                        for endpoint in self.endpoints:
                            s = ctx.socket(zmq.DEALER)
                            s.setsockopt(zmq.IDENTITY, w.identity)
                            s.setsockopt(zmq.LINGER, 0)
                            s.setsockopt(zmq.IMMEDIATE, 1)
                            s.connect(endpoint)
                            w.socks.append(s)
                            owner[s] = (w, endpoint)
                            poller.register(s, zmq.POLLIN)
                        self.workers.append(w)
                    self._pending.clear()
                now = time.monotonic()
                with self._lock:
                    for w in self.workers:
                        if w.refused is None and now >= w.lease_until and w.sets.held:
                            w.lose_lease()
                        if not w.silent and w.refused is None and now >= w.next_report:
                            w.next_report = now + self.interval
                            frame = w.status(now)
                            for s in w.socks:
                                with contextlib.suppress(zmq.Again):
                                    s.send(frame, zmq.NOBLOCK)
                for sock, _ in poller.poll(20):
                    try:
                        frame = sock.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        continue
                    with self._lock:
                        w, endpoint = owner[sock]
                        self._received[endpoint] += 1
                        if w.silent:
                            continue
                        msg = codec.decode(frame)
                        why = "refusal" if isinstance(msg, Refusal) else unwanted(
                            msg, w.incarnation, w.applied)  # type: ignore[arg-type]
                        self._outcomes.append((time.monotonic(), endpoint, why or "applied"))
                        before = w.applied
                        changed = w.apply(msg)  # type: ignore[arg-type]
                        if w.applied != before:
                            w.applied_from.append((time.monotonic(), endpoint, w.applied[0]))
                        if changed:
                            w.next_report = 0.0  # report at once after a change
        finally:
            for w in self.workers:
                for s in w.socks:
                    s.close(linger=0)
            ctx.term()
