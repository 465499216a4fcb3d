"""Following the supervisor with one control client, at a cost it hardly notices
(docs/dashboard.md, "How it follows the supervisor" and "Cost").

- the change feed: ``events`` after the cursor about once a second (at once again while a page
  comes back full); a ``missed`` answer, a new leader (another endpoint answers) or a feed that
  started again (a restart: its newest number is below the cursor) start a resync;
- ``status`` every couple of seconds (phase, epoch, counts, HA roles);
- the complete ``workers`` listing, in pages, paced by its own cost: after a listing that took
  d seconds the next one waits d ÷ ``budget`` (at least ``workers_min``), so the dashboard asks
  at most about ``budget`` of the supervisor's time for it; feed events that touch workers bring
  the next listing forward within that pace, and patch the rows at once meanwhile;
- a balance sample every ``history.EVERY_S``.

Every answer becomes a delta for the browsers (`stream.Hub`). The control client is blocking
and single-threaded: every call, the browsers' own (a drill-down, a task search, an action)
included, runs on one executor thread, one at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from corral.cli import logs
from corral.client import ControlClient, ControlFailed, Unreachable

from . import history
from .eventlog import EventLog
from .roster import Roster
from .stream import Hub

MAX_DELTA_ROWS = 500  # more changed rows than this: browsers refetch their page instead
HANDOFF_PAGE = 2000  # hand-offs in flight the dashboard asks the names of, at most
WORKER_KINDS = frozenset({"join", "restart", "revive", "timeout", "move", "drain", "undrain",
                          "state", "handoff", "rebalance", "placed", "tasks", "contested",
                          "refused", "role", "forget"})


@dataclass(frozen=True)
class FollowConfig:
    events_every: float = 1.0
    status_every: float = 2.0
    workers_min: float = 2.0  # seconds between complete listings, at least
    workers_max: float = 60.0  # and at most
    budget: float = 0.01  # share of the supervisor's time the listings may take
    page: int = 2000  # workers per call: the supervisor's loop is never held long
    retry: float = 1.0  # after the supervisor did not answer


class Follower:
    def __init__(self, client: ControlClient, hub: Hub, cfg: FollowConfig = FollowConfig(),
                 wall: Callable[[], float] = time.time) -> None:
        self.client, self.hub, self.cfg = client, hub, cfg
        self._wall = wall
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="control")
        self.fleet, self.log, self.history = Roster(), EventLog(), history.History()
        self.status: dict[str, Any] | None = None
        self.conn: dict[str, Any] = {"ok": False, "endpoint": client.endpoint, "error": None,
                                     "since_ms": self.wall_ms(), "endpoints": client.endpoints}
        self.cursor: int | None = None
        self._events_from: str | None = None  # the endpoint whose feed the cursor belongs to
        now = time.monotonic()
        self.due = {"events": now, "status": now, "workers": now, "sample": now + 1.0}
        self.listing_cost = 0.0
        self._listed_at = 0.0
        self._wake = asyncio.Event()
        self._stopping = False
        self._log = logs.get("dashboard.follower")

    def wall_ms(self) -> float:
        return self._wall() * 1000.0

    # -- calls ---------------------------------------------------------------------------------

    async def call(self, verb: str, args: dict[str, Any] | None = None) -> Any:
        """One control call on the client's thread (raises `Unreachable`, `ControlFailed`)."""
        result, _ = await self._call(verb, args)
        return result

    async def _call(self, verb: str, args: dict[str, Any] | None = None) -> tuple[Any, str]:
        def run() -> tuple[Any, str]:
            return self.client.call(verb, args), self.client.endpoint

        return await asyncio.get_running_loop().run_in_executor(self._pool, run)

    async def act(self, verb: str, args: dict[str, Any]) -> Any:
        """An operator's action; what it changes is fetched at once."""
        result = await self.call(verb, args)
        self.due["events"] = self.due["status"] = time.monotonic()
        self._soon_listing()
        return result

    # -- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        while not self._stopping:
            now = time.monotonic()
            try:
                if now >= self.due["events"]:
                    await self.poll_events()
                if now >= self.due["status"]:
                    await self.poll_status()
                if now >= self.due["workers"]:
                    await self.poll_workers()
                if now >= self.due["sample"]:
                    self.take_sample()
            except (Unreachable, ControlFailed) as exc:
                self._lost(str(exc))
            except Exception as exc:  # a bug, or an answer of an unexpected shape: go on
                self._log.exception("following the supervisor failed", error=repr(exc))
                self._lost(f"{type(exc).__name__}: {exc}")
            wait = min(self.due.values()) - time.monotonic()
            if wait > 0:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), min(wait, 1.0))

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        await asyncio.get_running_loop().run_in_executor(self._pool, self.client.close)
        self._pool.shutdown(wait=False)

    def _found(self, endpoint: str) -> None:
        if not self.conn["ok"] or self.conn["endpoint"] != endpoint:
            self.conn = {**self.conn, "ok": True, "endpoint": endpoint, "error": None,
                         "since_ms": self.wall_ms()}
            self._log.info("following the supervisor", endpoint=endpoint)
            self.hub.publish("events", [self.log.note("connected", self.wall_ms(),
                                                      endpoint=endpoint)])
            self._publish_status()

    def _lost(self, error: str) -> None:
        now = time.monotonic()
        for k in ("events", "status", "workers"):
            self.due[k] = max(self.due[k], now + self.cfg.retry)
        if self.conn["ok"] or self.conn["error"] != error:
            was_ok = self.conn["ok"]
            self.conn = {**self.conn, "ok": False, "error": error,
                         "since_ms": self.wall_ms() if was_ok else self.conn["since_ms"]}
            if was_ok:
                self._log.warning("supervisor unreachable", error=error)
                self.hub.publish("events", [self.log.note("unreachable", self.wall_ms(),
                                                          reason=error)])
            self._publish_status()

    def _resync(self, why: str) -> None:
        """Start the feed afresh (its newest events) and list the fleet again now."""
        self.cursor = None
        now = time.monotonic()
        self.due["workers"] = self.due["status"] = self.due["events"] = now
        self._log.info("resynchronising with the supervisor", reason=why)
        self.hub.publish("events", [self.log.note("resync", self.wall_ms(), reason=why)])

    def _soon_listing(self) -> None:
        """Bring the next listing forward, within the listing's pace."""
        earliest = self._listed_at + self.listing_cost / self.cfg.budget
        self.due["workers"] = min(self.due["workers"], max(earliest, time.monotonic() + 0.2))

    # -- what is asked -------------------------------------------------------------------------

    async def poll_events(self) -> None:
        args: dict[str, Any] = {"limit": 1000}
        if self.cursor is not None:
            args["after"] = self.cursor
        ans, endpoint = await self._call("events", args)
        now = time.monotonic()
        self.due["events"] = now + self.cfg.events_every
        if self.cursor is not None and endpoint != self._events_from:
            self._events_from = endpoint
            self._found(endpoint)
            return self._resync(f"the leader is now at {endpoint}")
        if self.cursor is not None and ans["last"] < self.cursor:
            self._found(endpoint)
            return self._resync("the supervisor's feed started again (a restart)")
        self._events_from = endpoint
        wall = self.wall_ms()
        kept = []
        if ans.get("missed"):
            kept.append(self.log.note("missed", wall, missed=ans["missed"]))
            self._soon_listing()
        self.cursor = ans["cursor"]
        kept += self.log.add(ans["events"], float(ans["now"]), wall)
        self._found(endpoint)  # after the backlog, so the page reads in order
        changed: dict[str, dict[str, Any]] = {}
        removed: dict[str, None] = {}
        touched = False
        for ev in kept:
            delta = self.fleet.apply_event(ev)
            for r in delta.changed:
                changed[r["id"]] = r
                removed.pop(r["id"], None)
            for wid in delta.removed:
                changed.pop(wid, None)
                removed[wid] = None
            touched = touched or ev.get("kind") in WORKER_KINDS
        if kept:
            self.hub.publish("events", kept)
        if changed or removed:
            self._publish_fleet(list(changed.values()), list(removed), listing=False)
        if touched:
            self._soon_listing()
        if ans["cursor"] < ans["last"]:
            self.due["events"] = now  # a full page: more to catch up on

    async def poll_status(self) -> None:
        st, endpoint = await self._call("status")
        self._found(endpoint)
        self.due["status"] = time.monotonic() + self.cfg.status_every
        old = self.status
        self.status = st
        if old is not None and old.get("epoch") != st.get("epoch") and self.cursor is not None:
            self._resync(f"epoch {old.get('epoch')} -> {st.get('epoch')}")
        await self._settle_handoffs(int(st.get("handoffs") or 0))
        if old is None or {**old, "uptime_s": 0} != {**st, "uptime_s": 0}:
            self._publish_status()

    async def _settle_handoffs(self, in_flight: int) -> None:
        """Fewer hand-offs in flight than shown: some ended without an event (their task left
        the task list): ask which are in flight, show only those, never more than the count."""
        log = self.log
        if 0 < in_flight < len(log.handoffs) and in_flight <= HANDOFF_PAGE:
            ans = await self.call("tasks", {"handoffs": True, "limit": HANDOFF_PAGE})
            if ans.get("next") is None:  # the complete list: the others ended
                log.keep_handoffs({row["task"] for row in ans["tasks"]})
        log.settle_handoffs(in_flight)

    async def poll_workers(self) -> None:
        started = time.monotonic()
        rows: list[dict[str, Any]] = []
        after: str | None = None
        while True:
            args: dict[str, Any] = {"limit": self.cfg.page}
            if after is not None:
                args["after"] = after
            ans, endpoint = await self._call("workers", args)
            rows += ans["workers"]
            after = ans.get("next")
            if after is None:
                break
        self._found(endpoint)
        end = time.monotonic()
        self.listing_cost, self._listed_at = end - started, end
        pause = min(max(self.listing_cost / self.cfg.budget, self.cfg.workers_min),
                    self.cfg.workers_max)
        self.due["workers"] = end + pause
        delta = self.fleet.replace(rows, self.wall_ms())
        self._publish_fleet(delta.changed, delta.removed, listing=True)

    def take_sample(self) -> None:
        self.due["sample"] = time.monotonic() + history.EVERY_S
        if not self.fleet.listed:
            return
        wall = self.wall_ms()
        point = history.sample(self.fleet.summary(), self.status,
                               self.log.moves_since(wall - 60_000.0), wall)
        self.hub.publish("sample", self.history.add(point))

    # -- to the browsers -----------------------------------------------------------------------

    def _publish_fleet(self, changed: list[dict[str, Any]], removed: list[str],
                       listing: bool) -> None:
        many = len(changed) + len(removed) > MAX_DELTA_ROWS
        self.hub.publish("fleet", {
            "changed": [] if many else changed, "removed": [] if many else removed,
            "truncated": many, "listing": listing, "summary": self.fleet.summary(),
            "now_ms": round(self.wall_ms())})

    def _publish_status(self) -> None:
        self.hub.publish("status", {"status": self.status, "conn": self.conn,
                                    "handoffs": list(self.log.handoffs.values())})

    def table_sizes(self) -> dict[str, int]:
        """Entries in every per-worker, per-task and per-browser table of the dashboard: each
        has a way out (a listing, a feed event, the supervisor's counts, a ring's capacity)."""
        return {**self.fleet.sizes(), **self.log.sizes(), "history": len(self.history),
                "browsers": len(self.hub)}

    def snapshot(self, recent: int = 200) -> dict[str, Any]:
        """What a browser gets first on its stream; deltas follow."""
        return {"now_ms": round(self.wall_ms()), "status": self.status, "conn": self.conn,
                "summary": self.fleet.summary(), "history": self.history.points(),
                "events": self.log.recent(recent),
                "handoffs": list(self.log.handoffs.values()),
                "listing": {"cost_s": round(self.listing_cost, 4), "min_s": self.cfg.workers_min,
                            "budget": self.cfg.budget}}
