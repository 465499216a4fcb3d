"""A control client: one request, one reply, over a DEALER. Used by corralctl, tests, benches."""

from __future__ import annotations

import itertools
import os
from typing import Any

import zmq

from corral.common import codec
from corral.common.errors import CorralError, ProtocolError
from corral.common.protocol import ControlError, ControlReply, ControlRequest

DEFAULT_CONTROL = "tcp://127.0.0.1:7761"


class Unreachable(CorralError):
    """No answer from the supervisor within the timeout."""


class ControlFailed(CorralError):
    def __init__(self, error: ControlError) -> None:
        super().__init__(f"{error.code}: {error.message}")
        self.error = error


_ids = itertools.count(os.getpid() * 1000)


def request(endpoint: str, verb: str, args: dict[str, Any] | None = None,
            timeout: float = 3.0, curve: tuple[bytes, bytes, bytes] | None = None) -> Any:
    """The verb's result; raises Unreachable or ControlFailed. ``curve``: (the supervisor's
    public key, ours, our secret) when its control endpoint is Curve-protected."""
    s: zmq.Socket[Any] = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        s.curve_serverkey, s.curve_publickey, s.curve_secretkey = curve
    s.setsockopt(zmq.MAXMSGSIZE, codec.MAX_FRAME_BYTES + 1024)
    try:
        s.connect(endpoint)
        rid = next(_ids)
        s.send(codec.encode(ControlRequest(rid, verb, args or {})))
        deadline_ms = int(timeout * 1000)
        while s.poll(deadline_ms, zmq.POLLIN):
            try:
                reply = codec.decode(s.recv())
            except ProtocolError as exc:
                raise Unreachable(f"bad reply from {endpoint}: {exc}") from None
            if type(reply) is ControlReply and reply.request_id in (rid, 0):
                if reply.error is not None:
                    raise ControlFailed(reply.error)
                return reply.result
        raise Unreachable(f"no answer from the supervisor at {endpoint} within {timeout:g} s")
    finally:
        s.close(linger=0)
