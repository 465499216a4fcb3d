"""The control endpoint's side of the supervisor: requests read, each answered by its verb
(supervisor/verbs.py) and replied to at once; what state-changing verbs decided is returned
for the daemon to carry out. Bad requests get an error reply of the fixed shape and are
counted; a client that is gone or not reading loses its reply, counted, never blocking.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import zmq

from corral.common.errors import ProtocolError
from corral.common.wire import codec
from corral.common.wire.protocol import (
    ERR_BAD_REQUEST,
    MAX_TEXT_CHARS,
    ControlError,
    ControlReply,
    ControlRequest,
)

from . import verbs
from .counters import IoCounters
from .events import Action

if TYPE_CHECKING:
    from .core import SupervisorCore

NOBLOCK = int(zmq.NOBLOCK)
MAX_REQUESTS = 100  # answered per loop turn: the workers' reports get their turn too


class ControlServer:
    def __init__(self, socket: zmq.Socket[bytes], io: IoCounters) -> None:
        self._socket = socket
        self._io = io

    def serve(self, core: SupervisorCore, now: float) -> list[Action]:
        """Answer the requests waiting (up to MAX_REQUESTS); the actions they decided."""
        out: list[Action] = []
        for _ in range(MAX_REQUESTS):
            try:
                frames = self._socket.recv_multipart(NOBLOCK)
            except zmq.Again:
                break
            envelope, payload = frames[:-1], frames[-1]
            if not envelope:
                continue
            try:
                req = codec.decode_as(payload, ControlRequest)
            except ProtocolError as exc:
                self._io.control_errors += 1
                self._reply(envelope, ControlReply(0, None, ControlError(
                    ERR_BAD_REQUEST, str(exc)[:MAX_TEXT_CHARS])))
                continue
            result, error, actions = verbs.call(core, req.verb, dict(req.args), now)
            if error is not None:
                self._io.control_errors += 1
            self._reply(envelope, ControlReply(req.request_id, result, error))
            out += actions
        return out

    def _reply(self, envelope: list[bytes], reply: ControlReply) -> None:
        try:
            frame = codec.encode(reply)
        except TypeError as exc:  # a view that is not plain data is a bug; say so, don't die
            frame = codec.encode(ControlReply(reply.request_id, None, ControlError(
                "internal", f"cannot encode the answer: {exc}")))
        try:
            self._socket.send_multipart([*envelope, frame], NOBLOCK)
        except (zmq.Again, zmq.ZMQError):  # the client is gone, or not reading its replies
            self._io.control_replies_dropped += 1
