"""The lease keeper with real processes: a `corral-worker run` with ``exec`` tasks against a
fake supervisor, the agent frozen (SIGSTOP) or its keeper killed (the agent killed or handed
over: test_worker_handover.py). Every process is stopped by pid at the end (the `workers`
fixture; task groups by the agent or its keeper, and keepers left behind by the autouse
fixture)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from corral.worker import keeperproc
from corral.worker.keeper import fields

from ..support import alive, wait_until
from . import workerprocs as support
from .workerprocs import FakeSupervisor, Workers

supervisor_fixture = support.supervisor_fixture  # the `supervisor` fixture
workers_fixture = support.workers_fixture  # the `workers` fixture

# The task id is a file path here: the group writes "<leader pid> <child pid>" into it.
TWO_PROCS = "sh -c 'sleep 60 & echo $$ $! > \"$0\"; wait' {task}"


def pids(path: Path) -> list[int]:
    text = wait_until(lambda: path.exists() and path.read_text().strip(), what=f"{path} written")
    return [int(p) for p in text.split()]


def keeper_of(agent: int) -> int:
    """The pid of the agent's keeper (its child running keeperproc.py)."""
    def find() -> int | None:
        for child in Path(f"/proc/{agent}/task/{agent}/children").read_text().split():
            cmd = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"keeperproc.py" in cmd:
                return int(child)
        return None
    pid = wait_until(find, what="the keeper process")
    return int(pid)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def exec_worker(workers: Workers, supervisor: FakeSupervisor, tmp: Path,
                *extra: str) -> subprocess.Popen[str]:
    return workers.start(supervisor.endpoint, "--handler", "exec", "--exec", TWO_PROCS,
                         "--stop-grace", "1", "--journal", str(tmp / "journal"), *extra)


def hold(supervisor: FakeSupervisor, tasks: tuple[str, ...], lease: float,
         after: float = 0.0) -> float:
    """Give the worker ``tasks`` under a lease, answering a report sent at ``after`` or later;
    the monotonic time the lease ends."""
    status = supervisor.wait_for(lambda s: s.sent_at >= after)
    supervisor.answer(status, add=tasks, lease=lease)
    supervisor.wait_for(lambda s: set(s.running) == set(tasks) and s.lease_held)
    return status.sent_at + lease


def test_a_frozen_agent_s_tasks_end_when_its_lease_lapses(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    agent = exec_worker(workers, supervisor, tmp_path)
    tasks = (str(tmp_path / "a"), str(tmp_path / "b"))
    expires = hold(supervisor, tasks, lease=2.0)
    procs = [p for t in tasks for p in pids(Path(t))]
    os.kill(agent.pid, signal.SIGSTOP)  # and the supervisor renews nothing any more
    try:
        wait_until(lambda: not any(alive(p) for p in procs), timeout=expires + 5
                   - time.monotonic(), what="the keeper ending the tasks")
        gone = time.monotonic()
        assert gone - expires < 1.0, gone - expires  # within the keeper's reach: at once
        def stops_() -> list[dict[str, Any]]:
            return [d for d in lines(tmp_path / "journal") if d["event"] == "stop"]

        stops = wait_until(lambda: len(stops_()) == 2 and stops_(),  # written as they end
                           what="two stop lines")
        assert sorted(d["task"] for d in stops) == sorted(tasks)
        assert all(d["by"] == "keeper" and expires <= d["t"] < expires + 0.5 for d in stops)
    finally:
        os.kill(agent.pid, signal.SIGCONT)
    # Awake: it finds its lease lapsed, holds nothing, and restarts nothing.
    status = supervisor.wait_for(lambda s: not s.lease_held and s.running == {})
    for _ in range(5):  # a few more reports (turns of its loop) in which nothing may start
        status = supervisor.recv()
        assert not status.lease_held and status.running == {}
    assert [d for d in lines(tmp_path / "journal") if d["event"] == "start"][2:] == []
    # The keeper's stops are the keeper's lines alone: the agent, awake, adds none.
    assert [d["by"] for d in lines(tmp_path / "journal") if d["event"] == "stop"] == \
        ["keeper", "keeper"]
    assert agent.poll() is None
    # A new lease and set: it takes tasks again.
    supervisor.answer(status, add=(str(tmp_path / "c"),), lease=30.0)
    assert pids(tmp_path / "c")


def test_with_keep_the_keeper_leaves_a_frozen_agent_s_tasks_running(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    # A witness under `stop` (its own fake supervisor), given its lease after the agent under
    # `keep` was: once the witness's keeper has ended its tasks, the agent's lease has lapsed
    # too, and its keeper has had as long to act on it.
    agent = exec_worker(workers, supervisor, tmp_path, "--on-lease-loss", "keep")
    with FakeSupervisor() as other:
        witness = workers.start(other.endpoint, "--handler", "exec", "--exec", TWO_PROCS,
                                "--stop-grace", "1", worker_id="witness")
        task, seen = str(tmp_path / "a"), str(tmp_path / "w")
        expires = hold(supervisor, (task,), lease=1.0)
        os.kill(agent.pid, signal.SIGSTOP)
        try:
            hold(other, (seen,), lease=1.0, after=expires - 1.0)
            os.kill(witness.pid, signal.SIGSTOP)
            procs, witnessed = pids(Path(task)), pids(Path(seen))
            wait_until(lambda: not any(alive(p) for p in witnessed), timeout=expires + 10
                       - time.monotonic(), what="the witness's keeper ending its tasks")
            assert all(alive(p) for p in procs)
        finally:
            os.kill(agent.pid, signal.SIGCONT)
            os.kill(witness.pid, signal.SIGCONT)


def test_a_killed_keeper_stops_the_tasks_and_the_agent_exits_4_long_before_its_lease(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    agent = exec_worker(workers, supervisor, tmp_path)
    tasks = (str(tmp_path / "a"), str(tmp_path / "b"))
    hold(supervisor, tasks, lease=30.0)
    procs = [p for t in tasks for p in pids(Path(t))]
    keeper = keeper_of(agent.pid)
    killed = time.monotonic()
    os.kill(keeper, signal.SIGKILL)
    assert agent.wait(5.0) == 4
    took = time.monotonic() - killed
    assert took < 30.0 / 2, took  # on the keeper's death, not at the lease's end
    assert not any(alive(p) for p in procs)
    assert "lease keeper gone" in agent.output()


def test_a_lapse_the_keeper_is_late_for_is_the_agent_s_stop_and_recorded_once(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    # The keeper acts on the lease's end only once it runs again (here: frozen, as a loaded
    # host may leave it for a while), and a renewal that reaches it before then moves its
    # deadline: it will never end these groups. So the agent, which saw its lease lapse, stops
    # them itself; its line is the only one, and the keeper, awake, adds none.
    agent = exec_worker(workers, supervisor, tmp_path)
    supervisor.recv()  # it reports once attached to its keeper: freezing that now blocks nothing
    keeper = keeper_of(agent.pid)
    os.kill(keeper, signal.SIGSTOP)
    try:
        tasks = (str(tmp_path / "a"), str(tmp_path / "b"))
        hold(supervisor, tasks, lease=1.0)
        procs = [p for t in tasks for p in pids(Path(t))]
        supervisor.wait_for(lambda s: not s.lease_held)
        wait_until(lambda: not any(alive(p) for p in procs),
                   what="the agent stopping its tasks (its keeper is frozen)")
        status = supervisor.wait_for(lambda s: s.running == {})
        supervisor.answer(status, lease=30.0)  # the renewal: it reaches the keeper first
        supervisor.wait_for(lambda s: s.lease_held)
    finally:
        os.kill(keeper, signal.SIGCONT)
    agent.signal(signal.SIGTERM)  # it holds nothing: it leaves at once, and so does its keeper
    assert agent.wait() == 0
    wait_until(lambda: not alive(keeper), what="the keeper exiting after the agent")
    stops = [d for d in lines(tmp_path / "journal") if d["event"] == "stop"]
    assert sorted(d["task"] for d in stops) == sorted(tasks)
    assert all("by" not in d for d in stops), stops


@pytest.mark.parametrize("agent_first", [True, False])
def test_at_the_lease_s_end_the_keeper_claims_only_what_the_agent_is_not_ending(
        runtime_dir: Path, agent_first: bool) -> None:
    # The keeper's own loop, step by step, with a socket pair for the agent's link. Both act
    # on one deadline: when the agent's stop (its "-" still on the way) ended the group before
    # the keeper looks, a claim would make a second stop line; a live group is the keeper's.
    journal = runtime_dir / "journal"
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener:
        keeper = keeperproc.Keeper(listener, str(runtime_dir))
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        task = subprocess.Popen(["sleep", "60"], start_new_session=True)
        try:
            theirs.setblocking(False)
            keeper.conn, keeper.state, keeper.hello_until = theirs, keeperproc.ATTACHED, None
            keeper.journal, keeper.worker = str(journal), "w1"
            keeper.watch(fields(task.pid, 5, "t1", None))
            keeper.deadline = time.monotonic()  # the lease ends now
            if agent_first:
                task.terminate()  # the agent's stop: its "-" is not read yet
                task.wait()
            keeper.lapse()
            ours.setblocking(False)
            if agent_first:
                with pytest.raises(BlockingIOError):
                    ours.recv(64)  # no K: it claimed nothing
            else:
                assert ours.recv(64) == b"K%d" % task.pid
                task.wait()  # the keeper's SIGTERM
            (group,) = keeper.groups.values()
            keeper.ended(group)
            ours.send(b"-%d %r" % (task.pid, time.monotonic()))  # what the agent says then
            ours.send(b"%s%d" % (b"W" if agent_first else b"Y", task.pid))
            keeper.read_agent()
            lines = journal.read_text().splitlines() if journal.exists() else []
            if agent_first:
                assert lines == []  # the agent's line is the only one
            else:
                (line,) = lines
                assert json.loads(line)["by"] == "keeper" and '"cause":"lease"' in line
        finally:
            task.kill()
            task.wait()
            ours.close()
            keeper.drop_conn()
            os.close(keeper.dirfd)
