"""Request routing end to end: a real `corral-supervisor`, real `corral-worker --serve`
processes with a python handler that echoes who served, and a `Router` in the test process.
Short timings (lease 3 s, report interval 0.5 s); every wait is bounded."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from corral.client import Router, RouterConfig
from corral.client.errors import RouteError

from ..support import Proc, free_port, wait_until
from .procs import BIN, Procs, Supervisor

pytestmark = pytest.mark.e2e

HANDLER = '''
import os, time

class Echo:
    """Serves by saying who served what; SERVE_DELAY makes it artificially slow."""

    def __init__(self):
        self.me = os.environ["WORKER_NAME"]
        self.delay = float(os.environ.get("SERVE_DELAY", "0"))

    def start(self, task):
        pass

    def stop(self, task):
        pass

    def serve(self, task, request):
        if self.delay:
            time.sleep(self.delay)
        return {"worker": self.me, "task": task, "request": request}
'''


class Fleet:
    def __init__(self, procs: Procs, tasks: int, workers: int) -> None:
        self.procs = procs
        (procs.tmp / "routing_handler.py").write_text(HANDLER)
        (procs.tmp / "tasks.txt").write_text("".join(f"t{i}\n" for i in range(tasks)))
        self.sup = Supervisor(procs, f"file:{procs.tmp / 'tasks.txt'}", expect_workers=workers,
                              warmup=10)
        self.workers: dict[str, Proc] = {}
        self.routers: list[Router] = []

    def worker(self, name: str, delay: float = 0.0) -> Proc:
        args = [str(BIN / "corral-worker"), "run", "--supervisor", self.sup.endpoint, "--id",
                name, "--handler", "python:routing_handler:Echo", "--serve",
                f"tcp://127.0.0.1:{free_port()}", "--report-interval", "0.5",
                "--drain-timeout", "20"]
        self.workers[name] = self.procs.start(name, args, env={
            "PYTHONPATH": str(self.procs.tmp), "WORKER_NAME": name, "SERVE_DELAY": str(delay),
            "CORRAL_LOG_JSON": "1"})
        return self.workers[name]

    def router(self, **cfg: Any) -> Router:
        r = Router(RouterConfig(control=self.sup.control, **{"client": 1, **cfg}))
        self.routers.append(r)
        return r

    def ready(self, tasks: int, workers: int) -> None:
        def full() -> bool:
            m = self.sup.query("map")
            return (len(m["workers"]) == workers and len(m["tasks"]) == tasks
                    and all(m["tasks"].values()))
        wait_until(full, timeout=30, what="every task served")

    def close(self) -> None:
        """Routers closed; workers stopped at once (a first SIGTERM drains, a second stops),
        so the teardown does not wait for drains that have nowhere to go."""
        for r in self.routers:
            r.close()
        alive = [p for p in self.workers.values() if p.alive()]
        for p in alive:
            p.signal(signal.SIGTERM)
        for p in alive:
            wait_until(lambda p=p: not p.alive() or "lame duck" in p.output(), timeout=10,
                       what="the worker to start draining")
            p.signal(signal.SIGTERM)


@pytest.fixture
def fleet(procs: Procs) -> Iterator[Fleet]:
    f = Fleet(procs, tasks=6, workers=3)
    try:
        yield f
    finally:
        f.close()


def owners_by_map(router: Router) -> dict[str, str]:
    router.refresh()
    return {t: ws[0] for t, ws in router.map.tasks.items() if ws}


def test_no_errors_while_tasks_move_and_a_worker_drains(fleet: Fleet) -> None:
    for name in ("w1", "w2", "w3"):
        fleet.worker(name)
    fleet.ready(tasks=6, workers=3)
    router = fleet.router(policy="rr", refresh_interval=0.5, timeout=5.0)
    before = owners_by_map(router)
    errors: list[str] = []
    served: dict[str, set[str]] = {t: set() for t in before}
    calls = Counter[str]()

    def one_round() -> None:
        for task in sorted(before):
            try:
                served[task].add(router.call(task, calls["task"])["worker"])
                router.call_any(calls["any"])
                router.call_key(f"user-{calls['key']}", 1)
            except RouteError as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            calls.update(("task", "any", "key"))

    def traffic_until(done: Any, what: str) -> None:
        deadline = time.monotonic() + 40.0
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            one_round()

    traffic_until(lambda: calls["task"] >= 30, "warm-up traffic")
    fleet.sup.query("drain", worker="w2")  # operator drain: w2's tasks move, make-before-break
    traffic_until(lambda: "w2" not in owners_by_map(router).values(), "w2's tasks to move")
    fleet.workers["w1"].signal(signal.SIGTERM)  # lame duck: w1 drains and exits
    traffic_until(lambda: not fleet.workers["w1"].alive(), "w1 to drain and exit")
    one_round()  # and with w1 gone
    assert fleet.workers["w1"].wait(10) == 0
    assert errors == [], errors
    after = owners_by_map(router)
    assert set(after.values()) == {"w3"}  # w2 drained by the operator, w1 gone
    moved = [t for t in before if before[t] != "w3"]
    assert moved and all({before[t], "w3"} <= served[t] for t in moved)
    assert router.counters["calls"] == router.counters["ok"] > 3 * len(before) * 10


def test_a_stale_map_gives_not_owner_a_refresh_and_success_on_the_retry(fleet: Fleet) -> None:
    for name in ("w1", "w2", "w3"):
        fleet.worker(name)
    fleet.ready(tasks=6, workers=3)
    router = fleet.router(refresh_interval=600.0)  # no periodic refresh: only the one asked
    old = owners_by_map(router)
    task = sorted(old)[0]
    owner = old[task]
    fleet.sup.query("drain", worker=owner)

    def moved_and_stopped() -> bool:
        now = fleet.sup.query("map")["tasks"]
        running = {w["id"]: w["running"] for w in fleet.sup.query("workers")["workers"]}
        return now[task] != [owner] and bool(now[task]) and running[owner] == 0
    wait_until(moved_and_stopped, timeout=30, what=f"{task} to move off {owner}")
    new_owner = fleet.sup.query("map")["tasks"][task][0]
    assert router.map.tasks[task] == (owner,)  # the router still holds the stale map
    refreshes = router.counters["refreshes"]
    reply = router.call(task, "hello")
    assert reply == {"worker": new_owner, "task": task, "request": "hello"}
    assert router.counters["not_owner"] == 1 and router.counters["retries"] == 1
    assert router.counters["refreshes"] == refreshes + 1
    assert router.map.tasks[task] == (new_owner,)
    route = fleet.sup.ctl("route", task)  # corralctl agrees
    assert route["goes_to"] == [new_owner] and route["verdict"] == f"goes to {new_owner}"
    by_key = fleet.sup.ctl("route", "--key", "user-42")
    assert by_key["task"] == router.task_for("user-42")


def test_weighted_round_robin_sends_a_slow_worker_less_than_round_robin(procs: Procs) -> None:
    fleet = Fleet(procs, tasks=3, workers=3)
    try:
        fleet.worker("fast1", delay=0.002)
        fleet.worker("fast2", delay=0.002)
        fleet.worker("slow", delay=0.004)  # twice as slow
        fleet.ready(tasks=3, workers=3)
        share = {}
        for policy in ("rr", "wrr"):
            router = fleet.router(policy=policy)
            warm_until = time.monotonic() + (3.0 if policy == "wrr" else 0.2)
            while time.monotonic() < warm_until:  # wrr: past the weights' 2 s blackout
                router.call_any(0)
            router.served_by.clear()
            for i in range(600):
                router.call_any(i)
            share[policy] = router.served_by["slow"] / 600
        assert share["rr"] == pytest.approx(1 / 3, abs=0.02)  # rr counts, it does not weigh
        assert share["wrr"] < 0.8 * share["rr"], share  # expected ≈ 0.2: half a fast one's
    finally:
        fleet.close()
