"""scripts/bench scale [-o json] [--sizes 10000,30000,100000]: one supervisor, a big fleet.

For each fleet size, a real `corral-supervisor` at its default settings (lease 10 s, margin
2 s, tick 0.5 s; only `--expect-workers` set, so the warm-up ends once every worker reported)
and that many emulated workers with 10 tasks each (the ingest benchmark's cheap senders, made
to behave like workers: they apply instruction sets, assemble sets in parts, report what they
run with its fencing tokens, every half lease as real workers do by default). The emulators
run at nice 10: they stand for other machines, and on a 2-core box they would otherwise take
the supervisor's core (starved, it falls behind, and then every renewal leaves in a system
call of its own: at 100,000 workers its ZMQ thread went from 0.15 to 0.4 of a core). They
share a connection 25 at a time; ``--per-socket 1`` gives each its own, as a real fleet has
(≈ 27 KB of the supervisor's memory each, and an open file on both sides):

- ``cpu_share``: the supervisor's CPU seconds per second in the steady state;
- ``rss_mb``: its resident memory then;
- ``settle_s``: from running with every task assigned until no set with content has gone
  out, or been applied by a worker, for two report intervals, and the supervisor reads
  reports as fast as they are sent (no backlog left to drain): the steady state the figures
  below are taken in;
- ``rebuild_s``: kill -9 and restart it: time until it runs again with every task assigned,
  rebuilt from the workers' reports (``rebuild_settle_s``: until settled again; ``stalls``:
  steps that kept it from reading reports for over a second; ``resends_after_rebuild``);
- ``death_to_resend_s``: one worker falls silent right after a report: time until all its
  tasks were sent to others (bound: lease + margin + a tick); null, with ``death_note``, if
  that took over a minute more;
- ``ctl_workers_s``: `corralctl workers --limit 100` (the first page), wall time of the
  command; also in-process first pages of workers/assignments, status, and the whole list;
- ``bytes_in_per_s`` / ``bytes_out_per_s``: bytes of reports to, and of instruction sets from,
  the supervisor per second in the steady state.

Then ``placement_1m``: the pure placement core at 1,000,000 tasks × 10,000 workers × 2 replicas
(scripts/benchmarks/placement.py's measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _fleet import PER_SOCKET, FleetProcs  # scripts/benchmarks/_fleet.py: the emulated workers
from chaostools.ports import free_port  # scripts/ is on the path (scripts/bench)

from corral.client import ControlClient
from corral.client.errors import ControlFailed, Unreachable

BIN = Path(sys.executable).parent
TASKS_PER_WORKER = 10
LEASE, MARGIN, TICK = 10.0, 2.0, 0.5  # the defaults
REPORT_INTERVAL = LEASE / 2  # the workers' default


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Supervisor:
    def __init__(self, workers: int, tmp: Path) -> None:
        self.tmp = tmp
        self.tasks = workers * TASKS_PER_WORKER
        (tmp / "tasks.txt").write_text("".join(f"t{i:07d}\n" for i in range(self.tasks)))
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.control = f"tcp://127.0.0.1:{free_port()}"
        self.workers = workers
        self.proc: subprocess.Popen[bytes] | None = None
        self.client = ControlClient(self.control, timeout=30)

    def start(self) -> float:
        args = [str(BIN / "corral-supervisor"), "run", "--bind", self.endpoint,
                "--control", self.control, "--tasks", f"file:{self.tmp / 'tasks.txt'}",
                "--state-file", str(self.tmp / "epoch"), "--expect-workers",
                str(self.workers), "--lease", str(LEASE), "--log-level", "warning",
                # emulated workers share connections: let each bring as many ids as it has
                "--fresh-ids", str(self.workers)]
        started = time.monotonic()
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                     stderr=open(self.tmp / "supervisor.log", "ab"))  # noqa: SIM115
        return started

    def status(self) -> dict[str, Any] | None:
        try:
            return self.client.call("status")  # type: ignore[no-any-return]
        except (Unreachable, ControlFailed):
            return None

    def wait_running(self, timeout: float) -> float:
        """Until it runs with every task assigned and no hand-off in flight."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.status()
            if st and st["phase"] == "running" and st["tasks_assigned"] == self.tasks \
                    and st["tasks_pending"] == 0:
                return time.monotonic()
            time.sleep(0.1)
        raise RuntimeError(f"not running with every task assigned after {timeout:g} s; see "
                           f"{self.tmp / 'supervisor.log'}")

    def wait_settled(self, timeout: float, fleet: FleetProcs) -> float:
        """Until no instruction set with content went out or was applied for two report
        intervals (every worker runs what it should, and nothing was resent), and the
        supervisor reads reports as fast as they are sent (no backlog left to drain: after a
        first placement or a rebuild at 100,000 workers it may be seconds behind, and while
        it catches up it reads faster than the fleet sends, at a higher cost per report):
        the steady state. A first placement's sets to 100,000 workers leave over many loop
        turns after its one assignment event, so the sets the workers applied count too."""
        deadline = time.monotonic() + timeout
        last, since = None, time.monotonic()
        window: list[tuple[int, int]] = []  # (reports read, reports sent) every 0.5 s
        span = int(2 * REPORT_INTERVAL / 0.5)
        while time.monotonic() < deadline:
            c = self.client.call("counters")
            traffic = fleet.traffic()
            window = [*window[-span:], (c["messages_in"], traffic[2])]
            now = (c["assignment_events"], c["resends"], c["reconciliations"], traffic[3])
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= 2 * REPORT_INTERVAL and len(window) > span:
                read, sent = window[-1][0] - window[0][0], window[-1][1] - window[0][1]
                # Caught up: over the window the backlog moved by at most 1 % of what was
                # sent (with 5 %, a drain of two seconds' reports passed for steady).
                if abs(read - sent) <= 0.01 * sent:
                    return max(since, time.monotonic() - 2 * REPORT_INTERVAL)
            time.sleep(0.5)
        raise RuntimeError(f"not settled after {timeout:g} s: (assignment events, resends, "
                           f"reconciliations, sets applied) = {last}, reports read and sent "
                           f"over the last {2 * REPORT_INTERVAL:g} s: {window[-1:]} - "
                           f"{window[:1]}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.client.close()


def timed(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure_size(workers: int, senders: int, steady_s: float,
                 per_socket: int = PER_SOCKET) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"corral-scale-{workers}-"))
    sup = Supervisor(workers, tmp)
    fleet = FleetProcs(workers, senders, REPORT_INTERVAL, per_socket)
    out: dict[str, Any] = {}
    try:
        sup.start()
        fleet.start(sup.endpoint)
        running = sup.wait_running(timeout=300)
        out["settle_s"] = round(sup.wait_settled(300, fleet) - running, 3)
        assert sup.proc is not None
        pid = sup.proc.pid
        cpu0, w0, traffic0 = cpu_seconds(pid), time.monotonic(), fleet.traffic()
        time.sleep(steady_s)
        cpu1, w1, traffic1 = cpu_seconds(pid), time.monotonic(), fleet.traffic()
        span = w1 - w0
        out["cpu_share"] = round((cpu1 - cpu0) / span, 4)
        out["rss_mb"] = round(rss_mb(pid), 1)
        out["bytes_in_per_s"] = round((traffic1[0] - traffic0[0]) / span)
        out["bytes_out_per_s"] = round((traffic1[1] - traffic0[1]) / span)
        out["reports_per_s"] = round((traffic1[2] - traffic0[2]) / span)
        c = sup.client
        out["ctl_status_s"] = round(timed(lambda: c.call("status")), 4)
        out["ctl_workers_first_page_s"] = round(
            timed(lambda: c.call("workers", {"limit": 100})), 4)
        out["ctl_assignments_first_page_s"] = round(
            timed(lambda: c.call("assignments", {"limit": 100})), 4)
        out["ctl_workers_all_s"] = round(timed(lambda: _all_pages(c, "workers")), 3)
        cli = [str(BIN / "corralctl"), "--control", sup.control, "--timeout", "30", "-o",
               "json", "workers", "--limit", "100"]
        out["ctl_workers_s"] = round(timed(lambda: subprocess.run(
            cli, check=True, capture_output=True, timeout=120)), 3)
        # kill -9 the supervisor and restart it: the assignment is rebuilt from reports.
        sup.kill()
        restarted = sup.start()
        out["rebuild_s"] = round(sup.wait_running(timeout=300) - restarted, 3)
        out["rebuild_settle_s"] = round(sup.wait_settled(300, fleet) - restarted, 3)
        out["stalls"] = c.call("counters")["stalls"]
        # One worker falls silent right after a report; its tasks go elsewhere.
        victim = fleet.worker_id(workers // 2)
        mine = [t["task"] for t in c.call("tasks", {"worker": victim})["tasks"]]
        try:
            out["death_to_resend_s"] = round(fleet.kill_and_wait(
                victim, mine, timeout=LEASE + MARGIN + 60), 3)
        except RuntimeError as exc:  # keep what was measured; say what was not
            out["death_to_resend_s"] = None
            out["death_note"] = str(exc)
        cnt = c.call("counters")
        out["set_parts"], out["resends_after_rebuild"] = cnt["set_parts"], cnt["resends"]
    finally:
        fleet.stop()
        sup.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _all_pages(c: ControlClient, verb: str) -> int:
    rows, after = 0, None
    while True:
        page = c.call(verb, {"after": after} if after else {})
        rows += len(page[verb])
        after = page.get("next")
        if after is None:
            return rows


def placement_1m() -> dict[str, Any]:
    """The placement core at 1 M tasks (scripts/benchmarks/placement.py measures it)."""
    import placement

    measure = getattr(placement, "measure_1m", None)
    if measure is None:
        return {"note": "scripts/benchmarks/placement.py has no measure_1m"}
    return measure()  # type: ignore[no-any-return]


def _more_files(connections: int, senders: int) -> None:
    """A connection per worker: the supervisor needs a descriptor per connection, and each
    emulator two per socket (children inherit the limit); above the hard limit it takes root
    (CAP_SYS_RESOURCE)."""
    import resource

    need = max(connections, 2 * connections // senders) + 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, max(need, hard)))
    except (ValueError, OSError) as exc:
        sys.exit(f"scale: {connections} connections need {need} open files; the limit is "
                 f"{soft} (hard {hard}) and cannot be raised: {exc}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-o", "--output", choices=["table", "json"], default="table")
    ap.add_argument("--sizes", default="10000,30000,100000",
                    help="fleet sizes, comma-separated [default: 10000,30000,100000]")
    ap.add_argument("--senders", type=int, default=4, help="emulating processes")
    ap.add_argument("--per-socket", type=int, default=PER_SOCKET,
                    help=f"emulated workers per connection [default: {PER_SOCKET}; 1: a "
                         "connection each, as a real fleet (as root: the open-file limit is "
                         "raised for it)]")
    ap.add_argument("--steady", type=float, default=20.0, help="seconds of steady state")
    ap.add_argument("--no-placement", action="store_true", help="skip placement_1m")
    ap.add_argument("--lease", type=float, default=None,
                    help="the supervisor's --lease instead of its default (10 s); the emulated "
                         "workers report every lease / 2, as real workers do by default")
    args = ap.parse_args()
    global LEASE, REPORT_INTERVAL
    if args.lease is not None:  # a longer lease: workers report every lease / 2, as real ones
        LEASE, REPORT_INTERVAL = args.lease, args.lease / 2
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.per_socket < 1:
        ap.error("--per-socket must be at least 1")
    if args.per_socket < PER_SOCKET:
        _more_files(max(sizes) // args.per_socket, args.senders)
    by_size: dict[str, Any] = {}
    for n in sizes:
        print(f"scale: {n} workers × {TASKS_PER_WORKER} tasks …", file=sys.stderr)
        by_size[str(n)] = measure_size(n, args.senders, args.steady, args.per_socket)
        print(f"  {json.dumps(by_size[str(n)])}", file=sys.stderr)
    result: dict[str, Any] = {"workers": sizes, "by_size": by_size,
                              "settings": {"lease": LEASE, "margin": MARGIN, "tick": TICK,
                                           "report_interval": round(REPORT_INTERVAL, 3),
                                           "tasks_per_worker": TASKS_PER_WORKER,
                                           "workers_per_connection": args.per_socket}}
    if not args.no_placement:
        print("scale: placement at 1 M tasks × 10 k workers × 2 replicas …", file=sys.stderr)
        result["placement_1m"] = placement_1m()
    if args.output == "json":
        print(json.dumps(result, indent=2))
        return
    keys = ["cpu_share", "rss_mb", "rebuild_s", "death_to_resend_s", "ctl_workers_s",
            "ctl_workers_first_page_s", "ctl_workers_all_s", "bytes_in_per_s",
            "bytes_out_per_s", "reports_per_s"]
    print("metric".ljust(28) + "".join(f"{n:>14}" for n in sizes))
    for k in keys:
        print(k.ljust(28) + "".join(f"{by_size[str(n)].get(k, '-')!s:>14}" for n in sizes))
    if "placement_1m" in result:
        print("placement_1m: " + json.dumps(result["placement_1m"]))


if __name__ == "__main__":
    main()
