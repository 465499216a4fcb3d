"""Exec tasks outlive their agent, with real processes against a fake supervisor: a hand-over
(SIGUSR2) and a crash (kill -9) within the lease are adopted by the next agent with the same
id — same processes, same tokens, nothing stopped or started — and without a next agent the
keeper ends the tasks at the lease's end; a keeper of another version or settings has its
tasks stopped; every stop has one journal line. Processes are stopped by pid (the `workers`
fixture, and the autouse fixture that ends keepers left behind)."""

from __future__ import annotations

import json
import signal
import socket
import threading
from pathlib import Path
from typing import Any

from corral.common.wire.protocol import Status, WorkerState, make_token
from corral.worker.rundir import RunDir

from ..support import alive, keeper_pids, wait_until
from . import workerprocs as support
from .workerprocs import FakeSupervisor, Workers

supervisor_fixture = support.supervisor_fixture  # the `supervisor` fixture
workers_fixture = support.workers_fixture  # the `workers` fixture

E7 = make_token(7, 0)  # the token of a task given by a set of epoch 7 that names none
# The task id is a file path here: the group writes "<leader pid> <child pid>" into it.
TWO_PROCS = "sh -c 'sleep 60 & echo $$ $! > \"$0\"; wait' {task}"


def pids(path: Path) -> list[int]:
    text = wait_until(lambda: path.exists() and path.read_text().strip(), what=f"{path} written")
    return [int(p) for p in text.split()]


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def events(path: Path, kind: str) -> list[dict[str, Any]]:
    return [d for d in lines(path) if d["event"] == kind]


def agent(workers: Workers, supervisor: FakeSupervisor, tmp: Path, *extra: str,
          command: str = TWO_PROCS) -> Any:
    return workers.start(supervisor.endpoint, "--handler", "exec", "--exec", command,
                         "--stop-grace", "1", "--journal", str(tmp / "journal"), *extra)


def hold(supervisor: FakeSupervisor, tasks: tuple[str, ...], lease: float) -> Status:
    """Give the worker ``tasks`` under a lease; its report once it runs them."""
    supervisor.answer(supervisor.recv(), add=tasks, lease=lease)
    return supervisor.wait_for(lambda s: set(s.running) == set(tasks) and s.lease_held
                               and not s.starting)


def successor(supervisor: FakeSupervisor, before: Status) -> Status:
    """The first report of a new incarnation."""
    return supervisor.wait_for(lambda s: s.incarnation != before.incarnation)


def two_tasks(tmp: Path) -> tuple[str, str]:
    return str(tmp / "a"), str(tmp / "b")


def test_usr2_hands_the_tasks_over_and_the_next_agent_adopts_them(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    old = agent(workers, supervisor, tmp_path)
    tasks = two_tasks(tmp_path)
    held = hold(supervisor, tasks, lease=30.0)
    procs = {t: pids(Path(t)) for t in tasks}
    old.signal(signal.SIGUSR2)
    last = supervisor.wait_for(lambda s: s.state is WorkerState.HANDING_OVER)
    assert last.running == held.running == {t: E7 for t in tasks}
    assert old.wait() == 0
    assert all(alive(p) for ps in procs.values() for p in ps)

    agent(workers, supervisor, tmp_path)
    first = successor(supervisor, last)
    assert first.running == held.running and first.starting == () and first.lease_held
    # The supervisor's first set to the new incarnation: a reset to what it adopted.
    supervisor.answer(first, reset=True, add=tasks, tokens=dict(first.running))
    after = supervisor.wait_for(lambda s: s.applied == (7, supervisor.seq))
    assert after.running == held.running and after.failures == {}
    assert {t: pids(Path(t)) for t in tasks} == procs
    assert all(alive(p) for ps in procs.values() for p in ps)
    journal = tmp_path / "journal"
    assert len(events(journal, "start")) == 2 and events(journal, "stop") == []
    adopted = events(journal, "adopt")
    assert sorted((d["task"], d["token"], d["pid"]) for d in adopted) == \
        sorted((t, E7, procs[t][0]) for t in tasks)
    assert "handing over" in old.output()


def test_an_agent_killed_and_restarted_within_its_lease_restarts_nothing(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    old = agent(workers, supervisor, tmp_path)
    tasks = two_tasks(tmp_path)
    held = hold(supervisor, tasks, lease=30.0)
    procs = {t: pids(Path(t)) for t in tasks}
    old.kill()
    agent(workers, supervisor, tmp_path)
    first = successor(supervisor, held)
    assert first.running == held.running and first.lease_held
    assert {t: pids(Path(t)) for t in tasks} == procs
    assert all(alive(p) for ps in procs.values() for p in ps)
    journal = tmp_path / "journal"
    assert len(events(journal, "start")) == 2 and events(journal, "stop") == []
    assert sorted(d["task"] for d in events(journal, "adopt")) == sorted(tasks)


def test_without_a_next_agent_the_keeper_ends_whole_groups_at_the_lease_s_end(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path,
        runtime_dir: Path) -> None:
    old = agent(workers, supervisor, tmp_path)
    tasks = two_tasks(tmp_path)
    answered = supervisor.recv()
    supervisor.answer(answered, add=tasks, lease=2.0)
    supervisor.wait_for(lambda s: set(s.running) == set(tasks) and not s.starting)
    expires = answered.sent_at + 2.0  # nothing renews it: this is the lease's end
    procs = [p for t in tasks for p in pids(Path(t))]
    (keeper,) = keeper_pids(runtime_dir)
    old.kill()  # and no agent comes back: the supervisor renews nothing either
    assert all(alive(p) for p in procs)  # not bound to the agent any more
    wait_until(lambda: not any(alive(p) for p in procs), timeout=10, what="the groups ended")
    wait_until(lambda: not alive(keeper), what="the keeper exited")
    stops = events(tmp_path / "journal", "stop")
    assert sorted((d["task"], d["by"], d["cause"]) for d in stops) == \
        sorted((t, "keeper", "lease") for t in tasks)
    assert all(expires <= d["t"] for d in stops)  # not a moment before the lease's end


def test_a_usr2_d_agent_with_no_successor_is_a_crash_its_tasks_end_with_the_lease(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    old = agent(workers, supervisor, tmp_path)
    tasks = two_tasks(tmp_path)
    supervisor.answer(supervisor.recv(), add=tasks, lease=2.0)
    supervisor.wait_for(lambda s: set(s.running) == set(tasks) and not s.starting)
    procs = [p for t in tasks for p in pids(Path(t))]
    old.signal(signal.SIGUSR2)
    assert old.wait() == 0
    assert all(alive(p) for p in procs)
    wait_until(lambda: not any(alive(p) for p in procs), timeout=10, what="the groups ended")
    stops = events(tmp_path / "journal", "stop")
    assert sorted((d["task"], d["by"]) for d in stops) == sorted((t, "keeper") for t in tasks)


def test_an_agent_that_comes_after_the_lease_s_end_adopts_nothing(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    old = agent(workers, supervisor, tmp_path)
    tasks = two_tasks(tmp_path)
    supervisor.answer(supervisor.recv(), add=tasks, lease=1.0)
    held = supervisor.wait_for(lambda s: set(s.running) == set(tasks) and not s.starting)
    procs = [p for t in tasks for p in pids(Path(t))]
    old.kill()
    wait_until(lambda: not any(alive(p) for p in procs), timeout=10, what="the groups ended")
    agent(workers, supervisor, tmp_path)
    first = successor(supervisor, held)
    assert first.running == {} and not first.lease_held
    assert events(tmp_path / "journal", "adopt") == []


def test_other_exec_settings_stop_the_old_tasks_and_start_fresh(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    old = agent(workers, supervisor, tmp_path)
    tasks = two_tasks(tmp_path)
    held = hold(supervisor, tasks, lease=30.0)
    procs = [p for t in tasks for p in pids(Path(t))]
    old.signal(signal.SIGUSR2)
    assert old.wait() == 0
    new = agent(workers, supervisor, tmp_path, command=TWO_PROCS + " other")
    first = successor(supervisor, held)
    assert first.running == {}
    assert not any(alive(p) for p in procs)  # ended before the new agent said anything
    assert "another version or other settings" in new.output()
    stops = events(tmp_path / "journal", "stop")
    assert sorted((d["task"], d["cause"]) for d in stops) == \
        sorted((t, "mismatch") for t in tasks)


def test_an_agent_with_another_handler_stops_the_exec_tasks_it_cannot_adopt(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    old = agent(workers, supervisor, tmp_path)
    tasks = two_tasks(tmp_path)
    held = hold(supervisor, tasks, lease=30.0)
    procs = [p for t in tasks for p in pids(Path(t))]
    old.kill()
    new = workers.start(supervisor.endpoint, "--handler", "log")
    first = successor(supervisor, held)
    assert first.running == {} and not any(alive(p) for p in procs)
    assert "its tasks were stopped" in new.output()


def test_a_keeper_of_another_version_is_told_to_end_its_tasks(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path,
        runtime_dir: Path) -> None:
    # A stand-in for an older keeper: it speaks only the part every version keeps (V, X).
    rundir = RunDir("w1", runtime_dir / "corral")
    rundir.create()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(rundir.socket_address())
    listener.listen(1)
    told: list[bytes] = []

    def old_keeper() -> None:
        conn, _ = listener.accept()
        conn.send(b"V" + json.dumps({"version": 0, "pid": 1, "grace": 0.1,
                                     "fingerprint": "", "tasks": 3}).encode())
        told.append(conn.recv(100))
        (rundir.path / "keeper.sock").unlink()
        conn.close()  # "done"
        listener.close()

    thread = threading.Thread(target=old_keeper, daemon=True)
    thread.start()
    new = agent(workers, supervisor, tmp_path)
    supervisor.recv()
    thread.join(10)
    assert told == [b"X"]
    wait_until(lambda: "speaks version 0" in new.output(), what="the mismatch logged")
    assert len(keeper_pids(runtime_dir)) == 1  # a fresh keeper of its own
    supervisor.answer(supervisor.last or supervisor.recv(), add=(str(tmp_path / "a"),))
    assert pids(tmp_path / "a")


def test_a_second_agent_with_the_same_id_on_one_host_exits_3(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    agent(workers, supervisor, tmp_path)
    supervisor.recv()
    second = agent(workers, supervisor, tmp_path)
    assert second.wait() == 3
    assert "another agent with this id runs on this host" in second.output()


# -- one journal line per stop (issue 33) ------------------------------------------------------


def test_an_agent_s_own_stops_have_one_line_each_at_exit_and_before_a_kill(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path,
        runtime_dir: Path) -> None:
    first = agent(workers, supervisor, tmp_path)
    a, b, c = (str(tmp_path / x) for x in "abc")
    held = hold(supervisor, (a, b, c), lease=2.0)
    procs = {t: pids(Path(t)) for t in (a, b, c)}
    supervisor.answer(held, remove=(a,), lease=2.0)  # the agent stops a: its line
    supervisor.wait_for(lambda s: a not in s.running)
    first.kill()  # b and c: kept, then ended by the keeper at the lease's end
    wait_until(lambda: not any(alive(p) for ps in procs.values() for p in ps), timeout=10,
               what="every group ended")
    stops = events(tmp_path / "journal", "stop")
    assert sorted((d["task"], d.get("by")) for d in stops) == \
        [(a, None), (b, "keeper"), (c, "keeper")]

    # A normal exit: every stop is the agent's, and the keeper adds nothing.
    (tmp_path / "journal").unlink()
    second = agent(workers, supervisor, tmp_path)
    d, e = str(tmp_path / "d"), str(tmp_path / "e")
    supervisor.answer(supervisor.wait_for(lambda s: s.running == {}), add=(d, e))
    supervisor.wait_for(lambda s: set(s.running) == {d, e} and not s.starting)
    second.signal(signal.SIGTERM)
    wait_until(lambda: "lame duck" in second.output(), what="draining")
    second.signal(signal.SIGTERM)  # the second: stop now
    assert second.wait() == 0
    assert keeper_pids(runtime_dir) == []  # it waited for its keeper: no line may come later
    stops = events(tmp_path / "journal", "stop")
    assert sorted((x["task"], x.get("by")) for x in stops) == [(d, None), (e, None)]
