"""scripts/bench soak [--minutes N] [-o json]: corral under constant churn for N minutes.

Two supervisors on loopback, each with its own fleet of `exec` workers (each task a `sleep`
process, each agent with its lease keeper): supervisor A is killed (SIGKILL) and restarted on
its state file every --kill-supervisor-every; supervisor B is never restarted, so its RSS
slope and its tables over the whole run show whether a long-lived supervisor's state is
bounded. A `corral-dashboard` and a status poller follow B. On both sites, the churn:

- a task-list edit every --edit-every: the --edit-size oldest ids replaced by fresh ones,
  through the task file (the supervisors watch it);
- an agent kill -9 every --kill-agent-every (worker 0 never: it lives through the run),
  restarted --restart-after later — or, every --late-every-th kill, only once its lease has
  ended (an agent that does not come back in time);
- a drain (`corralctl drain`) every --drain-every, undrained half a period later.

Printed (a table, or one JSON object with -o json):

- RSS slope per process kind, KB/min: a least-squares slope over periodic /proc samples,
  common to every process of the kind (each its own intercept, so restarts are not growth),
  leaving out each process's first --skip-s; also over the agents and keepers that lived
  through the whole run. The sample and process counts say what it rests on;
- open descriptors per kind (/proc/PID/fd), mean in the first and last sample rounds;
- the killed agents' task processes: how long each took to go after the kill; one alive past
  kill + lease + margin + 1 s that no new agent adopted (`adopt` journal line) is left behind;
- status latency (p50, p99, max) and polls left unanswered within --poll-timeout;
- B's tables (`tables` in status) at the start and the end, and whether each ended within what
  its live tasks and workers explain (`_soakreport.tables`);
- after the churn stops: tasks running 1 s later, and when all were, per supervisor.

The machine's load changes the absolute figures: compare slopes with their standard errors,
and runs with runs on the same machine. Everything started is stopped at the end (and on
Ctrl-C, SIGTERM or an error) by pid.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import _soakreport as report
from _soakprocs import BIN, Run, Site, Timing
from _soakwatch import Leftovers, Poller, Sampler
from chaostools.ports import free_port  # scripts/ is on the path (scripts/bench)

from corral.client.control import request


def options() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    a = ap.add_argument
    a("--minutes", type=float, default=8.0, help="how long the churn runs (default 8)")
    a("-o", "--output", choices=["table", "json"], default="table")
    a("--tasks", type=int, default=300, help="tasks per supervisor (default 300)")
    a("--workers", type=int, default=5, help="exec workers per supervisor (default 5)")
    a("--max-load", type=float, default=None,
      help="each worker's (default: room for every task with two workers out, +10 %%)")
    a("--edit-every", type=float, default=0.5, help="seconds between task-list edits (0.5)")
    a("--edit-size", type=int, default=2, help="ids an edit replaces with fresh ones (2)")
    a("--kill-agent-every", type=float, default=15.0, help="seconds between agent kills (15)")
    a("--restart-after", type=float, default=1.0,
      help="seconds from an agent's kill to its restart (1, a service manager's)")
    a("--late-every", type=int, default=2,
      help="every Nth kill restarts the agent only after lease + margin + 1 s (2; 0: never)")
    a("--drain-every", type=float, default=40.0, help="seconds between drains (40)")
    a("--kill-supervisor-every", type=float, default=60.0,
      help="seconds between kills of supervisor A (60)")
    a("--poll-every", type=float, default=1.0, help="the status poller's period (1 s)")
    a("--poll-timeout", type=float, default=5.0, help="a poll unanswered after this fails (5)")
    a("--sample-every", type=float, default=5.0, help="seconds between /proc rounds (5)")
    a("--skip-s", type=float, default=20.0,
      help="each process's first seconds, left out of its RSS slope (20: start-up)")
    a("--lease", type=float, default=10.0, help="the supervisors' lease (10, the default)")
    a("--margin", type=float, default=2.0, help="their lease margin (2, the default)")
    a("--tick", type=float, default=0.5, help="their tick (0.5, the default)")
    a("--warmup", type=float, default=None,
      help="their warm-up (default: the lease; it ends once every worker reported)")
    a("--start-timeout", type=float, default=180.0,
      help="bound on the wait for every task to run before the churn (180 s)")
    a("--settle-timeout", type=float, default=120.0,
      help="bound on the wait for every task to run after the churn (120 s)")
    a("--workdir", type=Path, default=None, help="keep the logs and journals here")
    return ap


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = a = args
        warmup = a.lease if a.warmup is None else a.warmup
        self.timing = Timing(a.lease, a.margin, a.tick, warmup)
        max_load = a.max_load or math.ceil(1.1 * a.tasks / max(1, a.workers - 2))
        self.run = Run(a.workdir)
        self.sites = {n: Site(self.run, n, a.tasks, a.workers, max_load, self.timing)
                      for n in ("a", "b")}
        self.sampler, self.leftovers = Sampler(), Leftovers()
        self.poller = Poller(self.sites["b"].control, a.poll_every, a.poll_timeout)
        self.count = {"edits": 0, "fresh_ids": 0, "agent_kills": 0, "agent_kills_at_once": 0,
                      "agent_kills_late": 0, "drains": 0,
                      "undrains": 0, "ctl_failed": 0, "supervisor_kills": 0}
        self.ctls: list[Any] = []
        self.ctl_errors: list[str] = []  # the first ten failed corralctl calls, their stderr
        self.restarts: list[tuple[float, str, str]] = []  # (when, site, worker)
        self.drained: dict[str, str | None] = {"a": None, "b": None}
        self.dashboard_url = ""
        self.churned = (0.0, 0.0)  # when the churn started and stopped

    # -- phases ---------------------------------------------------------------------------------

    def start(self) -> dict[str, int]:
        for site in self.sites.values():
            site.start_supervisor()
            for wid in site.workers:
                site.start_agent(wid)
        self.dashboard_url = f"127.0.0.1:{free_port()}"
        self.run.spawn("dashboard", "dashboard", "", [
            str(BIN / "corral-dashboard"), "--control", self.sites["b"].control, "--listen",
            self.dashboard_url, "--log-level", "warning"])
        for site in self.sites.values():
            self._wait_running(site, self.args.start_timeout)
        st = self.sites["b"].status()
        assert st is not None
        self.poller.start()
        self.leftovers.start()
        return dict(st["tables"])

    def churn(self) -> float:
        """The churn, for --minutes; returns when it stopped."""
        a, now = self.args, time.monotonic()
        start, end = now, now + a.minutes * 60
        due = {"edit": now + a.edit_every, "sample": now,
               "kill-a": now + a.kill_agent_every, "kill-b": now + 1.5 * a.kill_agent_every,
               "drain-a": now + a.drain_every / 4, "drain-b": now + 3 * a.drain_every / 4,
               "supervisor": now + a.kill_supervisor_every}
        kills = {"a": 0, "b": 0}  # per site: each sees both kinds of restart
        while (now := time.monotonic()) < end:
            self._restart_due(now)
            self.leftovers.judge(now, self._adopted)
            self._reap_ctls()
            if now >= due["sample"]:
                self.sampler.round(self.run.scan.scan())
                due["sample"] += a.sample_every
            if now >= due["edit"]:
                for site in self.sites.values():
                    site.edit(a.edit_size)
                    self.count["fresh_ids"] += a.edit_size
                self.count["edits"] += 1
                due["edit"] += a.edit_every
            for n in ("a", "b"):
                if now >= due[f"kill-{n}"]:
                    kills[n] += 1
                    self._kill_agent(self.sites[n], late=a.late_every > 0 and
                                     kills[n] % a.late_every == 0)
                    due[f"kill-{n}"] += a.kill_agent_every
                if now >= due[f"drain-{n}"]:
                    self._drain(self.sites[n])
                    due[f"drain-{n}"] += a.drain_every / 2
            if now >= due["supervisor"]:
                site = self.sites["a"]
                site.kill_supervisor()
                site.start_supervisor()
                self.count["supervisor_kills"] += 1
                due["supervisor"] += a.kill_supervisor_every
            time.sleep(max(0.0, min(min(due.values()), end) - time.monotonic()))
        self.churned = (start, time.monotonic())
        return self.churned[1]

    def after(self, stopped: float) -> dict[str, Any]:
        """The churn stopped: drains lifted, killed agents back when due (no new faults); the
        tasks running 1 s later, and how long until every task ran on each supervisor."""
        for site in self.sites.values():
            if self.drained[site.name]:
                self._ctl(site, "undrain", self.drained[site.name] or "")
        time.sleep(max(0.0, stopped + 1.0 - time.monotonic()))
        out: dict[str, Any] = {}
        for site in self.sites.values():
            st = site.status()
            out[site.name] = {"tasks": self.args.tasks, "all_running_after_s": None,
                              "tasks_running_at_1s": None if st is None else st["tasks_running"]}
        deadline = stopped + self.args.settle_timeout
        while time.monotonic() < deadline:
            self._restart_due(time.monotonic())
            for site in self.sites.values():
                if out[site.name]["all_running_after_s"] is None and self._running(site):
                    out[site.name]["all_running_after_s"] = round(time.monotonic() - stopped, 3)
            if not self.restarts and all(o["all_running_after_s"] is not None
                                         for o in out.values()):
                break
            time.sleep(0.1)
        # Every killed agent's deadline passes (bounded: lease + margin + 1 s after the last).
        while (last := self.leftovers.pending()) is not None:
            time.sleep(max(0.05, min(1.0, last - time.monotonic())))
            self.leftovers.judge(time.monotonic(), self._adopted)
        self._reap_ctls(wait=True)
        return out

    def finish(self, tables_start: dict[str, int], after: dict[str, Any]) -> dict[str, Any]:
        b = self.sites["b"]
        quiet = self._wait_quiet()
        end_st = b.status() or {}
        self.sampler.round(self.run.scan.scan())
        self.poller.stop()
        self.leftovers.stop()
        procs = self.run.scan.scan()
        a = self.args
        listed = _dashboard_total(self.dashboard_url)
        with open(self.run.dir / "samples.jsonl", "w") as fh:  # the raw series, for a closer look
            fh.writelines(json.dumps(vars(s)) + "\n" for s in self.sampler.samples)
        with open(self.run.dir / "tables.jsonl", "w") as fh:  # B's, from every status poll
            fh.writelines(json.dumps({"t": t, **v}) + "\n" for t, v in self.poller.tables)
        loads = self.sampler.loadavg
        return {
            "run": {"minutes": a.minutes, "tasks": a.tasks, "workers": a.workers,
                    "lease_s": a.lease, "margin_s": a.margin, "tick_s": a.tick,
                    "warmup_s": self.timing.warmup, "edit_every_s": a.edit_every,
                    "edit_size": a.edit_size, "kill_agent_every_s": a.kill_agent_every,
                    "drain_every_s": a.drain_every,
                    "kill_supervisor_every_s": a.kill_supervisor_every,
                    "sample_every_s": a.sample_every, "sample_rounds": len(self.sampler.rounds),
                    "cores": _cores(), "loadavg_mean": round(sum(loads) / len(loads), 2)
                    if loads else None, "loadavg_max": max(loads, default=None),
                    "workdir": str(self.run.dir)},
            "churn": self.count,
            "ctl_errors": self.ctl_errors,
            "processes": report.per_kind(self.sampler, a.skip_s),
            "leftovers": report.leftovers(self.leftovers),
            "status": report.latency(self.poller.latencies, self.poller.failures),
            "tables": {"start": tables_start, "end": end_st.get("tables", {}),
                       "max": report.tables_max(self.poller.tables, *self.churned),
                       "quiet_before_end": quiet,
                       "judged": report.tables(tables_start, end_st.get("tables", {}),
                                               (a.tasks, end_st.get("tasks_total", 0)),
                                               (a.workers, end_st.get("workers_total", 0)))},
            "after_churn": after,
            "dashboard_workers_listed": listed,  # it still follows B: W, or None
            "end": {"task_processes": sum(1 for p in procs if p.kind == "task"),
                    "tasks_expected": 2 * a.tasks,
                    "keepers": sum(1 for p in procs if p.kind == "keeper"),
                    "agents": sum(1 for p in procs if p.kind == "agent"),
                    "lease_losses": {n: s.lease_losses() for n, s in self.sites.items()},
                    "supervisor_b_counters": _counters(b)},
        }

    # -- churn steps ----------------------------------------------------------------------------

    def _kill_agent(self, site: Site, late: bool) -> None:
        """kill -9 the live agent (worker 0 never) that runs the most task processes now."""
        live = [w for w in site.workers[1:] if w in site.agents]
        if not live:
            return
        procs = [p for p in self.run.scan.scan() if p.kind == "task"]
        held = {w: [p for p in procs if p.worker == w] for w in live}
        wid = max(live, key=lambda w: (len(held[w]), -site.started[w]))
        killed = site.kill_agent(wid)
        t = self.timing
        self.leftovers.track(site.name, held[wid], killed, killed + t.lease + t.margin + 1.0,
                             late)
        wait = t.lease + t.margin + 1.0 if late else self.args.restart_after
        self.restarts.append((killed + wait, site.name, wid))
        self.count["agent_kills"] += 1
        self.count["agent_kills_late" if late else "agent_kills_at_once"] += 1

    def _restart_due(self, now: float) -> None:
        for item in [r for r in self.restarts if r[0] <= now]:
            self.restarts.remove(item)
            self.sites[item[1]].start_agent(item[2])

    def _drain(self, site: Site) -> None:
        """Undrain the drained worker, or drain the next one (worker 0 never)."""
        if self.drained[site.name] is not None:
            self._ctl(site, "undrain", self.drained[site.name] or "")
            self.drained[site.name] = None
            self.count["undrains"] += 1
            return
        n = self.count["drains"] % max(1, len(site.workers) - 1)
        self.drained[site.name] = site.workers[1 + n]
        self._ctl(site, "drain", site.workers[1 + n])
        self.count["drains"] += 1

    def _ctl(self, site: Site, *args: str) -> None:
        self.ctls.append(site.ctl(*args))

    def _reap_ctls(self, wait: bool = False) -> None:
        for p in list(self.ctls):
            if wait:
                p.wait(30)
            if p.poll() is not None:
                self.ctls.remove(p)
                if p.returncode != 0:
                    self.count["ctl_failed"] += 1
                    err = f"{' '.join(p.args[-2:])}: {(p.stderr.read() or '').strip()[-300:]}"
                    self.ctl_errors += [err][:10 - len(self.ctl_errors)]

    def _adopted(self, site: str, worker: str, since: float) -> set[tuple[str, int | None]]:
        return self.sites[site].adopted(worker, since)

    def _running(self, site: Site) -> bool:
        """The site's supervisor runs every task, nothing pending."""
        st = site.status(timeout=2.0)
        return bool(st and st["phase"] == "running" and st["tasks_running"] == self.args.tasks
                    and st["tasks_pending"] == 0)

    def _wait_running(self, site: Site, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self._running(site):
            if time.monotonic() > deadline:
                raise RuntimeError(f"supervisor {site.name}: tasks not all running after "
                                   f"{timeout:g} s; see {site.dir}")
            time.sleep(0.1)

    def _wait_quiet(self) -> bool:
        """Until, on both sites, every worker is active, no hand-off, start, stop or planned
        rebalance is in flight, and there is one task process per task and one keeper per
        agent (bounded by the settle timeout): the end's tables and processes are then what
        the live tasks and workers hold."""
        deadline = time.monotonic() + self.args.settle_timeout
        while time.monotonic() < deadline:
            everything = self.run.scan.scan()
            procs = [p for p in everything if p.kind == "task"]
            kinds = [p.kind for p in everything]
            quiet = kinds.count("keeper") == kinds.count("agent")
            for site in self.sites.values():
                mine = sum(1 for p in procs if p.worker.startswith(f"{site.name}-"))
                st = site.status() or {}
                t = st.get("tables", {})
                quiet = quiet and bool(t) and mine == self.args.tasks and \
                    st["workers_active"] == len(site.workers) and not (
                        t["handoffs"] or t["starts_tasks"] or t["stopping"]
                        or t["placement_pending"] or t["placement_plan_steps"]
                        or t["placement_plan_arrived"])
            if quiet:
                return True
            time.sleep(0.2)
        return False


def _counters(site: Site) -> dict[str, Any]:
    try:
        return request(site.control, "counters", {}, timeout=5.0)  # type: ignore[no-any-return]
    except Exception as exc:  # a report, not a failure: any error is shown
        return {"error": str(exc)}


def _dashboard_total(listen: str) -> int | None:
    try:
        with urllib.request.urlopen(f"http://{listen}/api/workers?limit=1", timeout=10) as r:
            return int(json.load(r)["total"])
    except (OSError, ValueError, KeyError):
        return None


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def _stop_on_signal(*_: object) -> None:
    for signum in (signal.SIGTERM, signal.SIGINT):  # a second one must not cut the clean-up
        signal.signal(signum, signal.SIG_IGN)
    raise KeyboardInterrupt  # main's finally stops everything


def main() -> None:
    args = options().parse_args()
    for signum in (signal.SIGTERM, signal.SIGINT):  # SIGINT too: a shell's `&` ignores it
        signal.signal(signum, _stop_on_signal)
    soak = Soak(args)
    killed: dict[str, int] = {}
    try:
        tables_start = soak.start()
        stopped = soak.churn()
        after = soak.after(stopped)
        result = soak.finish(tables_start, after)
    except KeyboardInterrupt:
        print("soak: interrupted; stopping everything it started", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        try:
            for thread in (soak.poller, soak.leftovers):
                if thread.is_alive():
                    thread.stop()
        finally:
            killed = soak.run.close()
    result["end"]["killed_at_close"] = killed  # ours still there after a stop: by kind
    if args.output == "json":
        print(json.dumps(result, indent=2))
    else:
        report.print_table(result)
        if killed:
            print(f"processes of the run still there after SIGTERM, killed: {killed}")


if __name__ == "__main__":
    main()
