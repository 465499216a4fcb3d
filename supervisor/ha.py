"""High availability on etcd: leader election, with the key's creation revision as the epoch.

One key (``--ha-key``, default ``/corral/leader``) under an etcd lease (``--ha-ttl``) names the
leader. A supervisor campaigns with a transaction that creates the key only if it does not
exist; the winner's key creation revision only grows from one leader to the next, so it is the
fencing token every instruction carries (as ``HA_EPOCH_BASE + revision``, above any epoch a
state file could have produced). Losers watch the key and campaign again when it goes.

Each supervisor also keeps a member key (``KEY/members/NAME``) under its lease, so every one of
them can show who the standbys are.

Lifecycle (one thread per supervisor; etcd3gw is synchronous):

    candidate -> leader     the create transaction succeeded
    candidate -> standby    someone else holds the key
    standby   -> candidate  the key was deleted (or its lease expired)
    leader    -> candidate  a keep-alive failed past the local deadline, or the key is gone
    any       -> stopped    stop() (a leader deletes its key, so a standby takes over at once)

The thread never touches the supervisor's state: it calls ``notify`` with a `Role`, which the
daemon enqueues for its loop. The leader's local deadline — the send time of its last
successful keep-alive + TTL − a margin — is in every `Role`; the daemon's loop enforces it by
itself, so a leader stops acting before etcd can give the key to anyone else even if this
thread is stuck in a request.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from corral.common.errors import ConfigError
from corral.common.wire.protocol import HA_EPOCH_BASE

from .role import Role

MIN_TTL = 2.0  # etcd grants at least 2 s


def parse_endpoints(spec: str) -> list[tuple[str, int]]:
    """``etcd://HOST:PORT[,HOST:PORT…]`` -> [(host, port), …]."""
    if not spec.startswith("etcd://"):
        raise ConfigError("ha", f"expected etcd://HOST:PORT[,HOST:PORT…], got {spec!r}")
    out = []
    for part in spec[len("etcd://"):].split(","):
        u = urlsplit("//" + part.strip())
        if not u.hostname or not u.port:
            raise ConfigError("ha", f"expected HOST:PORT in {spec!r}, got {part!r}")
        out.append((u.hostname, u.port))
    return out


class Election:
    def __init__(self, endpoints: list[tuple[str, int]], key: str, ttl: float,
                 info: dict[str, Any], notify: Callable[[Role], None], log: Any) -> None:
        self.endpoints = endpoints
        self.key = key.rstrip("/")
        self.ttl = max(MIN_TTL, ttl)
        self.name = str(info["name"])
        self.info = info
        self.notify = notify
        self.log = log
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ha-election", daemon=True)
        self._client: Any = None
        self._lease: Any = None
        self._leader = False
        self._watch_timeout: type[BaseException] = Exception

    # -- public --------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop campaigning; a leader revokes its lease so a standby takes over at once."""
        self._stop.set()
        self._thread.join(self.ttl + 2)
        if self._lease is not None:
            try:
                self._lease.revoke()
            except Exception as exc:  # etcd may be gone; the lease then simply expires
                self.log.warning("could not revoke the etcd lease", error=str(exc))

    # -- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            try:
                self._connect(attempt)
                self._campaign()
                attempt = 0
            except Exception as exc:  # etcd unreachable, timed out, refused: try again
                attempt += 1
                if self._leader:
                    self.log.warning("leadership lost", error=str(exc))
                self._leader = False
                self.notify(Role(False, error=f"etcd: {exc}"))
                self._lease = None
                self._stop.wait(min(self.ttl / 3 * attempt, self.ttl))

    def _connect(self, attempt: int) -> None:
        import etcd3gw  # the `ha` extra: only HA deployments need it
        from etcd3gw.exceptions import WatchTimedOut

        host, port = self.endpoints[attempt % len(self.endpoints)]
        self._client = etcd3gw.client(host=host, port=port, timeout=self.ttl / 3)
        self._watch_timeout = WatchTimedOut

    def _campaign(self) -> None:
        from etcd3gw.utils import _encode

        c = self._client
        sent = time.monotonic()
        self._lease = c.lease(ttl=round(self.ttl))
        until = sent + self.ttl - self._margin()
        c.put(f"{self.key}/members/{self.name}", json.dumps(self.info), lease=self._lease)
        key = _encode(self.key.encode())
        won = c.transaction({
            "compare": [{"key": key, "result": "EQUAL", "target": "CREATE",
                         "create_revision": 0}],
            "success": [{"request_put": {"key": key, "value": _encode(
                json.dumps(self.info).encode()), "lease": self._lease.id}}],
            "failure": [],
        }).get("succeeded", False)
        if won:
            revision = self._our_revision()
            if revision is None:
                raise RuntimeError("won the election but the key is not ours")
            self._leader = True
            self.log.info("elected leader", epoch=HA_EPOCH_BASE + revision, key=self.key)
            self._lead(HA_EPOCH_BASE + revision, until)
        else:
            self._stand_by()

    def _margin(self) -> float:
        # Stop acting well before etcd could hand the key on: a third of the TTL.
        return self.ttl / 3

    def _our_revision(self) -> int | None:
        for _value, meta in self._client.get(self.key, metadata=True):
            if int(meta.get("lease", 0)) == int(self._lease.id):
                return int(meta["create_revision"])
        return None

    def _lead(self, epoch: int, until: float) -> None:
        while not self._stop.is_set():
            self.notify(Role(True, epoch, until, self.info, self._members()))
            if self._stop.wait(self.ttl / 3):
                return
            sent = time.monotonic()
            try:
                left = self._lease.refresh()
                ours = self._our_revision() == epoch - HA_EPOCH_BASE
            except Exception as exc:
                if time.monotonic() >= until:
                    raise RuntimeError(f"keep-alive failed past the deadline: {exc}") from None
                continue  # keep trying until the local deadline
            if not left or left <= 0 or not ours:
                raise RuntimeError("the etcd lease or the leader key is gone")
            until = sent + self.ttl - self._margin()

    def _stand_by(self) -> None:
        while not self._stop.is_set():
            current = self._client.get(self.key)
            if not current:
                return  # vacant: campaign again
            leader = json.loads(current[0])
            self.notify(Role(False, leader_info=leader, members=self._members()))
            self._lease.refresh()
            # Wake on any change of the key, or every TTL/3 to keep our member key alive.
            with contextlib.suppress(self._watch_timeout):
                self._client.watch_once(self.key, timeout=self.ttl / 3)

    def _members(self) -> tuple[str, ...]:
        try:
            rows = self._client.get_prefix(f"{self.key}/members/")
        except Exception:
            return ()
        return tuple(sorted(json.loads(v)["name"] for v, _ in rows))
