"""The daemon's loop in-process, on a fake clock: it sleeps until its core's next deadline
(no spin), runs the lifecycle through real sockets and a real task source, and a signal only
enqueues the shutdown verb that the next loop turn carries out."""

from __future__ import annotations

import gc
import json
import signal
from pathlib import Path

import pytest

from corral.supervisor.config import SupervisorConfig
from corral.supervisor.daemon import Daemon
from corral.supervisor.lifecycle import Phase

from ..support import FakeClock, free_port


def test_the_loop_waits_for_deadlines_and_a_signal_stops_it(tmp_path: Path) -> None:
    (tmp_path / "tasks.txt").write_text("a\nb\n")
    cfg = SupervisorConfig(bind=f"tcp://127.0.0.1:{free_port()}",
                           control=f"tcp://127.0.0.1:{free_port()}",
                           tasks=f"file:{tmp_path / 'tasks.txt'}", warmup=5.0,
                           query_interval=600.0, state_file=str(tmp_path / "epoch"))
    clock = FakeClock(100.0)
    sleeps: list[float] = []
    d = Daemon(cfg, clock=clock, sleep=sleeps.append)
    try:
        d.step(max_wait=0)
        assert d.core.life.phase is Phase.WARMUP
        assert d.poll_timeout(clock()) == 5.0  # asleep until the warm-up ends, not spinning
        clock.now += 5.0
        for _ in range(200):  # the task query runs on the fetcher's thread; it wakes the loop
            d.step(max_wait=0.05)
            if d.core.life.phase is Phase.RUNNING:
                break
        assert d.core.life.phase is Phase.RUNNING
        assert d.core.queries.placement_summary()["tasks_total"] == 2
        assert d.poll_timeout(clock()) >= 0.5  # the next deadline is a timer, not now
        d._on_signal(signal.SIGTERM, None)  # what the handler does: enqueue, nothing more
        assert not d.stopping
        d.step(max_wait=0)
        assert d.stopping and d.core.life.phase is Phase.STOPPING
    finally:
        d.close()
    assert (tmp_path / "epoch").read_text().strip() == "1"
    assert sleeps == []  # no batch of reports came, so no coalescing pause


def test_sends_to_gone_peers_in_a_queue_are_counted_not_fatal(tmp_path: Path) -> None:
    # Found by scripts/chaos --seed 11: a send that found its peer gone stepped the core
    # (PeerGone), whose handling drained the rest of the send queue under the first loop's
    # feet; the daemon died of an IndexError.
    from corral.common.wire.protocol import Instructions
    from corral.supervisor.events import Send

    (tmp_path / "tasks.txt").write_text("a\n")
    cfg = SupervisorConfig(bind=f"tcp://127.0.0.1:{free_port()}",
                           control=f"tcp://127.0.0.1:{free_port()}",
                           tasks=f"file:{tmp_path / 'tasks.txt'}",
                           state_file=str(tmp_path / "epoch"))
    d = Daemon(cfg, clock=FakeClock(100.0), sleep=lambda s: None)
    try:
        msg = Instructions(1, 1, 7, 10.0, 1, 1.0)
        d._execute([Send(f"gone-{i}".encode(), msg) for i in range(3)])
        assert d.io.send_failures == 3 and not d.stopping
        # Found by `scripts/bench scale` at 100,000 workers: each gone peer's PeerGone step
        # sent the next queued set from inside it, one frame deeper per peer; when the whole
        # fleet disconnected at once the daemon died of a RecursionError.
        d._execute([Send(f"gone-{i}".encode(), msg) for i in range(4000)])
        assert d.io.send_failures == 4003 and not d.stopping and not d.outbox.queued
    finally:
        d.close()


def sliced(tmp_path: Path, slice_items: int) -> tuple[Daemon, FakeClock]:
    """A daemon on a fake clock with 40 tasks in a file, whose rebuild runs in slices of
    ``slice_items``; its warm-up (1 s) is over by its first step. Two costs: a list of bare
    ids is added in a few big steps whatever the slice (`Placement.fill`)."""
    (tmp_path / "tasks.json").write_text(json.dumps({f"t{i}": 1 + i % 2 for i in range(40)}))
    cfg = SupervisorConfig(bind=f"tcp://127.0.0.1:{free_port()}",
                           control=f"tcp://127.0.0.1:{free_port()}",
                           tasks=f"file:{tmp_path / 'tasks.json'}", warmup=1.0,
                           query_interval=600.0, state_file=str(tmp_path / "epoch"))
    clock = FakeClock(100.0)
    d = Daemon(cfg, clock=clock, sleep=lambda s: None)
    d.core.rebuild_slice = slice_items
    clock.now += 1.0
    return d, clock


def test_a_rebuild_in_slices_takes_one_per_loop_turn_without_waiting(tmp_path: Path) -> None:
    d, clock = sliced(tmp_path, 2)  # 40 tasks: 20 slices and more
    try:
        turns = 0
        assert gc.isenabled()
        freezes = d.io.gc_freezes
        for _ in range(400):  # the task query runs on the fetcher's thread; it wakes the loop
            d.step(max_wait=0.05)
            if d.core.busy:
                turns += 1
                if turns == 1:  # the turn that took the list ran no slice: reading goes first
                    assert d.core.rebuilding is not None and d.core.rebuilding.slices == 0
                assert d.poll_timeout(clock()) == 0.0  # no sleeping while a rebuild is cut
                if turns > 1:  # (a slice ran, and the collector was paused for it)
                    assert not gc.isenabled(), "the cycle collector ran during the rebuild"
            if d.core.life.phase is Phase.RUNNING and not d.core.busy:
                break
        assert d.core.life.phase is Phase.RUNNING and not d.core.busy
        assert turns >= 19  # one slice a turn (the clock never moved: no timer drove them)
        assert d.core.queries.placement_summary()["tasks_total"] == 40
        # Done: what the rebuild built was frozen, and the collector runs again.
        assert gc.isenabled() and d.io.gc_freezes > freezes
    finally:
        d.close()
        gc.enable()


def test_a_daemon_closed_mid_rebuild_turns_the_collector_back_on(tmp_path: Path) -> None:
    d, _ = sliced(tmp_path, 1)  # far more slices than the loop below runs
    try:
        for _ in range(400):  # until a slice ran (the query answers on the fetcher's thread)
            d.step(max_wait=0.05)
            if d.gc.paused:
                break
        assert d.core.busy and not gc.isenabled()
    finally:
        d.close()
        enabled = gc.isenabled()
        gc.enable()
    assert enabled, "the daemon stopped mid-rebuild with the cycle collector still off"


def test_a_burst_of_sets_leaves_max_sends_a_loop_turn_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Up to MAX_SENDS sets leave at once; a bigger burst queues whole and leaves MAX_SENDS a
    loop turn (the receive loop is never starved), and sets behind a queue wait their turn."""
    from corral.common.wire.protocol import Instructions
    from corral.supervisor import outbox as module
    from corral.supervisor.events import Send

    monkeypatch.setattr(module, "MAX_SENDS", 5)
    (tmp_path / "tasks.txt").write_text("a\n")
    cfg = SupervisorConfig(bind=f"tcp://127.0.0.1:{free_port()}",
                           control=f"tcp://127.0.0.1:{free_port()}",
                           tasks=f"file:{tmp_path / 'tasks.txt'}", warmup=60.0,
                           state_file=str(tmp_path / "epoch"))
    d = Daemon(cfg, clock=FakeClock(100.0), sleep=lambda s: None)
    sent: list[bytes] = []
    monkeypatch.setattr(d.outbox, "send", lambda a: sent.append(a.identity))
    msg = Instructions(1, 1, 7, 10.0, 1, 1.0)
    try:
        d._execute([Send(b"a%d" % i, msg) for i in range(5)])
        assert sent == [b"a%d" % i for i in range(5)] and not d.outbox.queued
        burst = [Send(b"b%d" % i, msg) for i in range(12)]
        d._execute(burst)
        assert len(sent) == 5 and len(d.outbox.queued) == 12  # too many for one turn: all queued
        d._execute([Send(b"c", msg)])  # behind the queue, not ahead of it
        assert len(sent) == 5 and len(d.outbox.queued) == 13
        for turn in (1, 2, 3):
            d.step(max_wait=0)
            assert len(sent) == 5 + min(5 * turn, 13)
        assert sent[5:] == [s.identity for s in burst] + [b"c"] and not d.outbox.queued
    finally:
        d.close()


def test_after_a_batch_of_reports_the_loop_pauses_at_most_until_the_next_deadline(
        tmp_path: Path) -> None:
    """A wake-up that read some reports pauses COALESCE_S before polling again (the next ones
    then come in a batch), but never past the core's next deadline."""
    import zmq

    from corral.supervisor.daemon import COALESCE_S

    (tmp_path / "tasks.txt").write_text("a\n")
    bind = f"tcp://127.0.0.1:{free_port()}"
    cfg = SupervisorConfig(bind=bind, control=f"tcp://127.0.0.1:{free_port()}",
                           tasks=f"file:{tmp_path / 'tasks.txt'}", warmup=5.0,
                           state_file=str(tmp_path / "epoch"))
    clock = FakeClock(100.0)
    sleeps: list[float] = []
    d = Daemon(cfg, clock=clock, sleep=sleeps.append)
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(bind)
    try:
        for wait_left in (5.0, COALESCE_S / 5):  # the warm-up's end is the next deadline
            clock.now = 105.0 - wait_left
            dealer.send(b"not a report")  # read and counted: a batch of one
            before = d.io.messages_in
            for _ in range(200):
                d.step(max_wait=0.05)
                if d.io.messages_in > before:
                    break
            assert d.io.messages_in == before + 1
            assert sleeps[-1] == pytest.approx(min(COALESCE_S, wait_left))
    finally:
        dealer.close(0)
        ctx.term()
        d.close()


def test_a_control_request_ends_the_coalescing_pause(tmp_path: Path) -> None:
    """The pause that lets reports gather ends as soon as a control request comes (an
    operator does not wait it out), and the next turn answers it."""
    import zmq

    from corral.common.wire import codec
    from corral.common.wire.protocol import ControlReply, ControlRequest

    (tmp_path / "tasks.txt").write_text("a\n")
    control = f"tcp://127.0.0.1:{free_port()}"
    cfg = SupervisorConfig(bind=f"tcp://127.0.0.1:{free_port()}", control=control,
                           tasks=f"file:{tmp_path / 'tasks.txt'}", warmup=60.0,
                           state_file=str(tmp_path / "epoch"))
    d = Daemon(cfg)  # the real pause
    ctx = zmq.Context()
    req = ctx.socket(zmq.DEALER)
    req.connect(control)
    try:
        req.send_multipart([b"", codec.encode(ControlRequest(7, "status", {}))])
        assert d._sleep(600.0), "the pause did not end for the request"
        d.step(max_wait=0)
        assert req.poll(10_000)
        reply = codec.decode_as(req.recv_multipart()[-1], ControlReply)
        assert reply.request_id == 7 and reply.error is None
    finally:
        req.close(0)
        ctx.term()
        d.close()


class FakeElection:
    """What the daemon tells the election thread: the heard counts, and stand-downs."""

    def __init__(self) -> None:
        self.counts: list[int] = []
        self.demotions = 0

    def heard(self, count: int) -> None:
        self.counts.append(count)

    def demoted(self) -> None:
        self.demotions += 1

    def stop(self) -> None:
        pass


def test_a_leader_past_its_deadline_answers_no_report_it_wakes_to(tmp_path: Path) -> None:
    """HA: the loop hands the heard count to the election and says when it stood down; and a
    leader whose etcd deadline passed while it could not run (frozen) stops before it reads
    the reports waiting for it — it answers none of them."""
    import zmq

    from corral.common.wire import codec
    from corral.common.wire.protocol import HA_EPOCH_BASE, Status
    from corral.supervisor.role import Role

    (tmp_path / "tasks.txt").write_text("a\n")
    bind = f"tcp://127.0.0.1:{free_port()}"
    cfg = SupervisorConfig(bind=bind, control=f"tcp://127.0.0.1:{free_port()}",
                           tasks=f"file:{tmp_path / 'tasks.txt'}", warmup=60.0, tick=0.5,
                           ha="etcd://127.0.0.1:1", ha_ttl=3.0, lease=10.0,
                           state_file=str(tmp_path / "epoch"))
    clock = FakeClock(100.0)
    d = Daemon(cfg, clock=clock, sleep=lambda s: None)
    election = FakeElection()
    d.election = election  # type: ignore[assignment]
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, b"w1@1")
    dealer.connect(bind)
    seq = 0

    def report() -> None:
        nonlocal seq
        seq += 1
        dealer.send(codec.encode(Status("w1", 1, seq, clock(), 10.0, {})))

    def step_until(cond: object) -> None:
        for _ in range(200):
            d.step(max_wait=0.05)
            if cond():  # type: ignore[operator]
                return
        raise AssertionError("not reached")

    try:
        d._roles.append(Role(True, HA_EPOCH_BASE + 7, clock() + 2.0))
        report()
        step_until(lambda: dealer.poll(0))  # a leader answers: a renewal
        assert codec.decode(dealer.recv()).epoch == HA_EPOCH_BASE + 7  # type: ignore[union-attr]
        clock.now += 0.5
        step_until(lambda: election.counts == [1])  # counted at the tick, handed over
        clock.now += 5.0  # frozen past its deadline, with a report waiting
        report()
        step_until(lambda: d.io.messages_in >= 2)
        assert not d.core.life.leader and d.io.messages_out == 1
        assert election.demotions == 1  # it told the election it stood down
        assert dealer.poll(200) == 0, "a deposed leader answered a report"
        d._roles.append(Role(False, error="the etcd lease or the leader key is gone"))
        step_until(lambda: election.demotions == 2)
    finally:
        dealer.close(0)
        ctx.term()
        d.close()
