"""The port picker of the tests and the chaos harness (scripts/chaostools/ports.py): ports
below the ephemeral range, which an outgoing connection never takes, each one bindable when
handed out and none handed out twice in a run."""

from __future__ import annotations

import contextlib
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from chaostools import ports as procs


def test_ports_come_from_below_the_ephemeral_range_and_differ() -> None:
    ports = [procs.free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= p < procs._ephemeral_low() for p in ports)


def test_a_port_in_use_is_skipped() -> None:
    busy = procs._next_port  # the next one in the walk, taken meanwhile (or already busy)
    with socket.socket() as s:
        with contextlib.suppress(OSError):
            s.bind(("127.0.0.1", busy))
        assert procs.free_port() != busy
