"""`scripts/bench ingest --dashboards N`: corral-dashboard processes following the supervisor
under test, and the supervisor's CPU spent on them, measured directly.

The floods (ingest.py) compare the ingest ratio with the dashboards stopped (SIGSTOP) and
running; here: the supervisor's CPU seconds for a second of a dashboard's polling and for one
complete listing of the fleet, and what they make at the pace the dashboard keeps.
"""

from __future__ import annotations

import importlib.util
import json
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
BUDGET, PACE_MIN, PACE_MAX = 0.01, 2.0, 60.0  # the dashboard's listing pace (follower.py)


class Dashboards:
    """N corral-dashboard processes following ``control``; stopped (by pid) on close."""

    def __init__(self, control: str, n: int, ports: Callable[[], int]) -> None:
        if importlib.util.find_spec("aiohttp") is None:
            raise SystemExit("ingest: --dashboards needs aiohttp, a dependency of corral: "
                             "pip install -e . (scripts/test installs it)")
        self.procs: list[tuple[subprocess.Popen[bytes], str]] = []
        for _ in range(n):
            url = f"http://127.0.0.1:{ports()}"
            p = subprocess.Popen(
                [str(BIN / "corral-dashboard"), "--control", control, "--listen",
                 url.removeprefix("http://"), "--timeout", "10", "--log-level", "warning"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.procs.append((p, url))

    def wait_listed(self, workers: int, timeout: float = 120.0) -> None:
        """Until every dashboard has listed the whole fleet."""
        deadline = time.monotonic() + timeout
        for _, url in self.procs:
            while True:
                try:
                    with urllib.request.urlopen(url + "/api/workers?limit=1", timeout=5) as r:
                        if json.load(r)["total"] >= workers:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the dashboard at {url} never listed the fleet")
                time.sleep(0.5)

    def pause(self, paused: bool) -> None:
        for p, _ in self.procs:
            p.send_signal(signal.SIGSTOP if paused else signal.SIGCONT)

    def close(self) -> None:
        """SIGCONT (a stopped process would not act on SIGTERM) and SIGTERM to each, then
        SIGKILL to any still there after 10 s."""
        for p, _ in self.procs:
            p.send_signal(signal.SIGCONT)
            p.terminate()
        deadline = time.monotonic() + 10
        while any(p.poll() is None for p, _ in self.procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        for p, _ in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)


def polling_cpu(control: str, cpu: Callable[[], float], rounds: int = 200) -> float:
    """The supervisor's CPU seconds for one second of a dashboard's polling (the change feed
    once, status every other second), from many back to back, less its idle CPU over the
    same time (no reports arriving meanwhile)."""
    from corral.client.control import ControlClient

    with ControlClient(control, timeout=30) as c:
        cursor = c.call("events", {"limit": 1})["cursor"]
        cpu0, w0 = cpu(), time.monotonic()
        for i in range(rounds):
            cursor = c.call("events", {"after": cursor, "limit": 1000})["cursor"]
            if i % 2 == 0:
                c.call("status")
        busy, took = cpu() - cpu0, time.monotonic() - w0
    cpu0 = cpu()
    time.sleep(took)
    return max(0.0, busy - (cpu() - cpu0)) / rounds


def listing_cpu(control: str, cpu: Callable[[], float], page: int = 2000,
                repeat: int = 3) -> float:
    """The supervisor's CPU seconds for one complete listing of the fleet, in pages, as the
    dashboard asks for it (median of a few, no reports arriving meanwhile)."""
    from corral.client.control import ControlClient

    costs = []
    with ControlClient(control, timeout=30) as c:
        for _ in range(repeat):
            cpu0, after = cpu(), None
            while True:
                ans = c.call("workers", {"limit": page, **({"after": after} if after else {})})
                after = ans["next"]
                if after is None:
                    break
            costs.append(cpu() - cpu0)
    return statistics.median(costs)


def summary(n: int, ratio: float, raw: float, sups: list[float], share: float,
            listing: float, polling: float) -> dict[str, Any]:
    """The dashboards' part of the result. The dashboard paces its listings at their
    duration ÷ its budget; the duration is at least the CPU time, so the listing's share
    computed from the CPU time is an upper bound."""
    with_ratio = statistics.median(sups) / raw
    pace = min(max(listing / BUDGET, PACE_MIN), PACE_MAX)
    return {
        "count": n,
        "ratio": round(with_ratio, 3),
        "cost_per_dashboard": round((ratio - with_ratio) / ratio / n, 4),
        "cpu_share_10k_at_1hz": round(share, 4),
        "listing_cpu_s": round(listing, 3),
        "listing_share_at_pace": round(listing / pace, 4),
        "polling_share": round(polling, 5),
        "supervisor_share_per_dashboard": round(listing / pace + polling, 4),
        "runs": {"supervisor": [round(x) for x in sups]},
    }


def report(d: dict[str, Any]) -> None:
    print(f"with {d['count']} corral-dashboard(s) following the supervisor:")
    print(f"  ratio                      : {d['ratio']:.3f}")
    print(f"  change of the ratio        : {d['cost_per_dashboard']:.1%} per dashboard "
          "(floods: compare with this machine's noise)")
    print(f"  CPU share at 10k x 1 Hz    : {d['cpu_share_10k_at_1hz']:.3f}")
    print(f"  one complete listing       : {d['listing_cpu_s']:.3f} CPU s of the supervisor, "
          f"{d['listing_share_at_pace']:.1%} of its time at the dashboard's pace")
    print(f"  feed + status polling      : {d['polling_share']:.2%} of the supervisor's time")
    print(f"  => one dashboard takes     : {d['supervisor_share_per_dashboard']:.1%} of the "
          "supervisor's time: the ingest ratio it can cost (target < 2 %)")
    print(f"  runs (reports/s): supervisor {d['runs']['supervisor']}")
