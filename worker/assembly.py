"""Instruction sets that travel in parts: put back together, exactly once, or not at all. Pure.
(The wire side: docs/protocol.md, "Instructions".)

A big set (a reset of thousands of tasks) comes as ``parts`` frames sharing one ``(epoch, seq)``,
numbered by ``part`` from 0, each with the same lease fields, the same ``reset`` and a slice of
``add``/``remove``/``tokens``/``specs``. `Assembler` holds at most one set in assembly:

    empty      -> assembling   the first part of a set newer than the last one applied
    assembling -> assembling   another part of it (a duplicate is dropped and counted)
    assembling -> assembling   a part of a *newer* set: the partial one is discarded (counted)
    assembling -> empty        the last missing part came: the whole set is returned, once
    assembling -> empty        `forget`: a newer set was applied whole, or the agent is stopping

A part of an *older* set than the one in assembly is dropped; so is a part that contradicts the
set it claims to belong to (another ``parts``, ``reset`` or ``incarnation``, ``part >= parts``),
and a set whose parts add up to more than `MAX_ENTRIES` tasks (memory stays bounded). The caller
(`WorkerMachine`) has already dropped parts of sets not newer than the one it applied.

    >>> from corral.common.wire.protocol import Instructions
    >>> def part(i, add):
    ...     return Instructions(epoch=1, seq=2, incarnation=9, lease=10.0, answers_seq=1,
    ...                         answers_sent_at=0.0, reset=True, add=add, part=i, parts=2)
    >>> a = Assembler()
    >>> a.offer(part(1, ("c",))), a.offer(part(1, ("c",)))
    ((True, None), (False, None))
    >>> accepted, whole = a.offer(part(0, ("a", "b")))
    >>> whole.add, whole.parts, a.counters["parts_duplicate"]
    (('a', 'b', 'c'), 1, 1)
"""

from __future__ import annotations

import msgspec

from corral.common.wire.protocol import Instructions

# The most tasks (adds + removes) one assembled set may hold, summed over its parts.
MAX_ENTRIES = 1_000_000


class Assembler:
    """Collects the parts of one instruction set; `offer` returns the whole set once complete."""

    def __init__(self) -> None:
        self._key: tuple[int, int] | None = None  # (epoch, seq) of the set in assembly
        self._first: Instructions | None = None
        self._parts: dict[int, Instructions] = {}
        self._entries = 0
        self.counters: dict[str, int] = dict.fromkeys(
            ("parts_received", "parts_stale", "parts_duplicate", "parts_invalid",
             "parts_discarded", "sets_assembled", "sets_too_big"), 0)

    @property
    def pending(self) -> tuple[int, int] | None:
        """``(epoch, seq)`` of the set in assembly, if any."""
        return self._key

    def offer(self, msg: Instructions) -> tuple[bool, Instructions | None]:
        """Take one part: (whether it was taken, the whole set if this part completed it).
        A part that was taken answers one of the worker's reports: it may renew the lease."""
        self.counters["parts_received"] += 1
        if not 0 <= msg.part < msg.parts:
            self.counters["parts_invalid"] += 1
            return False, None
        key = (msg.epoch, msg.seq)
        if self._key is not None and key < self._key:
            self.counters["parts_stale"] += 1
            return False, None
        if self._key is not None and key > self._key:
            self.counters["parts_discarded"] += 1
            self.forget()
        if self._key is None:
            self._key, self._first = key, msg
        first = self._first
        assert first is not None
        if (msg.parts, msg.reset, msg.incarnation) != (first.parts, first.reset,
                                                        first.incarnation):
            self.counters["parts_invalid"] += 1
            return False, None
        if msg.part in self._parts:
            self.counters["parts_duplicate"] += 1
            return False, None
        self._entries += len(msg.add) + len(msg.remove)
        if self._entries > MAX_ENTRIES:
            self.counters["sets_too_big"] += 1
            self.forget()
            return False, None
        self._parts[msg.part] = msg
        if len(self._parts) < first.parts:
            return True, None
        whole = _merge([self._parts[i] for i in range(first.parts)])
        self.forget()
        self.counters["sets_assembled"] += 1
        return True, whole

    def forget(self) -> None:
        """Drop the set in assembly (if any)."""
        self._key, self._first, self._parts, self._entries = None, None, {}, 0


def _merge(parts: list[Instructions]) -> Instructions:
    """One set from its parts, in part order; the lease fields of the latest answer."""
    add: list[str] = []
    remove: list[str] = []
    tokens: dict[str, int] = {}
    specs: dict[str, str] = {}
    for p in parts:
        add += p.add
        remove += p.remove
        tokens.update(p.tokens)
        specs.update(p.specs)
    latest = max(parts, key=lambda p: (p.answers_sent_at, p.answers_seq))
    return msgspec.structs.replace(
        parts[0], add=tuple(add), remove=tuple(remove), tokens=tokens, specs=specs,
        lease=latest.lease, answers_seq=latest.answers_seq,
        answers_sent_at=latest.answers_sent_at, part=0, parts=1)
