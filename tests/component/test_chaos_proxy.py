"""The chaos harness's fault-injecting proxy (scripts/chaostools/proxy.py) with real sockets on
loopback: it forwards, holds one direction, delivers what it held late, and delays."""

from __future__ import annotations

import socket
import time

from chaostools.proxy import Fault, Proxy


def _echo_server() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    return srv, srv.getsockname()[1]


def test_proxy_forwards_holds_in_one_direction_delivers_late_and_delays() -> None:
    srv, port = _echo_server()
    proxy = Proxy(port)
    try:
        route = proxy.add_route("w1")
        client = socket.create_connection(("127.0.0.1", route), timeout=5)
        server, _ = srv.accept()
        server.settimeout(5)
        client.sendall(b"hello")
        assert server.recv(100) == b"hello"
        server.sendall(b"back")
        assert client.recv(100) == b"back"
        proxy.set_fault("w1", Fault(up=True))
        client.sendall(b"held")
        server.sendall(b"still flows")
        assert client.recv(100) == b"still flows"
        server.settimeout(0.3)
        try:
            got = server.recv(100)
        except TimeoutError:
            got = b""
        assert got == b"", "a black-holed direction must deliver nothing"
        proxy.set_fault("w1", Fault(delay=0.3))
        server.settimeout(5)
        assert server.recv(100) == b"held"  # healed: what was held arrives, late
        t0 = time.monotonic()
        client.sendall(b"slow")
        assert server.recv(100) == b"slow"
        assert time.monotonic() - t0 >= 0.25
        client.close()
        assert server.recv(100) == b""  # the close travels too
        server.close()
        assert proxy.stats()["w1"]["connections"] == 1
    finally:
        proxy.close()
        srv.close()
