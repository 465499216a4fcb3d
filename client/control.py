"""The control-channel client: one implementation for `corralctl`, the `Router`'s map and the
dashboard. It speaks to a supervisor's control endpoint (one request, one reply, over a DEALER)
and, given several endpoints (HA), finds the leader and follows it (docs/supervisor.md,
"corralctl" and "High availability").

    from corral.client import ControlClient

    with ControlClient("tcp://sup-a:7761,tcp://sup-b:7761") as c:
        c.call("status")                       # from the leader, wherever it is
        c.call("workers", {"limit": 100})

Leader following: a standby answers every verb but ``status``, ``counters`` and ``shutdown``
with the error ``not_leader`` (naming the leader when it knows it); the client then asks the
next endpoint (the named leader first). A ``status`` answered by a standby is taken only when
no endpoint answers as the leader. An endpoint with no connection is skipped at once (the
sockets use ``IMMEDIATE``: a send finds no peer instead of queueing); one that is connected
but silent costs the timeout. The endpoint that answered last is asked first next time.

CurveZMQ: pass `CurveKeys` when the supervisor's control endpoint is protected
(``--control-keys``): the supervisor's public key, and your key pair.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import zmq

from corral.common.errors import ConfigError, ProtocolError
from corral.common.wire import codec
from corral.common.wire.protocol import ERR_NOT_LEADER, ControlError, ControlReply, ControlRequest

from .errors import ControlFailed, Unreachable

DEFAULT_CONTROL = "tcp://127.0.0.1:7761"
NOBLOCK = int(zmq.NOBLOCK)
CONNECT_WAIT = 0.5  # a new connection gets this long to come up before the endpoint is skipped
_ids = itertools.count(os.getpid() * 1000)


@dataclass(frozen=True)
class CurveKeys:
    """CurveZMQ keys for a protected control endpoint (z85 bytes)."""

    server: bytes  # the supervisor's public key
    public: bytes
    secret: bytes

    @classmethod
    def load(cls, server_key: str, secret_key: str) -> CurveKeys:
        """From the supervisor's ``NAME.key`` and your ``NAME.key_secret``; `ConfigError`
        with a sentence when a file is missing or not a key."""
        import zmq.auth  # (its import, and the logging it pulls in, only for Curve: a process
        # per corralctl command pays for what it imports)

        try:
            server, _ = zmq.auth.load_certificate(server_key)
        except (OSError, ValueError) as exc:
            raise ConfigError("curve_server_key", f"cannot load {server_key}: {exc}") from None
        try:
            public, secret = zmq.auth.load_certificate(secret_key)
        except (OSError, ValueError) as exc:
            raise ConfigError("curve_secret_key", f"cannot load {secret_key}: {exc}") from None
        if not secret:
            raise ConfigError("curve_secret_key",
                              f"{secret_key} holds no secret key (use NAME.key_secret)")
        return cls(server, public, secret)


def parse_endpoints(control: str | Sequence[str]) -> tuple[str, ...]:
    """``"tcp://a:7761,tcp://b:7761"`` or a list -> the endpoints, in order, without repeats."""
    items = control.split(",") if isinstance(control, str) else list(control)
    out = tuple(dict.fromkeys(e.strip() for e in items if e and e.strip()))
    if not out:
        raise ConfigError("control", "no control endpoint given")
    for e in out:
        if "://" not in e:
            raise ConfigError("control", f"{e!r} is not a ZeroMQ endpoint (tcp://HOST:PORT)")
    return out


class _NotLeader(Exception):
    def __init__(self, error: ControlError) -> None:
        self.error = error


class ControlClient:
    """Requests to one supervisor, or to the leader among several. One thread at a time."""

    def __init__(self, control: str | Sequence[str], *, curve: CurveKeys | None = None,
                 timeout: float = 3.0, ctx: zmq.Context[Any] | None = None) -> None:
        self.endpoints = parse_endpoints(control)
        self.curve = curve
        self.timeout = timeout
        self._ctx = ctx or zmq.Context.instance()
        self._sockets: dict[str, tuple[zmq.Socket[Any], float]] = {}  # with when opened
        self._current = 0  # the endpoint that answered last

    @property
    def endpoint(self) -> str:
        """The endpoint asked first (the one that answered last)."""
        return self.endpoints[self._current]

    def call(self, verb: str, args: dict[str, Any] | None = None,
             timeout: float | None = None) -> Any:
        """The verb's result, from the leader; raises `Unreachable` (nobody answered within
        the timeout, per endpoint) or `ControlFailed` (the supervisor answered an error)."""
        wait = self.timeout if timeout is None else timeout
        order = [*self.endpoints[self._current:], *self.endpoints[:self._current]]
        standby_answer: tuple[str, Any] | None = None
        problems: list[str] = []
        tried: set[str] = set()
        while order:
            endpoint = order.pop(0)
            if endpoint in tried:
                continue
            tried.add(endpoint)
            try:
                result = self._ask(endpoint, verb, args or {}, wait)
            except Unreachable as exc:
                problems.append(str(exc))
                continue
            except _NotLeader as nl:
                problems.append(f"{endpoint}: {nl.error.message}")
                leader = _named_endpoint(nl.error.message)
                if leader is not None and leader not in tried:
                    order.insert(0, leader)
                continue
            if (len(self.endpoints) > 1 and isinstance(result, dict)
                    and result.get("role") == "standby"):
                standby_answer = standby_answer or (endpoint, result)
                leader = result.get("leader_control")
                if isinstance(leader, str) and leader not in tried:
                    order.insert(0, leader)
                continue
            self._remember(endpoint)
            return result
        if standby_answer is not None:
            self._remember(standby_answer[0])
            return standby_answer[1]
        if len(problems) == 1:
            raise Unreachable(problems[0])
        raise Unreachable("no leader answered: " + "; ".join(problems))

    def _remember(self, endpoint: str) -> None:
        if endpoint in self.endpoints:
            self._current = self.endpoints.index(endpoint)

    def _socket(self, endpoint: str) -> tuple[zmq.Socket[Any], float]:
        """The endpoint's DEALER and when it was opened. Every endpoint's is opened at once,
        so the standbys' connections are up by the time the leader's fails."""
        if not self._sockets:
            for e in self.endpoints:
                self._open(e)
        found = self._sockets.get(endpoint)
        return found if found is not None else self._open(endpoint)

    def _open(self, endpoint: str) -> tuple[zmq.Socket[Any], float]:
        s = self._ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.IMMEDIATE, 1)
        s.setsockopt(zmq.MAXMSGSIZE, codec.MAX_FRAME_BYTES + 1024)
        if self.curve is not None:
            s.curve_serverkey = self.curve.server
            s.curve_publickey = self.curve.public
            s.curve_secretkey = self.curve.secret
        s.connect(endpoint)
        opened = self._sockets[endpoint] = (s, time.monotonic())
        return opened

    def _ask(self, endpoint: str, verb: str, args: dict[str, Any], wait: float) -> Any:
        s, opened = self._socket(endpoint)
        rid = next(_ids)
        frame = codec.encode(ControlRequest(rid, verb, args))
        try:
            s.send(frame, NOBLOCK)
        except zmq.Again:
            # No live connection. With one endpoint there is nothing else to try: wait for it
            # up to the timeout. With several, a new connection gets a moment to come up; an
            # older one without a peer means that supervisor is down: next.
            conn_wait = wait if len(self.endpoints) == 1 else \
                opened + CONNECT_WAIT - time.monotonic()
            if conn_wait <= 0 or not s.poll(int(conn_wait * 1000) + 1, zmq.POLLOUT):
                raise Unreachable(self._silent(endpoint, wait)) from None
            try:
                s.send(frame, NOBLOCK)
            except zmq.Again:
                raise Unreachable(self._silent(endpoint, wait)) from None
        deadline_ms = int(wait * 1000)
        while s.poll(deadline_ms, zmq.POLLIN):
            try:
                reply = codec.decode(s.recv(NOBLOCK))
            except zmq.Again:
                continue
            except ProtocolError as exc:
                raise Unreachable(f"bad reply from {endpoint}: {exc}") from None
            if type(reply) is not ControlReply or reply.request_id not in (rid, 0):
                continue  # the late answer to an earlier request that timed out
            if reply.error is not None:
                if reply.error.code == ERR_NOT_LEADER:
                    raise _NotLeader(reply.error)
                raise ControlFailed(reply.error)
            return reply.result
        # Nothing within the timeout: this socket may yet deliver the late answer, which a
        # later request would have to skip; start that endpoint afresh instead.
        self._sockets.pop(endpoint)[0].close(linger=0)
        raise Unreachable(self._silent(endpoint, wait))

    def _silent(self, endpoint: str, wait: float) -> str:
        if len(self.endpoints) == 1:
            return f"no answer from the supervisor at {endpoint} within {wait:g} s"
        return f"no answer from the supervisor at {endpoint}"

    def close(self) -> None:
        for s, _ in self._sockets.values():
            s.close(linger=0)
        self._sockets.clear()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _named_endpoint(message: str) -> str | None:
    """The leader's control endpoint named in a not_leader message ("... at tcp://...")."""
    _, sep, rest = message.rpartition(" at ")
    return rest.strip() if sep and "://" in rest else None


def request(control: str | Sequence[str], verb: str, args: dict[str, Any] | None = None,
            timeout: float = 3.0, curve: CurveKeys | None = None) -> Any:
    """One call with a client made for it (scripts, tests, benchmarks)."""
    with ControlClient(control, curve=curve, timeout=timeout) as c:
        return c.call(verb, args)
