"""What the supervisor keeps per worker: one compact record (slots), shared by the parts.

Each field has one owner, the only part that writes it (`OWNERS`; tests/unit/test_layers.py
checks it over the code): the registry the identity, incarnation and liveness; the intake the
clocks of the reports it read and the settled digest; the dispatcher the numbering of
instruction sets; the reconciler what the worker is expected to confirm. Here are only the
fields' first values and read-only helpers, so a report on the hot path touches one object.
"""

from __future__ import annotations

from corral.common.wire.protocol import Status

OWNERS: dict[str, tuple[str, ...]] = {
    "registry": ("active", "conflict", "contender", "drained", "held", "id", "identity",
                 "incarnation", "last_probe", "prev_incarnation", "refused", "silence_tick",
                 "status"),
    "intake": ("clock_offset", "digest", "last_received", "last_seq", "seen_sent_at"),
    "dispatch": ("got_reset", "last_sent_at", "out_seq"),
    "reconciler": ("expect", "expect_seq", "expect_since", "mismatch_since", "resend_wait"),
}


class WorkerRecord:
    """One worker, as known from its reports. Mutable; created by the registry.

    ``active`` turns False when its timeout fires (no report for lease + margin) and True when
    it reports again. Instruction sets to it are numbered ``out_seq`` within this epoch and
    this incarnation. ``expect_seq`` is the last set that carried changes: until the worker
    reports having applied it, its running set is not judged.
    """

    __slots__ = tuple(sorted(f for fields in OWNERS.values() for f in fields))

    def __init__(self, status: Status, identity: bytes, now: float) -> None:
        # registry
        self.id = status.worker
        self.identity = identity
        self.incarnation = status.incarnation
        self.status = status  # the last report whose content changed
        self.active = True
        self.silence_tick = -1  # the tick its silence is judged at (Registry); -1: none
        self.drained = False
        self.held = False  # it ever ran a task (else it is forgotten soon after going silent)
        self.conflict: str | None = None
        # A second incarnation of this id that reported while this one is alive: it is sent
        # nothing until this one is known to be gone (see Registry). (identity, status)
        self.contender: tuple[bytes, Status] | None = None
        self.last_probe = -1e18
        self.refused: dict[int, None] = {}
        self.prev_incarnation = 0
        # intake: a settled worker's later reports (same digest) only move these clocks. The
        # clock offset is the least (our clock at reading) - (its clock at sending) seen: a
        # report's send time on our clock is at most its sent_at + this (see `sent_time`).
        self.last_received = now
        self.last_seq = status.seq
        self.seen_sent_at = status.sent_at
        self.clock_offset = now - status.sent_at
        self.digest: int | None = None
        # dispatch
        self.out_seq = 0
        self.last_sent_at = -1e18
        self.got_reset = False
        # reconciler
        self.expect_seq = 0
        self.expect: tuple[int, int] = (0, 0)  # (epoch, expect_seq): applied >= it means done
        self.expect_since = 0.0
        self.mismatch_since: float | None = None
        self.resend_wait = 0.0  # its first wait, doubled per resend

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
