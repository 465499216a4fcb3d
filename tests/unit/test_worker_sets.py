"""Instruction sets with fencing tokens, specs and parts, through the pure worker machine (and
`Assembler` alone), on a fake clock."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.common.wire.protocol import Instructions, make_token
from corral.worker.assembly import MAX_ENTRIES, Assembler
from corral.worker.events import (
    EXIT_KEEPER_LOST,
    Exit,
    KeeperLost,
    LeaseExtended,
    Log,
    Received,
    StartTask,
    StopTask,
    TaskFailed,
    TaskStopped,
)
from corral.worker.state import TaskState

from .test_worker_state import CFG, INC, Sim

SPEC_A = '{"room":"a"}'
SPEC_B = '{"room":"b"}'


class SetSim(Sim):
    """`Sim` whose sets can carry tokens, specs and parts."""

    def set(self, *, epoch: int = 1, seq: int | None = None, lease: float = 10.0,
            **fields: Any) -> Instructions:
        answered = self.last or self.report()
        if seq is None:
            self.set_seq += 1
            seq = self.set_seq
        return Instructions(epoch=epoch, seq=seq, incarnation=INC, lease=lease,
                            answers_seq=answered.seq, answers_sent_at=answered.sent_at,
                            **fields)

    def give(self, **fields: Any) -> list[Any]:
        return self.feed(Received(self.set(**fields)))

    def starts(self) -> list[StartTask]:
        return [a for a in self.actions if isinstance(a, StartTask)]


# -- tokens and specs --------------------------------------------------------------------------


def test_tasks_start_with_their_token_and_spec_and_report_the_token() -> None:
    s = SetSim()
    s.give(add=("a", "b"), tokens={"a": make_token(1, 5), "b": make_token(1, 6)},
           specs={"a": SPEC_A})
    assert s.starts() == [StartTask("a", make_token(1, 5), SPEC_A),
                          StartTask("b", make_token(1, 6), None)]
    assert s.report().running == {"a": make_token(1, 5), "b": make_token(1, 6)}
    assert s.m.counters["adds_without_token"] == 0


def test_a_set_without_tokens_falls_back_to_its_epoch_and_counts_it() -> None:
    s = SetSim()
    s.give(add=("a",), epoch=4)
    assert s.report().running == {"a": make_token(4, 0)}
    assert s.m.counters["adds_without_token"] == 1


def test_same_spec_again_leaves_the_task_alone_under_its_first_token() -> None:
    s = SetSim()
    s.give(add=("a",), tokens={"a": 10}, specs={"a": SPEC_A})
    s.give(add=("a",), tokens={"a": 11}, specs={"a": SPEC_A}, reset=True, epoch=2)
    assert len(s.starts()) == 1 and s.stopped == []
    assert s.report().running == {"a": 10}


def test_another_spec_restarts_the_task_with_the_new_spec_and_token() -> None:
    s = SetSim(async_stop=True)
    s.give(add=("a",), tokens={"a": 10}, specs={"a": SPEC_A})
    s.give(add=("a",), tokens={"a": 11}, specs={"a": SPEC_B})
    assert StopTask("a") in s.actions and len(s.starts()) == 1
    assert s.report().running == {"a": 10}  # still the old process until it has stopped
    s.feed(TaskStopped("a"))
    assert s.starts()[-1] == StartTask("a", 11, SPEC_B)
    assert s.report().running == {"a": 11}
    assert s.m.counters["spec_restarts"] == 1
    assert "spec changed: restarting the task" in s.logs("info")


def test_spec_to_no_spec_is_a_change_too() -> None:
    s = SetSim()
    s.give(add=("a",), tokens={"a": 10}, specs={"a": SPEC_A})
    s.give(add=("a",), tokens={"a": 11})
    assert s.starts()[-1] == StartTask("a", 11, None) and s.stopped == ["a"]


def test_a_spec_change_in_backoff_starts_at_once_with_failures_cleared() -> None:
    s = SetSim()
    s.give(add=("a",), tokens={"a": 10}, specs={"a": SPEC_A})
    s.feed(TaskFailed("a", "missing key"))
    assert s.m.task_states() == {"a": TaskState.BACKOFF}
    s.give(add=("a",), tokens={"a": 11}, specs={"a": SPEC_B})
    assert s.starts()[-1] == StartTask("a", 11, SPEC_B)
    assert s.report().failures == {}


def test_a_task_removed_then_added_again_while_stopping_restarts_with_the_new_grant() -> None:
    s = SetSim(async_stop=True)
    s.give(add=("a",), tokens={"a": 10}, specs={"a": SPEC_A})
    s.give(remove=("a",))
    s.give(add=("a",), tokens={"a": 12}, specs={"a": SPEC_B})
    s.feed(TaskStopped("a"))
    assert s.starts() == [StartTask("a", 10, SPEC_A), StartTask("a", 12, SPEC_B)]


def test_the_lease_extension_is_announced_before_the_starts_it_allows() -> None:
    s = SetSim()
    answered = s.report()
    out = s.give(add=("a",), lease=5.0)
    kinds = [type(a) for a in out if isinstance(a, LeaseExtended | StartTask)]
    assert kinds == [LeaseExtended, StartTask]
    assert out[0] == LeaseExtended(answered.sent_at + 5.0)
    assert s.m.lease_expires == answered.sent_at + 5.0
    # A renewal that does not extend it says nothing.
    early = s.set(lease=1.0)
    assert not any(isinstance(a, LeaseExtended) for a in s.feed(Received(early)))


def test_keeper_lost_stops_every_task_and_exits_4() -> None:
    s = SetSim()
    s.give(add=("a", "b"))
    out = s.feed(KeeperLost("keeper exited with status -9"))
    assert s.stopped == ["a", "b"] and out[-1] == Exit(EXIT_KEEPER_LOST)
    assert "lease keeper gone: stopping every task" in s.logs("error")


def test_zone_and_labels_are_in_every_report() -> None:
    s = SetSim(replace(CFG, zone="eu-1/rack-7", labels=(("gpu", "true"),)))
    status = s.report()
    assert status.zone == "eu-1/rack-7" and status.labels == {"gpu": "true"}


# -- parts -------------------------------------------------------------------------------------


def split(msg: Instructions, cuts: list[int]) -> list[Instructions]:
    """``msg`` in len(cuts) + 1 parts: add and remove cut at the given fractions."""
    n = len(cuts) + 1

    def slices(xs: tuple[str, ...]) -> list[tuple[str, ...]]:
        bounds = [0, *sorted(min(c, len(xs)) for c in cuts), len(xs)]
        return [xs[bounds[i]:bounds[i + 1]] for i in range(n)]

    adds, removes = slices(msg.add), slices(msg.remove)
    return [msgspec.structs.replace(
        msg, add=adds[i], remove=removes[i], part=i, parts=n,
        tokens={t: msg.tokens[t] for t in adds[i] if t in msg.tokens},
        specs={t: msg.specs[t] for t in adds[i] if t in msg.specs}) for i in range(n)]


def test_a_parted_reset_is_applied_only_once_whole() -> None:
    s = SetSim()
    s.give(add=("old",))
    whole = s.set(add=tuple(f"t{i}" for i in range(10)), reset=True,
                  tokens={f"t{i}": 100 + i for i in range(10)}, specs={"t3": SPEC_A})
    parts = split(whole, [3, 7])
    s.feed(Received(parts[0]))
    s.feed(Received(parts[2]))
    assert set(s.m.task_states()) == {"old"} and s.m.applied == (1, 1)
    s.feed(Received(parts[1]))
    assert s.stopped == ["old"] and s.m.applied == (1, 2)
    assert s.report().running == {f"t{i}": 100 + i for i in range(10)}
    assert StartTask("t3", 103, SPEC_A) in s.starts()
    assert s.m.counters["sets_assembled"] == 1


def test_every_part_renews_the_lease() -> None:
    s = SetSim()
    s.give(add=("a",), lease=3.0)  # until 103
    parts = split(s.set(add=("a", "b", "c"), reset=True, lease=3.0), [1, 2])
    for i, part in enumerate(parts[:2]):
        s.at(101.5 + 1.5 * i)
        answered = s.report()
        s.feed(Received(msgspec.structs.replace(part, answers_seq=answered.seq,
                                                answers_sent_at=answered.sent_at)))
    s.at(105.0)  # past the first lease: the parts kept it alive
    assert s.m.task_states() == {"a": TaskState.RUNNING}
    assert s.report().lease_held


def test_a_newer_set_discards_a_partial_one_and_older_parts_are_dropped() -> None:
    s = SetSim()
    first = split(s.set(add=("a", "b")), [1])
    newer = split(s.set(add=("c", "d")), [1])
    s.feed(Received(first[0]))
    s.feed(Received(newer[1]))
    s.feed(Received(first[1]))  # older than the set in assembly
    s.feed(Received(newer[0]))
    assert set(s.m.task_states()) == {"c", "d"} and s.m.applied == (1, 2)
    c = s.m.counters
    assert (c["parts_discarded"], c["parts_stale"], c["sets_assembled"]) == (1, 1, 1)


def test_bad_parts_are_counted_not_applied() -> None:
    s = SetSim()
    good = split(s.set(add=("a", "b")), [1])
    s.feed(Received(msgspec.structs.replace(good[0], part=5)))  # part >= parts
    s.feed(Received(good[0]))
    s.feed(Received(msgspec.structs.replace(good[1], parts=3)))  # contradicts part 0
    s.feed(Received(msgspec.structs.replace(good[1], reset=True)))
    assert s.m.task_states() == {} and s.m.counters["parts_invalid"] == 3
    s.feed(Received(good[1]))
    assert set(s.m.task_states()) == {"a", "b"}


def test_a_whole_set_newer_than_a_partial_one_supersedes_it() -> None:
    s = SetSim()
    partial = split(s.set(add=("a", "b")), [1])
    s.feed(Received(partial[0]))
    s.give(add=("z",))
    s.feed(Received(partial[1]))  # now older than what was applied
    assert set(s.m.task_states()) == {"z"} and s.m.counters["sets_stale"] == 1


def test_the_assembler_bounds_its_memory() -> None:
    a = Assembler()
    big = tuple(f"t{i}" for i in range(MAX_ENTRIES // 2 + 1))
    base = Instructions(epoch=1, seq=1, incarnation=1, lease=1.0, answers_seq=1,
                        answers_sent_at=0.0, add=big, parts=3)
    assert a.offer(msgspec.structs.replace(base, part=0)) == (True, None)
    assert a.offer(msgspec.structs.replace(base, part=1)) == (False, None)
    assert a.counters["sets_too_big"] == 1 and a.pending is None


# -- any split, any interleaving: exactly once and exactly the whole set, or not at all ---------

ADDS = [f"t{i}" for i in range(12)]


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[Instructions, list[Instructions], bool]:
    """A whole set, the frames delivered (its parts in order, with drops, duplicates and the
    first part of an older, never completed set interleaved), and whether every part of the
    set got through."""
    add = tuple(draw(st.lists(st.sampled_from(ADDS), unique=True, max_size=12)))
    remove = tuple(draw(st.lists(st.sampled_from(ADDS), unique=True, max_size=4)))
    whole = Instructions(epoch=2, seq=5, incarnation=INC, lease=100.0, answers_seq=1,
                         answers_sent_at=100.0, reset=draw(st.booleans()), add=add,
                         remove=remove, tokens={t: 1000 + i for i, t in enumerate(add)},
                         specs={t: SPEC_A for t in add[::2]})
    cuts = draw(st.lists(st.integers(0, 12), max_size=5))
    parts = split(whole, cuts)
    older = split(msgspec.structs.replace(whole, seq=4, add=("x", "y"), remove=(),
                                          tokens={}, specs={}), [1])[0]
    frames: list[Instructions] = []
    complete = True
    for part in parts:
        for _ in range(draw(st.integers(0, 2))):
            frames.append(older)
        copies = draw(st.integers(0, 2))
        complete &= copies > 0
        frames += [part] * copies
    return whole, frames, complete


@settings(max_examples=200, deadline=None)
@given(deliveries())
def test_any_split_is_applied_exactly_once_and_exactly_as_the_whole_set(
        case: tuple[Instructions, list[Instructions], bool]) -> None:
    whole, frames, complete = case
    base = replace(CFG, report_interval=1000.0)
    parted, direct = SetSim(base), SetSim(base)
    for sim in (parted, direct):
        sim.report()
    for frame in frames:
        parted.feed(Received(frame))
    direct.feed(Received(whole))
    applied = parted.m.counters["sets_applied"]
    if complete:
        assert parted.m.applied == (2, 5) and applied == 1
        assert parted.report().running == direct.report().running
        assert parted.starts() == direct.starts()
        assert parted.m.lease_expires == direct.m.lease_expires
    else:
        assert parted.m.applied == (0, 0) and applied == 0 and parted.starts() == []


def test_a_log_action_names_spec_restarts_with_the_token() -> None:
    s = SetSim()
    s.give(add=("a",), tokens={"a": 10}, specs={"a": SPEC_A})
    s.give(add=("a",), tokens={"a": 11}, specs={"a": SPEC_B})
    logs = [a for a in s.actions if isinstance(a, Log) and a.event.startswith("spec changed")]
    assert logs[0].fields == {"task": "a", "token": 11}
