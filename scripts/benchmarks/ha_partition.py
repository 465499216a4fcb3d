"""scripts/bench ha-partition [-o json]: supervisor HA under one-sided partitions and etcd loss.

etcd, two supervisors and three workers (log handler, journals, --max-load 10) run 12 tasks,
each in network namespaces of their own on two networks, etcd's and the workers' (see
_hanet.py); a link set down is a real one-sided cut. Supervisor and worker settings are the
defaults unless given (--lease 10, --ha-ttl 3, --tick 0.5). Needs root (`ip netns`): without
it, one line saying so and exit status 2. Each scenario runs on a fresh cluster, --repeat
times (default 3); the medians are reported, every run beside them.

- etcd cut: the leader's link to etcd down for --hold-etcd s. `etcd_cut_failover_s`: the cut
  to the standby's `leading` log line.
- worker cut: the leader's link to the workers down for --hold-workers s (it still reaches
  etcd). `worker_cut_failover_s`: the cut to the standby's `leading`; `worker_cut_uncovered_s`:
  the longest any task ran on no worker in the scenario (journals).
- etcd down: etcd stopped for --etcd-down s (every lease lapses), then started again.
  `etcd_down_recover_s`: etcd back to every task running again; `etcd_down_revival_moves`:
  starts after each task's first one since etcd came back (tasks moved once the fleet was
  back). The workers still reach the supervisors, which hear them all when a leader is
  elected: this one does not need the settle window.
- fleet back: etcd down and the workers cut from both supervisors until every lease lapsed
  and both took every worker for gone; etcd back, a leader elected, then the workers' link up:
  they come back one by one, as their connections get through (the settle window's case).
  `fleet_back_revival_moves`, `fleet_back_recover_s` (from the heal), as for etcd down;
  `back_s`: when each worker held a lease again. `revival_moves`: the worse of the two
  medians. `--settle 0` runs the supervisors without the window, to compare.
- standby cut: the standby's link to the workers down for --hold-workers s: leadership must
  not move (`leader_changes` 0), nor any task.
- etcd minority: three etcd members; the one every supervisor talks to first is cut from its
  two peers (clients still reach it) for --hold-etcd s (`--no-minority` skips it); a new
  leader (`elected leader`), if any, and when (`failover_s`; `elected_after_heal_s` for those
  after the heal), and how long no supervisor led (`leaderless_s`) until a lease after it.
  `--etcd-pre-vote` runs etcd with Raft's pre-vote (off by default in etcd 3.4).

In every scenario: `double_owner_s`, the time any task ran on two workers under two leaders'
grants (tokens of different epochs; the worst run) — a make-before-break move of one leader
is an overlap by design, counted apart (`planned_overlap_s`);
tasks started or stopped during the cuts ("moved"), and workers' lease lapses. Targets:
double_owner_s 0 everywhere; worker_cut_uncovered_s <= 2 at the defaults; nothing moved or
restarted in the cuts; revival_moves <= the fair share + 1.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import signal
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from _cluster import fleet_parser
from _hanet import HaNet, changes, coverage, settle
from chaostools.netns import unavailable


def _other(h: HaNet, sup: str) -> str:
    return next(s for s in h.sups if s != sup)


def _standby_again(h: HaNet, sup: str) -> bool:
    st = h.status(sup) or {}
    return st.get("role") == "standby" and not st.get("ha_error")


def _judge(h: HaNet, t0: float, t1: float) -> dict[str, Any]:
    bare, doubled, planned = coverage(h.journal(), t0, t1)
    return {"moved": changes(h.journal(), t0, t1), "lapses": h.lapses(t0),
            "uncovered_s": round(max(bare.values(), default=0.0), 3),
            "double_owner_s": round(sum(doubled.values()), 3),
            "planned_overlap_s": round(sum(planned.values()), 3)}


def cut(h: HaNet, network: str, hold: float) -> dict[str, Any]:
    """The leader's link to ``network`` down for ``hold`` s, then up again."""
    leader = h.leader()
    standby = _other(h, leader)
    t0 = time.monotonic()
    h.nets.cut(h.sups[leader], network)
    try:
        led = settle(lambda: h.log_times(standby, "leading", t0), timeout=hold)
    except TimeoutError:  # the standby never led
        led = []
    rest = t0 + hold - time.monotonic()
    if rest > 0:
        time.sleep(rest)
    h.nets.heal(h.sups[leader], network)
    with contextlib.suppress(TimeoutError):  # recorded below
        settle(lambda: _standby_again(h, leader), timeout=30)
    time.sleep(h.lease / 2)  # a report round after the heal: what moves, moves now
    out = _judge(h, t0, time.monotonic())
    out["failover_s"] = round(led[0] - t0, 3) if led else None
    out["old_leader_standby"] = _standby_again(h, leader)
    return out


def standby_cut(h: HaNet, hold: float) -> dict[str, Any]:
    """The standby's link to the workers down for ``hold`` s: nothing may change."""
    leader = h.leader()
    standby = _other(h, leader)
    t0 = time.monotonic()
    h.nets.cut(h.sups[standby], "workers")
    settle(lambda: (h.status(standby) or {}).get("heard", {}).get(standby) == 0, timeout=hold)
    unheard = time.monotonic() - t0
    rest = t0 + hold - time.monotonic()
    if rest > 0:
        time.sleep(rest)
    h.nets.heal(h.sups[standby], "workers")
    settle(lambda: (h.status(standby) or {}).get("heard", {}).get(standby) == len(h.workers),
           timeout=60)
    time.sleep(h.lease / 2)
    out = _judge(h, t0, time.monotonic())
    out["unheard_s"] = round(unheard, 3)  # the cut to the standby publishing 0 (polled)
    out["leader_changes"] = sum(len(h.log_times(s, "leading", t0)) for s in h.sups)
    out["leader_kept"] = h.leader() == leader
    return out


def _revival(h: HaNet, since: float) -> tuple[float | None, int]:
    """When the last task first started again from ``since`` on, and how many starts came
    after a task's first one (tasks moved once the fleet was back), after the starts and
    stops have stopped for a whole lease (the rebalance passes are over)."""
    settle(lambda: len(h.owners()) == h.tasks, timeout=60)
    settle(lambda: not [e for e in h.journal() if e["t"] > time.monotonic() - h.lease],
           timeout=120)
    firsts: dict[str, float] = {}
    moves = 0
    for e in h.journal():
        if e["t"] >= since and e["event"] == "start":
            if e["task"] in firsts:
                moves += 1
            firsts.setdefault(e["task"], e["t"])
    return (max(firsts.values()) if firsts else None), moves


def etcd_down(h: HaNet, down: float) -> dict[str, Any]:
    h.leader()
    t0 = h.stop("etcd-0")
    time.sleep(down)
    h.start_etcd(0)
    t1 = time.monotonic()
    last, moves = _revival(h, t1)
    out = _judge(h, t0, time.monotonic())
    out["recover_s"] = round(last - t1, 3) if last is not None else 0.0
    out["revival_moves"] = moves
    return out


def fleet_back(h: HaNet) -> dict[str, Any]:
    """etcd down and the workers cut from both supervisors until every lease lapsed and both
    took every worker for gone; etcd back, a leader elected; then the workers' link up: they
    come back one by one (each when its connection or report gets through), and the first
    placement waits the settle window (--settle) for the others."""
    h.leader()
    t0 = h.stop("etcd-0")
    h.nets.cut(h.wk, "workers")
    try:
        settle(lambda: h.lapses(t0) >= len(h.workers) and not h.owners(), timeout=3 * h.lease)
        settle(lambda: all((h.status(s) or {}).get("workers_active") == 0 for s in h.sups),
               timeout=3 * h.lease)
        h.start_etcd(0)
        settle(lambda: any((h.status(s) or {}).get("role") == "leader" for s in h.sups),
               timeout=60)
    finally:
        h.nets.heal(h.wk, "workers")
    t1 = time.monotonic()
    last, moves = _revival(h, t1)
    out = _judge(h, t0, time.monotonic())
    out["recover_s"] = round(last - t1, 3) if last is not None else 0.0
    out["revival_moves"] = moves
    # When each worker was back (its lease held again), from the heal: how far apart they
    # came, against the settle window.
    out["back_s"] = sorted(round(min(ts) - t1, 3) for w in h.workers
                           if (ts := h.log_times(w, "lease held", t1)))
    return out


def _leaderless(h: HaNet, leader: str, t0: float, t1: float) -> float:
    """Seconds within [t0, t1] no supervisor led (its `leading` to its `no longer the
    leader`), ``leader`` leading at t0."""
    marks = sorted([(t, s, True) for s in h.sups for t in h.log_times(s, "leading", t0)]
                   + [(t, s, False) for s in h.sups
                      for t in h.log_times(s, "no longer the leader", t0)])
    leading, since, gap = {leader}, t0, 0.0
    for t, s, up in [*marks, (t1, "", True)]:
        if not leading:
            gap += min(t, t1) - since
        since = t
        if s:
            (leading.add if up else leading.discard)(s)
    return gap


def minority(h: HaNet, hold: float) -> dict[str, Any]:
    leader = h.leader()
    t0 = time.monotonic()
    h.nets.cut(h.etcd[0], "peers")
    time.sleep(hold)
    h.nets.heal(h.etcd[0], "peers")
    healed = time.monotonic()
    # The member back may disrupt its peers (etcd without pre-vote: a higher term, an
    # election) a moment after the heal: look past that, then for a leader that runs.
    time.sleep(2 * h.ttl)
    h.leader()
    time.sleep(h.lease / 2)
    t1 = time.monotonic()
    out = _judge(h, t0, t1)
    led = sorted(t for s in h.sups for t in h.log_times(s, "elected leader", t0))
    # New leaders (new epochs), if any, and when: during the cut, or after the heal.
    out["failover_s"] = round(led[0] - t0, 3) if led else None
    out["leader_changes"] = len(led)
    out["elected_after_heal_s"] = [round(t - healed, 3) for t in led if t >= healed]
    out["leaderless_s"] = round(_leaderless(h, leader, t0, t1), 3)
    return out


def runs(n: int, make: Callable[[], HaNet], scenario: Callable[[HaNet], dict[str, Any]]
         ) -> list[dict[str, Any]]:
    out = []
    for _ in range(n):
        h = make()
        try:
            h.start()
            out.append(scenario(h))
        finally:
            h.close()
            shutil.rmtree(h.dir, ignore_errors=True)
    return out


def _median(rs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rs if r.get(key) is not None]
    return round(statistics.median(values), 3) if values else None


def main() -> None:
    ap = fleet_parser(__doc__, tasks=12, workers=3)
    ap.add_argument("--lease", type=float, default=10.0, help="--lease (the default)")
    ap.add_argument("--ttl", type=float, default=3.0, help="--ha-ttl (the default)")
    ap.add_argument("--tick", type=float, default=0.5, help="--tick (the default)")
    ap.add_argument("--hold-etcd", type=float, default=10.0)
    ap.add_argument("--hold-workers", type=float, default=25.0)
    ap.add_argument("--etcd-down", type=float, default=15.0)
    ap.add_argument("--no-minority", action="store_true", help="skip the etcd-minority runs")
    ap.add_argument("--etcd-pre-vote", action="store_true",
                    help="run etcd with --pre-vote=true (etcd 3.4's default is false)")
    ap.add_argument("--settle", type=float, default=None,
                    help="the supervisors' --settle (default: theirs, 1 s); 0 compares")
    ap.add_argument("--only", choices=["etcd-cut", "worker-cut", "standby-cut", "etcd-down",
                                       "fleet-back", "minority"])
    args = ap.parse_args()
    why = unavailable()
    if why:
        print(f"scripts/bench ha-partition: {why}; run it as root", file=sys.stderr)
        sys.exit(2)

    # SIGTERM or SIGHUP (a session ending) exit through the `finally`s: every process is
    # stopped, every namespace and folder removed (a default SIGTERM would leave them all).
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: sys.exit(128 + signum))
    etcd_args = ("--pre-vote=true",) if args.etcd_pre_vote else ()  # a Go bool flag: one word
    sup_args = () if args.settle is None else ("--settle", str(args.settle))

    def make(members: int = 1) -> Callable[[], HaNet]:
        return lambda: HaNet(args.tasks, lease=args.lease, ttl=args.ttl, tick=args.tick,
                             workers=args.workers, etcd_members=members, etcd_args=etcd_args,
                             sup_args=sup_args)

    plan: dict[str, tuple[Callable[[], HaNet], Callable[[HaNet], dict[str, Any]]]] = {
        "etcd-cut": (make(), lambda h: cut(h, "etcd", args.hold_etcd)),
        "worker-cut": (make(), lambda h: cut(h, "workers", args.hold_workers)),
        "standby-cut": (make(), lambda h: standby_cut(h, args.hold_workers)),
        "etcd-down": (make(), lambda h: etcd_down(h, args.etcd_down)),
        "fleet-back": (make(), fleet_back),
    }
    if not args.no_minority:
        plan["minority"] = (make(3), lambda h: minority(h, args.hold_etcd))
    results = {name: runs(args.repeat, mk, sc) for name, (mk, sc) in plan.items()
               if args.only in (None, name)}
    every = [r for rs in results.values() for r in rs]
    ec, wc, ed = (results.get(k, []) for k in ("etcd-cut", "worker-cut", "etcd-down"))
    out: dict[str, Any] = {
        "lease_s": args.lease, "ttl_s": args.ttl, "tick_s": args.tick, "tasks": args.tasks,
        "workers": args.workers,
        "etcd_cut_failover_s": _median(ec, "failover_s"),
        "worker_cut_failover_s": _median(wc, "failover_s"),
        "worker_cut_uncovered_s": _median(wc, "uncovered_s"),
        "etcd_down_recover_s": _median(ed, "recover_s"),
        # The worse of the two revivals (etcd down; the fleet back after it was taken for
        # gone), each a median of its runs; both are given apart below.
        "revival_moves": max((m for m in (_median(ed, "revival_moves"),
                                          _median(results.get("fleet-back", []),
                                                  "revival_moves")) if m is not None),
                             default=None),
        "etcd_down_revival_moves": _median(ed, "revival_moves"),
        "double_owner_s": max((r["double_owner_s"] for r in every), default=None),
        "fair_share_plus_1": math.ceil(args.tasks / args.workers) + 1,
        "runs": results,
    }
    if "standby-cut" in results:
        sc = results["standby-cut"]
        out["standby_cut_leader_changes"] = max(r["leader_changes"] for r in sc)
        out["standby_cut_uncovered_s"] = _median(sc, "uncovered_s")
    if "fleet-back" in results:
        fb = results["fleet-back"]
        out["fleet_back_recover_s"] = _median(fb, "recover_s")
        out["fleet_back_revival_moves"] = _median(fb, "revival_moves")
    if "minority" in results:
        out["etcd_minority_failover_s"] = _median(results["minority"], "failover_s")
        out["etcd_minority_uncovered_s"] = _median(results["minority"], "uncovered_s")
        out["etcd_minority_leader_changes"] = max(r["leader_changes"]
                                                  for r in results["minority"])
        out["etcd_minority_leaderless_s"] = _median(results["minority"], "leaderless_s")
    if args.output == "json":
        print(json.dumps(out, indent=2))
        return
    print(f"2 supervisors, {args.workers} workers, {args.tasks} tasks; lease {args.lease:g} s, "
          f"TTL {args.ttl:g} s, tick {args.tick:g} s; medians of {args.repeat}")
    for name, rs in results.items():
        print(f"  {name}:")
        for r in rs:
            print("    " + ", ".join(f"{k} {v}" for k, v in r.items()))
    for k, v in out.items():
        if k != "runs":
            print(f"  {k}: {v}")


if __name__ == "__main__":
    main()
