"""An ``etcd://HOST:PORT[,HOST:PORT…]/PREFIX`` task source: the task list lives in etcd.

One key per task under the prefix (the URL's path, with a ``/`` added at the end): the key is
``PREFIX`` + the task id, the value the task's JSON entry (``{"cost": 2, "spec": {…},
"require": {…}, "replicas": 3}``; a bare number is a cost; an empty value or ``{}`` is cost 1).
The list is read with a range get (paged, at one revision) and kept current by a watch from
the next revision, so a put or a delete reaches the supervisor well within a second.

The reading and the watch stream are in supervisor/etcdwatch.py.

When etcd is down the last good list stays: the loss is handed to the supervisor once (as a
failed query: its log line and ``source_errors``), then reconnect attempts follow with backoff
(`BACKOFF_S`), each counted in ``source_failures`` and logged at 1, 2, 4, 8… attempts; once
one succeeds (``source_reconnects``), the full list is read again and handed over if it
changed. Endpoints are tried in turn.

    (asked) -> synced --events--> synced (a new list)
    synced --stream lost / etcd error--> down (error handed over) --backoff--> synced | down
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from corral.cli import logs
from corral.common.errors import ConfigError, TaskSourceError
from corral.common.wire.tasklist import MAX_TASKS, TaskEntry, parse_entry_json

from .etcdwatch import WatchStream, connect, read_range, unb64, why
from .ha import parse_endpoints
from .sourcecounters import SourceCounters

MAX_TIMEOUT_S = 5.0  # an etcd request never waits longer, whatever --source-timeout says
BACKOFF_S = (0.25, 2.0)  # the first and the longest wait between reconnect attempts


def parse_target(spec: str) -> tuple[list[tuple[str, int]], str]:
    """``etcd://a:2379,b:2379/corral/tasks`` -> ([("a", 2379), ("b", 2379)], "/corral/tasks/")."""
    hosts, slash, path = spec.removeprefix("etcd://").partition("/")
    if not spec.startswith("etcd://") or not slash or not path.strip("/"):
        raise ConfigError("tasks", f"expected etcd://HOST:PORT[,HOST:PORT…]/PREFIX, got "
                                   f"{spec!r}")
    try:
        endpoints = parse_endpoints(f"etcd://{hosts}")
    except ConfigError as exc:
        raise ConfigError("tasks", str(exc).removeprefix("ha: ")) from None
    return endpoints, "/" + path.strip("/") + "/"


class _Table:
    """The keys under the prefix, parsed one by one: good entries and bad keys' errors."""

    def __init__(self, target: str, prefix: bytes) -> None:
        self.target = target
        self.prefix = prefix
        self.entries: dict[str, TaskEntry] = {}
        self.bad: dict[str, str] = {}

    def _name(self, key: bytes) -> str | None:
        try:
            return key[len(self.prefix):].decode()
        except UnicodeDecodeError:
            return None

    def put(self, key: bytes, value: bytes) -> None:
        name = self._name(key)
        if name is None:
            self.bad[repr(key)] = f"{self.target}: key {key!r:.80} is not UTF-8"
            return
        try:
            try:
                text = value.decode()
            except UnicodeDecodeError:
                raise TaskSourceError(f"{self.target} ({name:.60}): not UTF-8") from None
            self.entries[name] = parse_entry_json(name, text, self.target)
            self.bad.pop(name, None)
        except TaskSourceError as exc:
            self.bad[name] = str(exc)
            self.entries.pop(name, None)

    def delete(self, key: bytes) -> None:
        name = self._name(key)
        if name is not None:
            self.entries.pop(name, None)
        self.bad.pop(repr(key) if name is None else name, None)

    def snapshot(self) -> dict[str, TaskEntry]:
        """A copy of the list, or one error naming the first bad key (and how many more)."""
        if self.bad:
            more = len(self.bad) - 1
            raise TaskSourceError(self.bad[min(self.bad)]
                                  + (f" (and {more} more bad keys)" if more else ""))
        if len(self.entries) > MAX_TASKS:
            raise TaskSourceError(f"{self.target}: more than {MAX_TASKS} tasks")
        return dict(self.entries)


def fetch_once(target: str, timeout: float) -> dict[str, TaskEntry]:
    """One range get, no watch (``TaskSource.fetch``): the first endpoint that answers."""
    endpoints, prefix = parse_target(target)
    problem = ""
    for endpoint in endpoints:
        client = connect(endpoint, min(timeout, MAX_TIMEOUT_S))
        try:
            rows, _ = read_range(client, prefix.encode())
        except Exception as exc:
            problem = why(exc)
            continue
        finally:
            client.session.close()
        table = _Table(target, prefix.encode())
        for key, value in rows:
            table.put(key, value)
        return table.snapshot()
    raise TaskSourceError(f"{target}: unreachable: {problem}")


class EtcdSource:
    """The `Fetcher`'s driver for ``etcd://``: called only from the fetcher's thread, except
    `close` (after that thread has ended)."""

    def __init__(self, target: str, timeout: float, counters: SourceCounters,
                 nudge: Callable[[], None], log: Any = None) -> None:
        self.target = target
        self.endpoints, prefix = parse_target(target)
        self.timeout = min(timeout, MAX_TIMEOUT_S)
        self.counters = counters
        self.log = log if log is not None else logs.get("tasks", source=target)
        self._nudge = nudge
        self._table = _Table(target, prefix.encode())
        self._client: Any = None
        self._stream: WatchStream | None = None
        self._armed = False  # asked once: from then on it keeps itself current
        self._failures = 0  # consecutive
        self._retry_at = 0.0

    def query(self, reset: bool) -> dict[str, TaskEntry] | None:
        self._armed = True
        self._sync_or_raise()
        return self._table.snapshot()

    def poll(self) -> dict[str, TaskEntry] | None:
        if self._stream is None:
            if not self._armed or time.monotonic() < self._retry_at:
                return None
            try:
                self._sync()
            except Exception as exc:
                self.counters.failures += 1  # not handed over again: counted and logged
                self._lose(why(exc))
                return None
            return self._table.snapshot()
        changed = False
        while self._stream is not None and self._stream.inbox:
            kind, data = self._stream.inbox.popleft()
            if kind == "events":
                self._apply(data)
                changed = True
            elif kind == "resync":
                self.log.info("etcd watch cancelled; reading the list again", reason=data)
                self._sync_or_raise()
                changed = True
            else:
                raise self._lose(f"watch lost: {data}")
        return self._table.snapshot() if changed else None

    def wait_s(self) -> float | None:
        if not self._armed or self._stream is not None:
            return None  # the stream nudges the fetcher when something arrives
        return max(0.0, self._retry_at - time.monotonic())

    def close(self) -> None:
        self._drop()

    # -- inside ------------------------------------------------------------------------------

    def _sync_or_raise(self) -> None:
        try:
            self._sync()
        except Exception as exc:
            raise self._lose(why(exc)) from None

    def _sync(self) -> None:
        """Read every key again and watch from the revision after that read."""
        self._drop_stream()
        if self._client is None:
            self._client = connect(self.endpoints[self._failures % len(self.endpoints)],
                                    self.timeout)
        rows, revision = read_range(self._client, self._table.prefix)
        self._table = _Table(self.target, self._table.prefix)
        for key, value in rows:
            self._table.put(key, value)
        self._stream = WatchStream(self._client, self._table.prefix, revision + 1, self._nudge)
        if self._failures:
            self.counters.reconnects += 1
            self.log.info("etcd task source reconnected", attempts=self._failures,
                          tasks=len(self._table.entries))
        self._failures = 0

    def _apply(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            self.counters.watch_events += 1
            kv = event["kv"]
            if event.get("type") == "DELETE":
                self._table.delete(unb64(kv["key"]))
            else:
                self._table.put(unb64(kv["key"]), unb64(kv.get("value", "")))

    def _lose(self, reason: str) -> TaskSourceError:
        self._drop()
        self._failures += 1
        delay = min(BACKOFF_S[0] * 2 ** (self._failures - 1), BACKOFF_S[1])
        self._retry_at = time.monotonic() + delay
        if self._failures & (self._failures - 1) == 0:  # 1, 2, 4, 8…: a quieter log in time
            self.log.warning("etcd task source unreachable; the last good list stays",
                             error=reason, attempts=self._failures, retry_in_s=delay)
        return TaskSourceError(f"{self.target}: {reason}; the last good list stays, "
                               f"reconnecting")

    def _drop_stream(self) -> None:
        if self._stream is not None:
            self._stream.stop()
            self._stream = None

    def _drop(self) -> None:
        self._drop_stream()
        if self._client is not None:
            self._client.session.close()
            self._client = None
