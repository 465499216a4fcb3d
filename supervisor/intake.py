"""The intake: what a worker's report means, and what follows from it — the hot path.

A settled worker's report (the same content as its last full one) only moves its seq and
clocks and is answered when its lease needs it; anything else is classified by the registry
(`Outcome`) and acted on: a join or a comeback is admitted, a restart takes its desired set
over, a change of state or capacity updates the placement, a contender is probed or refused,
hand-offs are confirmed, reconciliation judges the running set, and the lease is renewed.
`report` says whether the report was read in full (the core then turns the changes it made
into sets); what it decides goes to the effects. See docs/architecture.md for the path of one
report, hop by hop.

Owns, on each `WorkerRecord`: the clocks of its reports (``last_seq``, ``seen_sent_at``,
``last_received``, ``clock_offset``) and the settled ``digest``.
"""

from __future__ import annotations

from corral.common.errors import ProtocolError
from corral.common.wire.codec import decode_as, encoded
from corral.common.wire.ids import FORBIDDEN, check_id
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
from .claims import EpochClaims
from .config import SupervisorConfig
from .counters import Counters
from .dispatch import Dispatch
from .effects import Effects
from .events import RawReport, Report
from .failures import Failures
from .feed import Feed
from .lifecycle import Lifecycle, Phase
from .rebalancing import Rebalancing
from .reconciler import Reconciler
from .records import WorkerRecord
from .registry import Outcome, Registry
from .starts import Starts


def _bad_ids(st: Status) -> str | None:
    """What is wrong with the ids a report holds (its worker id, zone, labels, task ids), or
    None. Checked on every full report; a settled worker's reports were checked once."""
    for text, what in ((st.worker, "worker id"), (st.zone, "zone")):
        why = check_id(text, what)
        if why is not None:
            return why
    for key, value in st.labels.items():
        why = check_id(key, "label") or check_id(value, f"label {key!r:.40}")
        if why is not None:
            return why
    for tasks in (st.running, st.failures, st.starting):
        if tasks and FORBIDDEN.search("".join(tasks)):
            for task in tasks:
                why = check_id(task, "task id")
                if why is not None:
                    return why
    return None


def _peer(rec: WorkerRecord) -> dict[str, str]:
    """Where a report came from, for a log line: its connection and serve address."""
    out = {"connection": rec.identity.hex()}
    if rec.status.serve:
        out["serve"] = rec.status.serve
    return out


_EMPTY_MAP, _EMPTY_LIST = encoded({}), encoded(())


def _default(field: str) -> object:
    """The glance's own default object for a field left off the wire."""
    fields = StatusGlance.__struct_fields__
    return StatusGlance.__struct_defaults__[fields.index(field) - len(fields)]


_NO_FAILURES, _NONE_STARTING = _default("failures"), _default("starting")
_SAME_PROCESS = (Outcome.REVIVED, Outcome.CHANGED, Outcome.UNCHANGED)


class Intake:
    def __init__(self, config: SupervisorConfig, counters: Counters, life: Lifecycle,
                 registry: Registry, assigner: Assigner, failures: Failures, starts: Starts,
                 reconciler: Reconciler, dispatch: Dispatch, rebalancing: Rebalancing,
                 feed: Feed, effects: Effects) -> None:
        self._config = config
        self._counters = counters
        self._life = life
        self._registry = registry
        self._assigner = assigner
        self._failures = failures
        self._starts = starts
        self._reconciler = reconciler
        self._dispatch = dispatch
        self._rebalancing = rebalancing
        self._feed = feed
        self._effects = effects
        self._changes = effects.changes  # one for the effects' life
        self._curve = bool(config.authorized_keys)
        self._record = registry.records.get  # the registry keeps one dict for its life
        self._claims = EpochClaims()

    def unsettle(self, rec: WorkerRecord) -> None:
        """Read ``rec``'s next report in full: what it should run, or its state, changed."""
        rec.digest = None

    def report(self, ev: Report | RawReport, now: float) -> bool:
        """One report; True if it was read in full (changes may wait to be sent). Most come
        from a settled worker saying what it said last time: the fields that matter and the
        task maps' bytes, as read (`RawReport`: the maps are not even decoded), hash to the
        digest the record keeps, so the report only moves the seq and the clocks. ``applied``
        is not compared: a settled worker has applied every set with content (so later ones
        are renewals), and each renewal would otherwise break the fast path for the next."""
        self._counters.reports += 1
        st: Status | StatusGlance
        if isinstance(ev, RawReport):
            st = glance = ev.glance
            running_b = bytes(glance.running)
            # Most workers have no failing task: their reports leave the map out.
            failures = glance.failures
            failures_b = _EMPTY_MAP if failures is _NO_FAILURES else bytes(failures)
            starting = glance.starting
            starting_b = _EMPTY_LIST if starting is _NONE_STARTING else bytes(starting)
        else:
            st = ev.status
            running_b = encoded(st.running) if st.running else _EMPTY_MAP
            failures_b = encoded(st.failures) if st.failures else _EMPTY_MAP
            starting_b = encoded(st.starting) if st.starting else _EMPTY_LIST
        if self._curve and ev.key_name != st.worker:
            self._unauthorized(ev.identity, ev.key_name, st.worker, st.incarnation)
            return False
        rec = self._record(st.worker)
        if rec is not None:
            # A hash kept on the record, not the fields: fewer objects touched per report.
            digest = hash((ev.identity, st.incarnation, st.state, st.max_load, st.serve,
                           st.lease_held, st.drained, running_b, failures_b, starting_b))
            if digest == rec.digest:
                if st.seq <= rec.last_seq:
                    self._counters.stale_reports += 1
                    return False
                rec.last_seq = st.seq
                rec.seen_sent_at = sent_at = st.sent_at
                rec.last_received = now
                if now - sent_at < rec.clock_offset:
                    rec.clock_offset = now - sent_at
                if now - rec.last_sent_at >= self._dispatch.renew_every:
                    self._dispatch.renew(rec, now)
                return False
        elif not self._registry.admits(ev.identity, now):
            return False  # a connection bringing new ids faster than --fresh-ids: dropped
        else:
            digest = None
        if isinstance(ev, RawReport):  # not the report it sent last time: read it all
            try:
                full = Report(ev.identity, decode_as(ev.frame, Status), ev.key_name)
            except ProtocolError as exc:
                self._counters.bad_task_maps += 1
                self._effects.log("debug", "bad task maps in a report",
                                  {"worker": st.worker, "error": str(exc)})
                return False
        else:
            full = ev
        self._feed.at(now)
        self._full_report(full, now, digest)
        return True

    def _full_report(self, ev: Report, now: float, digest: int | None) -> None:
        st = ev.status
        why = _bad_ids(st)
        if why is not None:  # never acted on: no record, no log line per report
            self._counters.bad_ids += 1
            self._effects.log("debug", "a report with a bad id", {"why": why})
            return
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
        if outcome in _SAME_PROCESS:
            self._heard(rec, st, now)
            if rec.contender is not None and st.state is WorkerState.HANDING_OVER:
                # The holder announces its hand-over while its successor waits: it goes now.
                self._counters.handovers += 1
                self._registry.accept_contender(rec, now)
                outcome, st = Outcome.RESTARTED, rec.status
            elif rec.contender is not None:
                # The live holder spoke while a contender waited: that is a second live
                # process with its id, refused for good.
                identity, inc, why = self._registry.refuse_contender(rec)
                self._effects.log("error", "duplicate worker id", {
                    "worker": rec.id, "refused": f"{inc:x}", "kept": f"{rec.incarnation:x}"})
                self._feed.add("refused", worker=rec.id, reason=why)
                self._refuse(identity, inc, REFUSE_DUPLICATE_ID, why)
        if st.drained is not rec.drained and (outcome is Outcome.JOINED or not self._life.leader):
            # An operator's drain, as the worker heard it from the leader: a restarted
            # supervisor, or a standby that may lead, keeps it (the leader's own word rules).
            self._registry.set_drained(rec, st.drained)
            self._effects.log("info", "drain kept from the worker's report" if st.drained
                              else "undrain kept from the worker's report", {"worker": rec.id})
        if outcome is Outcome.JOINED:
            self._joined(rec, now)
        elif outcome is Outcome.RESTARTED:
            self.took_over(rec, now)
        elif outcome is Outcome.REVIVED:
            self._feed.add("revive", worker=rec.id)
            self._effects.log("info", "worker is back", {"worker": rec.id,
                                                         "running": len(st.running)})
            self._notice_epochs(rec)
            self._up(rec, now)
        elif outcome is Outcome.CHANGED and running:
            self._feed.add("state", worker=rec.id, state=str(st.state), max_load=st.max_load)
            self._assigner.update_mode(rec, now)
            self._rebalancing.want(now)
        changes, dispatch = self._changes, self._dispatch
        if not running:
            # Nothing to judge before the supervisor runs: the same report next time takes
            # the fast path (the warm-up reads a whole fleet's reports; the rebuild resets
            # every worker, which judges its next report in full again).
            if rec.active and digest is not None:
                rec.digest = digest
            if dispatch.renewal_due(rec, now) and not changes.touches(rec.id):
                dispatch.renew(rec, now)
            return
        a = self._assigner
        if st.failures:
            self._failures.check(rec, now)
        late = self._starts.check(rec, a.desired(rec.id), now)
        if late:
            self._failures.not_started(rec, late, now)
            self._rebalancing.want(now)
        handoffs = a.handoffs
        # Only a worker in a hand-off is kept off the fast path while hand-offs are in flight
        # (at 100,000 workers a rebalance is nearly always in flight somewhere).
        involved = bool(handoffs.pinned) and handoffs.involves(rec.id)
        if involved and (a.confirm(rec) + handoffs.stopped(rec.id, st.running)):
            self._rebalancing.want(now)  # tasks pinned by their hand-off may move now
        if (rec.drained or st.state is WorkerState.LAME_DUCK) and a.holds(rec.id):
            a.drain(rec, now)  # tasks that waited for another hand-off to end
        if involved or self._reconciler.needed(rec):
            self._reconciler.check(rec, now)
        elif rec.active and digest is not None and not changes.touches(rec.id):
            rec.digest = digest  # settled: the same report next time takes the fast path
        if not changes.touches(rec.id) and dispatch.renewal_due(rec, now):
            dispatch.renew(rec, now)

    def _heard(self, rec: WorkerRecord, st: Status, now: float) -> None:
        """A report of the process that holds the id, read at ``now``."""
        rec.last_seq = st.seq
        rec.seen_sent_at = st.sent_at
        rec.last_received = now
        if now - st.sent_at < rec.clock_offset:
            rec.clock_offset = now - st.sent_at

    def _joined(self, rec: WorkerRecord, now: float) -> None:
        st = rec.status
        self._reconciler.start_over(rec)
        self._dispatch.number_on(rec)
        # One line per new id, at debug (counted in `joins`; the feed and `corralctl workers`
        # show them): a restart hears the whole fleet join, a flood of made-up ids is many.
        self._effects.log("debug", "worker joined", {
            "worker": rec.id, "max_load": st.max_load, "state": str(st.state),
            "running": len(st.running), "zone": st.zone or None})
        self._feed.add("join", worker=rec.id, max_load=st.max_load, zone=st.zone)
        self._notice_epochs(rec)
        if self._life.phase is Phase.STOPPING:
            return
        self._up(rec, now)

    def took_over(self, rec: WorkerRecord, now: float) -> None:
        """A new incarnation holds the id now (a restart, or a contender whose rival left)."""
        st = rec.status
        rec.last_seq, rec.seen_sent_at = st.seq, st.sent_at
        rec.last_received, rec.clock_offset = now, now - st.sent_at  # its own new clock
        rec.digest = None
        self._dispatch.start_over(rec)
        self._reconciler.start_over(rec)
        self._dispatch.number_on(rec)
        self._registry.arm(rec, now)
        self._effects.log("info", "worker restarted", {
            "worker": rec.id, "incarnation": f"{rec.incarnation:x}"})
        self._feed.add("restart", worker=rec.id, incarnation=f"{rec.incarnation:x}")
        self._notice_epochs(rec)
        if self._life.running and self._assigner.view.has_worker(rec.id):
            self._assigner.update_mode(rec, now)  # the new process runs its desired set
            self._changes.reset(rec.id)
            self._rebalancing.want(now)  # back ready after a drain: empty, and eligible again
        else:
            self._up(rec, now)

    def _up(self, rec: WorkerRecord, now: float) -> None:
        """A worker (new or back) takes part: admitted while running, renewed otherwise."""
        if self._life.running:
            self._dispatch.expect_reset(rec)
            self._assigner.admit(rec, now)
            self._rebalancing.want(now)
            return
        self._assigner.arrived(now)  # a rebuild while workers still arrive waits for them
        if self._life.leader:
            self._dispatch.renew(rec, now)  # its lease holds: it keeps running what it runs

    def _notice_epochs(self, rec: WorkerRecord) -> None:
        """A lost state file must not make workers ignore us: before anything of substance
        was said, the epoch rises above what the fleet has seen — as far as the fleet backs it
        (`EpochClaims`), never on one peer's word and never out of range."""
        st = rec.status
        token = token_epoch(max(st.running.values(), default=0))
        seen = max(st.applied[0], token)
        life = self._life
        if seen < life.epoch or (seen == life.epoch and life.content_sent):
            return  # ours (a worker that was away and is back), or older
        if self._config.ha or life.content_sent:
            self._counters.foreign_epochs += 1
            if self._config.ha:
                return  # a deposed or a new leader's sets: the election decides who leads
            self._effects.log("error", "a worker applied a newer epoch: is another "
                              "supervisor running?", {"worker": rec.id, "epoch": seen,
                                                      "ours": life.epoch, **_peer(rec)})
            return
        backed = self._claims.backed(rec.identity, st.applied[0], token, life.epoch)
        epoch = life.raise_epoch(backed) if backed >= life.epoch else None
        if epoch is not None:
            self._effects.persist_epoch(epoch)
            self._effects.log("warning", "epoch raised above what workers have seen",
                              {"epoch": epoch})
        if seen >= life.epoch:
            self._counters.epoch_claims_refused += 1
            self._effects.log("warning", "refused to raise the epoch on this worker's word: "
                              "no task runs under it and no other worker backs it, or it is "
                              "out of range", {"worker": rec.id, "claimed": seen,
                                               "ours": life.epoch, **_peer(rec)})

    def _refuse(self, identity: bytes, incarnation: int, code: str, reason: str) -> None:
        if self._life.leader:
            self._effects.send(identity, Refusal(self._life.epoch, incarnation, code, reason))

    def _unauthorized(self, identity: bytes, name: str | None, worker: str,
                      incarnation: int) -> None:
        """Curve: a report under an id its key does not name is counted and refused."""
        self._counters.unauthorized_reports += 1
        reason = (f"this worker's key is authorised as {name!r}, not as {worker!r}"
                  if name else "this worker's key is not authorised")
        self._refuse(identity, incarnation, REFUSE_UNAUTHORIZED, reason)
