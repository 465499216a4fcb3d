"""Leader election on a real etcd (loopback): one leader, fencing epochs that only grow,
hand-over on stop, stepping down when etcd goes away and electing again when it is back;
leadership that follows the fleet (each member's published count of the workers it hears):
a leader hearing clearly fewer resigns, only after its daemon stood down, and a candidate
hearing fewer never takes the key."""

from __future__ import annotations

import json
import threading
import time

from corral.cli import logs
from corral.supervisor.ha import HA_EPOCH_BASE, Election, Role, parse_endpoints

from ..etcd_server import Etcd
from ..support import wait_until

TTL = 2.0


class Seen:
    """The roles an election notified; like the daemon, it says when it has applied a role
    that is not leading (unless ``ack`` is off: a daemon stuck in a step)."""

    def __init__(self) -> None:
        self.roles: list[Role] = []
        self.times: list[float] = []  # when each was notified
        self.lock = threading.Lock()
        self.election: Election | None = None
        self.ack = True

    def __call__(self, role: Role) -> None:
        with self.lock:
            self.roles.append(role)
            self.times.append(time.monotonic())
        if not role.leader and self.ack and self.election is not None:
            self.election.demoted()

    def since(self, n: int) -> list[Role]:
        with self.lock:
            return self.roles[n:]

    def ever_led(self) -> bool:
        with self.lock:
            return any(r.leader for r in self.roles)

    def first_lead(self) -> float | None:
        with self.lock:
            return next((t for t, r in zip(self.times, self.roles, strict=True) if r.leader),
                        None)

    def named_leader(self) -> str | None:
        last = self.last()
        return (last.leader_info or {}).get("name") if last is not None else None

    def last(self) -> Role | None:
        with self.lock:
            return self.roles[-1] if self.roles else None

    def leading(self) -> bool:
        last = self.last()
        return bool(last and last.leader)


def elect(etcd: Etcd, name: str, heard: int = 0) -> tuple[Election, Seen]:
    seen = Seen()
    e = Election(parse_endpoints(etcd.endpoint), "/test/leader", TTL,
                 {"name": name, "control": f"tcp://127.0.0.1/{name}"}, seen,
                 logs.get("test", who=name), heard=heard)
    seen.election = e
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
        # And says why: etcd3gw's errors stringify to nothing; their type and text are kept.
        why = (seen_a.last() or Role(False)).error or ""
        assert why.startswith("etcd: ") and "Connection" in why, why
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




def test_a_leader_hearing_clearly_fewer_workers_resigns_once_its_daemon_stood_down(
    etcd: Etcd,
) -> None:
    a, seen_a = elect(etcd, "a", heard=3)
    wait_until(seen_a.leading, timeout=10, what="a leads")
    b, seen_b = elect(etcd, "b", heard=3)
    try:
        wait_until(lambda: dict((seen_a.last() or Role(False)).heard).get("b") == 3,
                   timeout=10, what="a sees b's count")
        # Both hear the whole fleet: a keeps leading, keep-alive after keep-alive.
        n = len(seen_a.roles)
        wait_until(lambda: len(seen_a.since(n)) >= 4, timeout=10, what="4 keep-alive periods")
        assert all(r.leader for r in seen_a.since(n)) and not seen_b.ever_led()
        # a hears one worker of three; its daemon is slow to say it stood down.
        seen_a.ack = False
        a.heard(1)
        resigned = wait_until(lambda: next((r for r in seen_a.since(n) if not r.leader), None),
                              timeout=2 * TTL, what="a resigns")
        assert resigned.error == "resigned: b hears 3 workers, this supervisor 1"
        # The key stays a's until its daemon stood down or its own deadline passed, so two
        # never lead at once: b leads only after a's last deadline.
        last_until = max(r.leader_until for r in seen_a.roles if r.leader)
        wait_until(seen_b.leading, timeout=TTL + 2, what="b leads")
        first = seen_b.first_lead()
        assert first is not None and first >= last_until
        assert (seen_b.last() or Role(False)).epoch > max(r.epoch for r in seen_a.roles)
        # a does not take the key back while b hears clearly more.
        wait_until(lambda: seen_a.named_leader() == "b", timeout=10, what="a stands by b")
        assert not seen_a.leading()
    finally:
        a.stop()
        b.stop()


def test_a_candidate_hearing_fewer_workers_never_takes_the_key(etcd: Etcd) -> None:
    a, seen_a = elect(etcd, "a", heard=5)
    wait_until(seen_a.leading, timeout=10, what="a leads")
    b, seen_b = elect(etcd, "b", heard=5)
    c, seen_c = elect(etcd, "c", heard=1)
    try:
        wait_until(lambda: dict((seen_a.last() or Role(False)).heard) == {"a": 5, "b": 5,
                                                                           "c": 1},
                   timeout=10, what="every count published")
        assert not seen_c.ever_led() and not seen_b.ever_led()  # c hears fewer than the leader
        a.heard(0)  # a hears nobody: it resigns at once; b and c see the key go together
        wait_until(seen_b.leading, timeout=2 * TTL, what="b leads")
        wait_until(lambda: seen_a.named_leader() == seen_c.named_leader() == "b", timeout=10,
                   what="a and c stand by b")
        assert not seen_c.ever_led()
        led = [r.leader for r in seen_a.roles]
        assert True not in led[led.index(False):], "a took the key back"
    finally:
        for e in (a, b, c):
            e.stop()


def test_a_candidate_defers_while_a_member_hears_clearly_more_however_long(etcd: Etcd) -> None:
    """The key is vacant, but a member (here a record the test keeps alive in etcd) hears
    clearly more workers: the candidate does not campaign until that member is gone."""
    import etcd3gw

    host, port = parse_endpoints(etcd.endpoint)[0]
    client = etcd3gw.client(host=host, port=port)
    lease = client.lease(ttl=10)
    client.put("/test/leader/members/z", json.dumps({"name": "z", "heard": 4}), lease=lease)
    c, seen_c = elect(etcd, "c", heard=1)
    try:
        wait_until(lambda: dict((seen_c.last() or Role(False)).heard) == {"c": 1, "z": 4},
                   timeout=10, what="c sees z's count")
        n = len(seen_c.roles)
        wait_until(lambda: len(seen_c.since(n)) >= 4, timeout=10, what="4 looks at the key")
        assert not seen_c.ever_led() and not client.get("/test/leader")
        lease.revoke()  # z is gone: nobody hears more than c
        wait_until(seen_c.leading, timeout=2 * TTL, what="c leads")
    finally:
        c.stop()
