"""Reconciliation: does a worker run what it should, and did it get what was sent?

Judged on a worker's full reports (a settled worker's reports take the core's fast path and
are not judged at all). Two questions, in order:

1. Has it applied the last set that carried changes? If a report it sent a wait (doubled per
   resend, capped) after the set still shows an older one, the set was lost, and a reset
   converges.
2. Does its running set match its desired set? A difference that outlives one report interval
   (a task that died and was dropped, a stray one) is corrected: tasks it runs that are short
   of a replica there are adopted, the rest stopped; missing ones are sent again.

Both are judged by when a report was *sent* (`WorkerRecord.sent_time`: its own clock plus the
least delay seen from it), not when it was read: a supervisor behind on reading (a warm-up at
100,000 workers) reads reports that crossed the sets it sent, and judging them by the time read
sent the whole fleet its set again.
"""

from __future__ import annotations

from corral.common.placement import correction

from .assigner import Assigner
from .config import SupervisorConfig
from .counters import Counters
from .effects import Effects
from .lifecycle import Lifecycle
from .records import WorkerRecord


class Reconciler:
    """Owns, on each `WorkerRecord`: ``expect``, ``expect_seq``, ``expect_since``,
    ``mismatch_since``, ``resend_wait``."""

    def __init__(self, config: SupervisorConfig, counters: Counters, assigner: Assigner,
                 life: Lifecycle, effects: Effects) -> None:
        self._interval = config.report_interval
        # A set is taken for lost only if no report shows it applied for this long (doubled per
        # resend, capped). A worker confirms a set with content at once, so this is about a
        # round trip through a busy supervisor's queue, not about the report interval: a third
        # of the lease (what a worker's periodic report takes) keeps a fleet-wide burst of
        # resets (a warm-up at 100,000 workers) from being sent twice.
        self.first_wait = max(config.report_interval, config.lease / 3)  # (3.3 s by default)
        self._cap = 16 * self.first_wait
        self._counters = counters
        self._assigner = assigner
        self._changes = effects.changes  # one for the effects' life
        self._life = life
        self._stalled_at = float("-inf")  # see `stalled`

    def stalled(self, now: float) -> None:
        """The supervisor could not read reports until ``now`` (a long step: a rebuild at
        100,000 workers). Sets sent in that step carry its start time, and the reports read
        after it were queued before the workers saw them: every wait counts from here, or the
        whole fleet would be sent its set again (O(1): one time for all records)."""
        self._stalled_at = now

    def start_over(self, rec: WorkerRecord) -> None:
        """Nothing is expected of ``rec`` yet: a new incarnation, or a new epoch."""
        rec.expect_seq, rec.expect, rec.expect_since = 0, (0, 0), 0.0
        rec.mismatch_since = None
        rec.resend_wait = self.first_wait

    def expect(self, rec: WorkerRecord, now: float) -> None:
        """A set with content (numbered ``rec.out_seq``) went to ``rec`` at ``now``: until it
        reports having applied it, its running set is not judged."""
        rec.expect_seq, rec.expect_since, rec.mismatch_since = rec.out_seq, now, None
        rec.expect = (self._life.epoch, rec.out_seq)

    def needed(self, rec: WorkerRecord) -> bool:
        """Whether this report needs judging (cheap: the usual report needs nothing)."""
        st = rec.status
        return (st.applied < rec.expect or bool(st.starting)
                or st.running.keys() != self._assigner.view.tasks_of(rec.id).keys()
                or rec.mismatch_since is not None or rec.resend_wait != self.first_wait)

    def check(self, rec: WorkerRecord, now: float) -> None:
        st = rec.status
        if rec.expect_seq:
            epoch, seq = st.applied
            ours = self._life.epoch
            if epoch < ours or (epoch == ours and seq < rec.expect_seq):
                # Judged as of when the report was sent, not read: under a backlog (a warm-up
                # at 100,000 workers) every report read is older than the sets just sent.
                if rec.sent_time() - max(rec.expect_since, self._stalled_at) \
                        >= rec.resend_wait:
                    # Back off, so an overloaded supervisor, whose every report is late, does
                    # not answer each one with yet another set.
                    self._counters.resends += 1
                    rec.resend_wait = min(rec.resend_wait * 2, self._cap)
                    self._changes.reset(rec.id)
                return
        rec.resend_wait = self.first_wait  # everything sent was applied (or nothing was sent)
        desired = self._assigner.desired(rec.id)
        running = st.running
        if running.keys() == desired.keys():
            rec.mismatch_since = None
            return
        sent = rec.sent_time()
        if rec.mismatch_since is None:
            rec.mismatch_since = sent
            return
        if sent - max(rec.mismatch_since, self._stalled_at) < self._interval:
            return
        fix = correction(running, desired)
        # A task it hands off and no longer runs has ended there: never start it again.
        releasing = self._assigner.handoffs.releasing(rec.id)
        add = [t for t in fix.add if t not in releasing]
        remove = [t for t in fix.remove if not self._assigner.adopt(rec, t)]
        self._counters.reconciliations += 1
        self._changes.correct(rec.id, add, remove)
        rec.mismatch_since = None

