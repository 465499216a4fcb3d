"""High availability in the state machine: what a supervisor does when it wins or loses the
election (supervisor/ha.py decides; this only reacts).

    standby -> leader    promoted: a new epoch (etcd's fencing token); every worker's sets start
                         over; a standby that has already heard the workers for a whole warm-up
                         queries the task source at once and rebuilds from their reports, so
                         nothing moves or restarts
    leader  -> standby   demoted (etcd lease lost or its local deadline passed): stop sending at
                         once and forget the assignment; the next leader decides
"""

from __future__ import annotations

from corral.common.diff import Diff
from corral.common.placement import Placement

from .assignment import Assigner
from .events import QUERY, QUERY_RETRY, REBALANCE
from .ha import Role
from .handoffs import Handoffs
from .records import Phase


class Leadership(Assigner):
    role: Role | None = None  # the election's latest decision, for `corralctl status`

    def _end_warmup(self, now: float) -> None:  # the lifecycle lives in SupervisorCore
        raise NotImplementedError

    def _on_role(self, role: Role, now: float) -> None:
        """The election decided: promote (a standby that already heard the workers skips the
        warm-up and rebuilds from their reports), demote (stop sending at once), or renew."""
        self.role = role
        if role.leader:
            self.leader_until = role.leader_until
            if not self.leader:
                self._promote(role.epoch, now)
        elif self.leader and self.config.ha:
            self._demote(role.error or "not the leader", now)

    def _promote(self, epoch: int, now: float) -> None:
        self.leader, self.epoch, self._content_sent = True, epoch, False
        for rec in self.workers.values():  # a new epoch: every worker's sets start over
            rec.out_seq, rec.expect_seq, rec.expect = 0, 0, (0, 0)
            rec.got_reset, rec.digest, rec.mismatch_since = False, None, None
            rec.resend_wait, rec.last_sent_at = self._base_wait, -1e18
        self.log.info("leading", epoch=epoch, workers=self.active_workers, warm=self.warm)
        if self.warm:
            self._end_warmup(now)

    def _demote(self, reason: str, now: float) -> None:
        """Stop acting at once; what we decided is the next leader's business now."""
        self.leader, self.leader_until, self.phase = False, 0.0, Phase.WARMUP
        self.placement = Placement(self.config.replicas, self.config.strategy)
        self.handoffs = Handoffs()
        self._diff, self._resets, self._out = Diff(), {}, []
        for key in (QUERY, QUERY_RETRY, REBALANCE):
            self.wheel.cancel(key)
        for rec in self.workers.values():
            rec.desired, rec.digest = {}, None
        self.log.warning("no longer the leader; standing by", reason=reason)
