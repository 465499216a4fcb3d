"""`corral-worker run` as a real process: configuration errors, signals, exit statuses and the
journal, against a fake supervisor on loopback. Every process is killed by pid at the end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from corral.common.wire.protocol import WorkerState, make_token

from ..support import WAIT, wait_until
from . import workerprocs as support
from .workerprocs import WORKER, FakeSupervisor, Workers, journal

E7 = make_token(7, 0)  # the token of a task given by a set of epoch 7 that names none

supervisor_fixture = support.supervisor_fixture  # the `supervisor` fixture
workers_fixture = support.workers_fixture  # the `workers` fixture


def run_to_exit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([WORKER, "run", *args], capture_output=True, text=True, timeout=WAIT,
                          env=env)


def test_help_documents_defaults_and_exit_statuses() -> None:
    out = subprocess.run([WORKER, "run", "--help"], capture_output=True, text=True,
                         timeout=WAIT).stdout
    flat = " ".join(out.split())
    for text in ("--report-interval", "half the lease", "[default: 30.0]", "[default: 10.0]",
                 "[default: stop]", "CORRAL_SUPERVISOR", "--config", "3 refused"):
        assert text in flat, text


@pytest.mark.parametrize(("args", "key"), [
    (["--handler", "log", "--report-interval", "0"], "report_interval"),
    (["--handler", "exec"], "exec"),
    (["--handler", "python:no_such_module_here:Handler"], "handler"),
    (["--supervisor", "nowhere", "--handler", "log"], "supervisor"),
])
def test_configuration_errors_print_one_line_and_exit_2(args: list[str], key: str) -> None:
    if "--supervisor" not in args:
        args = ["--supervisor", "tcp://127.0.0.1:9", *args]
    out = run_to_exit(*args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{key}:" in lines[0], out.stderr


def test_an_exec_worker_without_a_runtime_directory_exits_2() -> None:
    env = {**os.environ, "XDG_RUNTIME_DIR": "/proc/no-such-dir"}  # nothing can be made there
    out = run_to_exit("--supervisor", "tcp://127.0.0.1:9", "--handler", "exec", "--exec",
                      "sleep 1", env=env)
    assert out.returncode == 2 and "cannot create the runtime directory" in out.stderr


def test_unknown_config_file_key_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "worker.toml"
    config.write_text('handler = "log"\nrenew_interval = 2\n')
    out = run_to_exit("--supervisor", "tcp://127.0.0.1:9", "--config", str(config))
    assert out.returncode == 2 and "renew_interval" in out.stderr


def _holding(supervisor: FakeSupervisor, tasks: tuple[str, ...]) -> None:
    status = supervisor.recv()
    supervisor.answer(status, reset=True, add=tasks)
    supervisor.wait_for(lambda s: set(s.running) == set(tasks))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR2])
def test_sigterm_drains_lame_duck_and_exits_0_once_empty(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path,
        signum: signal.Signals) -> None:
    # SIGUSR2 hands exec tasks over; tasks that run inside the agent drain instead.
    path = tmp_path / "w1.journal"
    proc = workers.start(supervisor.endpoint, "--handler", "log", "--journal", str(path))
    _holding(supervisor, ("a", "b"))
    proc.signal(signum)
    status = supervisor.wait_for(lambda s: s.state == WorkerState.LAME_DUCK)
    assert status.running == {"a": E7, "b": E7}
    supervisor.answer(status, add=("c",), remove=("a",))  # removes apply, adds do not
    status = supervisor.wait_for(lambda s: s.applied == (7, 2))
    assert status.running == {"b": E7} and proc.poll() is None
    supervisor.answer(status, remove=("b",))
    assert proc.wait(WAIT) == 0
    assert journal(path) == [("start", "a"), ("start", "b"), ("stop", "a"), ("stop", "b")]
    line = json.loads(path.read_text().splitlines()[0])
    assert set(line) == {"t", "event", "task", "worker", "token"} and line["worker"] == "w1"
    assert line["token"] == E7


def test_drain_timeout_stops_what_is_left_and_exits_0(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    path = tmp_path / "w1.journal"
    proc = workers.start(supervisor.endpoint, "--handler", "log", "--journal", str(path),
                         "--drain-timeout", "0.5")
    _holding(supervisor, ("a",))
    proc.signal(signal.SIGTERM)
    supervisor.wait_for(lambda s: s.state == WorkerState.LAME_DUCK)
    assert proc.wait(WAIT) == 0
    assert journal(path) == [("start", "a"), ("stop", "a")]
    assert "drain timeout" in proc.output()


def test_a_second_signal_stops_at_once(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    path = tmp_path / "w1.journal"
    proc = workers.start(supervisor.endpoint, "--handler", "log", "--journal", str(path))
    _holding(supervisor, ("a",))
    proc.signal(signal.SIGINT)  # a first SIGINT drains like SIGTERM
    supervisor.wait_for(lambda s: s.state == WorkerState.LAME_DUCK)
    proc.signal(signal.SIGTERM)
    assert proc.wait(WAIT) == 0
    assert journal(path) == [("start", "a"), ("stop", "a")]


def test_refused_worker_logs_the_reason_and_exits_3(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    path = tmp_path / "w1.journal"
    proc = workers.start(supervisor.endpoint, "--handler", "log", "--journal", str(path))
    _holding(supervisor, ("a",))
    supervisor.refuse(supervisor.recv(), "id w1 is used by a live worker")
    assert proc.wait(WAIT) == 3
    assert journal(path) == [("start", "a"), ("stop", "a")]
    errors = [json.loads(line) for line in proc.output().splitlines()
              if '"error"' in line]
    assert errors and errors[0]["reason"] == "id w1 is used by a live worker"


def test_ready_after_holds_a_new_worker_in_starting(
        supervisor: FakeSupervisor, workers: Workers) -> None:
    workers.start(supervisor.endpoint, "--handler", "log", "--ready-after", "0.5")
    assert supervisor.recv().state == WorkerState.STARTING
    supervisor.wait_for(lambda s: s.state == WorkerState.READY)


def test_python_handler_from_a_module(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    (tmp_path / "myhandler.py").write_text(
        "import pathlib\n"
        "class Touch:\n"
        "    def start(self, task):\n"
        f"        pathlib.Path({str(tmp_path)!r}, task).touch()\n"
        "    def stop(self, task):\n"
        f"        pathlib.Path({str(tmp_path)!r}, task).unlink()\n"
    )
    proc = workers.start(supervisor.endpoint, "--handler", "python:myhandler:Touch",
                         env={"PYTHONPATH": str(tmp_path)})
    _holding(supervisor, ("t1",))
    assert (tmp_path / "t1").exists()
    proc.signal(signal.SIGTERM)
    # Wait for the first to land: two pending SIGTERMs merge into one in the kernel.
    supervisor.wait_for(lambda s: s.state == WorkerState.LAME_DUCK)
    proc.signal(signal.SIGTERM)
    assert proc.wait(WAIT) == 0
    wait_until(lambda: not (tmp_path / "t1").exists(), timeout=1.0, what="t1 stopped")
