"""The real `corral-supervisor` process, DEALER sockets playing workers, `corralctl` as a
subprocess. Short timings (lease 3 s, margin 1 s, tick 0.25 s)."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
import zmq

from corral.common.wire import codec
from corral.common.wire.protocol import ControlRequest, WorkerState, token_epoch

from ..support import wait_until
from .dealers import FakeWorker, Fleet
from .procs import BIN, Procs, Supervisor

pytestmark = pytest.mark.e2e


@pytest.fixture()
def tasks_file(tmp_path: Path) -> Path:
    f = tmp_path / "tasks.txt"
    f.write_text("".join(f"task-{i:02d}\n" for i in range(12)))
    return f


@pytest.fixture()
def sup(procs: Procs, tasks_file: Path) -> Supervisor:
    return Supervisor(procs, f"file:{tasks_file}", expect_workers=3, warmup=10)


@pytest.fixture()
def fleet(sup: Supervisor) -> Iterator[Fleet]:
    f = Fleet(sup.endpoint)
    try:
        yield f
    finally:
        f.close()


def assigned(sup: Supervisor) -> dict[str, list[str]]:
    return sup.query("assignments")["assignments"]  # type: ignore[no-any-return]


def test_assigns_reports_and_answers_corralctl(sup: Supervisor, fleet: Fleet) -> None:
    for name in "abc":
        fleet.add(FakeWorker(name))
    wait_until(lambda: len(fleet.owners()) == 12, what="every task running")
    status = sup.ctl("status")
    assert status["phase"] == "running" and status["workers_active"] == 3
    assert status["tasks_assigned"] == 12 and status["tasks_pending"] == 0
    workers = sup.ctl("workers")["workers"]
    assert sorted((w["id"], w["running"]) for w in workers) == [("a", 4), ("b", 4), ("c", 4)]
    asg = sup.ctl("assignments")
    assert asg["assignments"] == {t: o for t, o in sorted(fleet.owners().items())}
    tasks = sup.ctl("tasks", "--worker", "a")["tasks"]
    assert len(tasks) == 4 and all(t["owners"] == ["a"] for t in tasks)
    out = subprocess.run([str(BIN / "corralctl"), "--control", sup.control, "workers"],
                         capture_output=True, text=True, timeout=30)  # the table for people
    assert out.returncode == 0 and "WORKER" in out.stdout and "a" in out.stdout


def test_silent_worker_tasks_move_after_lease_and_margin(sup: Supervisor, fleet: Fleet) -> None:
    a, b, c = (fleet.add(FakeWorker(n)) for n in "abc")
    wait_until(lambda: len(fleet.owners()) == 12, what="every task running")
    before = assigned(sup)
    mine = {t for t, o in before.items() if o == ["a"]}
    a.silent = True
    silenced = time.monotonic()
    wait_until(lambda: all(assigned(sup)[t] != ["a"] for t in mine), timeout=10,
               what="a's tasks reassigned")
    took = time.monotonic() - silenced
    assert took >= 3 + 1 - 0.5 - 0.1  # lease + margin, less one report interval of slack
    after = assigned(sup)
    assert {t for t in before if before[t] != after[t]} == mine  # nothing else moved
    assert sup.ctl("counters")["lease_expiries"] == 1
    assert not a.running, "the silent worker's own lease lapsed: it stopped its tasks"
    row = next(w for w in sup.ctl("workers")["workers"] if w["id"] == "a")
    assert row["state"] == "inactive" and row["active"] is False
    del b, c


def test_drain_and_undrain(sup: Supervisor, fleet: Fleet) -> None:
    for name in "abc":
        fleet.add(FakeWorker(name, max_load=20))
    wait_until(lambda: len(fleet.owners()) == 12, what="every task running")
    assert sup.ctl("drain", "a") == {"drained": "a"}
    wait_until(lambda: not any("a" in o for o in assigned(sup).values())
               and not any("a" in o for o in fleet.owners().values()), what="a drained")
    assert next(w for w in sup.ctl("workers")["workers"] if w["id"] == "a")["state"] == "drained"
    sup.ctl("undrain", "a")
    wait_until(lambda: any("a" in o for o in assigned(sup).values()), what="a used again")
    out = sup.ctl("drain", "ghost", check=False)
    assert out.returncode == 1 and "not_found" in out.stderr


def test_query_now_and_on_sighup(sup: Supervisor, fleet: Fleet, tasks_file: Path) -> None:
    for name in "abc":
        fleet.add(FakeWorker(name))
    wait_until(lambda: len(fleet.owners()) == 12, what="every task running")
    tasks_file.write_text("task-00\nnew-1\n")
    sup.ctl("query")
    wait_until(lambda: sorted(fleet.owners()) == ["new-1", "task-00"], what="new list")
    tasks_file.write_text("task-00\nnew-1\nnew-2\n")
    sup.proc.signal(signal.SIGHUP)
    wait_until(lambda: "new-2" in fleet.owners(), what="SIGHUP query")
    tasks_file.write_text("")  # empty without --allow-empty: refused, last list kept
    sup.ctl("query")
    wait_until(lambda: sup.ctl("counters")["source_errors"] >= 1, what="refused empty list")
    assert len(fleet.owners()) == 3


def test_bad_input_is_counted_and_never_fatal(sup: Supervisor, fleet: Fleet) -> None:
    for name in "abc":
        fleet.add(FakeWorker(name))
    wait_until(lambda: len(fleet.owners()) == 12, what="every task running")
    ctx = zmq.Context.instance()
    rng = random.Random(5)
    junk = ctx.socket(zmq.DEALER)
    junk.setsockopt(zmq.LINGER, 0)
    junk.connect(sup.endpoint)
    ctl = ctx.socket(zmq.DEALER)
    ctl.setsockopt(zmq.LINGER, 0)
    ctl.connect(sup.control)
    try:
        for i in range(300):
            junk.send(rng.randbytes(rng.randrange(1, 60)))
            junk.send_multipart([b"extra", b"frames"])
            ctl.send(msgpack.packb([1, "control_request", {"request_id": i, "verb": 5}]))
        ctl.send(codec.encode(ControlRequest(9, "no-such-verb", {})))
        wait_until(lambda: sup.ctl("counters")["decode_errors"] >= 300, what="counted")
        counters = sup.ctl("counters")
        assert counters["bad_frames"] >= 300 and counters["control_errors"] >= 300
    finally:
        junk.close(0)
        ctl.close(0)
    assert sup.proc.alive() and sup.ctl("status")["workers_active"] == 3


def test_sigterm_exits_zero(sup: Supervisor) -> None:
    wait_until(lambda: sup.ctl("status", check=False).returncode == 0, what="up")
    sup.proc.signal(signal.SIGTERM)
    assert sup.proc.wait(10) == 0
    assert "supervisor stopped" in sup.proc.output()


def test_unreachable_supervisor_is_a_clear_error_with_status_1() -> None:
    out = subprocess.run([str(BIN / "corralctl"), "--control", "tcp://127.0.0.1:9",
                          "--timeout", "0.5", "status"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 1
    assert out.stderr.strip() == ("corralctl: no answer from the supervisor at "
                                  "tcp://127.0.0.1:9 within 0.5 s")


def test_restarted_supervisor_keeps_what_workers_run(procs: Procs, tasks_file: Path) -> None:
    sup = Supervisor(procs, f"file:{tasks_file}", expect_workers=3, warmup=10)
    fleet = Fleet(sup.endpoint)
    try:
        for name in "abc":
            fleet.add(FakeWorker(name))
        wait_until(lambda: len(fleet.owners()) == 12, what="every task running")
        before = fleet.owners()
        epoch = sup.ctl("status")["epoch"]
        sup.proc.signal(signal.SIGKILL)
        sup.proc.wait(5)
        sup.start("supervisor-2")
        wait_until(lambda: sup.ctl("status", check=False).returncode == 0
                   and sup.ctl("status")["phase"] == "running", what="running again")
        # Its reconciliation has had its say once it answered, on every worker, a report that
        # showed its reset applied.
        wait_until(lambda: fleet.every(lambda w: w.settled(epoch + 1)),
                   what="every worker's report after the new epoch's reset answered")
        assert fleet.owners() == before  # nothing stopped, nothing moved
        assert sup.ctl("status")["epoch"] == epoch + 1
        # Kept tasks keep the fencing tokens they were started under (the old epoch's).
        assert all(token_epoch(t) == epoch for w in fleet.workers for t in w.running.values())
    finally:
        fleet.close()


def test_lame_duck_worker_is_drained(sup: Supervisor, fleet: Fleet) -> None:
    a = fleet.add(FakeWorker("a", max_load=20))
    for name in "bc":
        fleet.add(FakeWorker(name, max_load=20))
    wait_until(lambda: len(fleet.owners()) == 12, what="every task running")
    a.state = WorkerState.LAME_DUCK
    wait_until(lambda: not a.running, what="lame duck emptied")
    assert len(fleet.owners()) == 12
