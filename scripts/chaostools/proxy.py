"""A fault-injecting TCP proxy on loopback: one listening port per route (per worker), each
connection forwarded to one upstream address (the supervisor's worker endpoint).

Faults are set per route and apply to every connection of that route, at once:

- ``up`` / ``down`` black-holed: bytes travelling worker -> supervisor (``up``) or back
  (``down``) are *held*, not forwarded — what a partition does to TCP: the sender's data waits
  in flight and is retransmitted, nothing arrives, and a connection closed meanwhile is not seen
  closed on the other side either. When the fault is lifted the held bytes (and any close) are
  delivered, late, as TCP would after a short partition. A held buffer over ``MAX_HELD`` stops
  reading from the sender (TCP's flow control).
- ``delay``: every byte read from then on is forwarded ``delay`` seconds later, both ways.

New connections are accepted while a route is black-holed (their ZeroMQ greeting is held like
any other byte). An upstream that refuses (the supervisor is down) closes the new connection at
once, so the worker's ZeroMQ socket reconnects by itself.

One thread, one ``select`` loop; `close` stops it and closes every socket it opened.

    state of one direction of one connection:
    open -> eof-read (the sender closed) -> eof-sent (delivered after the held bytes) -> closed
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field

MAX_HELD = 4 * 1024 * 1024  # bytes held per direction before the sender is no longer read
POLL_S = 0.02  # longest select wait: how soon a fault change takes effect
CONNECT_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class Fault:
    up: bool = False  # worker -> supervisor bytes held
    down: bool = False  # supervisor -> worker bytes held
    delay: float = 0.0  # seconds added to every byte, both ways

    def __str__(self) -> str:
        parts = [name for name, on in (("up", self.up), ("down", self.down)) if on]
        if self.delay:
            parts.append(f"delay {self.delay:g}s")
        return "+".join(parts) or "none"


HEALTHY = Fault()


@dataclass
class _Pipe:
    """One direction of a connection: bytes read from ``src``, waiting to go to ``dst``."""

    src: socket.socket
    dst: socket.socket
    up: bool  # worker -> supervisor
    chunks: deque[tuple[float, bytes]] = field(default_factory=deque)  # (release time, bytes)
    held: int = 0
    eof_read: bool = False
    eof_sent: bool = False

    def blocked(self, fault: Fault) -> bool:
        return fault.up if self.up else fault.down


@dataclass
class _Route:
    name: str
    listener: socket.socket
    fault: Fault = HEALTHY
    connections: int = 0
    bytes_up: int = 0
    bytes_down: int = 0


class Proxy:
    """Routes named after workers; `set_fault` changes what a route does to its traffic."""

    def __init__(self, upstream_port: int, host: str = "127.0.0.1") -> None:
        self._upstream = (host, upstream_port)
        self._host = host
        self._routes: dict[str, _Route] = {}
        self._conns: list[tuple[_Route, _Pipe, _Pipe]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-proxy", daemon=True)
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)
        self._thread.start()

    # -- the main thread's side ---------------------------------------------------------------

    def add_route(self, name: str) -> int:
        """A new listening port for ``name``; returns the port."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self._host, 0))
        listener.listen(16)
        listener.setblocking(False)
        with self._lock:
            self._routes[name] = _Route(name, listener)
        self._poke()
        return int(listener.getsockname()[1])

    def set_fault(self, name: str, fault: Fault) -> None:
        with self._lock:
            self._routes[name].fault = fault
        self._poke()

    def stats(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {r.name: {"connections": r.connections, "bytes_up": r.bytes_up,
                             "bytes_down": r.bytes_down} for r in self._routes.values()}

    def close(self) -> None:
        self._stop.set()
        self._poke()
        self._thread.join(5)
        with self._lock:
            for _, a, b in self._conns:
                a.src.close()
                b.src.close()
            self._conns.clear()
            for r in self._routes.values():
                r.listener.close()
        self._wake_r.close()
        self._wake_w.close()

    def _poke(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_w.send(b"\0")

    # -- the proxy thread ---------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            with self._lock:
                readers, writers, timeout = self._interest(now)
            try:
                r, _, _ = select.select(readers, writers, [], timeout)
            except (OSError, ValueError):  # a socket closed under us: look again
                continue
            now = time.monotonic()
            with self._lock:
                if self._wake_r in r:
                    with contextlib.suppress(BlockingIOError):
                        self._wake_r.recv(4096)
                for route in self._routes.values():
                    if route.listener in r:
                        self._accept(route)
                readable = set(r)
                for conn in list(self._conns):
                    self._pump(conn, readable, now)

    def _interest(self, now: float) -> tuple[list[socket.socket], list[socket.socket], float]:
        readers: list[socket.socket] = [self._wake_r]
        readers += [r.listener for r in self._routes.values()]
        writers: list[socket.socket] = []
        timeout = POLL_S
        for route, *pipes in self._conns:
            for p in pipes:
                if not p.eof_read and p.held < MAX_HELD:
                    readers.append(p.src)
                if p.chunks and not p.blocked(route.fault):
                    release = p.chunks[0][0]
                    if release <= now:
                        writers.append(p.dst)
                    else:
                        timeout = min(timeout, release - now)
        return readers, writers, max(0.0, timeout)

    def _accept(self, route: _Route) -> None:
        try:
            down, _ = route.listener.accept()
        except (BlockingIOError, OSError):
            return
        try:
            up = socket.create_connection(self._upstream, timeout=CONNECT_TIMEOUT_S)
        except OSError:  # the supervisor is down: the worker reconnects by itself
            down.close()
            return
        for s in (down, up):
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        route.connections += 1
        self._conns.append((route, _Pipe(down, up, up=True), _Pipe(up, down, up=False)))

    def _pump(self, conn: tuple[_Route, _Pipe, _Pipe], readable: set[socket.socket],
              now: float) -> None:
        route, up, down = conn
        for p in (up, down):
            if p.src in readable and not p.eof_read:
                try:
                    data = p.src.recv(65536)
                except BlockingIOError:
                    data = None
                except OSError:
                    data = b""
                if data == b"":
                    p.eof_read = True
                elif data:
                    p.chunks.append((now + route.fault.delay, data))
                    p.held += len(data)
            if not p.blocked(route.fault) and not self._flush(route, p, now):
                self._drop(conn)
                return
        if up.eof_sent and down.eof_sent:
            self._drop(conn)

    def _flush(self, route: _Route, p: _Pipe, now: float) -> bool:
        """Send what is due; False if the connection is broken."""
        while p.chunks and p.chunks[0][0] <= now:
            release, data = p.chunks[0]
            try:
                n = p.dst.send(data)
            except BlockingIOError:
                return True
            except OSError:
                return False
            p.held -= n
            if p.up:
                route.bytes_up += n
            else:
                route.bytes_down += n
            if n < len(data):
                p.chunks[0] = (release, data[n:])
                return True
            p.chunks.popleft()
        if p.eof_read and not p.chunks and not p.eof_sent:
            p.eof_sent = True
            with contextlib.suppress(OSError):
                p.dst.shutdown(socket.SHUT_WR)
        return True

    def _drop(self, conn: tuple[_Route, _Pipe, _Pipe]) -> None:
        _, up, down = conn
        up.src.close()
        down.src.close()
        self._conns.remove(conn)
