"""The worker state machine, stepped with a fake clock (no sockets, no sleeps)."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from corral.common.wire.protocol import Instructions, Refusal, Status, WorkerState, make_token
from corral.worker.config import Backoff, LeaseLoss, WorkerConfig
from corral.worker.events import (
    Action,
    Adopted,
    Event,
    Exit,
    HandlerReady,
    HandOver,
    HandOverRequested,
    Log,
    Received,
    Reconnect,
    SendStatus,
    StartTask,
    StopRequested,
    StopTask,
    TaskFailed,
    TaskStarted,
    TaskStopped,
    Tick,
)
from corral.worker.sets import Grant
from corral.worker.state import Phase, TaskState, WorkerMachine

INC = 77
CFG = WorkerConfig(supervisor="tcp://127.0.0.1:1", worker_id="w1", handler="log",
                   report_interval=1.0, drain_timeout=30.0,
                   backoff=Backoff(base=0.5, cap=4.0, reset_after=10.0))


def T(epoch: int) -> int:
    """The token of a task first given under ``epoch`` by a set that names none."""
    return make_token(epoch, 0)


class Sim:
    """The machine plus a stand-in for the loop: StartTask/StopTask are confirmed at once
    (unless ``async_stop``), and every action is kept for inspection."""

    def __init__(self, cfg: WorkerConfig = CFG, *, waits: bool = False,
                 async_stop: bool = False) -> None:
        self.now = 100.0
        self.m = WorkerMachine(cfg, INC, self.now, waits_for_handler=waits)
        self.async_stop = async_stop
        self.actions: list[Action] = []
        self.started: list[str] = []
        self.stopped: list[str] = []
        self.set_seq = 0
        self.last: Status | None = None  # the latest report sent

    def feed(self, event: Event) -> list[Action]:
        out: list[Action] = []
        queue = [event]
        while queue:
            for a in self.m.handle(queue.pop(0), self.now):
                out.append(a)
                if isinstance(a, SendStatus):
                    self.last = a.status
                elif isinstance(a, StartTask):
                    self.started.append(a.task)
                    queue.append(TaskStarted(a.task))
                elif isinstance(a, StopTask) and not self.async_stop:
                    self.stopped.append(a.task)
                    queue.append(TaskStopped(a.task))
        self.actions += out
        return out

    def tick(self, dt: float = 0.0) -> Status | None:
        self.now += dt
        reports = [a.status for a in self.feed(Tick()) if isinstance(a, SendStatus)]
        return reports[-1] if reports else None

    def at(self, t: float) -> Status | None:
        return self.tick(t - self.now)

    def report(self) -> Status:
        """Force a report (as the periodic one would) and return it."""
        self.now = max(self.now, self.m.next_deadline())
        status = self.tick()
        assert status is not None
        return status

    def send(self, *, add: tuple[str, ...] = (), remove: tuple[str, ...] = (),
             reset: bool = False, lease: float = 10.0, epoch: int = 1,
             seq: int | None = None, answers: Status | None = None,
             incarnation: int = INC) -> list[Action]:
        answered = answers or self.last or self.report()
        if seq is None:
            self.set_seq += 1
            seq = self.set_seq
        msg = Instructions(epoch=epoch, seq=seq, incarnation=incarnation, lease=lease,
                           answers_seq=answered.seq, answers_sent_at=answered.sent_at,
                           reset=reset, add=add, remove=remove)
        return self.feed(Received(msg))

    def logs(self, level: str) -> list[str]:
        return [a.event for a in self.actions if isinstance(a, Log) and a.level == level]


# -- reports -----------------------------------------------------------------------------------


def test_reports_at_once_then_every_interval() -> None:
    s = Sim()
    first = s.tick()
    assert first is not None
    assert (first.seq, first.state, first.running, first.lease_held) == (
        1, WorkerState.READY, {}, False)
    assert first.worker == "w1" and first.incarnation == INC and first.sent_at == 100.0
    assert s.tick(0.99) is None
    second = s.tick(0.01)
    assert second is not None and second.seq == 2
    assert s.m.next_deadline() == pytest.approx(102.0)


def test_a_change_is_reported_on_the_next_tick_not_at_the_interval() -> None:
    s = Sim()
    s.tick()
    s.send(add=("a",))
    assert s.m.next_deadline() == 0.0  # dirty: report now
    status = s.tick()
    assert status is not None and status.running == {"a": T(1)} and status.applied == (1, 1)


# -- instruction sets --------------------------------------------------------------------------


def test_applied_set_starts_tasks_records_epoch_and_renews_the_lease() -> None:
    s = Sim()
    answered = s.report()
    s.now += 0.3
    s.send(add=("a", "b"), epoch=9, lease=5.0, answers=answered)
    assert s.started == ["a", "b"]
    status = s.tick()
    assert status is not None
    assert status.running == {"a": T(9), "b": T(9)}
    assert status.lease_held and status.applied == (9, 1)
    # The lease counts from the answered report's send time, not from receipt.
    s.at(104.99)
    assert s.m.task_states() == {"a": TaskState.RUNNING, "b": TaskState.RUNNING}
    s.at(105.0)
    assert s.m.task_states() == {}


@pytest.mark.parametrize(("epoch", "seq", "incarnation", "counter"), [
    (5, 3, INC, "sets_stale"),      # the same (epoch, seq) again
    (5, 2, INC, "sets_stale"),      # older seq
    (4, 9, INC, "sets_stale"),      # older epoch, however large its seq
    (6, 1, INC + 1, "sets_foreign"),  # newer, but for another incarnation
])
def test_not_newer_or_foreign_sets_are_dropped_and_counted(
        epoch: int, seq: int, incarnation: int, counter: str) -> None:
    s = Sim()
    s.send(add=("a",), epoch=5, seq=3)
    before = s.m.counters[counter]
    s.send(add=("x",), remove=("a",), epoch=epoch, seq=seq, incarnation=incarnation)
    assert s.m.counters[counter] == before + 1
    assert set(s.m.task_states()) == {"a"}
    assert s.report().applied == (5, 3)


def test_a_newer_epoch_applies_even_with_a_lower_seq() -> None:
    s = Sim()
    s.send(add=("a",), epoch=5, seq=7)
    s.send(add=("b",), epoch=6, seq=1)
    assert s.report().applied == (6, 1)
    assert set(s.m.task_states()) == {"a", "b"}


def test_reset_keeps_tasks_in_both_untouched_stops_the_rest_starts_the_missing() -> None:
    s = Sim()
    s.send(add=("a", "b", "c"), epoch=1)
    s.started.clear()
    s.send(add=("b", "c", "d"), reset=True, epoch=2)
    assert s.started == ["d"] and s.stopped == ["a"]
    # Held tasks keep the token they were started under; a new one gets its own.
    assert s.report().running == {"b": T(1), "c": T(1), "d": T(2)}


def test_add_of_a_held_task_leaves_it_alone_and_remove_wins_over_add() -> None:
    s = Sim()
    s.send(add=("a", "b"), epoch=1)
    s.started.clear()
    s.send(add=("a", "b", "c"), remove=("b", "c"), epoch=2)
    assert s.started == [] and s.stopped == ["b"]
    assert s.report().running == {"a": T(1)}


def test_an_empty_set_only_renews_the_lease() -> None:
    s = Sim()
    s.send(add=("a",), lease=2.0)  # answers the report of t=100: lease until 102
    s.at(101.5)  # reports
    s.send(lease=2.0)  # answers the report of 101.5: lease until 103.5
    s.at(102.5)
    assert s.m.task_states() == {"a": TaskState.RUNNING}


# -- the lease ---------------------------------------------------------------------------------


def test_renewal_never_shortens_the_lease() -> None:
    s = Sim()
    early = s.report()
    late = s.report()  # one interval later
    assert (early.sent_at, late.sent_at) == (100.0, 101.0)
    s.send(add=("a",), lease=3.0, answers=late)
    s.send(lease=3.0, answers=early)  # a slow answer to an older report
    s.at(103.99)
    assert s.m.task_states() == {"a": TaskState.RUNNING}
    s.at(104.0)
    assert s.m.task_states() == {}


def test_lease_lapse_stops_every_task_and_says_so() -> None:
    s = Sim()
    s.send(add=("a", "b"), lease=3.0)
    s.at(102.99)
    assert s.stopped == []
    status = s.at(103.0)
    assert s.stopped == ["a", "b"] and s.m.task_states() == {}
    # The report of that tick went out while they were being stopped; the next one, at once:
    assert status is not None and not status.lease_held
    status = s.tick()
    assert status is not None and not status.lease_held and status.running == {}
    assert s.logs("warning") == ["lease lost: no renewal from the supervisor"]
    # Still lapsed half a lease later (3.0 / 2): the connections are opened again, once.
    assert s.m.next_deadline() <= 104.5
    s.at(104.49)
    assert not any(isinstance(a, Reconnect) for a in s.actions)
    s.at(104.5)
    s.at(110.0)
    assert sum(isinstance(a, Reconnect) for a in s.actions) == 1


def test_a_lapse_answered_soon_after_keeps_the_connections() -> None:
    """Most lapses are a supervisor restart: the new process answers the next report on the
    connection there is, and reopening it would only make the worker unheard for a while."""
    s = Sim()
    s.send(add=("a",), lease=3.0)
    s.at(103.0)  # lapsed
    s.at(104.0)
    s.send(lease=3.0)  # answers the lapse report (sent at 103): within half a lease
    assert s.m.lease_held
    s.at(105.99)  # past when the first lapse would have asked; the new lease still holds
    assert not any(isinstance(a, Reconnect) for a in s.actions)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["tick", "renew", "late"]),
                          st.floats(0.0, 4.0, allow_nan=False)), max_size=40),
       st.sampled_from(list(LeaseLoss)))
def test_each_unanswered_lapse_asks_once_for_the_connections_to_be_reopened(
        steps: list[tuple[str, float]], policy: LeaseLoss) -> None:
    """Over random histories of time passing and renewals (timely, or answering an old
    report), `Reconnect` comes exactly once per lapse that no renewal ends within half a
    lease, whatever the policy, never while the lease is held, and no later than due (the
    machine's next deadline covers it)."""
    s = Sim(replace(CFG, on_lease_loss=policy))
    s.send(add=("a",), lease=3.0)
    old = s.last
    due: float | None = None  # when the current lapse, unanswered, asks for a reconnect
    for kind, dt in steps:
        held, expires = s.m.lease_held, s.m.lease_expires
        assert due is None or s.m.next_deadline() <= due
        s.now += dt
        out = s.feed(Tick()) if kind == "tick" else s.send(
            lease=3.0, answers=old if kind == "late" else None)
        asked = sum(isinstance(a, Reconnect) for a in out)
        # Every step first expires what is due: a held lease past its end lapsed here, even
        # if the renewal of this same step then grants a new one.
        if held and s.now >= expires:
            due = expires + 1.5
        expected = 1 if due is not None and s.now >= due else 0
        assert asked == expected, (kind, dt, held, expires, due, s.now)
        if expected or s.m.lease_held:
            due = None
        if kind == "tick" and dt > 2.0:
            old = s.last


def test_lease_lapse_with_keep_keeps_the_tasks() -> None:
    s = Sim(replace(CFG, on_lease_loss=LeaseLoss.KEEP))
    s.send(add=("a",), lease=3.0)
    status = s.at(103.0)
    assert s.stopped == [] and status is not None
    assert status.running == {"a": T(1)} and not status.lease_held
    assert "lease lost: no renewal from the supervisor" in s.logs("warning")


def test_a_renewal_arriving_after_the_lapse_does_not_undo_it() -> None:
    s = Sim()
    s.send(add=("a",), lease=3.0)  # until 103
    late = s.at(101.0)
    s.now = 103.5
    # This set renews up to late.sent_at + 3, but the lease had lapsed at +3: the task is gone.
    s.send(lease=3.0, answers=late)
    assert s.stopped == ["a"]
    s.send(add=("a",), lease=3.0)  # the supervisor re-sends it: lease held, so it starts
    assert s.started == ["a", "a"]


def test_no_task_starts_without_a_lease() -> None:
    s = Sim()
    answered = s.report()
    s.now += 5.0
    s.send(add=("a",), lease=2.0, answers=answered)  # answers_sent_at + lease is past
    assert s.started == [] and s.m.counters["adds_not_started"] == 1
    assert not s.report().lease_held


def test_an_echoed_send_time_later_than_our_last_report_is_clamped() -> None:
    s = Sim()
    real = s.report()
    forged = msgspec.structs.replace(real, sent_at=real.sent_at + 1000.0)
    s.send(add=("a",), lease=3.0, answers=forged)
    s.at(real.sent_at + 3.0)
    assert s.m.task_states() == {}


# -- failures and backoff ----------------------------------------------------------------------


def test_a_failing_task_is_restarted_with_capped_backoff_and_reported() -> None:
    s = Sim()
    s.send(add=("a",), lease=1000.0)
    delays = []
    for n in range(1, 6):
        s.feed(TaskFailed("a", "exited with status 1"))
        status = s.tick()
        assert status is not None and status.failures == {"a": n} and "a" in status.running
        assert s.m.task_states() == {"a": TaskState.BACKOFF}
        delay = [a for a in s.actions if isinstance(a, Log)][-1].fields["retry_in"]
        delays.append(delay)
        s.started.clear()
        s.at(s.now + delay - 0.01)
        assert s.started == []
        s.at(s.now + 0.01)
        assert s.started == ["a"]
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0]


def test_consecutive_failures_clear_after_running_long_enough() -> None:
    s = Sim()
    s.send(add=("a",), lease=1000.0)
    s.feed(TaskFailed("a", "start raised"))
    s.at(100.5)  # restarted, running since 100.5; reset_after is 10
    s.at(110.49)
    assert s.last is not None and s.last.failures == {"a": 1}
    status = s.at(110.5)
    assert status is not None and status.failures == {}


def test_a_failed_task_that_is_removed_is_forgotten() -> None:
    s = Sim()
    s.send(add=("a",))
    s.feed(TaskFailed("a", "boom"))
    s.send(remove=("a",))
    assert s.stopped == []  # nothing ran: nothing to stop
    status = s.report()
    assert status.running == {} and status.failures == {}


# -- prewarm and lame duck ---------------------------------------------------------------------


def test_starting_takes_nothing_until_the_handler_is_ready() -> None:
    s = Sim(waits=True)
    assert s.report().state == WorkerState.STARTING
    s.send(add=("a",))
    assert s.started == [] and s.m.counters["adds_not_started"] == 1
    s.feed(HandlerReady())
    status = s.tick()
    assert status is not None and status.state == WorkerState.READY
    s.send(add=("a",))
    assert s.started == ["a"]


def test_ready_after_ends_starting_without_ready() -> None:
    s = Sim(replace(CFG, ready_after=5.0))
    assert s.report().state == WorkerState.STARTING
    assert s.m.next_deadline() == pytest.approx(101.0)  # the next report comes first
    s.tick(4.99 - (s.now - 100.0))
    assert s.m.phase is Phase.STARTING
    status = s.tick(0.01)
    assert status is not None and status.state == WorkerState.READY


def test_lame_duck_applies_removes_starts_nothing_and_exits_once_empty() -> None:
    s = Sim()
    s.send(add=("a", "b"))
    s.feed(StopRequested())
    status = s.tick()
    assert status is not None and status.state == WorkerState.LAME_DUCK
    assert status.running == {"a": T(1), "b": T(1)}
    s.send(add=("c",), remove=("a",))
    assert s.started == ["a", "b"] and s.stopped == ["a"]
    out = s.send(add=("b", "d"), reset=True)  # keeps b, starts no d
    assert s.started == ["a", "b"] and not any(isinstance(a, Exit) for a in out)
    out = s.send(remove=("b",))
    assert isinstance(out[-2], SendStatus) and out[-1] == Exit(0)
    last = out[-2].status
    assert last.running == {} and last.state == WorkerState.LAME_DUCK
    assert s.m.phase is Phase.EXITED and s.m.handle(Tick(), s.now + 5) == []


def test_drain_timeout_stops_the_rest_and_exits_0() -> None:
    s = Sim(replace(CFG, drain_timeout=3.0), async_stop=True)
    s.send(add=("a",), lease=1000.0)
    s.feed(StopRequested())
    s.at(102.99)
    assert not any(isinstance(a, StopTask) for a in s.actions)
    s.at(103.0)
    assert StopTask("a") in s.actions
    assert s.m.task_states() == {"a": TaskState.STOPPING}
    out = s.feed(TaskStopped("a"))
    assert out[-1] == Exit(0)


def test_second_stop_request_stops_at_once() -> None:
    s = Sim()
    s.send(add=("a", "b"))
    s.feed(StopRequested())
    out = s.feed(StopRequested())
    assert s.stopped == ["a", "b"] and out[-1] == Exit(0)


def test_stop_request_while_starting_exits_at_once() -> None:
    s = Sim(waits=True)
    out = s.feed(StopRequested())
    assert out[-1] == Exit(0)
    final = [a for a in out if isinstance(a, SendStatus)][-1].status
    assert final.state == WorkerState.LAME_DUCK and final.running == {}


def test_refusal_stops_tasks_and_exits_3_but_only_for_this_incarnation() -> None:
    s = Sim()
    s.send(add=("a",))
    s.feed(Received(Refusal(epoch=1, incarnation=INC + 1, code="duplicate_id", reason="x")))
    assert s.m.counters["refusals_foreign"] == 1 and s.m.phase is Phase.READY
    out = s.feed(Received(Refusal(epoch=1, incarnation=INC, code="duplicate_id",
                                  reason="w1 is in use by w1@1")))
    assert s.stopped == ["a"] and out[-1] == Exit(3)
    error = [a for a in s.actions if isinstance(a, Log) and a.level == "error"]
    assert error[0].fields["reason"] == "w1 is in use by w1@1"


# -- stops that take time (exec) ---------------------------------------------------------------


def test_a_stopping_task_is_still_reported_and_restarts_if_added_again() -> None:
    s = Sim(async_stop=True)
    s.send(add=("a",))
    s.send(remove=("a",), epoch=1)
    assert s.report().running == {"a": T(1)}  # still running until it has really stopped
    s.send(add=("a",), epoch=2)
    assert s.started == ["a"]  # not started twice at once
    s.feed(TaskStopped("a"))
    assert s.started == ["a", "a"]
    assert s.report().running == {"a": T(2)}  # restarted under the new grant


def test_sets_are_ignored_while_stopping() -> None:
    s = Sim(async_stop=True)
    s.send(add=("a",))
    s.feed(StopRequested())
    s.feed(StopRequested())
    s.send(add=("b",))
    assert s.m.counters["sets_while_stopping"] == 1 and s.started == ["a"]


# -- invariants under random event sequences ---------------------------------------------------

TASKS = ("a", "b", "c", "d")
ops = st.one_of(
    st.tuples(st.just("set"), st.sets(st.sampled_from(TASKS)), st.sets(st.sampled_from(TASKS)),
              st.booleans(), st.integers(0, 2), st.sampled_from([0.5, 2.0, 6.0])),
    st.tuples(st.just("wait"), st.sampled_from([0.1, 0.5, 1.0, 3.0, 7.0])),
    st.tuples(st.just("fail"), st.sampled_from(TASKS)),
    st.tuples(st.just("stopped"), st.sampled_from(TASKS)),
    st.tuples(st.just("signal")),
    st.tuples(st.just("ready")),
    st.tuples(st.just("handover")),
)


@given(st.lists(ops, max_size=40), st.booleans(), st.booleans(), st.booleans(),
       st.sets(st.sampled_from(TASKS)), st.sampled_from([0.5, 3.0]))
@example([("set", {"a"}, set(), False, 1, 6.0), ("fail", "a"), ("wait", 0.5), ("wait", 3.0)],
         False, False, False, set(), 0.5)  # a restarted task that then runs past reset_after
def test_invariants_hold_for_any_event_sequence(
        script: list[tuple], keep: bool, waits: bool, async_stop: bool, adopted: set[str],
        inherited: float) -> None:
    cfg = replace(CFG, on_lease_loss=LeaseLoss.KEEP if keep else LeaseLoss.STOP,
                  backoff=Backoff(base=0.5, cap=2.0, reset_after=2.5))  # short: reachable
    s = Sim(cfg, waits=waits, async_stop=async_stop)
    running: set[str] = set(adopted)  # what a real runner would be running now
    stopping: set[str] = set()
    if adopted:  # processes a previous agent of this id left with the keeper
        s.feed(Adopted({t: Grant(T(1), None) for t in adopted}, s.now + inherited))
    epoch = 1
    exited = handed = False
    for op in script:
        before = len(s.actions)
        if op[0] == "set":
            _, add, remove, reset, epoch_step, lease = op
            epoch += epoch_step
            s.send(add=tuple(sorted(add)), remove=tuple(sorted(remove)), reset=reset,
                   epoch=epoch, lease=lease)
        elif op[0] == "wait":
            s.tick(op[1])
        elif op[0] == "fail" and op[1] in running:
            running.discard(op[1])
            stopping.discard(op[1])
            s.feed(TaskFailed(op[1], "crashed"))
        elif op[0] == "stopped" and op[1] in stopping:
            stopping.discard(op[1])
            running.discard(op[1])
            s.feed(TaskStopped(op[1]))
        elif op[0] == "signal":
            s.feed(StopRequested())
        elif op[0] == "ready":
            s.feed(HandlerReady())
        elif op[0] == "handover":
            s.feed(HandOverRequested())
        lease_ok = s.m._lease_held or keep  # white-box: the rule under test
        for a in s.actions[before:]:
            assert not exited, "nothing happens after Exit"
            if isinstance(a, StartTask):
                assert a.task not in running, "a task is never started twice at once"
                assert lease_ok, "no start without a lease (unless on_lease_loss=keep)"
                running.add(a.task)
            elif isinstance(a, StopTask):
                assert a.task in running and a.task not in stopping
                if async_stop:
                    stopping.add(a.task)
                else:
                    running.discard(a.task)
            elif isinstance(a, HandOver):
                handed = True
            elif isinstance(a, Exit):
                assert handed or not running, "exit only once every task has stopped"
                assert a.code == 0 or not handed
                exited = True
        held = set(s.m.task_states())
        assert running <= held, "everything that runs is reported"
        if not keep and not s.m._lease_held:
            assert running <= stopping, "without a lease, every task is stopped or stopping"
        status = s.tick()
        if status is not None:
            assert set(status.running) == set(s.m.task_states())
        s.tick()  # reports what the last tick's own actions changed
        if s.m.phase is not Phase.EXITED:
            assert s.m.next_deadline() > s.now, "nothing left due now: the loop cannot spin"


def test_reports_come_every_half_lease_and_once_more_when_it_runs_short() -> None:
    s = Sim(replace(CFG, report_interval=None))
    s.tick()
    assert s.m.next_deadline() == pytest.approx(101.0)  # 1 s before any lease is known
    s.send(add=("a",), lease=8.0)  # answers the report of t=100: the lease ends at 108
    s.tick()  # the change goes at once
    assert s.m.next_deadline() == pytest.approx(100.0 + 4.0)  # then every lease / 2
    s.at(104.0)  # its answer is lost: no renewal
    assert s.last is not None and s.last.seq == 3
    assert s.m.next_deadline() == pytest.approx(108.0 - 2.0)  # once more, a quarter left
    s.at(106.0)
    # Not again: next the lease's end (108), then the usual report (110).
    assert s.last.seq == 4 and s.m.next_deadline() == pytest.approx(108.0)


@settings(max_examples=200, deadline=None)
@given(lease=st.floats(2.0, 120.0), rtt=st.floats(0.0, 0.2), rounds=st.integers(3, 12))
def test_a_renewed_worker_reports_once_per_interval(lease: float, rtt: float,
                                                     rounds: int) -> None:
    """Every report answered (after ``rtt``): reports come every half lease, never more often
    — the extra report for a lease running short is for an answer that did not come."""
    s = Sim(replace(CFG, report_interval=None))
    s.tick()
    s.send(lease=lease)  # the first lease: the interval is known from now on
    s.tick()
    sent = [s.last.sent_at] if s.last is not None else []
    for _ in range(rounds):
        s.at(s.m.next_deadline())
        assert s.last is not None
        sent.append(s.last.sent_at)
        s.at(s.now + rtt)
        s.send(lease=lease, answers=s.last)
    gaps = [b - a for a, b in pairwise(sent[1:])]
    assert gaps and all(g == pytest.approx(lease / 2) for g in gaps), gaps


# -- hand-over and adoption (exec tasks outlive their agent) -----------------------------------


def test_a_hand_over_reports_handing_over_then_exits_without_stopping_anything() -> None:
    s = Sim()
    s.send(add=("a", "b"))
    out = s.feed(HandOverRequested())
    kinds = [type(a) for a in out]
    assert kinds == [Log, SendStatus, HandOver, Exit]
    last = next(a.status for a in out if isinstance(a, SendStatus))
    assert last.state is WorkerState.HANDING_OVER and set(last.running) == {"a", "b"}
    assert s.stopped == [] and out[-1] == Exit(0)
    assert s.m.phase is Phase.EXITED and s.m.handle(Tick(), s.now + 100) == []


def test_a_hand_over_is_refused_while_stopping() -> None:
    s = Sim(async_stop=True)
    s.send(add=("a",))
    s.feed(StopRequested())
    s.feed(StopRequested())  # the second: stopping now
    out = s.feed(HandOverRequested())
    assert [type(a) for a in out] == [Log] and s.m.phase is Phase.STOPPING


def test_adopted_tasks_run_under_their_grants_and_the_lease_they_ran_under() -> None:
    s = Sim()
    s.feed(Adopted({"a": Grant(T(3), '{"x":1}')}, lease_expires=105.0))
    first = s.tick()
    assert first is not None and first.running == {"a": T(3)} and first.starting == ()
    assert first.lease_held and s.m.task_states() == {"a": TaskState.RUNNING}
    # The supervisor's reset to this incarnation names what it adopted: nothing restarts.
    msg = Instructions(epoch=3, seq=1, incarnation=INC, lease=10.0, answers_seq=first.seq,
                       answers_sent_at=first.sent_at, reset=True, add=("a",),
                       tokens={"a": T(3)}, specs={"a": '{"x":1}'})
    out = s.feed(Received(msg))
    assert not any(isinstance(a, (StartTask, StopTask)) for a in out)
    assert s.m.lease_expires == pytest.approx(110.0)


def test_adopted_tasks_stop_with_the_inherited_lease_unless_it_is_renewed() -> None:
    s = Sim(async_stop=True)
    s.feed(Adopted({"a": Grant(T(3), None)}, lease_expires=101.0))
    s.tick()
    assert not any(isinstance(a, StopTask) for a in s.actions)
    s.now = 101.0
    out = s.feed(Tick())
    assert StopTask("a", lapsed=True) in out  # the keeper ends it on the same deadline
    assert "lease lost: no renewal from the supervisor" in s.logs("warning")
