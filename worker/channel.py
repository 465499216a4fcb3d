"""The worker's end of the supervisor connection: one DEALER (docs/protocol.md).

Socket options, and why (docs/worker.md, "Reports", tells the same for operators):

* ``ROUTING_ID`` = first 200 bytes of the UTF-8 worker id + ``@`` + incarnation in hex: unique
  per process, so a restarted worker never collides with its dead predecessor's connection.
* ``IMMEDIATE=1`` and a small ``SNDHWM``: with the supervisor unreachable a send fails at once
  with ``zmq.Again`` instead of queueing stale reports; the report is dropped (counted) and the
  next one, self-contained, replaces it. Sends use NOBLOCK, so a dead supervisor never blocks.
* ``LINGER=0``: closing never hangs on undeliverable messages (only the very last report gets
  a short, bounded linger in `close`).
* ``MAXMSGSIZE``: a peer cannot make the worker buffer more than one maximal frame.
* No ZMTP heartbeats: a ping a second per worker costs the supervisor more than all the reports
  (docs/operations.md, "Sizing"). The kernel finds a half-open connection instead, at no cost
  between reports: ``TCP_MAXRT`` (Linux's TCP_USER_TIMEOUT) drops a connection whose sent
  report stays unacknowledged for `UNACKED_TIMEOUT_MS` (the supervisor's host vanished, or a
  partition either way: acknowledgements come back on the same path), and TCP keepalive probes
  one that stays idle (which a reporting worker never is). What TCP cannot see (a middlebox
  that acknowledges and holds) the lease does: the loop reopens every connection when it has
  stayed lapsed for half a lease (`Channel.reopen_all`).
* Reconnecting is libzmq's, with a capped interval — except after a protocol error (a frame
  over ``MAXMSGSIZE``, a broken handshake), where libzmq gives the connection up for good. So a
  socket that has taken no report for `REOPEN_AFTER_S` is closed and opened again (same routing
  id): a hostile or broken frame costs the worker a few seconds, not its place in the fleet.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import zmq

from corral.common.errors import ProtocolError
from corral.common.wire.codec import MAX_FRAME_BYTES, decode, encode
from corral.common.wire.protocol import Instructions, Refusal, Status

SNDHWM = 8
RECONNECT_IVL_MS = 100
RECONNECT_IVL_MAX_MS = 2000
UNACKED_TIMEOUT_MS = 5000  # a sent report unacknowledged this long: the connection is dead
KEEPALIVE_IDLE_S, KEEPALIVE_INTVL_S, KEEPALIVE_CNT = 10, 2, 3  # probes after 10 s idle
FINAL_LINGER_MS = 500
DRAIN_LIMIT = 1000  # messages per wake-up; the poller returns again at once if more wait
RETRY_S = 0.05  # how soon a report nobody could take is tried again
REOPEN_AFTER_S = 3.0  # a socket that took no report for this long is opened again


def routing_id(worker_id: str, incarnation: int) -> bytes:
    """
    >>> routing_id("w1", 255)
    b'w1@ff'
    """
    return worker_id.encode("utf-8")[:200] + b"@" + format(incarnation, "x").encode("ascii")


def transport_options(sock: zmq.Socket[bytes]) -> None:
    """How a worker's connection notices it is dead (see the module docstring); also what the
    scale benchmark's emulated workers set, so that they cost the supervisor what workers do."""
    sock.setsockopt(zmq.TCP_MAXRT, UNACKED_TIMEOUT_MS)
    sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
    sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, KEEPALIVE_IDLE_S)
    sock.setsockopt(zmq.TCP_KEEPALIVE_INTVL, KEEPALIVE_INTVL_S)
    sock.setsockopt(zmq.TCP_KEEPALIVE_CNT, KEEPALIVE_CNT)


class Channel:
    """Sends `Status`, receives `Instructions` and `Refusal`; counts what it drops.

    With several supervisors (HA: ``--supervisor tcp://a:7760,tcp://b:7760``) there is one
    DEALER per endpoint — one DEALER connected to several endpoints would round-robin its
    sends — and every report goes to each. Sets are taken from any of them: only the leader
    sends, and a deposed leader's older epoch makes the state machine drop what it sends.
    """

    def __init__(
        self,
        ctx: zmq.Context[zmq.Socket[bytes]],
        endpoints: str | list[str],
        worker_id: str,
        incarnation: int,
        curve: tuple[bytes, bytes, bytes] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ctx = ctx
        self._id = routing_id(worker_id, incarnation)
        self._curve = curve
        self._clock = clock
        self.endpoints = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        self.sockets: list[zmq.Socket[bytes]] = [self._open(e) for e in self.endpoints]
        # Per socket: since when no report got through (None: the last one did).
        self._failing: list[float | None] = [None] * len(self.sockets)
        self.counters: dict[str, int] = dict.fromkeys(
            ("reports_sent", "reports_dropped", "decode_errors", "unexpected_messages",
             "reopened"), 0)
        # A report no supervisor could take (with IMMEDIATE=1 that includes the first one, sent
        # before the connection is up): the loop resends it shortly instead of waiting a whole
        # report interval. Only the latest is kept; it is self-contained.
        self.unsent: list[tuple[zmq.Socket[bytes], bytes]] = []

    def _open(self, endpoint: str) -> zmq.Socket[bytes]:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.ROUTING_ID, self._id)
        sock.setsockopt(zmq.IMMEDIATE, 1)
        sock.setsockopt(zmq.SNDHWM, SNDHWM)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES + 1024)  # + the envelope's bytes
        sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
        transport_options(sock)
        if self._curve is not None:  # CurveZMQ: (the supervisor's public key, ours, our secret)
            sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = self._curve
        sock.connect(endpoint)
        return sock

    def reopen_stale(self) -> list[tuple[zmq.Socket[bytes], zmq.Socket[bytes]]]:
        """Open again every socket that has taken no report for `REOPEN_AFTER_S`; returns
        (old, new) pairs, so the loop can poll the new ones instead."""
        now = self._clock()
        return [self._reopen(i, now) for i, since in enumerate(self._failing)
                if since is not None and now - since >= REOPEN_AFTER_S]

    def reopen_all(self) -> list[tuple[zmq.Socket[bytes], zmq.Socket[bytes]]]:
        """Open every socket again (the lease lapsed: whatever path the reports take, no
        answer came back on it); returns (old, new) pairs, as `reopen_stale`."""
        now = self._clock()
        return [self._reopen(i, now) for i in range(len(self.sockets))]

    def _reopen(self, i: int, now: float) -> tuple[zmq.Socket[bytes], zmq.Socket[bytes]]:
        old = self.sockets[i]
        old.close(linger=0)
        self.sockets[i] = self._open(self.endpoints[i])
        self._failing[i] = now  # give the new connection its own while
        self.unsent = [(self.sockets[i] if s is old else s, f) for s, f in self.unsent]
        self.counters["reopened"] += 1
        return old, self.sockets[i]

    def send(self, status: Status) -> None:
        frame = encode(status)
        self.unsent = []
        for sock in self.sockets:
            self._send(sock, frame)

    def resend(self) -> None:
        """Try the latest undelivered report again (the loop calls this ~every RETRY_S)."""
        pending, self.unsent = self.unsent, []
        for sock, frame in pending:
            self._send(sock, frame, retry=True)

    def _send(self, sock: zmq.Socket[bytes], frame: bytes, retry: bool = False) -> None:
        i = self.sockets.index(sock)
        try:
            sock.send(frame, zmq.NOBLOCK)
        except zmq.Again:  # unreachable or slow supervisor: the next report replaces this one
            if not retry:
                self.counters["reports_dropped"] += 1  # once per report, not per attempt
            self.unsent.append((sock, frame))
            if self._failing[i] is None:
                self._failing[i] = self._clock()
        else:
            self.counters["reports_sent"] += 1
            self._failing[i] = None

    def receive(self) -> list[Instructions | Refusal]:
        """Everything waiting (up to DRAIN_LIMIT per socket), decoded; bad frames are counted
        and dropped."""
        out: list[Instructions | Refusal] = []
        for sock in self.sockets:
            for _ in range(DRAIN_LIMIT):
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
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
        for sock in self.sockets:
            sock.close(linger=FINAL_LINGER_MS)
