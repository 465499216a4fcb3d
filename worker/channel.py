"""The worker's end of the supervisor connection: one DEALER (docs/protocol.md).

Socket options, and why (see NOTES.md "ZeroMQ"):

* ``ROUTING_ID`` = first 200 bytes of the UTF-8 worker id + ``@`` + incarnation in hex: unique
  per process, so a restarted worker never collides with its dead predecessor's connection.
* ``IMMEDIATE=1`` and a small ``SNDHWM``: with the supervisor unreachable a send fails at once
  with ``zmq.Again`` instead of queueing stale reports; the report is dropped (counted) and the
  next one, self-contained, replaces it. Sends use NOBLOCK, so a dead supervisor never blocks.
* ``LINGER=0``: closing never hangs on undeliverable messages (only the very last report gets
  a short, bounded linger in `close`).
* ``MAXMSGSIZE``: a peer cannot make the worker buffer more than one maximal frame.
* ZMTP heartbeats: a half-open TCP connection (the supervisor's host vanished) is dropped and
  reconnected instead of swallowing reports. Reconnecting is libzmq's, with a capped interval.
"""

from __future__ import annotations

import zmq

from corral.common.codec import MAX_FRAME_BYTES, decode, encode
from corral.common.errors import ProtocolError
from corral.common.protocol import Instructions, Refusal, Status

SNDHWM = 8
RECONNECT_IVL_MS = 100
RECONNECT_IVL_MAX_MS = 2000
HEARTBEAT_IVL_MS = 1000
HEARTBEAT_TIMEOUT_MS = 5000
FINAL_LINGER_MS = 500
DRAIN_LIMIT = 1000  # messages per wake-up; the poller returns again at once if more wait


def routing_id(worker_id: str, incarnation: int) -> bytes:
    """
    >>> routing_id("w1", 255)
    b'w1@ff'
    """
    return worker_id.encode("utf-8")[:200] + b"@" + format(incarnation, "x").encode("ascii")


class Channel:
    """Sends `Status`, receives `Instructions` and `Refusal`; counts what it drops."""

    def __init__(
        self, ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, worker_id: str, incarnation: int
    ) -> None:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.ROUTING_ID, routing_id(worker_id, incarnation))
        sock.setsockopt(zmq.IMMEDIATE, 1)
        sock.setsockopt(zmq.SNDHWM, SNDHWM)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES + 1024)  # + the envelope's few bytes
        sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
        sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
        sock.connect(endpoint)
        self.socket = sock
        self.counters: dict[str, int] = dict.fromkeys(
            ("reports_sent", "reports_dropped", "decode_errors", "unexpected_messages"), 0)

    def send(self, status: Status) -> None:
        try:
            self.socket.send(encode(status), zmq.NOBLOCK)
        except zmq.Again:  # unreachable or slow supervisor: the next report replaces this one
            self.counters["reports_dropped"] += 1
        else:
            self.counters["reports_sent"] += 1

    def receive(self) -> list[Instructions | Refusal]:
        """Everything waiting (up to DRAIN_LIMIT), decoded; bad frames are counted and dropped."""
        out: list[Instructions | Refusal] = []
        for _ in range(DRAIN_LIMIT):
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            if len(frames) != 1:
                self.counters["decode_errors"] += 1
                continue
            try:
                msg = decode(frames[0])
            except ProtocolError:
                self.counters["decode_errors"] += 1
                continue
            if isinstance(msg, Instructions | Refusal):
                out.append(msg)
            else:
                self.counters["unexpected_messages"] += 1
        return out

    def close(self) -> None:
        # Bounded: with IMMEDIATE=1 nothing is queued for an unreachable supervisor, so this
        # waits only while the last report is actually being delivered.
        self.socket.close(linger=FINAL_LINGER_MS)
