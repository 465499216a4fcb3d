"""Runs a chaos plan against a real fleet and judges it.

    start the supervisor, the proxy and W workers; wait until every task runs on R workers
    -> carry out the plan's steps at their times (recording when each really happened)
    -> settle: wait until the journals and the supervisor agree that every task runs on R
       workers (bounded), then take `corralctl -o json` status, workers, assignments, counters
    -> stop every process by pid -> check the merged journals -> report

The whole run is bounded: the plan fills ``duration`` less what starting and settling need,
each wait has a deadline, and `Fleet.stop_all` runs whatever happens (Ctrl-C included).
"""

from __future__ import annotations

import math
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.client.errors import ControlFailed, Unreachable

from . import checker, schedule
from .processes import Fleet
from .proxy import Fault
from .schedule import Step, Timings

STARTUP_S = 5.0  # starting the fleet and placing every task, reserved out of --duration
POLL_S = 0.1
SAMPLE_S = 0.25  # how often the supervisor's assignments are sampled during the run


@dataclass(frozen=True)
class Options:
    duration: float = 60.0
    seed: int = 1
    workers: int = 4
    replicas: int = 2
    tasks: int = 0  # 0: six per worker
    slack: float = 1.5
    workdir: Path | None = None
    timings: Timings = field(default_factory=Timings)
    handler: str = "exec"  # the workers': exec (task processes, lease keepers) or log


class Harness:
    def __init__(self, opts: Options, workdir: Path) -> None:
        self.opts = opts
        self.tm = opts.timings
        self.bounds = checker.Bounds.from_timings(self.tm, slack=opts.slack)
        n_tasks = opts.tasks or 6 * opts.workers
        self.tasks = [f"task-{i:03d}" for i in range(n_tasks)]
        # Room for every replica on the healthy workers the plan keeps, with space to spare.
        max_load = math.ceil(2 * n_tasks * opts.replicas / opts.workers)
        self.fleet = Fleet(workdir, self.tm, opts.replicas, max_load, self.tasks, opts.handler)
        self.history: list[tuple[float, list[str]]] = []
        self.faults: dict[int, dict[str, Any]] = {}
        self.origin = 0.0
        self.notes: list[str] = []
        self.assigned: list[tuple[float, dict[str, list[str]]]] = []
        self._next_sample = 0.0

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        opts, f = self.opts, self.fleet
        settle_max = self.bounds.failover + 1.5 * self.bounds.lease + 2 * self.bounds.slack
        span = opts.duration - STARTUP_S - self.bounds.failover - self.bounds.slack
        if span < 5:
            raise ValueError(f"--duration {opts.duration:g} is too short: at least "
                             f"{STARTUP_S + settle_max + 5:.0f} s with these timings")
        f.start_supervisor()
        for i in range(opts.workers):
            f.spawn_worker(f"w{i + 1}")
        self.history.append((0.0, list(self.tasks)))
        if not self._settle(STARTUP_S + 20):
            raise RuntimeError("the fleet never ran every task at startup; see " + str(f.dir))
        self.origin = time.monotonic()
        plan = schedule.plan(opts.seed, span, [f"w{i + 1}" for i in range(opts.workers)],
                             self.tasks, opts.replicas, self.tm)
        hard_stop = self.origin + opts.duration + 60
        for step in plan:
            self._wait_until(self.origin + step.at)
            if time.monotonic() > hard_stop:
                self.notes.append("aborted: the plan overran its time")
                break
            late = time.monotonic() - (self.origin + step.at)
            if late > 0.5:
                self.notes.append(f"step {step.action} of fault {step.fault} ran {late:.1f} s late")
            self._do(step)
        settled = self._settle(settle_max)
        end = time.monotonic()
        views = {v: f.corralctl(v) for v in ("status", "workers", "assignments", "counters")}
        return self._judge(end, settled, views, plan)

    def _wait_until(self, t: float) -> None:
        while True:
            self.fleet.reap()
            now = time.monotonic()
            if now >= self._next_sample:
                self._sample()
            if now >= t:
                return
            time.sleep(min(POLL_S, t - now))

    def _sample(self) -> dict[str, Any] | None:
        """The supervisor's assignments now (kept: a worker fault's window covers the tasks
        placed on the worker while it was down, which its journal cannot show)."""
        now = time.monotonic()
        self._next_sample = now + SAMPLE_S
        if self.fleet.supervisor_down:
            return None
        try:  # a short timeout: the plan's next step must not wait for a slow answer
            asg: dict[str, Any] = self.fleet.query("assignments", timeout=0.3)
        except (Unreachable, ControlFailed):
            return None
        self.assigned.append((now, asg["assignments"]))
        return asg

    def _settle(self, timeout: float) -> bool:
        """Wait until every listed task runs on exactly R workers by the journals and the
        supervisor agrees, for one report interval in a row; bounded."""
        deadline = time.monotonic() + timeout
        since: float | None = None
        while time.monotonic() < deadline:
            self.fleet.reap()
            if self._agreed():
                now = time.monotonic()
                since = now if since is None else since
                if now - since >= 2 * self.tm.report:
                    return True
            else:
                since = None
            time.sleep(POLL_S)
        return False

    def _agreed(self) -> bool:
        f = self.fleet
        held = checker.owners_at(checker.build_spans(f.journals(), f.processes()),
                                 time.monotonic())
        tasks = self.history[-1][1]
        if sorted(held) != sorted(tasks) or any(len(held[t]) != self.opts.replicas
                                                for t in tasks):
            return False
        asg = self._sample()
        if asg is None:
            return False
        return not asg["pending"] and {t: sorted(w) for t, w in
                                       asg["assignments"].items()} == held

    # -- steps --------------------------------------------------------------------------------

    def _do(self, step: Step) -> None:
        f, a, w = self.fleet, step.action, step.target
        detail: dict[str, Any] = {}
        if a == "kill_worker":
            t = f.kill_worker(str(w))
        elif a == "spawn_worker":
            t = f.spawn_worker(str(w))
        elif a == "sigstop":
            t = f.sigstop(str(w))
        elif a == "sigcont":
            t = f.sigcont(str(w))
        elif a == "sigterm_worker":
            t = f.sigterm_worker(str(w))
        elif a == "kill_supervisor":
            t = f.kill_supervisor()
        elif a == "start_supervisor":
            t = f.start_supervisor()
            up = f.wait_supervisor_up()
            if up is None:
                self.notes.append("the restarted supervisor never answered")
            else:
                detail["up"] = up
        elif a == "proxy":
            both = bool(step.args.get("both"))
            fault = Fault(up=both or bool(step.args.get("up")),
                          down=both or bool(step.args.get("down")),
                          delay=float(step.args.get("delay", 0.0)))
            detail = {"proxy": str(fault), "delay": fault.delay} if step.begins else {}
            t = f.set_fault(str(w), fault)
        elif a == "ctl":
            t = time.monotonic()
            if f.corralctl(step.args["verb"], str(w)) is None:
                self.notes.append(f"corralctl {step.args['verb']} {w} failed")
        elif a == "tasks":
            tasks = list(step.args["tasks"])
            f.write_tasks(tasks)
            t = time.monotonic()
            self.history.append((t, tasks))
            if step.args["via"] == "sighup":
                f.sighup_supervisor()
            elif f.corralctl("query") is None:
                self.notes.append("corralctl query failed")
            detail = {k: step.args[k] for k in ("added", "removed", "via")}
        else:
            raise ValueError(f"unknown step {a!r}")
        self._record(step, t, detail)

    def _record(self, step: Step, t: float, detail: dict[str, Any]) -> None:
        if step.begins:
            self.faults[step.fault] = {"id": step.fault, "kind": schedule.kind_of(step),
                                       "target": step.target, "t0": t, "t1": t,
                                       "detail": detail}
        else:
            rec = self.faults[step.fault]
            rec["t1"] = t
            rec["detail"].update(detail)

    # -- the verdict --------------------------------------------------------------------------

    def _judge(self, end: float, settled: bool, views: dict[str, Any],
               plan: list[Step]) -> dict[str, Any]:
        f = self.fleet
        f.reap()
        faults = [checker.Fault(r["id"], r["kind"], r["target"], r["t0"], r["t1"], r["detail"])
                  for r in self.faults.values()]
        history = [(t if t else self.origin, ts) for t, ts in self.history]
        res = checker.check(f.journals(), f.processes(), faults, history, self.opts.replicas,
                            self.bounds, self.origin, end, self.assigned)
        out = res.as_dict(self.origin)
        final_state = self._final_state(views, end)
        out["violations"] += [{"task": None, "window": [round(end - self.origin, 3)] * 2,
                               "rule": "final_state", "detail": d} for d in final_state]
        out["violations"] += [{"task": None, "window": [0.0, round(end - self.origin, 3)],
                               "rule": "crash", "detail": f"{e['process']} exited with "
                                                          f"{e['exit_code']} unasked"}
                              for e in f.unexpected_exits]
        if not settled:
            out["violations"].append({"task": None, "window": [round(end - self.origin, 3)] * 2,
                                      "rule": "settle", "detail": "never settled at the end"})
        kinds: dict[str, int] = {}
        for r in self.faults.values():
            kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
        out["faults"] = {"total": len(self.faults), "by_kind": kinds,
                         "list": [{**r, "t0": round(r["t0"] - self.origin, 3),
                                   "t1": round(r["t1"] - self.origin, 3),
                                   "detail": _rounded(r["detail"], self.origin)}
                                  for r in self.faults.values()]}
        out["recovery_by_kind"] = _by_kind(res.recovery)
        out["run"] = {"seed": self.opts.seed, "workers": self.opts.workers,
                      "handler": self.opts.handler,
                      "replicas": self.opts.replicas, "tasks_at_start": len(self.tasks),
                      "tasks_at_end": len(self.history[-1][1]),
                      "fault_phase_s": round(end - self.origin, 3),
                      "timings": vars(self.tm), "bounds": vars(self.bounds),
                      "processes": len(f.procs), "workdir": str(f.dir), "notes": self.notes,
                      "origin": self.origin}
        out["lease_losses"] = f.lease_losses()
        out["supervisor"] = {"status": views["status"], "counters": views["counters"]}
        out["ok"] = not out["violations"] and not out["lost_tasks"]
        return out

    def _final_state(self, views: dict[str, Any], end: float) -> list[str]:
        """What `corralctl -o json` says at the end must match the journals."""
        f = self.fleet
        if any(v is None for v in views.values()):
            return ["corralctl failed at the end: " + ", ".join(k for k, v in views.items()
                                                                if v is None)]
        problems = []
        status, asg = views["status"], views["assignments"]
        if status["phase"] != "running" or status["tasks_pending"]:
            problems.append(f"status: phase {status['phase']}, "
                            f"{status['tasks_pending']} tasks pending")
        held = checker.owners_at(checker.build_spans(f.journals(), f.processes()), end)
        shown = {t: sorted(w) for t, w in asg["assignments"].items()}
        if shown != held:
            diff = sorted(t for t in set(shown) | set(held) if shown.get(t) != held.get(t))
            problems.append(f"assignments differ from the journals for {diff[:10]}")
        live = set(f.live_workers())
        rows = {w["id"]: w for w in views["workers"]["workers"]}
        for wid in sorted(live):
            row = rows.get(wid)
            if row is None or not row["active"] or not row["lease_held"]:
                problems.append(f"worker {wid} is alive but the supervisor shows {row}")
        for wid, row in rows.items():
            if row["active"] and wid not in live:
                problems.append(f"worker {wid} is gone but shown active")
        return problems


def _by_kind(recovery: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    out: dict[str, list[float]] = {}
    for r in recovery:
        out.setdefault(r["kind"], []).append(r["recovery_s"])
    return {k: {"count": len(v), "max_s": max(v), "mean_s": round(sum(v) / len(v), 3)}
            for k, v in sorted(out.items())}


def _rounded(detail: dict[str, Any], origin: float) -> dict[str, Any]:
    return {k: round(v - origin, 3) if k == "up" else v for k, v in detail.items()}


def run(opts: Options) -> dict[str, Any]:
    """One chaos run; stops every process it started, whatever happens."""
    workdir = opts.workdir or Path(tempfile.mkdtemp(prefix="corral-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    old = signal.signal(signal.SIGTERM, _interrupt)
    harness = Harness(opts, workdir)
    try:
        return harness.run()
    finally:
        harness.fleet.stop_all()
        signal.signal(signal.SIGTERM, old)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
