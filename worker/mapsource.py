"""The router's own tiny control client: the supervisor's ``map`` verb over one DEALER kept
open, one request and its reply at a time, bounded by a timeout. (corralctl's client is the
supervisor's; a client program must not need the supervisor package.)"""

from __future__ import annotations

import itertools
from typing import Any

import zmq

from corral.common import codec, routemap
from corral.common.errors import ProtocolError
from corral.common.protocol import ControlReply, ControlRequest
from corral.common.routemap import RouteMap

from .route_errors import MapUnavailable

NOBLOCK = int(zmq.NOBLOCK)


class MapSource:
    """``fetch(if_newer_than)``: the newer map, None when the caller's is current, or
    `MapUnavailable` saying why not."""

    def __init__(self, ctx: zmq.Context[Any], endpoint: str, timeout: float) -> None:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, codec.MAX_FRAME_BYTES + 1024)
        sock.connect(endpoint)
        self.socket = sock
        self.endpoint = endpoint
        self.timeout = timeout
        self._ids = itertools.count(1)

    def fetch(self, if_newer_than: int) -> RouteMap | None:
        rid = next(self._ids)
        args = {"if_newer_than": if_newer_than} if if_newer_than >= 0 else {}
        try:
            self.socket.send(codec.encode(ControlRequest(rid, "map", args)), NOBLOCK)
        except zmq.Again:
            raise MapUnavailable(f"cannot send to the supervisor at {self.endpoint}") from None
        wait_ms = int(self.timeout * 1000)
        while self.socket.poll(wait_ms, zmq.POLLIN):
            try:
                reply = codec.decode(self.socket.recv(NOBLOCK))
            except (zmq.Again, ProtocolError):
                continue  # garbage, or nothing after all: keep waiting for ours
            if type(reply) is not ControlReply or reply.request_id != rid:
                continue  # the answer to an earlier request that timed out
            if reply.error is not None:
                raise MapUnavailable(f"the supervisor at {self.endpoint} refused the map: "
                                     f"{reply.error.code}: {reply.error.message}")
            try:
                return None if reply.result is None else routemap.parse(reply.result)
            except ProtocolError as exc:
                raise MapUnavailable(f"bad map from {self.endpoint}: {exc}") from None
        raise MapUnavailable(f"no map from the supervisor at {self.endpoint} within "
                             f"{self.timeout:g} s")

    def close(self) -> None:
        self.socket.close(linger=0)
