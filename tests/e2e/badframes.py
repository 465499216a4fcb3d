"""Malformed frames for the bad-input tests (test_bad_input.py), and what else they use: a
DEALER, a process's resident memory, its JSON log lines and journal."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import zmq

from corral.common.errors import ProtocolError
from corral.common.wire import codec
from corral.common.wire.protocol import PROTOCOL_VERSION

FRAMES = 100_000
BURST = 2_000
RSS_GROWTH_LIMIT_KIB = 64 * 1024


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def log_events(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def journal_events(path: Path) -> list[tuple[str, str]]:
    return [(d["event"], d["task"]) for d in map(json.loads, path.read_text().splitlines())]


def dealer(ctx: zmq.Context[Any], endpoint: str, identity: bytes | None = None) -> Any:
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    if identity is not None:
        s.setsockopt(zmq.ROUTING_ID, identity)
    s.connect(endpoint)
    return s


# -- malformed frames ----------------------------------------------------------------------------


def _status(worker: str = "x", **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"worker": worker, "incarnation": 1, "seq": 1, "sent_at": 1.0,
                            "max_load": 10.0, "running": {}, "state": "ready"}
    body.update(over)
    return body


def malformed(rng: random.Random, valid: bytes, kind: str, n: int) -> list[bytes]:
    """``n`` frames that must each be refused by codec.decode — or decode as a message of the
    wrong kind for the socket (``kind`` is the body shape to mutate: status|instructions)."""
    pack, V = msgpack.packb, PROTOCOL_VERSION  # the right version: each mutation is the fault
    base = _status() if kind == "status" else {
        "epoch": 7, "seq": 1, "incarnation": 1, "lease": 5.0, "answers_seq": 1,
        "answers_sent_at": 1.0}
    makers: list[Callable[[int], bytes]] = [
        lambda i: rng.randbytes(rng.randrange(0, 200)),  # garbage
        lambda i: valid[: rng.randrange(1, len(valid))],  # truncated msgpack
        lambda i: pack([rng.choice([0, 1, 99, -1, "1"]), kind, base]),  # wrong version
        lambda i: pack([V, f"no-such-kind-{i % 7}", base]),  # unknown kind
        lambda i: pack([V, kind, {**base, rng.choice(list(base)): rng.choice(  # wrong types
            ["x", -5, [1, 2], {"a": 1}, None, 2**63, float("nan"), True])}]),
        lambda i: pack([V, kind, {**base, "extra": 1}]),  # unknown field
        lambda i: pack([V, kind, {**base, **rng.choice(  # in the types, out of range
            [{"max_load": 1e6}, {"applied": [2**41, 1]}, {"utilization": 1e4}, {"qps": 1e13},
             {"sent_at": 1e16}] if kind == "status" else
            [{"epoch": 2**41}, {"lease": 1e16}, {"parts": 70_000}, {"seq": 2**63}])}]),
        lambda i: pack([V, kind]),  # wrong envelope
        lambda i: pack([V, kind, {**base, ("running" if kind == "status" else "add"):  # huge id
                        ({"t" * 300: 1} if kind == "status" else ["t" * 300])}]),
    ]
    return [makers[i % len(makers)](i) for i in range(n)]


def huge_list(kind: str) -> bytes:
    """A list over the protocol's limit (200,000 entries): about 2 MB."""
    ids = [f"t{i}" for i in range(200_001)]
    if kind == "status":
        return msgpack.packb([1, "status", _status(running=dict.fromkeys(ids, 1))])
    return msgpack.packb([1, "instructions", {"epoch": 7, "seq": 99, "incarnation": 1,
                                              "lease": 5.0, "answers_seq": 1,
                                              "answers_sent_at": 1.0, "add": ids}])


def refused(frames: list[bytes], *, accept: tuple[type, ...] = ()) -> list[bytes]:
    """The frames codec.decode refuses (or decodes to a kind in ``accept``): random mutations
    can, rarely, make a valid message, which must not spoil the exact counts."""
    out = []
    for f in frames:
        try:
            msg = codec.decode(f)
        except ProtocolError:
            out.append(f)
            continue
        if isinstance(msg, accept):
            out.append(f)
    return out


def glances(frame: bytes) -> bool:
    """Whether the supervisor's first read of a report (`glance_status`) takes the frame."""
    try:
        codec.glance_status(frame)
    except ProtocolError:
        return False
    return True


def send_all(sock: Any, frames: list[bytes]) -> None:
    send = sock.send
    for f in frames:
        send(f)  # blocking: the peer's queue throttles us, nothing is dropped
