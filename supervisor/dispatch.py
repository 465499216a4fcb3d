"""The dispatcher: the only place an instruction set is built, numbered and sent.

Each set to a worker incarnation is numbered ``out_seq`` within the epoch, answers the worker's
latest report (so it renews the lease from that report's send time), and carries the fencing
token of every task it adds and the spec of those that have one. The first set carrying tasks
that an incarnation gets from this epoch is always a reset (its whole desired set). A set
bigger than `PART_TASKS` tasks or `PART_BYTES` of specs travels in parts that the worker
applies together, so no frame is huge and the loop keeps receiving between them.

Only the leader speaks: a standby (or a deposed leader) builds nothing.

Fencing tokens (`make_token(epoch, n)`) only grow per task: each new grant of a task takes the
task's next number in this epoch, and every epoch is above the last. A task a worker already
runs keeps the token it runs under (its reports say which), unless its spec changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from corral.common.wire.protocol import Instructions, Renewal, make_token

from .config import SupervisorConfig
from .counters import Counters
from .effects import Effects
from .lifecycle import Lifecycle
from .records import WorkerRecord
from .taskbook import TaskBook

PART_TASKS = 2000  # task ids per frame of a big set
PART_BYTES = 512 * 1024  # spec text per frame of a big set (a spec may be up to 64 KiB)


class Sent(NamedTuple):
    """What a set told a worker: the tasks it adds (all of them for a reset), those it stops
    (for a reset: what it last reported running and is not in the set), and whether it had
    content (a reset, or tasks to add or stop) rather than being a bare renewal."""

    adds: tuple[str, ...]
    stops: tuple[str, ...]
    content: bool


_NOTHING = Sent((), (), False)


class Dispatch:
    """Owns, on each `WorkerRecord`: ``out_seq``, ``last_sent_at``, ``got_reset``."""

    def __init__(self, config: SupervisorConfig, life: Lifecycle, counters: Counters,
                 effects: Effects, book: TaskBook) -> None:
        self._config = config
        self._life = life
        self._counters = counters
        self._effects = effects
        self._book = book
        self._grants: dict[str, int] = {}  # task -> grants made of it in this epoch
        # The most grants of a task dropped from `_grants` in this epoch: a task that leaves
        # the list and comes back counts on from above it, so its tokens still only grow.
        self._floor = 0
        self.renew_every = config.renew_every
        self._lease = config.lease

    def new_epoch(self) -> None:
        """Grant numbers start over under a new (higher) epoch."""
        self._grants, self._floor = {}, 0

    def forget_tasks(self, tasks: Iterable[str]) -> None:
        """These tasks left the list: their counts go, the floor keeps their highest."""
        grants = self._grants
        for task in tasks:
            n = grants.pop(task, 0)
            if n > self._floor:
                self._floor = n

    def __len__(self) -> int:
        return len(self._grants)

    def start_over(self, rec: WorkerRecord, renumber: bool = True) -> None:
        """Sets to ``rec`` are numbered afresh (a new incarnation, or a new epoch; without
        ``renumber``, a leader back in its epoch: they number on), and the first with tasks
        is a reset."""
        if renumber:
            rec.out_seq = 0
        rec.last_sent_at = -1e18
        rec.got_reset = False

    def number_on(self, rec: WorkerRecord) -> None:
        """A worker process that already applied sets of this epoch (the live one of two
        sharing an id, taken back after the newcomer was refused; or one forgotten and back)
        drops any set numbered at or below what it applied: go on from there."""
        applied = rec.status.applied
        if applied[0] == self._life.epoch:
            rec.out_seq = max(rec.out_seq, applied[1])

    def expect_reset(self, rec: WorkerRecord) -> None:
        """Its next set with content is a reset (it takes part afresh)."""
        rec.got_reset = False

    def renewal_due(self, rec: WorkerRecord, now: float) -> bool:
        return now - rec.last_sent_at >= self.renew_every

    def send(self, rec: WorkerRecord, now: float, desired: Mapping[str, None], *,
             reset: bool = False, add: Iterable[str] = (), remove: Iterable[str] = (),
             respec: Mapping[str, None] | None = None) -> Sent:
        """One instruction set to ``rec`` (a lease renewal when empty); ``desired`` is what it
        should run, for a reset. Nothing is sent by a standby."""
        life = self._life
        if not life.leader:
            return _NOTHING
        adds = tuple(add)
        removes = tuple(remove)
        stops = removes
        if life.running and (reset or ((adds or removes) and not rec.got_reset)):
            reset, adds, removes = True, tuple(desired), ()
            stops = tuple(t for t in rec.status.running if t not in desired)
            rec.got_reset = True
        elif not life.running:
            reset, adds, removes, stops = False, (), (), ()
        rec.out_seq += 1
        rec.last_sent_at = now
        tokens = self._tokens(rec, adds, respec) if adds else {}
        specs = self._specs(adds) if adds else {}
        head: dict[str, Any] = {
            "epoch": life.epoch, "seq": rec.out_seq, "incarnation": rec.incarnation,
            "lease": self._config.lease, "answers_seq": rec.last_seq,
            "answers_sent_at": rec.seen_sent_at, "reset": reset, "drained": rec.drained}
        if len(adds) + len(removes) <= PART_TASKS and not _big(specs):
            self._effects.send(rec.identity, Instructions(
                **head, add=adds, remove=removes, tokens=tokens, specs=specs))
        else:
            self._send_parts(rec.identity, head, adds, removes, tokens, specs)
        return Sent(adds, stops, bool(reset or adds or removes))

    def renew(self, rec: WorkerRecord, now: float) -> None:
        """A bare lease renewal: `send` with nothing in it, built the short way (this is what
        most of the supervisor's messages are)."""
        life = self._life
        if not life.leader:
            return
        rec.out_seq += 1
        rec.last_sent_at = now
        self._effects.send(rec.identity, Renewal(
            life.epoch, rec.out_seq, rec.incarnation, self._lease, rec.last_seq,
            rec.seen_sent_at, rec.drained))

    def renew_all(self, recs: Iterable[WorkerRecord], now: float) -> int:
        """A bare renewal to each of ``recs``; how many."""
        n = 0
        for rec in recs:
            self.renew(rec, now)
            n += 1
        return n

    def _tokens(self, rec: WorkerRecord, adds: tuple[str, ...],
                respec: Mapping[str, None] | None) -> dict[str, int]:
        running = rec.status.running
        grants, epoch = self._grants, self._life.epoch
        tokens: dict[str, int] = {}
        for task in adds:
            held = running.get(task)
            if held is not None and not (respec and task in respec):
                tokens[task] = held
                continue
            n = grants.get(task, self._floor) + 1
            grants[task] = n
            tokens[task] = make_token(epoch, n)
        return tokens

    def _specs(self, adds: tuple[str, ...]) -> dict[str, str]:
        spec = self._book.spec
        out: dict[str, str] = {}
        for task in adds:
            text = spec(task)
            if text is not None:
                out[task] = text
        return out

    def _send_parts(self, identity: bytes, head: dict[str, Any], adds: tuple[str, ...],
                    removes: tuple[str, ...], tokens: dict[str, int],
                    specs: dict[str, str]) -> None:
        """Split a big set into frames of at most PART_TASKS tasks and PART_BYTES of specs."""
        chunks: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
        add_l: list[str] = []
        n = size = 0
        for task in adds:
            text = specs.get(task)
            cost = len(text) if text is not None else 0
            if n and (n >= PART_TASKS or size + cost > PART_BYTES):
                chunks.append((tuple(add_l), ()))
                add_l, n, size = [], 0, 0
            add_l.append(task)
            n, size = n + 1, size + cost
        if add_l:
            chunks.append((tuple(add_l), ()))
        for i in range(0, len(removes), PART_TASKS):
            chunks.append(((), removes[i:i + PART_TASKS]))
        parts = len(chunks)
        for i, (a, r) in enumerate(chunks):
            msg = Instructions(**head, add=a, remove=r, tokens={t: tokens[t] for t in a},
                               specs={t: specs[t] for t in a if t in specs}, part=i,
                               parts=parts)
            self._effects.send(identity, msg)
        self._counters.set_parts += parts


def _big(specs: dict[str, str]) -> bool:
    return bool(specs) and sum(map(len, specs.values())) > PART_BYTES
