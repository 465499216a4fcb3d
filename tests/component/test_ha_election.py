"""Leader election on a real etcd (loopback): one leader, fencing epochs that only grow,
hand-over on stop, stepping down when etcd goes away and electing again when it is back."""

from __future__ import annotations

import threading
import time

from corral.cli import logs
from corral.supervisor.ha import HA_EPOCH_BASE, Election, Role, parse_endpoints

from ..etcd_server import Etcd
from ..support import wait_until

TTL = 2.0


class Seen:
    def __init__(self) -> None:
        self.roles: list[Role] = []
        self.lock = threading.Lock()

    def __call__(self, role: Role) -> None:
        with self.lock:
            self.roles.append(role)

    def last(self) -> Role | None:
        with self.lock:
            return self.roles[-1] if self.roles else None

    def leading(self) -> bool:
        last = self.last()
        return bool(last and last.leader)


def elect(etcd: Etcd, name: str) -> tuple[Election, Seen]:
    seen = Seen()
    e = Election(parse_endpoints(etcd.endpoint), "/test/leader", TTL,
                 {"name": name, "control": f"tcp://127.0.0.1/{name}"}, seen,
                 logs.get("test", who=name))
    e.start()
    return e, seen


def test_one_leader_then_hand_over_with_a_higher_epoch(etcd: Etcd) -> None:
    a, seen_a = elect(etcd, "a")
    wait_until(seen_a.leading, timeout=10, what="a leads")
    b, seen_b = elect(etcd, "b")
    try:
        wait_until(lambda: seen_b.last() is not None, timeout=10, what="b decided")
        role_b = seen_b.last()
        assert role_b is not None and not role_b.leader
        assert role_b.leader_info == {"name": "a", "control": "tcp://127.0.0.1/a"}
        wait_until(lambda: (seen_a.last() or Role(False)).members == ("a", "b"), timeout=10,
                   what="members a and b")
        first = seen_a.last()
        assert first is not None and first.epoch > HA_EPOCH_BASE
        assert first.leader_until > time.monotonic()  # a deadline in the future
        a.stop()
        wait_until(seen_b.leading, timeout=TTL + 2, what="b leads after a stopped")
        second = seen_b.last()
        assert second is not None and second.epoch > first.epoch
    finally:
        a.stop()
        b.stop()


def test_leader_steps_down_when_etcd_is_gone_and_is_elected_again(etcd: Etcd) -> None:
    a, seen_a = elect(etcd, "a")
    try:
        wait_until(seen_a.leading, timeout=10, what="a leads")
        role = seen_a.last()
        assert role is not None
        etcd.stop()
        stopped = time.monotonic()
        wait_until(lambda: not seen_a.leading(), timeout=TTL + 5, what="a steps down")
        # It stopped leading no later than its own deadline (plus the poll period).
        assert time.monotonic() - stopped <= TTL + 2
        etcd.start()
        wait_until(seen_a.leading, timeout=20, what="a leads again")
        again = seen_a.last()
        assert again is not None and again.epoch > role.epoch
    finally:
        a.stop()


def test_endpoint_parsing() -> None:
    assert parse_endpoints("etcd://a:2379,b:2380") == [("a", 2379), ("b", 2380)]
    import pytest

    from corral.common.errors import ConfigError
    for bad in ("http://a:2379", "etcd://a", "etcd://:12"):
        with pytest.raises(ConfigError, match="ha"):
            parse_endpoints(bad)


