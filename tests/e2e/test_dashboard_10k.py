"""The dashboard at 10,000 workers and 20,000 tasks: a load generator (not real processes)
emulates the fleet against a real supervisor, and the page must stay usable: the fleet comes
in pages of 100 sorted on the server, a filter answers, the balance charts and the histogram
draw. It saves the screenshot an operator would see.

The generator follows ``scripts/benchmarks/ingest.py``: a few sender processes, each one
DEALER for a few thousand worker ids, each worker reporting once a second; unlike the
benchmark it applies the instruction sets it is sent as a worker does (`corral.worker.sets`)
and reports what it was told to run, so the supervisor sees a settled fleet, with zones and
mixed capacities. Run it by hand to look
at the page: ``python -m tests.e2e.test_dashboard_10k`` (prints the URL; Ctrl-C stops).
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

import pytest

from ..support import wait_until
from .procs import Procs, Supervisor
from .test_dashboard_support import Dashboard, browser, screenshot

pytestmark = pytest.mark.e2e

WORKERS, TASKS, SENDERS = 10_000, 20_000, 4
CAPACITIES = (4, 8, 16)
PER_SOCKET = 250
ZONES = ("eu-1", "eu-2", "us-1")


def emulate(endpoint: str, first: int, count: int, stop: Any, silent_every: int) -> None:
    """Workers ``first`` … ``first + count - 1``, one report each per second, applying what
    they are sent, until ``stop`` is set. Every ``silent_every``-th worker falls silent
    after 20 s (a few timeouts and moves to see)."""
    import zmq

    from corral.common.wire import codec
    from corral.common.wire.protocol import Instructions, Status
    from corral.worker.sets import SetApplier

    ctx = zmq.Context()
    # One connection per PER_SOCKET workers: the supervisor's queue to one connection holds
    # 1,000 messages, and the first assignment sends every worker a set at once.
    socks = []
    for j in range(0, count, PER_SOCKET):
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.IDENTITY, f"gen-{first + j}".encode())
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, 100_000)
        s.setsockopt(zmq.RCVHWM, 100_000)
        s.connect(endpoint)
        socks.append(s)
    poller = zmq.Poller()
    for s in socks:
        poller.register(s, zmq.POLLIN)
    ids = [f"w{i:05d}" for i in range(first, first + count)]
    inc = [10_000 + i for i in range(first, first + count)]
    sets = [SetApplier(i) for i in inc]
    running: list[dict[str, int]] = [{} for _ in ids]
    seq = [0] * count

    def apply(msg: Any) -> None:
        k = getattr(msg, "incarnation", 0) - 10_000 - first
        if isinstance(msg, Instructions) and 0 <= k < count and sets[k].offer(msg).changed:
            running[k] = sets[k].tokens()

    start = time.monotonic()
    sent = 0
    while not stop.is_set():
        now = time.monotonic()
        due = int((now - start) * count) - sent  # each worker once a second, spread evenly
        for _ in range(max(0, min(due, 2000))):
            k = sent % count
            sent += 1
            i = first + k
            if silent_every and i % silent_every == 0 and now - start > 20:
                continue
            seq[k] += 1
            socks[k // PER_SOCKET].send(codec.encode(Status(
                ids[k], inc[k], seq[k], now, CAPACITIES[i % 3], running[k],
                applied=sets[k].applied, lease_held=sets[k].applied != (0, 0),
                zone=f"{ZONES[i % 3]}/rack-{i % 16:02d}")))
        for s, _ in poller.poll(0):
            while s.poll(0):
                apply(codec.decode(s.recv()))
        if due <= 0:
            time.sleep(0.005)
    for s in socks:
        s.close(0)
    ctx.term()



class Generator:
    """The emulated fleet's sender processes; stopped (and joined, by pid) on close."""

    def __init__(self, endpoint: str, workers: int = WORKERS, senders: int = SENDERS,
                 silent_every: int = 997) -> None:
        ctx = mp.get_context("spawn")
        self.stop = ctx.Event()
        per = workers // senders
        self.procs = [ctx.Process(target=emulate, args=(endpoint, k * per, per, self.stop,
                                                        silent_every), daemon=True)
                      for k in range(senders)]
        for p in self.procs:
            p.start()

    def close(self) -> None:
        self.stop.set()
        for p in self.procs:
            p.join(10)
            if p.is_alive() and p.pid is not None:
                p.kill()
                p.join(5)


def start_fleet(procs: Procs) -> tuple[Supervisor, Generator]:
    tasks = procs.tmp / "tasks.txt"
    tasks.write_text("".join(f"stream-{i:05d}\n" for i in range(TASKS)))
    sup = Supervisor(procs, f"file:{tasks}", expect_workers=WORKERS, warmup=60, lease=10,
                     lease_margin=2, tick=0.5, report_interval=1.0, log_level="warning",
                     fresh_ids=WORKERS)  # emulated: many workers share a connection
    return sup, Generator(sup.endpoint)


def all_assigned(sup: Supervisor) -> bool:
    """Every task has its owner (a supervisor busy with 10,000 joins may not answer in
    time: that is not yet)."""
    from corral.client import Unreachable

    try:
        return bool(sup.query("status")["tasks_assigned"] == TASKS)
    except Unreachable:
        return False


def test_ten_thousand_workers_keep_the_page_usable(procs: Procs) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    sup, gen = start_fleet(procs)
    try:
        wait_until(lambda: all_assigned(sup), timeout=120, interval=1.0,
                   what="20,000 tasks assigned to 10,000 workers")
        dash = Dashboard(procs, sup.control, True, "dashboard", "--timeout", "5")
        wait_until(lambda: dash.get("/api/workers?limit=1")["total"] == WORKERS, timeout=60,
                   what="the dashboard lists 10,000 workers")
        with browser() as driver:
            driver.get(dash.url)
            wait_until(lambda: "of 10,000" in driver.find_element(By.ID, "pager").text,
                       timeout=30, what="the pager over 10,000 workers")
            assert len(driver.find_elements(By.CSS_SELECTOR, "#fleet tbody tr")) == 100
            driver.find_element(By.CSS_SELECTOR, 'th[data-sort="utilization"]').click()
            wait_until(lambda: driver.execute_script(
                "const u = [...document.querySelectorAll('#fleet .util em')]"
                ".map(e => parseInt(e.innerText)); return u.length === 100 && "
                "u.every((x, i) => i === 0 || u[i - 1] >= x)"), timeout=20,
                what="the page sorted by utilization")
            driver.find_element(By.ID, "f-zone").send_keys("eu-2/rack-03")
            wait_until(lambda: "of 2" in driver.find_element(By.ID, "pager").text
                       and "of 10,000" not in driver.find_element(By.ID, "pager").text,
                       timeout=20, what="the zone filter")  # 10,000 / 3 zones / 16 racks
            driver.find_element(By.ID, "f-zone").send_keys(Keys.CONTROL, "a", Keys.DELETE)
            wait_until(lambda: "of 10,000" in driver.find_element(By.ID, "pager").text,
                       timeout=20, what="the whole fleet again")
            screenshot(driver, "dashboard-10k")
    finally:
        gen.close()


if __name__ == "__main__":  # a 10,000-worker page to look at by hand
    import tempfile
    from pathlib import Path

    p = Procs(Path(tempfile.mkdtemp(prefix="corral-10k-")))
    s, g = start_fleet(p)
    try:
        d = Dashboard(p, s.control, True, "dashboard", "--timeout", "5")
        print(f"dashboard at {d.url} (10,000 emulated workers; Ctrl-C stops)", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        g.close()
        p.stop_all()
