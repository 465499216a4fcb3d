"""One reading of an instruction set (corral.worker.sets), and everything that stands in for a
worker agrees with the real one: `WorkerMachine` (ready, holding a lease, starts and stops done
at once), `SetApplier`, the e2e tests' fake workers (tests/e2e/dealers.py) and the emulated
fleet of scripts/bench scale (scripts/benchmarks/_fleet.py) hold the same tasks under the same
grants after any frames, parts and stale or foreign sets included."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import msgspec
from benchmarks import _fleet
from hypothesis import given
from hypothesis import strategies as st

from corral.common.wire.protocol import Instructions, make_token
from corral.worker.events import Received, StartTask, StopTask
from corral.worker.sets import Grant, SetApplier, apply_set, plan_set, unwanted
from corral.worker.state import TaskState

from ..e2e.dealers import FakeWorker
from .test_worker_state import CFG, INC, Sim

TASKS = ["a", "b", "c", "d", "e", "f"]
SPECS = [None, '{"v":1}', '{"v":2}']
LEASE = 1000.0  # no lease runs out here: the machine may always start what it is given
BASE = replace(CFG, report_interval=LEASE)


def set_(epoch: int, seq: int, *, inc: int = INC, **fields: Any) -> Instructions:
    return Instructions(epoch=epoch, seq=seq, incarnation=inc, lease=LEASE, answers_seq=1,
                        answers_sent_at=100.0, **fields)


def parts_of(msg: Instructions, n: int) -> list[Instructions]:
    """``msg`` in ``n`` parts, add and remove cut evenly (a part may be empty)."""
    def cut(xs: tuple[str, ...], i: int) -> tuple[str, ...]:
        return xs[len(xs) * i // n: len(xs) * (i + 1) // n]

    return [msgspec.structs.replace(
        msg, add=cut(msg.add, i), remove=cut(msg.remove, i), part=i, parts=n,
        tokens={t: v for t, v in msg.tokens.items() if t in cut(msg.add, i)},
        specs={t: v for t, v in msg.specs.items() if t in cut(msg.add, i)}) for i in range(n)]


@st.composite
def frames(draw: st.DrawFn) -> list[Instructions]:
    """Sets as a worker may get them: numbered in any order (stale ones too), now and then for
    another incarnation, naming tasks in add and remove both, with or without tokens and
    specs, some in parts delivered shuffled, duplicated or incomplete."""
    out: list[Instructions] = []
    for _ in range(draw(st.integers(1, 8))):
        add = tuple(draw(st.lists(st.sampled_from(TASKS), max_size=6)))
        msg = set_(draw(st.integers(1, 2)), draw(st.integers(1, 6)),
                   inc=draw(st.sampled_from([INC, INC, INC, INC + 1])),
                   reset=draw(st.booleans()), add=add,
                   remove=tuple(draw(st.lists(st.sampled_from(TASKS), max_size=4))),
                   tokens={t: make_token(3, i) for i, t in enumerate(add) if draw(st.booleans())},
                   specs={t: s for t in add if (s := draw(st.sampled_from(SPECS))) is not None})
        n = draw(st.integers(1, 3))
        if n == 1:
            out.append(msg)
        else:
            pieces = parts_of(msg, n)
            out += draw(st.lists(st.sampled_from(pieces), min_size=n - 1, max_size=n + 1))
    return out


# -- the stand-ins, each as (apply one frame, what it holds: task -> token) -------------------

Standin = tuple[Callable[[Instructions], object], Callable[[], dict[str, int]]]


def applier() -> Standin:
    s = SetApplier(INC)
    return s.offer, s.tokens


def fake_worker() -> Standin:
    w = FakeWorker("w1", incarnation=INC)
    return w.apply, lambda: dict(w.running)


def emulated() -> Standin:
    w = _fleet._Worker("w1", INC)
    _fleet._encode(w)
    return (lambda m: _fleet._apply(w, m)), w.sets.tokens


STANDINS = [applier, fake_worker, emulated]


class Machine:
    """The real worker's machine: what it runs, task -> grant, from its own actions."""

    def __init__(self) -> None:
        self.sim = Sim(BASE)
        self.sim.report()
        self.grants: dict[str, Grant] = {}

    def feed(self, msg: Instructions) -> tuple[list[str], list[str]]:
        out = self.sim.feed(Received(msg))
        for a in out:
            if isinstance(a, StartTask):
                self.grants[a.task] = Grant(a.token, a.spec)
            elif isinstance(a, StopTask) and not any(
                    isinstance(b, StartTask) and b.task == a.task for b in out):
                del self.grants[a.task]
        return ([a.task for a in out if isinstance(a, StartTask)],
                [a.task for a in out if isinstance(a, StopTask)])

    def tokens(self) -> dict[str, int]:
        states = self.sim.m.task_states()
        assert set(states) == set(self.grants) and set(states.values()) <= {TaskState.RUNNING}
        return {t: g.token for t, g in self.grants.items()}


@given(frames())
def test_every_stand_in_holds_what_the_machine_holds_after_any_frames(
        sent: list[Instructions]) -> None:
    machine, s = Machine(), SetApplier(INC)
    standins = [make() for make in STANDINS]
    for msg in sent:
        started, stopped = machine.feed(msg)
        out = s.offer(msg)
        assert sorted(out.started) == sorted(started)
        assert sorted(out.stopped) == sorted(set(stopped) - set(started))
        for apply, _ in standins:
            apply(msg)
        held = machine.tokens()
        assert s.applied == machine.sim.m.applied
        assert s.held == machine.grants
        for _, tokens in standins:
            assert tokens() == held


@given(held=st.lists(st.sampled_from(TASKS), unique=True),
       both=st.lists(st.sampled_from(TASKS), min_size=1, unique=True),
       only_add=st.lists(st.sampled_from(TASKS)), only_remove=st.lists(st.sampled_from(TASKS)),
       reset=st.booleans())
def test_a_task_named_in_add_and_in_remove_is_removed_by_all(
        held: list[str], both: list[str], only_add: list[str], only_remove: list[str],
        reset: bool) -> None:
    first = set_(1, 1, add=tuple(held))
    msg = set_(1, 2, reset=reset, add=tuple(only_add + both), remove=tuple(only_remove + both))
    machine = Machine()
    machine.feed(first)
    machine.feed(msg)
    assert not set(both) & set(machine.tokens())
    for make in STANDINS:
        apply, tokens = make()
        apply(first)
        apply(msg)
        assert not set(both) & set(tokens()), make.__name__


def test_remove_wins_over_add_even_for_a_task_held_before() -> None:
    before = {"a": Grant(1, None), "b": Grant(1, None)}
    done = apply_set(before, set_(1, 2, add=("a", "b", "c"), remove=("b", "c")))
    assert done.held == {"a": Grant(1, None)}
    assert (done.started, done.stopped) == ((), ("b",))


def test_a_plan_stops_held_tasks_only_sorted_and_falls_back_to_the_epoch_s_token() -> None:
    plan = plan_set(["z", "a"], set_(4, 1, reset=True, add=("n", "m"), tokens={"m": 9},
                                     specs={"n": '{"v":1}'}))
    assert plan.stop == ("a", "z")
    assert plan.want == {"n": Grant(make_token(4, 0), '{"v":1}'), "m": Grant(9, None)}
    assert plan.without_token == 1
    assert plan_set(["a"], set_(1, 1, remove=("a", "x"))).stop == ("a",)


def test_a_set_for_another_incarnation_or_not_newer_is_not_taken() -> None:
    assert unwanted(set_(1, 1, inc=INC + 1), INC, (0, 0)) == "sets_foreign"
    assert unwanted(set_(1, 1), INC, (1, 1)) == "sets_stale"
    assert unwanted(set_(2, 1), INC, (1, 9)) is None
    s = SetApplier(INC)
    s.offer(set_(1, 2, add=("a",)))
    out = s.offer(set_(1, 1, reset=True))
    assert not out.taken and s.tokens() == {"a": make_token(1, 0)}


def test_parts_are_applied_once_whole_and_each_taken_part_says_so() -> None:
    s = SetApplier(INC)
    first, second = parts_of(set_(1, 1, add=("a", "b"), tokens={"a": 5, "b": 6}), 2)
    out = s.offer(second)
    assert out.taken and out.whole is None and s.held == {}
    assert not s.offer(second).taken  # a duplicate part
    out = s.offer(first)
    assert out.changed and out.started == ("a", "b") and s.tokens() == {"a": 5, "b": 6}
    renewal = s.offer(set_(1, 2))
    assert renewal.taken and not renewal.changed and s.applied == (1, 2)
