"""scripts/bench failover [-o json]: seconds from a worker's death to its tasks running elsewhere.

A supervisor and 5 workers (log handler, journals) run 200 tasks on loopback. One worker is
killed with SIGKILL; the time until every one of its tasks has been started by another worker
(from the workers' journals, CLOCK_MONOTONIC, shared by all processes here) is the failover
time. Also counted: how many tasks moved, and how many the dead worker had (they must match:
nothing else moves). Target: reassigned_after_s <= lease + margin + one tick + 0.5 s.

Then one `exec` worker runs 200 tasks (`sleep` processes): its agent's and its lease keeper's
RSS and CPU share over a steady stretch (`exec_200`, `keeper_rss_mb`); then the agent is
SIGSTOPped and left frozen past its lease: `frozen_agent_stop_s` is the time from the lease's
end to the last task process gone, from the keeper's journal stop lines (each has the time the
task's process ended and the lease deadline it enforced). Target: < 0.5 s.

Last, an upgrade: one `exec` worker runs 200 tasks; it gets SIGUSR2 and a new agent with the
same id is started the moment the old one has exited (as systemd's Restart= does, without its
RestartSec). `upgrade_s` is the time from the SIGUSR2 to the supervisor receiving the new
agent's first report, which lists the adopted tasks running; `upgrade_task_restarts` counts
the tasks whose process is not the one it was (another pid) or that the journal shows
stopped or started since (target: 0).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

from _cluster import Cluster, fleet_parser, median_run, wait_until

from corral.client.control import request


def _reporting(report: float | None) -> dict[str, float]:
    """The workers' --report-interval, if one was asked for (default: half the lease)."""
    return {} if report is None else {"report_interval": report}


def one_run(tasks: int, workers: int, lease: float, margin: float, tick: float,
            report: float | None) -> dict[str, float]:
    names = [f"worker-{i}" for i in range(workers)]
    c = Cluster([f"task-{i:03d}" for i in range(tasks)])
    try:
        c.start_supervisor(warmup=10, expect_workers=workers, lease=lease, lease_margin=margin,
                           tick=tick, log_level="warning")
        for name in names:
            c.start_worker(name, max_load=tasks, log_level="warning", **_reporting(report))
        wait_until(lambda: len(c.running(names)) == tasks, timeout=60)
        time.sleep(3 * (report or lease / 2))  # settled: every worker reported what it runs
        victim = names[len(names) // 2]
        before = c.running(names)
        lost = {t for t, ws in before.items() if ws == [victim]}
        survivors = [n for n in names if n != victim]
        killed = c.kill(victim)
        wait_until(lambda: lost <= set(c.running(survivors)), timeout=lease + margin + 30)
        starts = c.starts_after(survivors, killed)
        after = c.running(survivors)
        moved = sum(1 for t in before if t not in lost and after.get(t) != before[t])
        return {"reassigned_after_s": max(starts[t] for t in lost) - killed,
                "tasks_moved": len({t for t in starts if t in lost}) + moved,
                "departed_tasks": len(lost)}
    finally:
        c.close()
        shutil.rmtree(c.dir, ignore_errors=True)


STEADY_S = 5.0  # the stretch over which CPU is measured


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _keeper_of(pid: int) -> int:
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        if b"keeperproc.py" in Path(f"/proc/{child}/cmdline").read_bytes():
            return int(child)
    raise RuntimeError("the worker has no lease keeper")


def exec_run(tasks: int, lease: float, margin: float, tick: float,
             report: float | None) -> dict[str, float]:
    """One exec worker with ``tasks`` sleep processes: RSS, CPU, and a freeze past its lease."""
    c = Cluster([f"task-{i:03d}" for i in range(tasks)])
    try:
        c.start_supervisor(warmup=10, expect_workers=1, lease=lease, lease_margin=margin,
                           tick=tick, log_level="warning")
        agent = c.start_worker("exec-0", max_load=tasks, log_level="warning", handler="exec",
                               exec="sleep 100000", stop_grace=1, **_reporting(report))
        wait_until(lambda: len(c.running(["exec-0"])) == tasks, timeout=60)
        keeper = _keeper_of(agent.pid)
        time.sleep(2 * (report or lease / 2))  # settled
        cpu0, k0, t0 = _cpu_s(agent.pid), _cpu_s(keeper), time.monotonic()
        time.sleep(STEADY_S)
        wall = time.monotonic() - t0
        out = {"agent_rss_mb": _rss_mb(agent.pid), "keeper_rss_mb": _rss_mb(keeper),
               "agent_cpu_share": (_cpu_s(agent.pid) - cpu0) / wall,
               "keeper_cpu_share": (_cpu_s(keeper) - k0) / wall}
        os.kill(agent.pid, signal.SIGSTOP)
        try:
            journal = c.dir / "exec-0.journal"

            def keeper_stops() -> list[dict[str, float]]:
                lines = [json.loads(x) for x in journal.read_text().splitlines()]
                return [d for d in lines if d.get("by") == "keeper"]

            stops = wait_until(lambda: len(keeper_stops()) == tasks and keeper_stops(),
                               timeout=lease + 30)
        finally:
            os.kill(agent.pid, signal.SIGCONT)
        out["frozen_agent_stop_s"] = max(d["t"] for d in stops) - stops[0]["deadline"]
        return out
    finally:
        c.close()
        shutil.rmtree(c.dir, ignore_errors=True)


def _task_pids(worker: str) -> dict[str, int]:
    """task -> the pid of its process, read from the process table (its environment)."""
    out: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = dict(x.split(b"=", 1) for x in (entry / "environ").read_bytes().split(b"\0")
                       if b"=" in x)
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if env.get(b"CORRAL_WORKER") == worker.encode() and b"CORRAL_TASK" in env \
                and state != "Z":
            out[env[b"CORRAL_TASK"].decode()] = int(entry.name)
    return out


def upgrade_run(tasks: int, lease: float, margin: float, tick: float,
                report: float | None) -> dict[str, float]:
    """SIGUSR2 to an exec worker with ``tasks`` tasks and a new agent at once: how long until
    the supervisor hears the new agent report them running, and how many restarted."""
    c = Cluster([f"task-{i:03d}" for i in range(tasks)])
    opts = {"max_load": tasks, "log_level": "warning", "handler": "exec",
            "exec": "sleep 100000", "stop_grace": 1, **_reporting(report)}
    try:
        c.start_supervisor(warmup=10, expect_workers=1, lease=lease, lease_margin=margin,
                           tick=tick, log_level="warning")
        old = c.start_worker("exec-0", **opts)
        wait_until(lambda: len(c.running(["exec-0"])) == tasks, timeout=60)
        time.sleep(2 * (report or lease / 2))  # settled
        before = _task_pids("exec-0")
        if len(before) != tasks:  # a task it cannot see could restart uncounted
            raise RuntimeError(f"the process table shows {len(before)} of {tasks} tasks")
        journal = c.dir / "exec-0.journal"
        lines = len(journal.read_text().splitlines())
        incarnation = next(r["incarnation"] for r in request(c.control, "workers", {})["workers"])
        t0 = time.monotonic()
        os.kill(old.pid, signal.SIGUSR2)
        old.wait(30)
        c.start_worker("exec-0", **opts)

        def heard() -> float | None:
            asked = time.monotonic()
            for r in request(c.control, "workers", {}, timeout=3.0)["workers"]:
                if r["incarnation"] != incarnation and r["running"] == tasks:
                    return asked - r["last_report_age_s"]
            return None

        arrived = wait_until(heard, timeout=lease, interval=0.005)
        time.sleep(2 * (report or lease / 2))  # its first set applied: a restart would show
        after = _task_pids("exec-0")
        since = [json.loads(x) for x in journal.read_text().splitlines()[lines:]]
        restarted = {t for t in before if after.get(t) != before[t]}
        restarted |= {d["task"] for d in since if d["event"] in ("start", "stop")}
        adopted = sum(d["event"] == "adopt" for d in since)
        return {"upgrade_s": arrived - t0, "upgrade_task_restarts": len(restarted),
                "upgrade_adopted": adopted}
    finally:
        c.close()
        shutil.rmtree(c.dir, ignore_errors=True)


def main() -> None:
    ap = fleet_parser(__doc__)
    ap.add_argument("--lease", type=float, default=10.0, help="the supervisor's default")
    ap.add_argument("--margin", type=float, default=2.0, help="the supervisor's default")
    ap.add_argument("--tick", type=float, default=0.5, help="the supervisor's default")
    ap.add_argument("--report-interval", type=float, default=None,
                    help="the workers' (default: theirs, half the lease)")
    args = ap.parse_args()
    runs = [one_run(args.tasks, args.workers, args.lease, args.margin, args.tick,
                    args.report_interval) for _ in range(args.repeat)]
    r = median_run(runs, "reassigned_after_s")
    execs = [exec_run(args.tasks, args.lease, args.margin, args.tick, args.report_interval)
             for _ in range(args.repeat)]
    e = median_run(execs, "frozen_agent_stop_s")
    upgrades = [upgrade_run(args.tasks, args.lease, args.margin, args.tick, args.report_interval)
                for _ in range(args.repeat)]
    u = median_run(upgrades, "upgrade_s")
    result = {"lease_s": args.lease, "margin_s": args.margin, "tick_s": args.tick,
              "reassigned_after_s": round(r["reassigned_after_s"], 3),
              "tasks_moved": r["tasks_moved"], "departed_tasks": r["departed_tasks"],
              "runs_s": [round(x["reassigned_after_s"], 3) for x in runs],
              "target_s": args.lease + args.margin + args.tick + 0.5,
              "keeper_rss_mb": round(e["keeper_rss_mb"], 1),
              "frozen_agent_stop_s": round(e["frozen_agent_stop_s"], 3),
              "frozen_agent_stop_runs_s": [round(x["frozen_agent_stop_s"], 3) for x in execs],
              "frozen_agent_stop_target_s": 0.5,
              "upgrade_s": round(u["upgrade_s"], 3),
              "upgrade_runs_s": [round(x["upgrade_s"], 3) for x in upgrades],
              "upgrade_task_restarts": max(x["upgrade_task_restarts"] for x in upgrades),
              "upgrade_adopted": u["upgrade_adopted"],
              f"exec_{args.tasks}": {k: round(v, 3) for k, v in e.items()}}
    if args.output == "json":
        print(json.dumps(result, indent=2))
        return
    print(f"{args.tasks} tasks, {args.workers} workers; lease {args.lease:g} s, margin "
          f"{args.margin:g} s, tick {args.tick:g} s")
    print(f"  failover (kill -9 -> all its tasks running elsewhere): "
          f"{result['reassigned_after_s']:.2f} s (median of {args.repeat}: {result['runs_s']}; "
          f"target <= {result['target_s']:g} s)")
    print(f"  tasks moved {result['tasks_moved']}, departed worker's tasks "
          f"{result['departed_tasks']}")
    print(f"one exec worker, {args.tasks} sleep tasks: agent {e['agent_rss_mb']:.1f} MB RSS, "
          f"{e['agent_cpu_share']:.3f} of a core; lease keeper {e['keeper_rss_mb']:.1f} MB RSS, "
          f"{e['keeper_cpu_share']:.4f} of a core")
    print(f"  frozen agent (SIGSTOP past its lease): last task process gone "
          f"{e['frozen_agent_stop_s']:.3f} s after the lease's end (median of {args.repeat}; "
          f"target < 0.5 s)")
    print(f"  upgrade (SIGUSR2, a new agent at once): its report of the {u['upgrade_adopted']} "
          f"adopted tasks {result['upgrade_s']:.3f} s after the signal (median of "
          f"{args.repeat}: {result['upgrade_runs_s']}); task restarts "
          f"{result['upgrade_task_restarts']} (target 0)")


if __name__ == "__main__":
    main()
