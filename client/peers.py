"""The router's connections: one DEALER per worker it sends to, opened on first use and
closed when the worker leaves the map or moves to another address.

Socket options, and why: ``IMMEDIATE=1`` — a send to a worker with no live connection fails
at once (`zmq.Again`) instead of queueing, which is how the router learns that a worker
*refuses connections*; a connection opened a moment ago gets up to ``connect_wait`` to come
up first. ``SNDHWM``/``RCVHWM`` bound what queues per worker; ``LINGER=0`` never blocks a
close; ZMTP heartbeats drop a half-open connection (a vanished host) so it counts as refusing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import zmq

from corral.common.wire import codec

NOBLOCK = int(zmq.NOBLOCK)
HWM = 1000
HEARTBEAT_IVL_MS = 1000
HEARTBEAT_TIMEOUT_MS = 5000


class Peer:
    __slots__ = ("address", "opened_at", "socket", "worker")

    def __init__(self, worker: str, address: str, socket: zmq.Socket[Any], now: float) -> None:
        self.worker = worker
        self.address = address
        self.socket = socket
        self.opened_at = now


class Peers:
    def __init__(self, ctx: zmq.Context[Any], clock: Callable[[], float],
                 connect_wait: float) -> None:
        self._ctx = ctx
        self._clock = clock
        self._connect_wait = connect_wait
        self._open: dict[str, Peer] = {}

    def __len__(self) -> int:
        return len(self._open)

    def get(self, worker: str, address: str) -> Peer:
        """The connection to ``worker`` at ``address``, opened (or re-opened) if needed."""
        peer = self._open.get(worker)
        if peer is not None and peer.address == address:
            return peer
        if peer is not None:
            peer.socket.close(linger=0)
        sock = self._ctx.socket(zmq.DEALER)
        for opt, value in ((zmq.LINGER, 0), (zmq.IMMEDIATE, 1), (zmq.SNDHWM, HWM),
                           (zmq.RCVHWM, HWM), (zmq.MAXMSGSIZE, codec.MAX_FRAME_BYTES + 1024),
                           (zmq.RECONNECT_IVL, 100), (zmq.RECONNECT_IVL_MAX, 2000),
                           (zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS),
                           (zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)):
            sock.setsockopt(opt, value)
        sock.connect(address)
        peer = self._open[worker] = Peer(worker, address, sock, self._clock())
        return peer

    def send(self, peer: Peer, frame: bytes, deadline: float) -> bool:
        """Send without blocking; False if the worker has no live connection (refusing). A
        fresh connection is given until ``opened_at + connect_wait`` (and the deadline)."""
        try:
            peer.socket.send(frame, NOBLOCK)
            return True
        except zmq.Again:
            pass
        wait = min(peer.opened_at + self._connect_wait, deadline) - self._clock()
        if wait <= 0 or not peer.socket.poll(int(wait * 1000) + 1, zmq.POLLOUT):
            return False
        try:
            peer.socket.send(frame, NOBLOCK)
            return True
        except zmq.Again:
            return False

    def retain(self, addresses: Mapping[str, str]) -> None:
        """Close the connections to workers not in ``addresses`` or no longer at theirs."""
        for worker, peer in list(self._open.items()):
            if addresses.get(worker) != peer.address:
                peer.socket.close(linger=0)
                del self._open[worker]

    def close(self) -> None:
        self.retain({})
