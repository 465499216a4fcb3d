"""The supervisor's sockets, as the kernel sees them."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from corral.supervisor.config import SupervisorConfig
from corral.supervisor.endpoints import KEEPALIVE_IDLE_S, Endpoints

from ..support import free_port

KEEPALIVE_TIMER = 2  # /proc/net/tcp's "tr" column: 2 is the keepalive (or another) timer


def _timer(local_port: int, remote_port: int) -> tuple[int, float] | None:
    """The accepted connection's (timer kind, seconds until it fires), from /proc/net/tcp."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        local, remote, state = f[1], f[2], f[3]
        if state == "01" and int(local.split(":")[1], 16) == local_port \
                and int(remote.split(":")[1], 16) == remote_port:
            kind, when = f[5].split(":")
            return int(kind, 16), int(when, 16) / 100  # jiffies, USER_HZ
    return None


def test_worker_connections_are_kept_alive_by_the_kernel(tmp_path: Path) -> None:
    """A worker host that vanishes (no FIN, no RST) leaves a half-open connection; keepalive
    makes the kernel probe and close it instead of it holding a descriptor and ZeroMQ's
    buffers for ever. Live connections carry reports more often than the idle time."""
    port = free_port()
    cfg = SupervisorConfig(bind=f"tcp://127.0.0.1:{port}",
                           control=f"tcp://127.0.0.1:{free_port()}",
                           tasks=f"file:{tmp_path / 'none.txt'}")
    ends = Endpoints(cfg)
    client = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        mine = client.getsockname()[1]
        timer = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            timer = _timer(port, mine)
            if timer is not None and timer[0] == KEEPALIVE_TIMER:
                break
            time.sleep(0.02)
        assert timer is not None and timer[0] == KEEPALIVE_TIMER, timer
        assert KEEPALIVE_IDLE_S - 5 < timer[1] <= KEEPALIVE_IDLE_S, timer
    finally:
        client.close()
        ends.close()
