"""The exec handler with real processes: process groups, SIGTERM then SIGKILL, crashes,
safe substitution, and no orphans — in-process (`ExecRunner`, with ``now`` passed in so the
grace period is decided by the test, not by the clock) and through the real agent."""

from __future__ import annotations

import os
import shlex
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from corral.common.wire.protocol import make_token
from corral.worker.events import TaskFailed, TaskStopped
from corral.worker.handlers import StartError, TaskContext
from corral.worker.process import ExecRunner

from ..support import alive, wait_until
from . import workerprocs as support
from .workerprocs import FakeSupervisor, Workers

E7 = make_token(7, 0)  # the token of a task given by a set of epoch 7 that names none

supervisor_fixture = support.supervisor_fixture  # the `supervisor` fixture
workers_fixture = support.workers_fixture  # the `workers` fixture

# The task id is a file path here: the group writes "<leader pid> <child pid>" into it.
TWO_PROCS = "sh -c 'sleep 60 & echo $$ $! > \"$0\"; wait' {task}"
IGNORES_TERM = "sh -c 'trap \"\" TERM; sleep 60 & echo $$ $! > \"$0\"; wait' {task}"
CRASHES = "sh -c 'sleep 60 & echo $$ $! > \"$0\"; exit 3' {task}"


@pytest.fixture
def runner_for() -> Iterator[type[ExecRunner]]:
    made: list[ExecRunner] = []

    class Tracked(ExecRunner):
        def __init__(self, template: str, stop_grace: float = 5.0, worker_id: str = "w1"):
            super().__init__(template, stop_grace, worker_id)
            made.append(self)

    try:
        yield Tracked
    finally:
        for r in made:
            r.close()  # nothing may outlive a test


def pids(path: Path) -> list[int]:
    text = wait_until(lambda: path.exists() and path.read_text().strip(), what=f"{path} written")
    return [int(p) for p in text.split()]


def poll_until(runner: ExecRunner, now: float) -> list[TaskStopped | TaskFailed]:
    events: list[TaskStopped | TaskFailed] = wait_until(lambda: runner.poll(now),
                                                        what="the runner's outcome")
    return events


def test_stop_terminates_the_whole_group(runner_for: type[ExecRunner], tmp_path: Path) -> None:
    runner = runner_for(TWO_PROCS)
    task = str(tmp_path / "a")
    runner.start(TaskContext(task))
    procs = pids(Path(task))
    assert all(alive(p) for p in procs) and runner.poll(0.0) == []
    assert runner.stop(task, now=0.0) is None  # stopping; the outcome comes from poll
    assert poll_until(runner, 0.0) == [TaskStopped(task)]
    assert not any(alive(p) for p in procs)


def test_a_group_ignoring_sigterm_is_killed_after_the_grace(
        runner_for: type[ExecRunner], tmp_path: Path) -> None:
    runner = runner_for(IGNORES_TERM, stop_grace=3.0)
    witness = runner_for(TWO_PROCS, stop_grace=3.0)  # a group that ends at SIGTERM
    task, seen = str(tmp_path / "a"), str(tmp_path / "w")
    runner.start(TaskContext(task))
    witness.start(TaskContext(seen))
    procs = pids(Path(task))
    pids(Path(seen))
    runner.stop(task, now=10.0)
    witness.stop(seen, now=10.0)
    assert runner.next_deadline(10.0) == 13.0
    # The witness's SIGTERM, sent after ours, has landed; the grace is not over: ours lives.
    assert poll_until(witness, 12.9) == [TaskStopped(seen)]
    assert runner.poll(12.9) == [] and all(alive(p) for p in procs)
    assert poll_until(runner, 13.0) == [TaskStopped(task)]
    wait_until(lambda: not any(alive(p) for p in procs), what="every process gone")


def test_a_crash_is_a_failure_and_its_leftovers_are_killed(
        runner_for: type[ExecRunner], tmp_path: Path) -> None:
    runner = runner_for(CRASHES)
    task = str(tmp_path / "a")
    runner.start(TaskContext(task))
    leader, child = pids(Path(task))
    assert poll_until(runner, 0.0) == [TaskFailed(task, "exited with status 3")]
    assert not alive(leader)
    wait_until(lambda: not alive(child), what="the leftover child killed")
    runner.start(TaskContext(task))  # the agent restarts it later: the id is free again


def test_task_ids_are_one_argument_never_shell_text(
        runner_for: type[ExecRunner], tmp_path: Path) -> None:
    out = tmp_path / "out"
    script = f'printf "%s|%s" "$0" "$CORRAL_TASK" > {shlex.quote(str(out))}'
    runner = runner_for(f"sh -c {shlex.quote(script)} {{task}}")
    task = "a b; touch pwned $(touch pwned2) {task}"
    assert runner.command(task)[-1] == task
    runner.start(TaskContext(task))
    assert wait_until(lambda: out.exists() and out.read_text(), what="the output") \
        == f"{task}|{task}"
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def test_a_command_that_cannot_start_raises(runner_for: type[ExecRunner]) -> None:
    runner = runner_for("/nonexistent/recorder --room {task}")
    with pytest.raises(StartError, match=r"^cannot run '/nonexistent/recorder': "):
        runner.start(TaskContext("a"))
    assert runner.tasks() == []


def test_close_ends_running_and_stopping_groups(
        runner_for: type[ExecRunner], tmp_path: Path) -> None:
    runner = runner_for(IGNORES_TERM, stop_grace=0.2)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    runner.start(TaskContext(a))
    runner.start(TaskContext(b))
    procs = pids(Path(a)) + pids(Path(b))
    runner.stop(a, now=0.0)
    assert sorted(e.task for e in runner.close()) == sorted([a, b])
    wait_until(lambda: not any(alive(p) for p in procs), what="every process gone")


# -- through the agent -------------------------------------------------------------------------


def test_a_crashing_task_is_restarted_and_its_failures_reported(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    proc = workers.start(supervisor.endpoint, "--handler", "exec", "--exec", "sh -c 'exit 3'")
    status = supervisor.recv()
    supervisor.answer(status, add=("t",))
    status = supervisor.wait_for(lambda s: s.failures.get("t", 0) >= 2)  # 0.5 s, then 1 s
    assert status.running == {"t": E7} and proc.poll() is None
    supervisor.answer(status, remove=("t",))
    status = supervisor.wait_for(lambda s: s.applied == (7, 2))
    assert status.running == {} and status.failures == {}


def test_the_agent_leaves_no_process_behind_when_stopped(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    proc = workers.start(supervisor.endpoint, "--handler", "exec", "--exec", IGNORES_TERM,
                         "--stop-grace", "0.3", "--drain-timeout", "0.2")
    task = str(tmp_path / "a")
    status = supervisor.recv()
    supervisor.answer(status, add=(task,))
    procs = pids(Path(task))
    supervisor.wait_for(lambda s: task in s.running)
    proc.signal(signal.SIGTERM)  # drain times out, SIGTERM is ignored, SIGKILL ends it
    assert proc.wait(15.0) == 0
    assert not any(alive(p) for p in procs)


class StubKeeper:
    """What `ExecRunner` asks of its keeper link: whether the keeper is ending a group (K)."""

    def __init__(self, claims: set[int]) -> None:
        self.claims = claims
        self.announced: list[int] = []

    def child_hook(self, task: str, token: int, spec: str | None) -> Callable[[], None]:
        return lambda: None

    def claimed(self, pid: int) -> bool:
        return pid in self.claims

    def alive(self) -> bool:
        return True

    def announce(self, pid: int, kill_at: float) -> None:
        self.announced.append(pid)

    def settled(self, pid: int, by_keeper: bool) -> None:
        pass


@pytest.mark.parametrize("keeper_ending_it", [False, True])
def test_a_lapse_stop_is_the_agent_s_unless_the_keeper_is_ending_the_group(
        tmp_path: Path, keeper_ending_it: bool) -> None:
    # The keeper acts on the same deadline, but a renewal that reaches it first moves that
    # deadline: then only the agent stops the group, or it would run on with nobody's stop.
    task = str(tmp_path / "a")
    keeper = StubKeeper(set())
    runner = ExecRunner(TWO_PROCS, 5.0, "w1", keeper)  # type: ignore[arg-type]
    try:
        runner.start(TaskContext(task))
        procs = pids(Path(task))
        if keeper_ending_it:
            keeper.claims.add(procs[0])
        assert runner.stop(task, now=0.0, lapsed=True) is None
        if keeper_ending_it:  # left to the keeper: the agent signals nothing
            assert keeper.announced == [] and all(alive(p) for p in procs)
            os.killpg(procs[0], signal.SIGTERM)  # as the keeper does
        else:
            assert keeper.announced == [procs[0]]
        (event,) = poll_until(runner, now=0.0)
        assert event == TaskStopped(task, by_keeper=keeper_ending_it)
    finally:
        runner.close()
