"""What an instruction set asks of a worker: the one reading of a set, shared. Pure.

`plan_set` reads a whole set against the tasks a worker holds; `WorkerMachine` carries the plan
out on its tasks (their lifecycles, its phase and lease decide *when*), and `apply_set` carries
it out at once, for a worker's stand-ins: the tests' fake workers and the benchmarks' emulated
fleets. `SetApplier` follows one incarnation's sets as the machine does (which are dropped,
parts put together by `Assembler`), so a stand-in holds what a real worker would.

The rules (docs/protocol.md)::

    a set for another incarnation          dropped ("sets_foreign")
    (epoch, seq) not newer than applied    dropped ("sets_stale")
    a task in both add and remove          removed: remove wins (the safe side)
    reset                                  exactly the wanted adds: every other held task stops
    a held task added again, same spec     left alone, under the token it was started with
    a held task added again, other spec    restarted under the new grant
    an add without a token                 the set's epoch, counter 0 (make_token(epoch, 0))

    >>> from corral.common.wire.protocol import Instructions
    >>> s = SetApplier(incarnation=9)
    >>> def msg(seq, **kw):
    ...     return Instructions(epoch=1, seq=seq, incarnation=9, lease=10.0, answers_seq=1,
    ...                         answers_sent_at=0.0, **kw)
    >>> s.offer(msg(1, add=("a", "b"), tokens={"a": 5, "b": 6})).started
    ('a', 'b')
    >>> out = s.offer(msg(2, add=("b", "c"), remove=("b",), tokens={"c": 7}))
    >>> out.started, out.stopped, s.tokens()
    (('c',), ('b',), {'a': 5, 'c': 7})
    >>> s.offer(msg(2, reset=True)).taken, s.applied  # not newer: dropped
    (False, (1, 2))
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from corral.common.wire.protocol import Instructions, make_token

from .assembly import Assembler

__all__ = ["Applied", "Grant", "Outcome", "SetApplier", "SetPlan", "apply_set",
           "has_content", "plan_set", "unwanted"]


@dataclass(frozen=True)
class Grant:
    """One assignment of a task: its fencing token and its spec (None: no spec)."""

    token: int
    spec: str | None


@dataclass(frozen=True)
class SetPlan:
    """What one whole set asks: the held tasks to stop (sorted), then every task it wants,
    in the set's order, with its grant (held ones too: whether their spec changed is for the
    holder to see)."""

    stop: tuple[str, ...]
    want: dict[str, Grant]
    without_token: int  # adds that named no token (they fell back to the set's epoch)


def has_content(msg: Instructions) -> bool:
    """A set that changes something (a bare renewal does not): a worker reports it at once."""
    return bool(msg.reset or msg.add or msg.remove)


def unwanted(msg: Instructions, incarnation: int, applied: tuple[int, int]) -> str | None:
    """Why a set (or a part of one) is not for a worker that applied ``applied`` last: the
    name of the counter it is counted under, or None when it is to be taken."""
    if msg.incarnation != incarnation:
        return "sets_foreign"
    if (msg.epoch, msg.seq) <= applied:
        return "sets_stale"
    return None


def plan_set(held: Collection[str], msg: Instructions) -> SetPlan:
    """Read the whole set ``msg`` against the tasks held (stopping ones too)."""
    removed = set(msg.remove)
    wanted = [t for t in dict.fromkeys(msg.add) if t not in removed]  # remove wins
    if msg.reset:
        keep = set(wanted)
        stop = sorted(t for t in held if t not in keep)
    else:
        stop = sorted(t for t in removed if t in held)
    tokens, specs = msg.tokens, msg.specs
    want: dict[str, Grant] = {}
    without = 0
    for task in wanted:
        token = tokens.get(task)
        if token is None:  # a supervisor that names no token: the set's epoch, counter 0
            without += 1
            token = make_token(msg.epoch, 0)
        want[task] = Grant(token, specs.get(task))
    return SetPlan(tuple(stop), want, without)


@dataclass(frozen=True)
class Applied:
    """A plan carried out at once: what is held after it, what started (or restarted under a
    new grant) and what stopped for good."""

    held: dict[str, Grant]
    started: tuple[str, ...]
    stopped: tuple[str, ...]


def apply_set(held: Mapping[str, Grant], msg: Instructions) -> Applied:
    """The tasks held after the whole set ``msg``, every start and stop done at once: what a
    worker that may start tasks ends up running (`WorkerMachine` with instant tasks)."""
    plan = plan_set(held, msg)
    stop = set(plan.stop)
    after = {t: g for t, g in held.items() if t not in stop}
    started = []
    for task, grant in plan.want.items():
        had = after.get(task)
        if had is None or had.spec != grant.spec:
            after[task] = grant
            started.append(task)
    return Applied(after, tuple(started), plan.stop)


@dataclass(frozen=True)
class Outcome:
    """What one frame did to a `SetApplier`."""

    taken: bool = False  # a set or a part was taken: it answers a report (renews the lease)
    whole: Instructions | None = None  # the whole set applied, if this frame completed one
    started: tuple[str, ...] = ()
    stopped: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """A set with content was applied: a worker reports at once."""
        return self.whole is not None and has_content(self.whole)


_DROPPED = Outcome()


class SetApplier:
    """One worker incarnation's instruction sets, followed as `WorkerMachine` follows them,
    with every start and stop done at once: ``held`` is what that worker would run. For the
    stand-ins of a worker (fake workers, emulated fleets); leases are theirs to keep."""

    __slots__ = ("_assembler", "applied", "held", "incarnation")

    def __init__(self, incarnation: int, applied: tuple[int, int] = (0, 0)) -> None:
        self.incarnation = incarnation
        self.applied = applied
        self.held: dict[str, Grant] = {}
        self._assembler: Assembler | None = None  # made for the first set that comes in parts

    def tokens(self) -> dict[str, int]:
        """task -> the token it runs under (a report's ``running``)."""
        return {t: g.token for t, g in self.held.items()}

    def offer(self, msg: Instructions) -> Outcome:
        """Take one frame: a whole set, or a part of one (applied once all parts are in)."""
        if unwanted(msg, self.incarnation, self.applied) is not None:
            return _DROPPED
        if msg.parts != 1 or msg.part != 0:
            if self._assembler is None:
                self._assembler = Assembler()
            taken, whole = self._assembler.offer(msg)
            if whole is None:
                return Outcome(taken=taken)
            msg = whole
        self.applied = (msg.epoch, msg.seq)
        a = self._assembler
        if a is not None and a.pending is not None and a.pending <= self.applied:
            a.forget()  # superseded by what was just applied
        if not has_content(msg):
            return Outcome(taken=True, whole=msg)
        done = apply_set(self.held, msg)
        self.held = done.held
        return Outcome(True, msg, done.started, done.stopped)
