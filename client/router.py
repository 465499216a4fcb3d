"""The client side of request routing: send a request to the worker that should answer it.
docs/routing.md ("The client") has its settings, failures and counters. ::

    from corral.client import Router, RouterConfig

    with Router(RouterConfig(control="tcp://10.0.0.5:7761", policy="wrr")) as router:
        router.call("room-7", {"op": "get"})      # to an owner of task room-7
        router.call_key("user-42", {"op": "get"}) # tasks are partitions: key -> task by hash ring
        router.call_any({"op": "ping"})           # to any worker of this client's subset

The map comes from the supervisor's ``map`` verb (the leader's under HA, found and followed by
the `ControlClient`; calls go on from the last map held meanwhile), refreshed by version at the
first call after ``refresh_interval`` and at once when a worker answers ``not_owner`` — the call
is then retried once, elsewhere if the map allows; nothing else is retried. A task's owners are
picked by `corral.common.balancer.replicas.ReplicaChooser`, ``call_any`` by the `Balancer` over
this client's subset of the serving workers, both by the policy (``rr``, ``llrr``, ``wrr``, …);
every reply's load report and lame-duck flag feed both, and a send that finds no live
connection marks the worker *refusing* (tried again after ``refused_retry``). Importable by any
program (it needs only `corral.common`); one Router serves one thread, calls are synchronous
(requests in parallel: one Router per thread). With CurveZMQ on the control endpoint, give
the key files as for ``corralctl``.

Nothing queues without bound: at most ``max_active`` requests per worker in flight from this
client on each path (a timed-out request counts until its late reply or ``forget_after``), and
the sockets' queues are capped. Failures raise one `RouteError` subclass with a clear message.
"""

from __future__ import annotations

import itertools
import random
import secrets
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import zmq
from zmq import zmq_poll

from corral.common.balancer import Balancer, BalancerConfig, NoBackendAvailable
from corral.common.balancer.backends import HealthConfig
from corral.common.balancer.replicas import ReplicaChooser
from corral.common.balancer.subsetting import LOW_CHURN
from corral.common.balancer.weights import LoadReport, WeightConfig
from corral.common.errors import ConfigError, ProtocolError
from corral.common.wire.codec import decode_as, encode
from corral.common.wire.protocol import REPLY_ERROR, REPLY_OK, Reply, Request
from corral.common.wire.routemap import EMPTY, RouteMap
from corral.common.wire.routemap import parse as parse_map

from .control import ControlClient, CurveKeys
from .errors import (
    CallTimeout,
    ControlFailed,
    MapUnavailable,
    NoOwner,
    NotOwner,
    RemoteError,
    Unavailable,
    Unreachable,
)
from .health import Health
from .peers import Peer, Peers
from .routes import TaskRing, explain

NOBLOCK = int(zmq.NOBLOCK)
POLLIN = int(zmq.POLLIN)
MAX_SENDS = 3  # picks per attempt: each failed send marks a worker refusing, the next moves on


@dataclass(frozen=True)
class RouterConfig:
    """How a client routes. Times in seconds."""

    # The supervisor's control endpoint, e.g. tcp://10.0.0.5:7761; several (HA): a list, or
    # one string with commas.
    control: str | tuple[str, ...] | list[str]
    policy: str = "wrr"  # rr | llrr | llrr-naive | wrr | p2c | random
    subset_size: int = 20  # call_any: workers this client uses (the chapter: 20 to 100)
    subsetting: str = LOW_CHURN  # worker ids carry no stable index for steady: by name
    seed: int = 0  # shared by all clients of a service, so their subsets fit together
    client: int | None = None  # this client's index for subsetting; None: a random one
    timeout: float = 5.0  # per call, unless the call says otherwise
    refresh_interval: float = 5.0  # the map is refreshed at least this often (by version)
    control_timeout: float = 2.0
    max_active: int = 100  # flow control: requests in flight per worker, per path
    forget_after: float = 30.0  # a timed-out request stops counting as in flight after this
    refused_retry: float = 0.5  # a refusing worker is tried again after this
    connect_wait: float = 0.5  # a new connection may take this long to come up
    curve_server_key: str | None = None  # CurveZMQ: the supervisor's NAME.key
    curve_secret_key: str | None = None  # CurveZMQ: your NAME.key_secret
    # Reports come with every reply, so trust them after 2 s rather than gRPC's 10 s.
    weights: WeightConfig = field(default_factory=lambda: WeightConfig(blackout=2.0))

    def balancer(self) -> BalancerConfig:
        return BalancerConfig(picker=self.policy, subsetting=self.subsetting,
                              subset_size=self.subset_size, seed=self.seed,
                              health=self.health(), weights=self.weights)

    def health(self) -> HealthConfig:
        return HealthConfig(max_active=self.max_active)


@dataclass(slots=True)
class _Pending:
    rid: int
    worker: str
    peer: Peer
    via_any: Any  # the Balancer's request for call_any, None for a task's owner
    forget_at: float = 0.0


class Router:
    """See the module docstring. ``counters``, ``served_by`` (replies per worker) and
    ``reports`` (each worker's latest load report) are for tests, benchmarks and metrics;
    `explain` says where a request would go and why."""

    def __init__(self, config: RouterConfig, ctx: zmq.Context[Any] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._clock = clock
        client = config.client if config.client is not None else secrets.randbits(31)
        rng = random.Random(config.seed ^ (client * 0x9E3779B1))
        self._ctx = ctx or zmq.Context.instance()
        curve = None
        if config.curve_server_key or config.curve_secret_key:
            if not (config.curve_server_key and config.curve_secret_key):
                raise ConfigError("curve_server_key", "curve_server_key and curve_secret_key "
                                  "go together")
            curve = CurveKeys.load(config.curve_server_key, config.curve_secret_key)
        self._control = ControlClient(config.control, curve=curve,
                                      timeout=config.control_timeout, ctx=self._ctx)
        self._peers = Peers(self._ctx, clock, config.connect_wait)
        self._balancer = Balancer(config.balancer(), (), client, rng=rng)
        self._chooser = ReplicaChooser(config.policy, config.health(), config.weights, rng)
        self._health = Health(self._balancer, self._chooser, config.refused_retry)
        self.reports = self._health.reports  # each worker's latest load report
        self.map: RouteMap = EMPTY
        self._ring: TaskRing | None = None
        self._next_refresh = float("-inf")
        self._pending: dict[int, _Pending] = {}
        self._abandoned: deque[_Pending] = deque()  # timed out, oldest first
        self._ids = itertools.count(1)
        self.served_by: Counter[str] = Counter()
        self.counters: dict[str, int] = dict.fromkeys(
            ("calls", "ok", "remote_errors", "timeouts", "not_owner", "retries", "refreshes",
             "refresh_failures", "send_failures", "late_replies", "bad_replies",
             "bad_reports"), 0)

    # -- the API ---------------------------------------------------------------------------

    def call(self, task: str, request: Any, timeout: float | None = None) -> Any:
        """The reply of an owner of ``task`` (picked among its replicas by the policy)."""
        return self._call(task, request, timeout)

    def call_key(self, key: str, request: Any, timeout: float | None = None) -> Any:
        """The reply of an owner of the task that ``key`` maps to on the hash ring of tasks."""
        self._housekeeping(self._clock())
        return self._call(self.task_for(key), request, timeout)

    def call_any(self, request: Any, timeout: float | None = None) -> Any:
        """The reply of a worker of this client's subset, picked by the policy."""
        return self._call(None, request, timeout)

    def task_for(self, key: str) -> str:
        if self._ring is None or self._ring.tasks != self.map.tasks.keys():
            self._ring = TaskRing(self.map.tasks)
        try:
            return self._ring.task_for(key)
        except LookupError:
            raise NoOwner(f"key {key!r}: no tasks in map version {self.map.version}") from None

    def refresh(self) -> bool:
        """Fetch the map now if it is newer than the one held; True if it changed."""
        return self._refresh(self._clock())

    def explain(self, task: str | None = None, key: str | None = None) -> dict[str, Any]:
        """Where a request would go by the map held, and what this client knows of the
        owners (state, requests in flight on the task path)."""
        out = explain(self.map, task=task, key=key, ring=self._ring)
        for row in out["owners"]:
            row["client_state"] = str(self._chooser.state(row["worker"]))
            row["in_flight"] = self._chooser.active.get(row["worker"], 0)
        return out

    def table_sizes(self) -> dict[str, int]:
        """Entries in every per-worker and per-request table of this client (each has a way
        out: a map without the worker, a reply, ``forget_after``), for a program that runs for
        weeks to publish and for tests to check."""
        return {"pending": len(self._pending), "abandoned": len(self._abandoned),
                "served_by": len(self.served_by), "peers": len(self._peers),
                **self._health.sizes(), **self._chooser.sizes(),
                **{f"any_{k}": v for k, v in self._balancer.sizes().items()}}

    def close(self) -> None:
        self._peers.close()
        self._control.close()

    def __enter__(self) -> Router:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one call --------------------------------------------------------------------------

    def _call(self, task: str | None, body: Any, timeout: float | None) -> Any:
        clock, counters = self._clock, self.counters
        now = clock()
        deadline = now + (self.config.timeout if timeout is None else timeout)
        counters["calls"] += 1
        self._housekeeping(now)
        avoid: str | None = None
        for attempt in range(2):
            p = self._send(task, body, now, deadline, avoid)
            reply = self._await(p, deadline, task, deadline - now)
            if reply.code == REPLY_OK:
                counters["ok"] += 1
                return reply.body
            if reply.code == REPLY_ERROR:
                counters["remote_errors"] += 1
                raise RemoteError(f"{p.worker} failed to serve {_what(task)}: {reply.error}")
            counters["not_owner"] += 1
            if attempt == 0:  # the map is stale: refresh at once, try once more
                counters["retries"] += 1
                now = clock()
                self._refresh(now)
                avoid = p.worker
        raise NotOwner(f"{_what(task)}: {p.worker} answered not_owner again after a refresh "
                       f"to map version {self.map.version} ({reply.error})")

    def _send(self, task: str | None, body: Any, now: float, deadline: float,
              avoid: str | None) -> _Pending:
        refreshed = False
        for _ in range(MAX_SENDS):
            if task is None:
                try:
                    via_any: Any = self._balancer.acquire(now)
                except NoBackendAvailable as exc:
                    raise Unavailable(f"call_any: {exc} (map version {self.map.version})"
                                      ) from None
                worker = via_any.backend
            else:
                worker, via_any = self._owner(task, now, avoid), None
            rid = next(self._ids)
            p = _Pending(rid, worker, self._peers.get(worker, self.map.workers[worker].serve),
                         via_any)
            if self._peers.send(p.peer, encode(Request(rid, task, body)), deadline):
                self._pending[rid] = p
                return p
            self.counters["send_failures"] += 1
            self._release(p, now, False, None)
            self._health.refused(worker, now)
            if task is not None and not refreshed:  # perhaps the task moved meanwhile
                refreshed = True
                self._refresh(now)
        raise Unavailable(f"{_what(task)}: no worker took the request ({MAX_SENDS} tried, "
                          f"refusing connections)")

    def _owner(self, task: str, now: float, avoid: str | None) -> str:
        owners = self.map.tasks.get(task)
        if not owners:  # not in the map, or no serving owner yet: perhaps the map is stale
            self._refresh(now)
            owners = self.map.tasks.get(task)
            if owners is None:
                raise NoOwner(f"no task {task!r} in map version {self.map.version}")
            if not owners:
                raise NoOwner(f"task {task!r} has no owner that serves requests (map version "
                              f"{self.map.version})")
        worker = self._chooser.pick(owners, now, avoid)
        if worker is None:
            raise Unavailable(f"task {task!r}: every owner ({', '.join(owners)}) has "
                              f"{self.config.max_active} requests in flight from this client")
        return worker

    def _await(self, p: _Pending, deadline: float, task: str | None, timeout: float) -> Reply:
        # One frame per wake-up: a trailing NOBLOCK recv that fails costs an exception, more
        # than another poll; zmq_poll on a plain list, not a Poller built per call.
        sock, clock = p.peer.socket, self._clock
        items = [(sock, POLLIN)]
        while True:
            left = deadline - clock()
            if left > 0 and zmq_poll(items, int(left * 1000) + 1):
                try:
                    frame = sock.recv(NOBLOCK)
                except zmq.Again:  # woken for nothing
                    continue
                reply = self._take(p.peer, frame)
                if reply is not None:
                    if reply.id == p.rid:
                        return reply
                    self.counters["late_replies"] += 1  # ended a request that timed out
            elif clock() >= deadline:
                self.counters["timeouts"] += 1
                p.forget_at = clock() + self.config.forget_after
                self._abandoned.append(p)  # still in flight: flow control keeps counting it
                raise CallTimeout(f"{_what(task)}: no reply from {p.worker} ({p.peer.address}) "
                                  f"within {timeout:.3g} s; it may still have been served")

    def _take(self, peer: Peer, frame: bytes) -> Reply | None:
        """A frame from ``peer``: the reply that ends one of its requests, or None (counted:
        garbage, or a reply to a request already forgotten)."""
        try:
            reply = decode_as(frame, Reply)
        except ProtocolError:
            self.counters["bad_replies"] += 1
            return None
        p = self._pending.get(reply.id)
        if p is None or p.peer is not peer:
            self.counters["late_replies"] += 1
            return None
        del self._pending[reply.id]
        self._finish(p, reply, self._clock())
        return reply

    def _finish(self, p: _Pending, reply: Reply, now: float) -> None:
        report = LoadReport(reply.qps, reply.utilization, reply.errors)
        usable = report.checked()  # wire-valid is not enough: no real load looks like 1e15 qps
        if usable is not report:
            self.counters["bad_reports"] += 1  # ignored, or its noise-sized values zeroed
        self._release(p, now, reply.code != REPLY_ERROR, usable)
        self.served_by[p.worker] += 1
        self._health.replied(p.worker, report, reply.lame_duck)

    def _release(self, p: _Pending, now: float, ok: bool, report: LoadReport | None) -> None:
        """End a request on whichever path picked it; the report reaches both paths."""
        if p.via_any is not None:
            self._balancer.release(p.via_any, now, ok, report)
            if report is not None:
                self._chooser.report(p.worker, report, now)
        else:
            self._chooser.finished(p.worker, ok, now, report)
            if report is not None:
                self._balancer.report(p.worker, report, now)

    # -- the map and the passage of time ---------------------------------------------------

    def _housekeeping(self, now: float) -> None:
        if now >= self._next_refresh:
            self._refresh(now)
        self._health.tick(now)
        abandoned = self._abandoned
        while abandoned and abandoned[0].forget_at <= now:
            p = abandoned.popleft()
            if self._pending.pop(p.rid, None) is p:
                self._release(p, now, False, None)

    def _refresh(self, now: float) -> bool:
        """Fetch the map if newer (at most one wait of ``control_timeout``). A failure keeps
        the map held, and raises only if there is none yet."""
        self._next_refresh = now + self.config.refresh_interval
        try:
            new = self._fetch_map(self.map)
        except MapUnavailable:
            self.counters["refresh_failures"] += 1
            if self.map is EMPTY:
                raise
            return False
        self.counters["refreshes"] += 1
        if new is None:
            return False
        self._apply(new)
        return True

    def _apply(self, new: RouteMap) -> None:
        old, self.map = self.map, new
        workers = new.workers
        self._peers.retain({w: e.serve for w, e in workers.items()})
        self._balancer.set_backends(workers)
        self._chooser.set_workers(workers)
        self._health.new_map(old.workers, workers)
        for gone in self.served_by.keys() - workers.keys():  # a count per worker of the map
            del self.served_by[gone]

    def _fetch_map(self, held: RouteMap) -> RouteMap | None:
        """The leader's map, None when ours is current, or `MapUnavailable` saying why not.
        (After a failover the new leader's map has another epoch: it replaces ours.)"""
        args = {"if_newer_than": held.version, "epoch": held.epoch} if held.version >= 0 else {}
        try:
            result = self._control.call("map", args)
        except Unreachable as exc:
            raise MapUnavailable(f"no map from the supervisor: {exc}") from None
        except ControlFailed as exc:
            raise MapUnavailable(f"the supervisor refused the map: {exc}") from None
        try:
            return None if result is None else parse_map(result)
        except ProtocolError as exc:
            raise MapUnavailable(f"bad map from {self._control.endpoint}: {exc}") from None


def _what(task: str | None) -> str:
    return "call_any" if task is None else f"task {task!r}"
