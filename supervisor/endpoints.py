"""The daemon's sockets: the worker endpoint, the control endpoint (each a ROUTER, optionally
behind CurveZMQ) and the self-pipe that wakes its poll. Made and bound at construction, closed
once by `close`.

Socket options, and why: ``LINGER=0`` — a close never blocks on an unsent message to a gone
peer; ``MAXMSGSIZE`` — libzmq refuses an oversized frame before buffering it;
``SNDHWM`` = `SEND_HWM` sets per peer (one worker): beyond that the worker is *slow* and a send
fails at once; ``ROUTER_MANDATORY`` — a send to a gone peer raises (``EHOSTUNREACH``), which
is how the registry learns that a worker's old process is gone; ``ROUTER_HANDOVER`` — a
reconnecting worker is never locked out by its own stale connection; TCP keepalive on the
worker endpoint — a connection from a worker host that vanished (no FIN, no RST) is closed by
the kernel `KEEPALIVE_IDLE_S` + a few probes after its last byte, instead of holding a
descriptor and ~27 KB of ZeroMQ buffers for ever (a live worker reports more often than that,
so its connection is never probed).
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

import zmq

from corral.common.wire import codec

from . import curve
from .config import SupervisorConfig

SEND_HWM = 64  # instruction sets queued per worker; beyond that the worker is "slow"
KEEPALIVE_IDLE_S, KEEPALIVE_INTVL_S, KEEPALIVE_CNT = 75, 5, 3  # above the longest report interval


class BindError(RuntimeError):
    pass


class Endpoints:
    def __init__(self, config: SupervisorConfig) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context()
        self._sockets: list[zmq.Socket[Any]] = []
        self.guard: curve.Guard | None = None
        # Curve: each authorised key's z85 public key -> the worker id it may report as.
        self.key_names: dict[str, str] | None = None
        self.wake_r, self._wake_w = socket.socketpair()
        for s in (self.wake_r, self._wake_w):
            s.setblocking(False)
        try:
            self.router = self._socket(zmq.ROUTER)
            if config.curve_secret_key:
                self.guard = curve.Guard(self.ctx, config.curve_secret_key)
            if self.guard is not None and config.authorized_keys:
                self.key_names = self.guard.protect(self.router, "workers",
                                                    config.authorized_keys, "authorized_keys")
            for option, value in ((zmq.TCP_KEEPALIVE, 1), (zmq.TCP_KEEPALIVE_IDLE,
                                  KEEPALIVE_IDLE_S), (zmq.TCP_KEEPALIVE_INTVL, KEEPALIVE_INTVL_S),
                                  (zmq.TCP_KEEPALIVE_CNT, KEEPALIVE_CNT)):
                self.router.setsockopt(option, value)  # before bind: connections inherit them
            self._bind(self.router, config.bind)
            self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
            self.router.setsockopt(zmq.ROUTER_HANDOVER, 1)
            self.control = self._socket(zmq.ROUTER)
            # A reply to a client that left or does not read raises instead of vanishing, so
            # it can be counted.
            self.control.setsockopt(zmq.ROUTER_MANDATORY, 1)
            if config.control_keys and self.guard is not None:
                self.guard.protect(self.control, "control", config.control_keys,
                                   "control_keys")
            self._bind(self.control, config.control)
        except BaseException:
            self.close()
            raise

    def _socket(self, kind: int) -> zmq.Socket[Any]:
        s: zmq.Socket[Any] = self.ctx.socket(kind)
        self._sockets.append(s)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.MAXMSGSIZE, codec.MAX_FRAME_BYTES + 1024)
        s.setsockopt(zmq.SNDHWM, SEND_HWM)
        return s

    def _bind(self, s: zmq.Socket[Any], endpoint: str) -> None:
        try:
            s.bind(endpoint)
        except zmq.ZMQError as exc:
            raise BindError(f"cannot bind {endpoint}: {exc.strerror}") from None

    def wake(self) -> None:
        """Wake the loop's poll (from any thread, or a signal handler's wakeup fd)."""
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_w.send(b"\0")

    def wakeup_fd(self) -> int:
        return self._wake_w.fileno()

    def drain_wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while self.wake_r.recv(4096):
                pass

    def close(self) -> None:
        for s in self._sockets:
            s.close(linger=0)
        self._sockets.clear()
        if self.guard is not None:
            self.guard.stop()
            self.guard = None
        self.ctx.term()
        self.wake_r.close()
        self._wake_w.close()
