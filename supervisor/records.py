"""What the supervisor keeps per worker, and the supervisor's own lifecycle phase."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from corral.common.protocol import Status


class Phase(StrEnum):
    """The supervisor's lifecycle (the seed's four phases).

    warmup   -> querying   the warm-up ended (its timer, or --expect-workers reported)
    querying -> running    the first task list arrived; the assignment was rebuilt and sent
    querying -> querying   the first query failed: retried after --query-retry
    any      -> stopping   shutdown was asked for (SIGTERM, SIGINT, `corralctl shutdown`)
    """

    WARMUP = "warmup"
    QUERYING = "querying"
    RUNNING = "running"
    STOPPING = "stopping"


class WorkerRecord:
    """One worker, as known from its reports. Mutable; owned by `SupervisorCore`.

    ``active`` turns False when its timeout fires (no report for lease + margin) and True when
    it reports again. Instruction sets to it are numbered ``out_seq`` within this epoch and
    this incarnation. ``expect_seq`` is the last set that carried changes: until the worker
    reports having applied it, its running set is not judged.
    """

    __slots__ = (
        "active",
        "conflict",
        "desired",
        "digest",
        "drained",
        "expect",
        "expect_seq",
        "expect_since",
        "first_seen",
        "got_reset",
        "id",
        "identity",
        "incarnation",
        "last_received",
        "last_sent_at",
        "last_seq",
        "mismatch_since",
        "out_seq",
        "prev_incarnation",
        "prev_reports",
        "refused",
        "resend_wait",
        "seen_sent_at",
        "status",
        "takeover_at",
    )

    def __init__(self, status: Status, identity: bytes, now: float) -> None:
        self.id = status.worker
        self.identity = identity
        self.incarnation = status.incarnation
        self.status = status
        self.first_seen = now
        self.last_received = now
        self.last_seq = status.seq
        self.active = True
        self.drained = False
        self.conflict: str | None = None
        # Placement's live set of the tasks this worker should run (see Assigner._bind).
        self.desired: Mapping[str, None] = {}
        self.refused: dict[int, None] = {}
        self.prev_incarnation = 0
        self.prev_reports = 0
        self.takeover_at = -1e18
        self.new_incarnation(status, identity)

    def new_incarnation(self, status: Status, identity: bytes) -> None:
        """Per-incarnation counters start over (a restarted worker process)."""
        self.incarnation = status.incarnation
        self.identity = identity
        # The last report whose content changed; a settled worker's later reports (same
        # digest) only move last_seq and seen_sent_at, the ones lease answers echo.
        self.status = status
        self.last_seq = status.seq
        self.seen_sent_at = status.sent_at
        self.digest: int | None = None
        self.out_seq = 0
        self.last_sent_at = -1e18
        self.expect_seq = 0
        self.expect: tuple[int, int] = (0, 0)  # (epoch, expect_seq): applied >= it means done
        self.expect_since = 0.0
        self.mismatch_since: float | None = None
        self.got_reset = False
        self.resend_wait = 0.0  # set by the core: one report interval, doubled per resend

    @property
    def display_state(self) -> str:
        """inactive | drained | starting | ready | lame_duck, as corralctl and metrics show it."""
        if not self.active:
            return "inactive"
        return "drained" if self.drained else str(self.status.state)
