"""High availability on etcd: leader election, with the key's creation revision as the epoch.

One key (``--ha-key``, default ``/corral/leader``) under an etcd lease (``--ha-ttl``) names the
leader. A supervisor campaigns with a transaction that creates the key only if it does not
exist; the winner's key creation revision only grows from one leader to the next, so it is the
fencing token every instruction carries (as ``HA_EPOCH_BASE + revision``, above any epoch a
state file could have produced). Losers watch the key and campaign again when it goes.

Each supervisor also keeps a member key (``KEY/members/NAME``) under its lease, holding how
many workers it hears (``heard``, handed over by the daemon: supervisor/hearing.py). etcd
decides who *may* lead; the counts decide whether leading does any good (leadrule.py): a
leader that hears clearly fewer workers than a standby resigns its key, and a candidate does
not campaign while another member hears clearly more.

Lifecycle (one thread per supervisor; etcd3gw is synchronous)::

    candidate -> leader     the create transaction succeeded
    candidate -> standby    someone else holds the key
    candidate -> deferring  the key is vacant, but another member hears clearly more workers
    deferring -> candidate  the key changed, or a keep-alive period passed
    standby   -> candidate  the key was deleted (or its lease expired)
    leader    -> candidate  keep-alives failed past the local deadline (each failure is tried
                            again through the next member: a lease is the cluster's, so a
                            member cut off from its peers costs no leadership), or the key
                            is gone
    leader    -> deferring  resigned: a standby heard clearly more workers for a keep-alive
                            period (the daemon stood down first, then the key was deleted)
    any       -> stopped    stop() (a leader deletes its key, so a standby takes over at once)

The thread never touches the supervisor's state: it calls ``notify`` with a `Role`, which the
daemon enqueues for its loop. The leader's local deadline — the send time of its last
successful keep-alive + TTL − a margin — is in every `Role`; the daemon's loop enforces it by
itself, so a leader stops acting before etcd can give the key to anyone else even if this
thread is stuck in a request. A resigning leader deletes its key only once the daemon says it
has stood down (`demoted`), or its deadline passed: it never leads beside its successor.
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

from .leadrule import HOLD_SHARE, better, resign_now
from .role import Role

MIN_TTL = 2.0  # etcd grants at least 2 s
MAX_REASON = 300  # characters of an error's text kept in `ha_error` and log lines


def describe(exc: BaseException) -> str:
    """An error as a reason: its type and its text. etcd3gw's errors keep their text in
    ``detail_text`` and stringify to nothing, which left `ha_error` reading ``'etcd: '``."""
    text = str(exc) or str(getattr(exc, "detail_text", None) or "")
    name = type(exc).__name__
    return f"{name}: {text}"[:MAX_REASON] if text else name


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
                 info: dict[str, Any], notify: Callable[[Role], None], log: Any,
                 heard: int = 0) -> None:
        self.endpoints = endpoints
        self.key = key.rstrip("/")
        self.ttl = max(MIN_TTL, ttl)
        self.name = str(info["name"])
        self.info = info
        self.notify = notify
        self.log = log
        self._stop = threading.Event()
        self._wake = threading.Event()  # stop(), or a new heard count: compare again
        self._acked = threading.Event()  # the daemon applied a role that is not leading
        self._thread = threading.Thread(target=self._run, name="ha-election", daemon=True)
        self._client: Any = None
        self._lease: Any = None
        self._leader = False
        self._heard = heard  # how many workers this supervisor hears (the daemon's latest)
        self._published: int | None = None  # the count in our member key
        self._kept = 0.0  # send time of the last successful keep-alive (or the grant)
        self._deferring = False
        self._watch_timeout: type[BaseException] = Exception
        self._endpoint = 0  # which member we talk to (index into endpoints, mod its length)
        self._failures = 0  # sessions that failed in a row
        # A request may take a sixth of the TTL: a keep-alive that fails on one member is
        # tried on the next one before the leader's deadline (a third of the TTL later).
        self._request_timeout = self.ttl / 6

    # -- public (any thread) -------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def heard(self, count: int) -> None:
        """The daemon's latest count of the workers this supervisor hears."""
        if count != self._heard:
            self._heard = count
            self._wake.set()

    def demoted(self) -> None:
        """The daemon has applied a role that is not leading: it sends nothing any more."""
        self._acked.set()

    def stop(self) -> None:
        """Stop campaigning; a leader revokes its lease so a standby takes over at once."""
        self._stop.set()
        self._wake.set()
        self._acked.set()
        self._thread.join(self.ttl + 2)
        if self._lease is not None:
            try:
                self._lease.revoke()
            except Exception as exc:  # etcd may be gone; the lease then simply expires
                self.log.warning("could not revoke the etcd lease", error=describe(exc))

    # -- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._connect()
                self._session()
            except Exception as exc:  # etcd unreachable, timed out, refused: try again
                self._failures += 1
                why = describe(exc)
                if self._leader:
                    self.log.warning("leadership lost", error=why)
                self._leader = False
                self.notify(Role(False, error=f"etcd: {why}"))
                self._lease = None
                self._endpoint += 1
                # The next member at once; once every one failed in a row, back off.
                rounds = self._failures // len(self.endpoints)
                self._stop.wait(min(self.ttl / 3 * rounds, self.ttl))

    def _connect(self) -> None:
        """A client for the current member. A lease is the cluster's, not a member's: one we
        hold is kept alive through whichever member answers."""
        import etcd3gw  # the `ha` extra: only HA deployments need it
        from etcd3gw.exceptions import WatchTimedOut
        from etcd3gw.lease import Lease

        host, port = self.endpoints[self._endpoint % len(self.endpoints)]
        self._client = etcd3gw.client(host=host, port=port, timeout=self._request_timeout)
        self._watch_timeout = WatchTimedOut
        if self._lease is not None:
            self._lease = Lease(self._lease.id, self._client)

    def _session(self) -> None:
        """One lease: publish our count under it, then campaign, lead or stand by until the
        lease is lost (an exception) or we stop."""
        c = self._client
        self._kept = time.monotonic()
        self._lease = c.lease(ttl=round(self.ttl))
        self._failures = 0
        self._published = None
        self._publish()
        while not self._stop.is_set():
            leader, revision = self._read_key()
            if leader is not None:
                self._stand_by(leader, revision)
                continue
            members = self._members()
            ahead = better(self._heard, self._others(members))
            if ahead is not None:
                self._defer(ahead, members, revision)
                continue
            self._deferring = False
            self._keep()  # the deadline counts from a keep-alive sent just now
            if self._create():
                created = self._our_revision()
                if created is None:
                    raise RuntimeError("won the election but the key is not ours")
                self._leader = True
                self.log.info("elected leader", epoch=HA_EPOCH_BASE + created, key=self.key,
                              workers=self._heard)
                self._lead(HA_EPOCH_BASE + created)

    def _create(self) -> bool:
        from etcd3gw.utils import _encode

        key = _encode(self.key.encode())
        return bool(self._client.transaction({
            "compare": [{"key": key, "result": "EQUAL", "target": "CREATE",
                         "create_revision": 0}],
            "success": [{"request_put": {"key": key, "value": _encode(
                json.dumps(self.info).encode()), "lease": self._lease.id}}],
            "failure": [],
        }).get("succeeded", False))

    def _margin(self) -> float:
        # Stop acting well before etcd could hand the key on: a third of the TTL.
        return self.ttl / 3

    def _keep(self) -> None:
        """Keep our lease alive; raise when it is gone."""
        sent = time.monotonic()
        left = self._lease.refresh()
        if not left or left <= 0:
            raise RuntimeError("the etcd lease expired")
        self._kept = sent

    def _publish(self) -> None:
        """Our member key, with how many workers we hear, when that changed."""
        n = self._heard
        if n != self._published:
            self._client.put(f"{self.key}/members/{self.name}",
                             json.dumps({**self.info, "heard": n}), lease=self._lease)
            self._published = n

    def _our_revision(self) -> int | None:
        for _value, meta in self._client.get(self.key, metadata=True):
            if int(meta.get("lease", 0)) == int(self._lease.id):
                return int(meta["create_revision"])
        return None

    def _lead(self, epoch: int) -> None:
        """Keep the key alive every TTL/3; compare counts at each keep-alive and whenever our
        count changes. Returns when we resigned; raises when the lease or the key is lost."""
        period = self.ttl / 3
        until = self._kept + self.ttl - self._margin()
        next_keep = self._kept + period
        since: float | None = None  # since when a standby has heard clearly more
        while not self._stop.is_set():
            self._wake.clear()
            members = self._members(strict=False)
            self.notify(Role(True, epoch, until, self.info, tuple(sorted(members)),
                             heard=self._counts(members)))
            ahead = better(self._heard, self._others(members))
            now = time.monotonic()
            since = None if ahead is None else (since if since is not None else now)
            if ahead is not None and resign_now(self._heard, since, now, self.ttl):
                self._resign(epoch, until, ahead, members)
                return
            wake_at = next_keep if since is None else min(next_keep,
                                                          since + self.ttl * HOLD_SHARE)
            self._wake.wait(max(0.0, wake_at - time.monotonic()))
            if self._stop.is_set() or time.monotonic() < next_keep:
                continue  # woken early (a new count, or the hold is over): compare again
            sent = time.monotonic()
            try:
                left = self._lease.refresh()
                ours = self._our_revision() == epoch - HA_EPOCH_BASE
            except Exception as exc:
                if time.monotonic() >= until:
                    raise RuntimeError("keep-alive failed past the deadline: "
                                       f"{describe(exc)}") from None
                # Keep trying until the local deadline, through the next member (one cut off
                # from its peers, a minority, cannot keep a lease alive).
                self._endpoint += 1
                self._connect()
                # Another member is tried at once; the same one (a single endpoint) shortly.
                pause = 0.0 if len(self.endpoints) > 1 else min(period, self._request_timeout)
                next_keep = time.monotonic() + pause
                continue
            if not left or left <= 0 or not ours:
                raise RuntimeError("the etcd lease or the leader key is gone")
            self._kept = sent
            until = sent + self.ttl - self._margin()
            next_keep = sent + period
            with contextlib.suppress(Exception):  # a count not published is published later
                self._publish()

    def _resign(self, epoch: int, until: float, ahead: tuple[str, int],
                members: dict[str, int | None]) -> None:
        """Give the key up to a member that hears clearly more workers: the daemon stands
        down first (or its own deadline passes), then the key goes, and that member wins."""
        from etcd3gw.utils import _encode

        name, count = ahead
        why = f"resigned: {name} hears {count} workers, this supervisor {self._heard}"
        self.log.warning("resigning the lead: another supervisor hears more workers",
                         better=name, its_workers=count, workers=self._heard)
        self._leader = False
        self._acked.clear()
        self.notify(Role(False, error=why, members=tuple(sorted(members)),
                         heard=self._counts(members)))
        self._acked.wait(max(0.0, until - time.monotonic()))
        self._publish()
        key = _encode(self.key.encode())
        self._client.transaction({
            "compare": [{"key": key, "result": "EQUAL", "target": "CREATE",
                         "create_revision": epoch - HA_EPOCH_BASE}],
            "success": [{"request_delete_range": {"key": key}}],
            "failure": [],
        })
        self._deferring = True  # logged above; the next look at the key defers quietly

    def _defer(self, ahead: tuple[str, int], members: dict[str, int | None],
               revision: int) -> None:
        """The key is vacant, but ``ahead`` hears clearly more workers: let it take the key;
        look again when the key changes, or after a keep-alive period."""
        if not self._deferring:
            self._deferring = True
            self.log.info("not campaigning: another supervisor hears more workers",
                          better=ahead[0], its_workers=ahead[1], workers=self._heard)
        self.notify(Role(False, members=tuple(sorted(members)), heard=self._counts(members)))
        self._keep()
        self._publish()
        with contextlib.suppress(self._watch_timeout):
            self._client.watch_once(self.key, timeout=self.ttl / 3, start_revision=revision + 1)

    def _read_key(self) -> tuple[dict[str, Any] | None, int]:
        """The leader key's value (None: vacant), and the store's revision as it was read."""
        from etcd3gw.utils import _decode, _encode

        c = self._client
        out = c.post(c.get_url("/kv/range"), json={"key": _encode(self.key.encode())})
        kvs = out.get("kvs") or []
        value = json.loads(_decode(kvs[0]["value"])) if kvs else None
        return value, int(out["header"]["revision"])

    def _stand_by(self, leader: dict[str, Any], revision: int) -> None:
        self._deferring = False
        members = self._members()
        self.notify(Role(False, leader_info=leader, members=tuple(sorted(members)),
                         heard=self._counts(members)))
        self._keep()
        self._publish()
        # Wake on any change of the key since it was read (a delete just after the read is not
        # missed; that revision is the store's latest, never compacted), or every TTL/3 to keep
        # our lease.
        with contextlib.suppress(self._watch_timeout):
            self._client.watch_once(self.key, timeout=self.ttl / 3,
                                    start_revision=revision + 1)

    def _members(self, strict: bool = True) -> dict[str, int | None]:
        """Every member's name and the count it published (None: it publishes none). A leader
        reads them with ``strict`` off: a failed read is only its own count, and its
        keep-alive decides whether etcd is reachable."""
        try:
            rows = self._client.get_prefix(f"{self.key}/members/")
        except Exception:
            if strict:
                raise
            return {self.name: self._heard}
        out: dict[str, int | None] = {}
        for value, _ in rows:
            info = json.loads(value)
            count = info.get("heard")
            out[str(info["name"])] = count if isinstance(count, int) else None
        out[self.name] = self._heard
        return out

    def _others(self, members: dict[str, int | None]) -> dict[str, int | None]:
        return {n: c for n, c in members.items() if n != self.name}

    def _counts(self, members: dict[str, int | None]) -> tuple[tuple[str, int], ...]:
        return tuple(sorted((n, c) for n, c in members.items() if c is not None))
