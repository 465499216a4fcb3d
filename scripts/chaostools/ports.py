"""Loopback ports for the processes a test or a chaos run starts.

Ports are handed out below the kernel's ephemeral range. A port the kernel picked there (bind
to port 0) and that was freed again may become any process's outgoing connection before the
daemon binds it: seen in CI, a supervisor died "Address already in use". Nothing takes a port
below the range unless it asks for it by number. Each process walks its own stretch (by pid),
one port after another, skipping any in use.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_LOW = max(1024, _ephemeral_low() - 16_000)
_SPAN = max(1, _ephemeral_low() - _LOW)
_next_port = _LOW + (os.getpid() * 97) % _SPAN


def free_port() -> int:
    """A loopback port that binds now, from below the ephemeral range."""
    global _next_port
    for _ in range(_SPAN):
        port = _next_port
        _next_port = _LOW + (_next_port + 1 - _LOW) % _SPAN
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {_LOW}-{_LOW + _SPAN - 1}")
