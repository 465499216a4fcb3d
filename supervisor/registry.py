"""The worker registry: who the workers are, which process speaks for each id, who is alive.

It keeps one `WorkerRecord` per worker id and decides, for every report, what the report *is*
(`Outcome`): a settled worker saying what it said last time, a change, a newcomer, a restart,
a comeback, a stale or foreign message — or a second process using an id that a live process
holds. It owns the workers' timeouts (`LazyTimers`: each worker is armed for one tick at a
time, and a report only moves its clock — the timer re-arms itself when it comes out early)
and the identities; what to do about an outcome is the core's business.

A second incarnation of a live id (an id thief, or a restart while the old process still
runs) is a *contender*: nothing is sent to it until the old process is known to be gone — a
send to the old connection found no such peer (`peer_gone`), or the old one's lease + margin
passed in silence. If the old one reports again meanwhile, the contender is refused. A worker
restarted after a crash is therefore taken over at once (its old connection is gone), and a
thief never runs a task while the owner lives. The one exception is a hand-over the holder
announced itself, from its own connection (its report says ``handing_over``: it leaves its
``exec`` tasks running for its successor to adopt): the next incarnation takes the id at once,
and so does a contender that was already waiting.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import IntEnum
from typing import Any

from corral.common.timers import LazyTimers, TimerWheel
from corral.common.wire.protocol import Status, WorkerState

from .counters import Counters
from .fresh import FreshIds
from .records import WorkerRecord

FORGET = "forget"


class Outcome(IntEnum):
    STALE = 0  # not newer than the last report from that process: dropped
    IMPOSTOR = 1  # an id and incarnation from a connection not its own: dropped
    REFUSED = 2  # from an incarnation that was refused: refuse again
    WAITING = 3  # a contender: sent nothing until the live holder of the id is gone
    JOINED = 5  # a new id
    RESTARTED = 6  # a new incarnation took the id over
    REVIVED = 7  # an inactive worker reported again
    CHANGED = 8  # same process, new content
    UNCHANGED = 9  # same process and content as the last full report (digest mismatch only
    #                because the record was not settled)


class Registry:
    def __init__(self, wheel: TimerWheel[Any], counters: Counters, silence: float,
                 forget_after: float, now: float, fresh_ids: int = 64) -> None:
        self.records: dict[str, WorkerRecord] = {}
        self._silence_timers: LazyTimers[str] = LazyTimers(wheel.tick, now)
        self.active = 0
        self._wheel = wheel
        self._counters = counters
        self._silence = silence  # lease + margin
        self._heard_from = float("-inf")  # the end of the last stall: silence counts from it
        self._forget_after = forget_after
        # A worker that never held a task (a made-up id, a worker that never got one) is
        # forgotten soon after it went silent: there is nothing to remember it for.
        self._forget_idle_after = min(forget_after, silence)
        self._fresh = FreshIds(fresh_ids)
        self.liveness = 0  # moves when a worker turns active or inactive (listings' order)
        self._contended: dict[bytes, str] = {}  # a contended id's holder's identity -> the id
        self.generation = 0  # moves when a worker id joins or is forgotten
        self.changes = 0  # moves whenever any record's content may have changed
        # Workers whose last full report listed failing tasks (active or not): `status`
        # counts failing tasks from these, not from every record (O(fleet) per poll).
        self.failing: set[str] = set()

    def __iter__(self) -> Iterator[WorkerRecord]:
        return iter(self.records.values())

    def __len__(self) -> int:
        return len(self.records)

    def get(self, worker: str) -> WorkerRecord | None:
        return self.records.get(worker)

    def named(self, worker: object) -> WorkerRecord:
        """The record a control verb names; LookupError (the caller's answer) if none."""
        rec = self.records.get(worker) if isinstance(worker, str) else None
        if rec is None:
            raise LookupError(f"no worker {worker!r:.80}")
        return rec

    def sizes(self) -> dict[str, int]:
        return {"workers": len(self.records), "contended": len(self._contended),
                "failing_workers": len(self.failing), "fresh_id_buckets": len(self._fresh),
                "silence_timers": len(self._silence_timers)}

    def admits(self, identity: bytes, now: float) -> bool:
        """May connection ``identity`` bring a worker id the registry does not know?"""
        if self._fresh.allow(identity, now):
            return True
        self._counters.fresh_ids_refused += 1
        return False


    # -- reports (the slow path: the core handles a settled worker's report itself) ----------

    def classify(self, identity: bytes, st: Status, now: float) -> tuple[Outcome, WorkerRecord]:
        """What this report is; the record is created or updated accordingly."""
        outcome, rec = self._classify(identity, st, now)
        self._note_report(rec)
        return outcome, rec

    def _note_report(self, rec: WorkerRecord) -> None:
        st = rec.status
        if not rec.held and st.running and len(st.starting) < len(st.running):
            rec.held = True  # it ran a task (given one and never running it is not enough)
        if rec.status.failures:
            self.failing.add(rec.id)
        else:
            self.failing.discard(rec.id)

    def _classify(self, identity: bytes, st: Status, now: float
                  ) -> tuple[Outcome, WorkerRecord]:
        rec = self.records.get(st.worker)
        if rec is None:
            rec = self.records[st.worker] = WorkerRecord(st, identity, now)
            self.generation += 1
            self.liveness += 1
            self.changes += 1
            self.arm(rec, now)
            self.active += 1
            self._counters.joins += 1
            return Outcome.JOINED, rec
        inc = st.incarnation
        if inc == rec.incarnation:
            if st.seq <= rec.last_seq:
                self._counters.stale_reports += 1
                return Outcome.STALE, rec
            if identity != rec.identity:
                self._counters.impostor_reports += 1
                return Outcome.IMPOSTOR, rec
            return self._same_process(rec, st, now), rec
        if inc in rec.refused:
            self._counters.refused_reports += 1
            return Outcome.REFUSED, rec
        if not rec.active:
            return self._take_over(rec, identity, st, now), rec
        if rec.status.state is WorkerState.HANDING_OVER and inc != rec.prev_incarnation:
            self._counters.handovers += 1  # announced by the holder: its successor is here
            return self._take_over(rec, identity, st, now), rec
        if inc == rec.prev_incarnation:
            # The process this one replaced speaks again: it lost its id when it was taken
            # for gone; it is refused, the current one keeps the id.
            rec.refused[inc] = None
            self._counters.refused_reports += 1
            return Outcome.REFUSED, rec
        # Another process wants a live id: it waits.
        if rec.contender is None or rec.contender[1].incarnation != inc:
            self._counters.contested_ids += 1
        rec.contender = (identity, st)
        self._contended[rec.identity] = rec.id
        return Outcome.WAITING, rec

    def _same_process(self, rec: WorkerRecord, st: Status, now: float) -> Outcome:
        self.changes += 1
        prev = rec.status
        rec.status = st
        # The timeout is re-armed lazily: it fires at the old deadline, sees the later report
        # (the intake moved last_received) and moves itself on. No timer work here.
        if not rec.active:
            self._revive(rec, now)
            return Outcome.REVIVED
        if st.state is not prev.state or st.max_load != prev.max_load:
            return Outcome.CHANGED
        return Outcome.UNCHANGED

    def refuse_contender(self, rec: WorkerRecord) -> tuple[bytes, int, str]:
        """The contender is refused for good: (its identity, its incarnation, why)."""
        assert rec.contender is not None
        identity, st = rec.contender
        rec.contender = None
        self._contended.pop(rec.identity, None)
        rec.refused[st.incarnation] = None
        rec.conflict = (f"two live workers use id {rec.id!r}: incarnation {st.incarnation:x} "
                        f"started while {rec.incarnation:x} was running and was refused")
        self._counters.duplicate_ids += 1
        return identity, st.incarnation, rec.conflict

    def _take_over(self, rec: WorkerRecord, identity: bytes, st: Status, now: float) -> Outcome:
        self._contended.pop(rec.identity, None)
        self.changes += 1
        was_active = rec.active
        rec.prev_incarnation = rec.incarnation
        rec.incarnation = st.incarnation
        rec.identity = identity
        rec.status = st
        rec.contender = None
        self._counters.restarts += 1
        if not was_active:
            self._revive(rec, now)
        return Outcome.RESTARTED

    def peer_gone(self, identity: bytes, now: float) -> WorkerRecord | None:
        """A send to ``identity`` found no connection. If a contender waits for that worker's
        id, it takes the id over now; returns the record it took over."""
        worker = self._contended.get(identity)
        rec = self.records.get(worker) if worker is not None else None
        if rec is None or rec.identity != identity or rec.contender is None:
            return None
        self.accept_contender(rec, now)
        return rec

    def accept_contender(self, rec: WorkerRecord, now: float) -> None:
        """The holder of a contended id is gone (or handing over): the contender takes the id
        over."""
        assert rec.contender is not None
        identity, st = rec.contender
        self._take_over(rec, identity, st, now)
        self._note_report(rec)

    def probe_due(self, rec: WorkerRecord, now: float, every: float) -> bool:
        """Whether to check again that a contended id's holder is still connected."""
        if now - rec.last_probe < every:
            return False
        rec.last_probe = now
        return True

    # -- liveness ----------------------------------------------------------------------------

    def arm(self, rec: WorkerRecord, now: float) -> None:
        """Judge ``rec``'s silence at ``now`` + lease + margin (not before: a later arming
        replaces an earlier one)."""
        rec.silence_tick = self._silence_timers.arm(rec.id, now + self._silence)

    def next_deadline(self) -> float | None:
        """When the next worker's silence is judged."""
        return self._silence_timers.next_deadline()

    def expire(self, now: float, read_until: float | None = None) -> list[WorkerRecord]:
        """Judge the silence of the workers armed until ``now``, as of ``read_until`` (the
        last time no report was waiting unread; default: now): one that reported since is
        armed again (from its last report, plus however far reading is behind); the others
        turn inactive and are returned (a contender waiting for the id takes it over then:
        the core admits it)."""
        judged = now if read_until is None else read_until
        timers = self._silence_timers
        keys = timers.expire(now)
        later, silent = timers.next_tick, []
        for worker in keys:
            rec = self.records.get(worker)
            # Gone, inactive, or armed for a later tick (armed again since this was armed).
            if rec is None or not rec.active or not 0 <= rec.silence_tick < later:
                continue
            if self._timeout(rec, now, judged):
                silent.append(rec)
        return silent

    def _revive(self, rec: WorkerRecord, now: float) -> None:
        rec.active = True
        self.active += 1
        self.liveness += 1
        self.arm(rec, now)
        self._wheel.cancel((FORGET, rec.id))
        self._counters.revivals += 1

    def _timeout(self, rec: WorkerRecord, now: float, judged: float) -> bool:
        """Its timer came out: re-armed if it reported since; else it turns inactive (True).
        Silence is judged as of ``judged``: reports sent after it may wait unread."""
        due = max(rec.last_received, self._heard_from) + self._silence
        if judged < due:  # it reported since this was armed (or we could not listen): re-arm
            rec.silence_tick = self._silence_timers.arm(rec.id, due + (now - judged))
            return False
        rec.silence_tick = -1
        rec.active = False
        self.active -= 1
        self.changes += 1
        self.liveness += 1
        self._counters.lease_expiries += 1
        after = self._forget_after if rec.held else self._forget_idle_after
        self._wheel.schedule_timeout((FORGET, rec.id), now + after)
        return True

    def stalled(self, now: float) -> None:
        """The supervisor could not read reports until ``now``: a worker's silence counts
        from here, not from its last report read (later is always safe: its lease ran out
        before, so nobody else gets its tasks any sooner than it stops them)."""
        self._heard_from = now

    def forget(self, worker: str) -> bool:
        """Drop an inactive worker's record (its FORGET timer, or `corralctl forget`)."""
        rec = self.records.get(worker)
        if rec is None or rec.active:
            return False
        del self.records[worker]
        self.failing.discard(worker)
        self._wheel.cancel((FORGET, worker))
        self.generation += 1
        self.liveness += 1
        self.changes += 1
        return True

    def prune(self, now: float) -> None:
        """Forget the fresh-id buckets that are full again."""
        self._fresh.prune(now)

    def set_drained(self, rec: WorkerRecord, drained: bool) -> None:
        """An operator drained (or undrained) the worker."""
        rec.drained = drained
        self.changes += 1
