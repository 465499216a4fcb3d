"""The supervisor's own lifecycle: its phase, its epoch, and whether it may act (HA role).

Phases (the seed's four)::

    warmup   -> querying   the warm-up ended (its timer, or --expect-workers reported), while
                           leading
    querying -> running    the first task list arrived; the assignment was rebuilt and sent
    querying -> querying   the first query failed: retried after --query-retry
    any      -> warmup     demoted (HA): the next leader decides; a standby keeps listening
    any      -> stopping   shutdown was asked for (SIGTERM, SIGINT, `corralctl shutdown`)

HA roles (supervisor/ha.py decides; this only records and answers "may I act?")::

    standby -> leader    promoted: a new epoch (etcd's fencing token); a standby that has
                         already heard the workers for a whole warm-up queries at once
    leader  -> standby   demoted (etcd lease lost, the local deadline passed, or resigned: a
                         standby hears clearly more workers): stop sending at once and forget
                         the assignment

Without --ha a supervisor is always the leader, and its epoch comes from its state file; it may
still rise above any epoch a worker reports having seen, until it has said anything of substance.
"""

from __future__ import annotations

from dataclasses import replace
from enum import Enum, StrEnum

from corral.common.wire.protocol import MAX_STATE_EPOCH

from .role import Role

DEADLINE_PASSED = "the leader's etcd deadline passed"


class Phase(StrEnum):
    WARMUP = "warmup"
    QUERYING = "querying"
    RUNNING = "running"
    STOPPING = "stopping"


class RoleChange(Enum):
    NONE = 0
    PROMOTED = 1
    DEMOTED = 2


class Lifecycle:
    def __init__(self, epoch: int, now: float, ha: bool) -> None:
        self.phase = Phase.WARMUP
        self.started_at = now
        self.ha = ha
        # With HA, nothing is ours until the election says so; the epoch is etcd's token.
        self.leader = not ha
        self.epoch = 0 if ha else epoch
        self.leader_until = float("inf")
        self.role: Role | None = None  # the election's latest decision, for `corralctl status`
        self.warm = False  # the warm-up has run its course (a promoted standby skips it)
        self.content_sent = False  # once true, the epoch may no longer move
        self.warmup_until = now  # when the warm-up's timer ends it (the core sets it)

    @property
    def running(self) -> bool:
        return self.phase is Phase.RUNNING

    def end_warmup(self) -> bool:
        """The warm-up is over; True if the first task query should start now."""
        self.warm = True
        if self.phase is not Phase.WARMUP or not self.leader:
            return False
        self.phase = Phase.QUERYING
        return True

    def start_running(self) -> None:
        self.phase = Phase.RUNNING

    def stop(self) -> None:
        self.phase = Phase.STOPPING

    def on_role(self, role: Role, now: float) -> RoleChange:
        """Record the election's decision and say what changed. A leading role read after its
        deadline (the election thread, retrying a keep-alive, says again that it leads until
        the last good one's deadline) is that deadline passing: it demotes, never promotes."""
        if role.leader and now >= role.leader_until:
            role = replace(role, leader=False, error=DEADLINE_PASSED)
        self.role = role
        if role.leader:
            self.leader_until = role.leader_until
            if not self.leader:
                self.leader, self.epoch, self.content_sent = True, role.epoch, False
                return RoleChange.PROMOTED
        elif self.leader and self.ha:
            return self._demote()
        return RoleChange.NONE

    def deadline_passed(self, now: float) -> bool:
        """A leader whose etcd deadline passed must stop acting, whatever its election thread
        is doing (it may be stuck in a request)."""
        return self.leader and now >= self.leader_until

    def expire_leadership(self) -> RoleChange:
        return self._demote() if self.leader else RoleChange.NONE

    def _demote(self) -> RoleChange:
        self.leader, self.leader_until = False, 0.0
        if self.phase is not Phase.STOPPING:
            self.phase = Phase.WARMUP
        return RoleChange.DEMOTED

    def spoke(self) -> None:
        """Something of substance (a set with content) was sent: the epoch may no longer
        move."""
        self.content_sent = True

    def raise_epoch(self, seen: int) -> int | None:
        """The fleet has seen epoch ``seen``. Before anything of substance was said, the epoch
        rises above it (a lost state file must not make workers ignore us), never past
        MAX_STATE_EPOCH: the new epoch, or None when nothing changes. With HA the epoch is
        etcd's token and never moves here."""
        if seen < self.epoch or self.ha or self.content_sent or seen >= MAX_STATE_EPOCH:
            return None
        self.epoch = seen + 1
        return self.epoch
