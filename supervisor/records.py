"""What the supervisor keeps per worker: one compact record (slots), shared by the parts.

Each part owns its own fields — the registry the identity, the clocks and the incarnation
bookkeeping; the dispatcher the numbering of instruction sets and what the worker is expected
to confirm; the assigner ``desired`` — so a report on the hot path touches one object.
"""

from __future__ import annotations

from collections.abc import Mapping

from corral.common.wire.protocol import Status


class WorkerRecord:
    """One worker, as known from its reports. Mutable; owned by the registry.

    ``active`` turns False when its timeout fires (no report for lease + margin) and True when
    it reports again. Instruction sets to it are numbered ``out_seq`` within this epoch and
    this incarnation. ``expect_seq`` is the last set that carried changes: until the worker
    reports having applied it, its running set is not judged.
    """

    __slots__ = (
        "active",
        "clock_offset",
        "conflict",
        "contender",
        "desired",
        "digest",
        "drained",
        "expect",
        "expect_seq",
        "expect_since",
        "got_reset",
        "id",
        "identity",
        "incarnation",
        "last_probe",
        "last_received",
        "last_sent_at",
        "last_seq",
        "mismatch_since",
        "out_seq",
        "prev_incarnation",
        "refused",
        "resend_wait",
        "seen_sent_at",
        "silence_tick",
        "status",
    )

    def __init__(self, status: Status, identity: bytes, now: float) -> None:
        self.id = status.worker
        self.last_received = now
        self.active = True
        self.silence_tick = -1  # the tick its silence is judged at (Registry); -1: none
        self.drained = False
        self.conflict: str | None = None
        # A second incarnation of this id that reported while this one is alive: it is sent
        # nothing until this one is known to be gone (see Registry). (identity, status)
        self.contender: tuple[bytes, Status] | None = None
        self.last_probe = -1e18
        # The assigner's live view of the tasks this worker should run (placement's own set).
        self.desired: Mapping[str, None] = {}
        self.refused: dict[int, None] = {}
        self.prev_incarnation = 0
        self.new_incarnation(status, identity, now)

    def new_incarnation(self, status: Status, identity: bytes, now: float) -> None:
        """Per-incarnation state starts over (a restarted worker process)."""
        self.incarnation = status.incarnation
        # The least (our clock at reading) - (its clock at sending) seen: a report's send time
        # on our clock is at most its sent_at + this (see `sent_time`). Its clock is its own
        # process's: it starts over with the incarnation.
        self.clock_offset = now - status.sent_at
        self.identity = identity
        # The last report whose content changed; a settled worker's later reports (same
        # digest) only move last_seq and seen_sent_at, the ones lease answers echo.
        self.status = status
        self.last_seq = status.seq
        self.seen_sent_at = status.sent_at
        self.digest: int | None = None
        self.contender = None
        self.reset_numbering()

    def reset_numbering(self) -> None:
        """Instruction sets start over: a new incarnation, or a new epoch (HA promotion)."""
        self.out_seq = 0
        self.last_sent_at = -1e18
        self.expect_seq = 0
        self.expect: tuple[int, int] = (0, 0)  # (epoch, expect_seq): applied >= it means done
        self.expect_since = 0.0
        self.mismatch_since: float | None = None
        self.got_reset = False
        self.resend_wait = 0.0  # the reconciler's: its first wait, doubled per resend
        self.digest = None

    def heard(self, sent_at: float, now: float) -> None:
        """A report sent at ``sent_at`` (its clock) was read at ``now`` (ours)."""
        if now - sent_at < self.clock_offset:
            self.clock_offset = now - sent_at

    def sent_time(self) -> float:
        """When its latest report was sent, on our clock (at most one least delay late). Under
        a backlog a report is read long after it was sent; what it shows is judged as of then:
        a set it does not show yet may simply have crossed it."""
        return self.status.sent_at + self.clock_offset

    @property
    def display_state(self) -> str:
        """inactive | drained | starting | ready | lame_duck, as corralctl and metrics show it."""
        if not self.active:
            return "inactive"
        return "drained" if self.drained else str(self.status.state)
