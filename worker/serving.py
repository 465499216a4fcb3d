"""Request serving: the worker's ROUTER at ``--serve``, with the ownership double-check
(docs/routing.md, "Serving").

Each request, drained with NOBLOCK (at most DRAIN_LIMIT per wake-up), is answered at once:

1. a frame that does not decode is counted and dropped (without an id there is no one to
   answer; the client's timeout tells it);
2. a request for a task the worker does not own *when it arrives* gets ``not_owner`` and the
   handler does not run (``owns``: the task runs here under a valid lease);
3. ``serve(task, body)`` runs; an exception becomes an ``error`` reply;
4. ownership is checked *again*, with the clock read after the handler: if the task was lost
   meanwhile (the lease ran out while it served), the result is withheld — ``abandon`` lets
   the handler drop or roll it back — and the client gets ``not_owner``;
5. the reply carries the worker's load report (`LoadMeter`), its assignment version and the
   lame-duck flag (set unless the worker is ``ready``: draining, prewarming or stopping).

Sends never block: a reply whose client has gone or cannot take it is dropped and counted.

Lifecycle::

    serving -> closing   the agent is exiting (`close`): whatever is queued or still arrives is
                         answered ``not_owner`` until nothing came for QUIET_S (at most
                         LINGER_S), so clients with a stale map retry elsewhere at once
    closing -> closed    the socket is closed
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import msgspec
import zmq

from corral.common.balancer.loadmeter import LoadMeter
from corral.common.errors import ConfigError, ProtocolError
from corral.common.wire import codec
from corral.common.wire.protocol import (
    REPLY_ERROR,
    REPLY_NOT_OWNER,
    REPLY_OK,
    Reply,
    ReplyCode,
    Request,
    Status,
)

from .state import Phase, WorkerMachine

NOBLOCK = int(zmq.NOBLOCK)
SNDMORE = int(zmq.SNDMORE)
RCVMORE = int(zmq.RCVMORE)
EVENTS = int(zmq.EVENTS)
POLLIN = int(zmq.POLLIN)
DRAIN_LIMIT = 1000  # requests per wake-up; the supervisor channel gets its turn in between
LINGER_S = 1.0
QUIET_S = 0.2
FINAL_LINGER_MS = 200  # to flush the last replies when the socket closes
METER_WIDTH_S = 0.5  # load report: 4 buckets of 0.5 s, the last 2 s
METER_BUCKETS = 4


@dataclasses.dataclass(frozen=True)
class Service:
    """The handler's serving methods: ``serve`` (required) and ``abandon`` (optional)."""

    serve: Callable[[str | None, Any], Any]
    abandon: Callable[[str, Any, Any], Any] | None = None

    @classmethod
    def of(cls, handler: object) -> Service:
        serve = getattr(handler, "serve", None)
        if not callable(serve):
            raise ConfigError("serve", f"{type(handler).__name__} has no serve(task, request) "
                                       "method, which --serve needs")
        abandon = getattr(handler, "abandon", None)
        return cls(serve, abandon if callable(abandon) else None)


def _why(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"[: codec.MAX_TEXT_CHARS]


class Server:
    """The serving socket; `drain` answers what is waiting. Counters in ``counters``."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str, advertise: str | None,
                 service: Service, machine: WorkerMachine, clock: Callable[[], float]) -> None:
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a departed client raises: count, move on
        sock.setsockopt(zmq.MAXMSGSIZE, codec.MAX_FRAME_BYTES + 1024)
        try:
            sock.bind(endpoint)
        except zmq.ZMQError as exc:
            sock.close(0)
            raise ConfigError("serve", f"cannot bind {endpoint}: {exc.strerror}") from None
        self.socket = sock
        self.advertise = advertise or endpoint
        self._service = service
        self._machine = machine
        self._clock = clock
        self._closing = False
        self.meter = LoadMeter(METER_WIDTH_S, METER_BUCKETS, clock())
        self.counters: dict[str, int] = dict.fromkeys(
            ("requests", "served", "serve_errors", "not_owner", "abandoned", "bad_requests",
             "replies_dropped"), 0)

    # -- the hot path ----------------------------------------------------------------------

    def drain(self) -> int:
        """Answer every waiting request (up to DRAIN_LIMIT); returns how many.

        Between messages it asks the socket whether more wait (EVENTS) rather than calling
        recv until it fails: a failed NOBLOCK recv raises, which costs more than the check."""
        recv, get, counters = self.socket.recv, self.socket.get, self.counters
        n = 0
        while n < DRAIN_LIMIT:
            try:
                identity = recv(NOBLOCK)
                frame = recv(NOBLOCK)  # a ROUTER message arrives whole: identity + frames
            except zmq.Again:
                break
            n += 1
            if get(RCVMORE):  # a client sends one frame; drop the rest of this message
                while get(RCVMORE):
                    recv(NOBLOCK)
                counters["bad_requests"] += 1
            else:
                try:
                    req = codec.decode_as(frame, Request)
                except ProtocolError:
                    counters["bad_requests"] += 1
                else:
                    self._send(identity, req.id, self._answer(req))
            if not get(EVENTS) & POLLIN:
                break
        counters["requests"] += n
        return n

    def _answer(self, req: Request) -> tuple[ReplyCode, Any, str | None]:
        """``(code, body, error)`` for one request."""
        task, owns, clock = req.task, self._machine.owns, self._clock
        start = clock()
        self.meter.roll(start)
        if self._closing or (task is not None and not owns(task, start)):
            self.counters["not_owner"] += 1
            return REPLY_NOT_OWNER, None, ("not serving any more" if self._closing else
                                           f"this worker does not own {task!r}")
        try:
            body = self._service.serve(task, req.body)
        except Exception as exc:  # the handler's failure is the client's answer, not ours
            self.meter.record(start, clock(), ok=False)
            self.counters["serve_errors"] += 1
            return REPLY_ERROR, None, _why(exc)
        end = clock()
        self.meter.record(start, end, ok=True)
        if task is not None and not owns(task, end):  # lost while serving: withhold it
            self.counters["abandoned"] += 1
            self.counters["not_owner"] += 1
            abandon = self._service.abandon
            if abandon is not None:
                try:
                    abandon(task, req.body, body)
                except Exception:  # nothing better to do than count it
                    self.counters["serve_errors"] += 1
            return REPLY_NOT_OWNER, None, f"lost {task!r} while serving the request"
        self.counters["served"] += 1
        return REPLY_OK, body, None

    def _send(self, identity: bytes, rid: int, answer: tuple[ReplyCode, Any, str | None]) -> None:
        m, machine = self.meter, self._machine
        code, body, error = answer
        lame = self._closing or machine.phase is not Phase.READY
        reply = Reply(rid, code, body, error, machine.applied, m.qps, m.utilization, m.errors,
                      lame)
        try:
            frame = codec.encode(reply)
        except TypeError as exc:  # the handler returned something msgpack cannot carry
            self.counters["serve_errors"] += 1
            frame = codec.encode(msgspec.structs.replace(
                reply, code=REPLY_ERROR, body=None, error=f"cannot encode the reply: {exc}"))
        try:
            self.socket.send(identity, NOBLOCK | SNDMORE)
            self.socket.send(frame, NOBLOCK)
        except zmq.ZMQError:  # EHOSTUNREACH (client gone) or EAGAIN (its queue is full)
            self.counters["replies_dropped"] += 1

    # -- reports and shutdown --------------------------------------------------------------

    def annotate(self, status: Status) -> Status:
        """``status`` with the serve address and the current load report."""
        m = self.meter
        m.roll(self._clock())
        return msgspec.structs.replace(status, serve=self.advertise, qps=m.qps,
                                   utilization=m.utilization, errors=m.errors)

    def close(self) -> None:
        """Answer ``not_owner`` to everything until quiet (bounded), then close."""
        self._closing = True
        clock = self._clock
        deadline = clock() + LINGER_S
        try:
            while (left := deadline - clock()) > 0:
                if not self.socket.poll(int(min(QUIET_S, left) * 1000) + 1, zmq.POLLIN):
                    break
                self.drain()
        finally:
            self.socket.close(linger=FINAL_LINGER_MS)
