"""The corral demo: a supervisor and three workers on loopback, 35 tasks, one worker killed,
and the dashboard following it all. Its URL is printed; run from a terminal, the demo then
keeps everything up until Enter is pressed, so the page can be looked at (--keep: until
Ctrl-C); with no terminal (CI, a pipe) it stops at once and says so.

Run by scripts/demo. Everything it starts is stopped (by pid) when it ends, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "benchmarks"))
from _cluster import BIN, Cluster, free_port, wait_until

WORKERS = {"worker-10": 10, "worker-20": 20, "worker-40": 40}
TASKS = [f"room-{i:02d}" for i in range(35)]
LEASE, MARGIN, REPORT = 4.0, 1.0, 0.5


def say(text: str) -> None:
    print(text, flush=True)


def start_dashboard(c: Cluster) -> str:
    """corral-dashboard following the demo's supervisor, with an operator token; one of the
    cluster's processes, so it is stopped (by pid) with them. Returns its URL."""
    port = free_port()
    token = c.dir / "dashboard.token"
    token.write_text("demo-token-please-change\n")
    c._spawn("dashboard", [str(BIN / "corral-dashboard"), "--control", c.control,
                           "--listen", f"127.0.0.1:{port}", "--token-file", str(token)])
    url = f"http://127.0.0.1:{port}/"

    def up() -> bool:
        try:
            with urllib.request.urlopen(url + "api/state", timeout=2) as r:
                return bool(json.load(r)["conn"]["ok"])
        except OSError:
            return False

    wait_until(up, timeout=30)
    return url


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--keep", action="store_true",
                    help="leave the cluster and the dashboard running until Ctrl-C")
    args = ap.parse_args()
    c = Cluster(TASKS)
    names = list(WORKERS)
    try:
        say(f"corral demo: a supervisor and {len(WORKERS)} workers on loopback, "
            f"{len(TASKS)} tasks (work dir {c.dir})\n")
        c.start_supervisor(warmup=5, expect_workers=len(WORKERS), lease=LEASE,
                           lease_margin=MARGIN, tick=0.25, report_interval=REPORT)
        for name, cap in WORKERS.items():
            c.start_worker(name, max_load=cap, report_interval=REPORT)
        url = start_dashboard(c)
        interactive = sys.stdin.isatty()
        until = ("until Ctrl-C" if args.keep else "until you press Enter at the end"
                 if interactive else "while the demo runs (scripts/demo --keep keeps it up)")
        say(f"dashboard: {url}  (actions token: demo-token-please-change), up {until}\n")
        wait_until(lambda: len(c.running(names)) == len(TASKS), timeout=60)
        wait_until(lambda: sum(w["running"] for w in c.ctl("workers")["workers"]) == len(TASKS),
                   timeout=30)
        say("$ corralctl workers")
        say(c.ctl("workers", json_out=False))
        say("$ corralctl assignments")
        say(c.ctl("assignments", json_out=False))
        victim = "worker-20"
        survivors = [n for n in names if n != victim]
        lost = {t for t, ws in c.running(names).items() if ws == [victim]}
        say(f"kill -9 {victim}: its {len(lost)} tasks move once its lease ({LEASE:g} s) "
            f"and the margin ({MARGIN:g} s) have passed\n")
        killed = c.kill(victim)
        wait_until(lambda: lost <= set(c.running(survivors)), timeout=LEASE + MARGIN + 30)
        took = max(c.starts_after(survivors, killed)[t] for t in lost) - killed
        say(f"all {len(lost)} tasks of {victim} running elsewhere after {took:.1f} s\n")
        wait_until(lambda: sum(w["running"] for w in c.ctl("workers")["workers"]
                               if w["active"]) == len(TASKS), timeout=30)
        say("$ corralctl workers")
        say(c.ctl("workers", json_out=False))
        say("$ corralctl status          # corralctl status --help says what each field means")
        say(c.ctl("status", json_out=False))
        if args.keep:
            say(f"\nstill running: the dashboard at {url}; Ctrl-C stops everything")
            while True:
                time.sleep(3600)
        if interactive:
            say(f"\nstill running: the dashboard at {url}; press Enter to stop everything")
            with contextlib.suppress(EOFError):
                input()
        else:
            say(f"\nno terminal to wait on: stopping now (scripts/demo --keep keeps the "
                f"dashboard at {url} up until Ctrl-C)")
        return 0
    finally:
        c.close()
        shutil.rmtree(c.dir, ignore_errors=True)
        say("stopped the dashboard, the supervisor and the workers")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
