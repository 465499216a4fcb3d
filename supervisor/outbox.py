"""Instruction sets on their way to workers: sent at once when nothing waits, else queued and
paced, with the peers a send found gone handed back to the daemon.

Sets leave at most `MAX_SENDS` a loop turn, so a burst (a warm-up that resets 100,000
workers, a reset in parts) never starves the receive loop; the queue keeps each worker's sets
in order, and the core's resends cover what a full peer queue dropped. The usual case, a
batch's renewals with nothing queued, skips the queue.

One pass at a time (`flush`): what the daemon does about a peer gone — a core step, whose
sets come back here — joins the queue of the pass under way. A pass inside a pass recursed
once per gone peer: the daemon died when a whole fleet disconnected at once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import zmq

from corral.common.wire import codec

from .counters import IoCounters
from .events import Send

NOBLOCK = int(zmq.NOBLOCK)
SNDMORE = int(zmq.SNDMORE)
# pyzmq's Socket.send wraps the backend's in Python (routing ids, groups: not ours); the
# backend's own is ~0.4 us a message cheaper (measured), and the supervisor sends 20,000
# renewals a second at 100,000 workers.
_SEND = zmq.backend.Socket.send
MAX_SENDS = 5000  # messages sent per loop turn; the rest wait for the next turn


class Outbox:
    def __init__(self, router: zmq.Socket[bytes], io: IoCounters,
                 peer_gone: Callable[[bytes], None]) -> None:
        self._router = router
        self._io = io
        self._peer_gone = peer_gone  # the daemon tells the core (`PeerGone`)
        self.queued: deque[Send] = deque()
        self._gone: deque[bytes] = deque()  # peers a send found gone, not yet handed back
        self._sending = False  # a `flush` pass is under way

    @property
    def waiting(self) -> bool:
        """Something to do on the next turn (sets queued, gone peers to hand back)."""
        return bool(self.queued or self._gone)

    def direct(self, n: int) -> bool:
        """May ``n`` sets (or fewer) leave at once, ahead of nothing?"""
        return not self.queued and not self._sending and n <= MAX_SENDS

    def put(self, a: Send) -> None:
        """Queue a set behind the others (it leaves on a later `flush`)."""
        self.queued.append(a)

    def after_put(self) -> None:
        """After a step's sets were sent or queued: peers found gone are handed back, and a
        short queue goes in this turn."""
        if self._gone or (self.queued and len(self.queued) <= MAX_SENDS):
            self.flush()

    def flush(self) -> None:
        """Send what is queued, at most MAX_SENDS, and hand back each peer a send found
        gone."""
        if self._sending:
            return
        self._sending = True
        try:
            q, gone, sent = self.queued, self._gone, 0
            while gone or (q and sent < MAX_SENDS):
                if gone:
                    self._peer_gone(gone.popleft())
                else:
                    self.send(q.popleft())
                    sent += 1
        finally:
            self._sending = False

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
            self._gone.append(a.identity)  # handed back in `flush`
