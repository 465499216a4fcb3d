"""The intake: what a worker's report means, and what follows from it.

Every report goes through here — the hot path. A settled worker's report (the same content as
its last full one) only moves its seq and clocks, and is answered when its lease needs it;
anything else is classified by the registry (`Outcome`) and acted on: a join or a comeback is
admitted, a restart takes its desired set over, a change of state or capacity updates the
placement, a contender is probed or refused, hand-offs are confirmed, reconciliation judges the
running set, and the lease is renewed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from corral.common.errors import ProtocolError
from corral.common.timers import TimerWheel
from corral.common.wire.codec import decode_as, encoded
from corral.common.wire.protocol import (
    REFUSE_DUPLICATE_ID,
    REFUSE_UNAUTHORIZED,
    Refusal,
    Status,
    StatusGlance,
    WorkerState,
    token_epoch,
)

from .assigner import Assigner
from .config import SupervisorConfig
from .counters import Counters
from .dispatch import Dispatch
from .events import Action, Log, PersistEpoch, RawReport, Report, Send
from .feed import Feed
from .lifecycle import Lifecycle, Phase
from .rebalancing import Rebalancing
from .reconciler import Reconciler
from .records import WorkerRecord
from .registry import Outcome, Registry

_NONE: list[Action] = []
_EMPTY_MAP = encoded({})
_SAME_PROCESS = (Outcome.REVIVED, Outcome.CHANGED, Outcome.UNCHANGED)


class Intake:
    def __init__(self, config: SupervisorConfig, counters: Counters, wheel: TimerWheel[Any],
                 life: Lifecycle, registry: Registry, assigner: Assigner,
                 reconciler: Reconciler, dispatch: Dispatch, converge: Rebalancing,
                 feed: Feed, out: list[Action], flush: Callable[[float], list[Action]],
                 take_out: Callable[[], list[Action]],
                 end_warmup: Callable[[float], None]) -> None:
        self._config = config
        self._counters = counters
        self._wheel = wheel
        self._life = life
        self._registry = registry
        self._assigner = assigner
        self._changes = assigner.changes  # kept for the assigner's life
        self._reconciler = reconciler
        self._dispatch = dispatch
        self._converge = converge
        self._feed = feed
        self._out = out  # the actions under way, the core's; `take_out` hands them over
        self._take_out = take_out  # (none while a batch is open: they wait for its end)
        self._flush = flush
        self._end_warmup = end_warmup
        self._curve = bool(config.authorized_keys)
        self._resend_wait = reconciler.first_wait

    def report(self, ev: Report | RawReport, now: float) -> list[Action]:
        """One report. Most come from a settled worker saying what it said last time: the
        fields that matter and the task maps' bytes, as read (`RawReport`: the maps are not
        even decoded), hash to the digest the record keeps, so the report only moves the seq
        and the clocks. At fleet scale the cost of a report is allocations and cache
        misses on per-worker objects, not bytecode: this path touches a handful, the full
        path dozens. ``applied`` is not compared: a settled worker has applied every set with
        content (so later ones are renewals), and each renewal would otherwise break the fast
        path for the next report."""
        self._counters.reports += 1
        if isinstance(ev, RawReport):
            st: Status | StatusGlance = ev.glance
            running_b, failures_b = bytes(ev.glance.running), bytes(ev.glance.failures)
        else:
            st = ev.status
            running_b = encoded(st.running) if st.running else _EMPTY_MAP
            failures_b = encoded(st.failures) if st.failures else _EMPTY_MAP
        if self._curve and ev.key_name != st.worker:
            return self._unauthorized(ev.identity, ev.key_name, st.worker, st.incarnation)
        rec = self._registry.records.get(st.worker)
        if rec is not None:
            # A hash kept on the record, not the fields themselves: comparing those (the maps'
            # bytes as `Raw`, no copies) was cheaper in a loop but slower at fleet scale
            # (measured: 8.0 against 7.6 us a settled report at 100,000 workers), each a
            # cache miss of its own.
            digest = hash((ev.identity, st.incarnation, st.state, st.max_load, st.serve,
                           st.lease_held, running_b, failures_b))
            if digest == rec.digest:
                if st.seq <= rec.last_seq:
                    self._counters.stale_reports += 1
                    return _NONE
                rec.last_seq = st.seq
                rec.seen_sent_at = sent_at = st.sent_at
                rec.last_received = now
                if now - sent_at < rec.clock_offset:  # rec.heard, inline: the hot path
                    rec.clock_offset = now - sent_at
                if now - rec.last_sent_at >= self._dispatch.renew_every:
                    self._dispatch.renew(rec, now)
                return self._take_out()
        else:
            digest = None
        if isinstance(ev, RawReport):  # not the report it sent last time: read it all
            try:
                full = Report(ev.identity, decode_as(ev.frame, Status), ev.key_name)
            except ProtocolError as exc:
                self._counters.bad_task_maps += 1
                self._out.append(Log("debug", "bad task maps in a report",
                                     {"worker": st.worker, "error": str(exc)}))
                return self._take_out()
        else:
            full = ev
        self._feed.at(now)
        self._full_report(full, now, digest)
        return self._flush(now)

    def _full_report(self, ev: Report, now: float, digest: int | None) -> None:
        st = ev.status
        outcome, rec = self._registry.classify(ev.identity, st, now)
        if outcome is Outcome.STALE or outcome is Outcome.IMPOSTOR:
            return
        rec.digest = None
        running = self._life.running
        if outcome is Outcome.REFUSED:
            self._refuse(ev.identity, st.incarnation, REFUSE_DUPLICATE_ID,
                         rec.conflict or "this worker incarnation was refused")
            return
        if outcome is Outcome.WAITING:
            # Is the id's holder still connected? A send to a gone peer comes back as PeerGone.
            if self._registry.probe_due(rec, now, self._config.report_interval / 2):
                self._dispatch.renew(rec, now)
            self._feed.add("contested", worker=rec.id, incarnation=f"{st.incarnation:x}")
            return
        if outcome in _SAME_PROCESS and rec.contender is not None:
            # The live holder spoke while a contender waited: that is a second live process
            # with its id, refused for good.
            identity, inc, why = self._registry.refuse_contender(rec)
            self._out.append(Log("error", "duplicate worker id", {"worker": rec.id,
                                 "refused": f"{inc:x}", "kept": f"{rec.incarnation:x}"}))
            self._feed.add("refused", worker=rec.id, reason=why)
            self._refuse(identity, inc, REFUSE_DUPLICATE_ID, why)
        if outcome is Outcome.JOINED:
            self._joined(rec, now)
        elif outcome is Outcome.RESTARTED:
            self.took_over(rec, now)
        elif outcome is Outcome.REVIVED:
            self._feed.add("revive", worker=rec.id)
            self._out.append(Log("info", "worker is back", {"worker": rec.id,
                                                            "running": len(st.running)}))
            self._notice_epochs(rec)
            self._up(rec, now)
        elif outcome is Outcome.CHANGED and running:
            self._feed.add("state", worker=rec.id, state=str(st.state), max_load=st.max_load)
            self._assigner.update_mode(rec, now)
            self._converge.want(now)
        if not running:
            # Nothing to judge before the supervisor runs: the same report next time takes
            # the fast path (the warm-up reads a whole fleet's reports; the rebuild resets
            # every worker, which judges its next report in full again).
            if rec.active and digest is not None:
                rec.digest = digest
            if self._dispatch.renewal_due(rec, now) and not self._changes.touches(rec.id):
                self._dispatch.renew(rec, now)
            return
        if st.failures:
            self._assigner.check_failures(rec, now)
        handoffs = self._assigner.handoffs
        # Only a worker in a hand-off is kept off the fast path while hand-offs are in flight
        # (at 100,000 workers a rebalance is nearly always in flight somewhere).
        involved = bool(handoffs.pinned) and handoffs.involves(rec.id)
        if involved and (self._assigner.confirm(rec) + handoffs.stopped(rec.id, st.running)):
            self._converge.want(now)  # tasks pinned by their hand-off may move now
        if (rec.drained or st.state is WorkerState.LAME_DUCK) and rec.desired:
            self._assigner.drain(rec, now)  # tasks that waited for another hand-off to end
        if involved or self._reconciler.needed(rec):
            self._reconciler.check(rec, now)
        elif rec.active and digest is not None and not self._changes.touches(rec.id):
            rec.digest = digest  # settled: the same report next time takes the fast path
        if not self._changes.touches(rec.id) and self._dispatch.renewal_due(rec, now):
            self._dispatch.renew(rec, now)

    def _joined(self, rec: WorkerRecord, now: float) -> None:
        st = rec.status
        rec.resend_wait = self._resend_wait
        self._number_on(rec)
        # A restart hears the whole fleet join during its warm-up: that is one line ("warm-up
        # over", with the count) at info, not one per worker (100,000 lines cost the warm-up
        # ~3 s at 100,000 workers); a worker joining later is news.
        level = "debug" if self._life.phase is Phase.WARMUP else "info"
        self._out.append(Log(level, "worker joined", {
            "worker": rec.id, "max_load": st.max_load, "state": str(st.state),
            "running": len(st.running), "zone": st.zone or None}))
        self._feed.add("join", worker=rec.id, max_load=st.max_load, zone=st.zone)
        self._notice_epochs(rec)
        if self._life.phase is Phase.STOPPING:
            return
        self._up(rec, now)
        expect = self._config.expect_workers
        if self._life.phase is Phase.WARMUP and expect and self._registry.active >= expect:
            self._end_warmup(now)

    def took_over(self, rec: WorkerRecord, now: float) -> None:
        """A new incarnation holds the id now (a restart, or a contender whose rival left)."""
        rec.resend_wait = self._resend_wait
        self._number_on(rec)
        self._registry.arm(rec, now)
        self._out.append(Log("info", "worker restarted", {
            "worker": rec.id, "incarnation": f"{rec.incarnation:x}"}))
        self._feed.add("restart", worker=rec.id, incarnation=f"{rec.incarnation:x}")
        self._notice_epochs(rec)
        if self._life.running and self._assigner.placement.view.has_worker(rec.id):
            self._assigner.update_mode(rec, now)  # the new process runs its desired set
            self._changes.reset(rec.id)
        else:
            self._up(rec, now)

    def _up(self, rec: WorkerRecord, now: float) -> None:
        """A worker (new or back) takes part: admitted while running, renewed otherwise."""
        if self._life.running:
            rec.got_reset = False
            self._assigner.admit(rec, now)
            self._converge.want(now)
        elif self._life.leader:
            self._dispatch.renew(rec, now)  # its lease holds: it keeps running what it runs

    def _number_on(self, rec: WorkerRecord) -> None:
        """A worker process that already applied sets of this epoch (the live one of two
        sharing an id, taken back after the newcomer was refused; or one forgotten and back)
        drops any set numbered at or below what it applied: go on from there."""
        applied = rec.status.applied
        if applied[0] == self._life.epoch:
            rec.out_seq = max(rec.out_seq, applied[1])

    def _notice_epochs(self, rec: WorkerRecord) -> None:
        """A lost state file must not make workers ignore us: before anything of substance
        was said, the epoch rises above any a worker has seen."""
        st = rec.status
        seen = max(st.applied[0], token_epoch(max(st.running.values(), default=0)))
        if seen < self._life.epoch or (seen == self._life.epoch and self._life.content_sent):
            return  # ours (a worker that was away and is back), or older
        epoch = self._life.raise_epoch(seen)
        if epoch is not None:
            self._out.append(PersistEpoch(epoch))
            self._out.append(Log("warning", "epoch raised above what workers have seen",
                                 {"epoch": epoch}))
        elif not self._config.ha:
            self._counters.foreign_epochs += 1
            self._out.append(Log("error", "a worker applied a newer epoch: is another "
                                 "supervisor running?",
                                 {"worker": rec.id, "epoch": seen, "ours": self._life.epoch}))

    def _refuse(self, identity: bytes, incarnation: int, code: str, reason: str) -> None:
        if self._life.leader:
            self._out.append(Send(identity, Refusal(self._life.epoch, incarnation, code, reason)))

    def _unauthorized(self, identity: bytes, name: str | None, worker: str,
                      incarnation: int) -> list[Action]:
        """Curve: a report under an id its key does not name is counted and refused."""
        self._counters.unauthorized_reports += 1
        reason = (f"this worker's key is authorised as {name!r}, not as {worker!r}"
                  if name else "this worker's key is not authorised")
        self._refuse(identity, incarnation, REFUSE_UNAUTHORIZED, reason)
        return self._take_out()
