"""Instruction sets on their way to workers: sent at once when nothing waits, else queued and
paced; the peers a send found gone are handed back by `take_gone` (the daemon steps the core
with them), never through a call back into the daemon.

Sets leave at most `MAX_SENDS` a loop turn, so a burst (a warm-up that resets 100,000
workers, a reset in parts) never starves the receive loop; the queue keeps each worker's sets
in order, and the core's resends cover what a full peer queue dropped. The usual case, a
batch's renewals with nothing queued, skips the queue.
"""

from __future__ import annotations

from collections import deque

import zmq

from corral.common.wire import codec

from .counters import IoCounters
from .events import Send

NOBLOCK = int(zmq.NOBLOCK)
SNDMORE = int(zmq.SNDMORE)
# pyzmq's Socket.send wraps the backend's in Python (routing ids, groups: not ours); the
# backend's own is ~0.4 us a message cheaper, and the supervisor sends 20,000
# renewals a second at 100,000 workers.
_SEND = zmq.backend.Socket.send
MAX_SENDS = 5000  # messages sent per loop turn; the rest wait for the next turn


class Outbox:
    def __init__(self, router: zmq.Socket[bytes], io: IoCounters) -> None:
        self._router = router
        self._io = io
        self.queued: deque[Send] = deque()
        self._gone: list[bytes] = []  # peers a send found gone, not yet taken

    @property
    def waiting(self) -> bool:
        """Something to do on the next turn (sets queued, gone peers to hand back)."""
        return bool(self.queued or self._gone)

    def direct(self, n: int) -> bool:
        """May ``n`` sets (or fewer) leave at once, ahead of nothing?"""
        return not self.queued and n <= MAX_SENDS

    def put(self, a: Send) -> None:
        """Queue a set behind the others (it leaves on a later `flush`)."""
        self.queued.append(a)

    def after_put(self) -> None:
        """After a step's sets were sent or queued: a short queue goes in this turn."""
        if self.queued and len(self.queued) <= MAX_SENDS:
            self.flush()

    def flush(self) -> None:
        """Send what is queued, at most MAX_SENDS."""
        q = self.queued
        for _ in range(min(len(q), MAX_SENDS)):
            self.send(q.popleft())

    def take_gone(self) -> list[bytes]:
        """The peers sends found gone since the last call (each a worker process gone)."""
        gone, self._gone = self._gone, []
        return gone

    def send(self, a: Send) -> None:
        """One set, now."""
        io = self._io
        try:
            # With ROUTER_MANDATORY the first frame decides: unknown peer or full queue
            # raise here, before anything is queued.
            _SEND(self._router, a.identity, NOBLOCK | SNDMORE)
            _SEND(self._router, codec.encode(a.message), NOBLOCK)
            io.messages_out += 1
        except zmq.Again:  # its queue is full: slow; reconciliation resends later
            io.send_failures += 1
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            io.send_failures += 1  # gone; its timeout (or the registry) will tell
            self._gone.append(a.identity)
